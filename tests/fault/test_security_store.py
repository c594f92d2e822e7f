"""Hostile data already in the store (issue 11): a real ``relay serve`` on both stores.

Poison is written straight to the event store, as an older Relay, a tool or a
hand could have: an executor whose hostname holds a NUL byte and one whose id is
8 kB. Before the fix the read models stopped at the first of them on Postgres
(every later batch failed), so executors connecting afterwards were never listed
and a restarted Relay never bootstrapped its process manager. Now each read model
skips what it cannot hold, says so in the audit log, and goes on.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import httpx
import pytest

from relay_es.adapters.clock import SystemClock
from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates import Executor
from relay_es.service import Relay
from tests.e2e.scene import FAST
from tests.fake_executor import FakeExecutor
from tests.server import RelayServer

pytestmark = pytest.mark.timeout(240)

LONG_ID = secrets.token_urlsafe(6000)


def write_poison(store_url: str, tag: str) -> None:
    """Records two executors the way no protocol check sees: on the aggregates, straight to the store."""
    relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
    try:
        relay.register_app("local", "app")
        for executor_id, hostname in ((f"nul-{tag}", "evil\x00host"), (f"{LONG_ID}-{tag}", "host")):
            ex = Executor(org="local", app="app", executor_id=executor_id, timestamp=relay.now())
            ex.connect(connection_id=f"c-{tag}", owner="a-tool", app_version="v1", hostname=hostname,
                       language="python", dbos_version="3.2.0", executor_metadata=None, at=relay.now())
            relay.save(ex)
    finally:
        relay.close()


def _rows(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict):  # a paged answer
        body = next(v for v in body.values() if isinstance(v, list))
    return body


def listed(server: RelayServer) -> set[str]:
    r = httpx.get(server.http + "/v2/orgs/local/apps/app/executors", timeout=10)
    assert r.status_code == 200, r.text
    return {e["executorId"] for e in _rows(r.json())}


def skips(server: RelayServer) -> list[dict[str, Any]]:
    r = httpx.get(server.http + "/v2/orgs/local/audit-logs", params={"limit": 1000}, timeout=10)
    assert r.status_code == 200, r.text
    return [e for e in _rows(r.json()) if e["action"] == "projection.skipped"]


def wait(pred: Any, what: str, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


def test_poison_in_the_store_never_stops_the_read_models(tmp_path, store_url: str) -> None:
    write_poison(store_url, "before")  # already there when Relay starts
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    try:
        async def scenario() -> list[FakeExecutor]:
            first = await FakeExecutor(server.ws, executor_id="A").connect()
            write_poison(store_url, "live")  # and while it serves
            second = await FakeExecutor(server.ws, executor_id="B").connect()
            return [first, second]

        executors = asyncio.run(scenario())
        wait(lambda: {"A", "B"} <= listed(server), "executors connected after the poison are listed")
        found = wait(lambda: len(skips(server)) >= 4 and skips(server), "each poison in the audit log")
        assert {e["detail"]["projection"] for e in found} == {"executors", "audit"}
        assert all(e["detail"]["reason"] and e["detail"]["notificationId"] for e in found)
        assert "relay-projections failed" not in server.log()  # skipped, not retried for ever
        del executors

        # a restarted Relay bootstraps its process manager from the read models, past the poison
        server.kill()
        server = RelayServer(tmp_path, port=server.port, args=["--database-url", store_url], env=FAST).start()

        async def later() -> None:
            await FakeExecutor(server.ws, executor_id="C").connect()

        asyncio.run(later())
        wait(lambda: "C" in listed(server), "an executor connected after the restart is listed")
        assert "relay-projections failed" not in server.log()
        assert "relay-process-manager failed" not in server.log()
    finally:
        server.stop()
