"""The executor wire protocol, Sans-I/O: no sockets, no clocks, no store.

* :mod:`~relay_es.protocol.messages` -- the core message types (executor_info,
  recovery, exist_pending_workflows, retention) and their encoding;
* :mod:`~relay_es.protocol.catalogue` -- every other wire type (the workflow
  operations), for the Conductor API parity work;
* :mod:`~relay_es.protocol.session` -- one connection's protocol state;
* :mod:`~relay_es.protocol.limits` -- bounds on what an executor may send, and
  the resource limits of ADR 15;
* :mod:`~relay_es.protocol.retention` -- the retention message an application's
  settings call for;
* :mod:`~relay_es.protocol.metrics` -- ``get_metrics``: the request for one window,
  and its answer bounded and made fit to store.
"""
