"""The hub: executors' WebSocket connections, from the handshake to the recovery conversation.

One module per job:

* :mod:`~relay_es.adapters.hub.endpoint` -- :class:`Hub`, the ASGI WebSocket endpoint: accepts
  a socket, runs its read loop through the Sans-I/O session, registers the executor, audits
  violations and refusals, records the disconnect; the close codes.
* :mod:`~relay_es.adapters.hub.admission` -- who may connect, as which org and token
  (:class:`Gate`, :class:`AuthGate`, :class:`Refused`).
* :mod:`~relay_es.adapters.hub.limits` -- what each address, key and application holds,
  against ``ResourceLimits``.
* :mod:`~relay_es.adapters.hub.connection` -- one socket: :class:`Connection` (send, call,
  close), :class:`Guard`, :class:`ConnectionLost`.
* :mod:`~relay_es.adapters.hub.registry` -- the open connections, by id, executor, application.
* :mod:`~relay_es.adapters.hub.outbox` -- executor transitions on their way to the store:
  grouped, ordered, retried, never dropped.
* :mod:`~relay_es.adapters.hub.calls` -- :class:`Calls`: one request of a REST operation to one
  executor of an application, its answer (or the reason there is none) back.
* :mod:`~relay_es.adapters.hub.dispatcher` -- the process manager's
  :class:`~relay_es.engine.process_manager.Dispatcher`: recovery and retention conversations.
* :mod:`~relay_es.adapters.hub.harvest` -- the metrics collection (``get_metrics``, window by window).
* :mod:`~relay_es.adapters.hub.alerts` -- the alert manager's sender: rule checks asked of an
  executor, alerts delivered to an executor or a webhook.
* :mod:`~relay_es.adapters.hub.throttle` -- the one pruned throttle of audits, warnings and
  refusal slow-downs.
* :mod:`~relay_es.adapters.hub.pool` -- the thread pool that runs store commands off the loop.

The composition root builds them in this order: pool, outbox, registry, dispatcher (for the
process manager), calls (for the REST API), then the endpoint (given the process manager as its roster).
"""

from relay_es.adapters.hub.admission import AuthGate, Gate, Refused
from relay_es.adapters.hub.calls import Calls
from relay_es.adapters.hub.connection import Connection, ConnectionLost, Guard
from relay_es.adapters.hub.dispatcher import Dispatcher
from relay_es.adapters.hub.endpoint import Hub, parse_path, scrub
from relay_es.adapters.hub.outbox import Outbox
from relay_es.adapters.hub.pool import CommandPool
from relay_es.adapters.hub.registry import Registry
from relay_es.adapters.hub.throttle import Throttle
from relay_es.protocol.limits import MAX_FRAME

__all__ = ["MAX_FRAME", "AuthGate", "Calls", "CommandPool", "Connection", "ConnectionLost", "Dispatcher", "Gate", "Guard",
           "Hub", "Outbox", "Refused", "Registry", "Throttle", "parse_path", "scrub"]
