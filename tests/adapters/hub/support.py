"""Helpers of the hub's tests: a real ``relay serve`` with fast timers, and a hub built
from its parts (no store, no server) the way the runtime builds it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relay_es.adapters.hub import CommandPool, Connection, Dispatcher, Gate, Hub, Outbox, Registry
from relay_es.engine.process_manager import Answers
from relay_es.protocol.limits import ResourceLimits
from tests.rest_client import events, rest as api
from tests.server import RelayServer

FAST = {
    "RELAY_PING_INTERVAL_SECS": "1",
    "RELAY_PING_WAIT_SECS": "2",
    "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "2",
    "RELAY_RESTART_SETTLE_SECS": "0.5",
    "RELAY_RETENTION_INTERVAL_SECS": "3600",
    "RELAY_DEFAULT_EXECUTOR_TIMEOUT_SECS": "60",
}


def at(entry: dict[str, Any]) -> float:
    """The time Relay recorded an audit entry, as a Unix timestamp."""
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).timestamp()


def actions(server: RelayServer, executor_id: str) -> list[str]:
    return [a["action"] for a in events(server, executorId=executor_id)]


def set_grace(server: RelayServer, secs: int, app: str = "app") -> None:
    assert api(server, "PUT", f"/v2/orgs/local/apps/{app}").status_code == 204
    r = api(server, "PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": secs})
    assert r.status_code == 204, r.text


class NoRoster:
    """A process manager that lists no executor."""

    def listed(self, org: str, app: str) -> int:
        return 0

    def is_listed(self, stream_id: str) -> bool:
        return False


@dataclass
class Parts:
    pool: CommandPool
    outbox: Outbox
    registry: Registry
    answers: Answers
    dispatcher: Dispatcher
    hub: Hub

    def close(self) -> None:
        self.pool.shutdown(wait=False)


def build(relay: Any = None, *, monotonic: Any = None, roster: Any = None, response_timeout: float = 30.0,
          limits: ResourceLimits = ResourceLimits()) -> Parts:
    """The hub's parts in the runtime's order, on a fake store (``relay``) or none."""
    import time

    clock = monotonic or time.monotonic
    pool = CommandPool(2)
    outbox = Outbox(relay, pool.run)
    registry = Registry()
    answers = Answers()
    dispatcher = Dispatcher(relay, registry, outbox, pool.run, answers=answers, response_timeout=response_timeout,
                            monotonic=clock)
    hub = Hub(relay, owner="test", gate=Gate(relay, pool.run), roster=roster or NoRoster(), registry=registry,
              outbox=outbox, pool=pool, handshake_timeout=10.0, limits=limits, monotonic=clock)
    return Parts(pool, outbox, registry, answers, dispatcher, hub)


def registered(send: Any, executor_id: str = "T", *, id: str = "c1", app: str = "app", org: str = "local",
               token: str | None = None) -> Connection:
    """A connection whose executor answered executor_info (its frames go to ``send``)."""
    conn = Connection(id=id, org=org, app=app, peer="127.0.0.1:1", token=token, send_message=send)
    req = json.loads(conn.session.open())
    conn.session.receive(json.dumps({"type": "executor_info", "request_id": req["request_id"],
                                     "executor_id": executor_id, "application_version": "v1"}))
    conn.executor_id = executor_id
    return conn


class Handshake:
    """One socket driven through the hub's ASGI endpoint by hand: ``inbox`` what it receives next,
    ``sent`` what the hub sent (a close is answered with the disconnect it causes), ``task`` the
    endpoint's run."""

    def __init__(self, parts: Parts, path: str = "/websocket/app/key") -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.inbox.put_nowait({"type": "websocket.connect"})
        self.task = asyncio.ensure_future(parts.hub({"type": "websocket", "path": path,
                                                     "client": ("127.0.0.1", 5555), "headers": []},
                                                    self.inbox.get, self.send))

    async def send(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)
        if msg["type"] == "websocket.close":
            await self.inbox.put({"type": "websocket.disconnect", "code": msg["code"]})


async def settle() -> None:
    """Lets the loop run what was scheduled on it."""
    for _ in range(5):
        await asyncio.sleep(0)
