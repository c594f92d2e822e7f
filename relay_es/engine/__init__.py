"""The application layer: the command service, the process manager, its timers, the alert manager
and the queries.

Decides; does no I/O of its own. The stores, sockets and clocks it uses are handed to it.

The command service and its store:

* :mod:`~relay_es.engine.service` -- ``Relay``, the command service: every command, on one event store;
* :mod:`~relay_es.engine.store` -- the ``eventsourcing`` Application every command saves
  through: its environment, transcodings, snapshots, save listeners and executor cache;
* :mod:`~relay_es.engine.commands` -- the command bus: many commands in one transaction,
  conflicts retried;
* :mod:`~relay_es.engine.executor_commands` -- the executor commands, each an op factory and
  its single form;
* :mod:`~relay_es.engine.action_commands` -- an operator's action through the API, on record
  before and after;
* :mod:`~relay_es.engine.alert_commands` -- alerting rules, and their alerts and deliveries;
* :mod:`~relay_es.engine.role_commands` -- an org's own roles;
* :mod:`~relay_es.engine.member_commands` -- who signs in with OIDC, and the roles granted them.

The process manager (durable timers and recovery decisions):

* :mod:`~relay_es.engine.process_manager` -- the process manager itself;
* :mod:`~relay_es.engine.timers` -- a heap of keyed deadlines on a monotonic clock;
* :mod:`~relay_es.engine.recovery` -- the recovery conversation, and the choice of a target;
* :mod:`~relay_es.engine.settle` -- the settle window after a restart, when nothing is enforced;
* :mod:`~relay_es.engine.indexes` -- its indexes over the executor rows, kept in step row by row;
* :mod:`~relay_es.engine.journal` -- the events this process saved, handed to the log's follower
  without reading them back;
* :mod:`~relay_es.engine.pace` -- how much work that can wait fits before the next deadline;
* :mod:`~relay_es.engine.metric_windows` -- which metrics buckets to ask the executors for, and
  when.

Beside it:

* :mod:`~relay_es.engine.alerting` -- the alert manager: rules checked and fired, deliveries
  retried;
* :mod:`~relay_es.engine.queries` -- history and time travel over the event store;
* :mod:`~relay_es.engine.routing` -- which executor a call goes to (pure);
* :mod:`~relay_es.engine.calls` -- how a call to an executor can fail, each error with its
  HTTP status;
* :mod:`~relay_es.engine.stranded` -- which PENDING workflows wait on an executor not alive,
  why, and what fixes them;
* :mod:`~relay_es.engine.autoscale` -- the autoscaling recommendation.
"""
