"""Relay: a self-hosted, event-sourced control plane for DBOS Transact executors.

Seven layer packages, lowest first; each imports only those before it (ADR 18, tests/test_layers.py).
Each package's docstring names its modules.

* :mod:`relay_es.domain` -- the shared vocabulary: errors, units, bounded text, the Clock interface,
  the timing defaults, ids, roles and permissions, autoscaling and alerting rules, sealed values.
* :mod:`relay_es.aggregates` -- the state machines (Executor, Application, Token, Gate,
  ProjectionSkip, Action, AlertFirings, OrgRoles, OrgMembers); their event class paths are stored
  data.
* :mod:`relay_es.protocol` -- the executor wire protocol, Sans-I/O: messages, the connection
  session, input limits, the retention plan, the workflow catalogue, the metrics answers.
* :mod:`relay_es.projections` -- read models as pure folds over the events, and the runner that
  drives them through a storage port.
* :mod:`relay_es.engine` -- the command service, the process manager and its timers, the alert
  manager, the queries: decides, does no I/O of its own.
* :mod:`relay_es.adapters` -- all I/O: stores and SQL, the WebSocket hub, REST, the system clock,
  logs, metrics, the lease.
* :mod:`relay_es.composition` -- settings, the command line, the runtime that builds and wires one
  process.

``__main__`` makes ``python -m relay_es`` the ``relay`` command.
"""

__version__ = "0.1.0"
