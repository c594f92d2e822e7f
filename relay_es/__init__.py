"""Relay: a self-hosted, event-sourced control plane for DBOS Transact executors.

Layers, outermost last:

* :mod:`relay_es.aggregates` -- the state machines (Executor, Application, Token).
* :mod:`relay_es.engine.service` -- the eventsourcing application: commands with retries.
* :mod:`relay_es.projections` -- pure reducers and the read models built from them.
* :mod:`relay_es.engine.process_manager` -- timers and recovery decisions, pure logic.
* :mod:`relay_es.adapters` -- all I/O: stores, clock, HTTP, WebSocket hub.
"""

__version__ = "0.1.0"
