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
from relay_es.engine.service import Relay
from tests.e2e.scene import FAST
from tests.fake_executor import FakeExecutor
from tests.server import RelayServer, TLS

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
    r = httpx.get(server.http + "/v2/orgs/local/apps/app/executors", verify=TLS, timeout=10)
    if r.status_code == 404 and "is not registered" in r.text:
        return set()  # the application's registration is not in the read models yet
    assert r.status_code == 200, r.text
    return {e["executorId"] for e in _rows(r.json())}


def skips(server: RelayServer) -> list[dict[str, Any]]:
    r = httpx.get(server.http + "/v2/orgs/local/executor-events", params={"limit": 1000}, verify=TLS, timeout=10)
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


def failed(server: RelayServer) -> bool:
    """The read models failed (the server's projection worker, or its read-model process) and retried."""
    log = server.log()
    return "relay-projections failed" in log or "the read models' process failed" in log


def poison_counted(server: RelayServer) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in server.get("/metrics").text.splitlines()
               if line.startswith("relay_projection_poison_events_total{"))


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
        assert not failed(server)  # skipped, not retried for ever
        # counted by the server, whichever process folded them (ADR 8: its read-model process)
        wait(lambda: poison_counted(server) >= len(found), "each poison on /metrics")
        del executors

        # a restarted Relay bootstraps its process manager from the read models, past the poison
        server.kill()
        server = RelayServer(tmp_path, port=server.port, args=["--database-url", store_url], env=FAST).start()

        async def later() -> None:
            await FakeExecutor(server.ws, executor_id="C").connect()

        asyncio.run(later())
        wait(lambda: "C" in listed(server), "an executor connected after the restart is listed")
        assert not failed(server)
        assert "relay-process-manager failed" not in server.log()
    finally:
        server.stop()


# ------------------------------------------------------------ the store is the one the operator named, and private

import os  # noqa: E402
import stat  # noqa: E402

import psycopg  # noqa: E402

from relay_es.aggregates.executor import executor_stream_id  # noqa: E402


def _with(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _connect_one(server: RelayServer, executor_id: str) -> None:
    async def go() -> None:
        await FakeExecutor(server.ws, executor_id=executor_id).connect()

    asyncio.run(go())
    wait(lambda: executor_id in listed(server), f"{executor_id} listed")


def test_relay_serve_refuses_a_postgres_without_tls_when_the_url_requires_it(tmp_path, postgres_url: str) -> None:
    # sslmode=require was dropped by the event store's connections: a token went over plaintext.
    server = RelayServer(tmp_path, args=["--database-url", _with(postgres_url, "sslmode=require")], env=FAST)
    with pytest.raises((RuntimeError, TimeoutError)):
        server.start()
    server.stop()
    assert "SSL" in server.log()


def test_every_connection_of_relay_serve_carries_the_url_s_parameters(tmp_path, postgres_url: str) -> None:
    url = _with(postgres_url, "sslmode=disable&application_name=relay-under-test")
    server = RelayServer(tmp_path, args=["--database-url", url], env=FAST).start()
    try:
        _connect_one(server, "A")
        with psycopg.connect(postgres_url, autocommit=True, application_name="the-checker") as c:
            names = [r[0] for r in c.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")]
        assert names and set(names) == {"relay-under-test"}, names  # the event store's pool included
    finally:
        server.stop()


def test_the_operator_s_environment_does_not_redirect_relay_serve_s_events(tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    url = f"sqlite:///{tmp_path}/data/relay.db"
    env = {**FAST, "RELAY_SQLITE_DBNAME": str(elsewhere), "SQLITE_DBNAME": str(elsewhere),
           "RELAY_PERSISTENCE_MODULE": "eventsourcing.popo", "CIPHER_TOPIC": "nowhere:Cipher"}
    server = RelayServer(tmp_path, args=["--database-url", url], env=env).start()
    try:
        _connect_one(server, "A")
    finally:
        server.stop()
    assert not elsewhere.exists()
    relay = Relay(event_store_env(parse_database_url(url)), clock=SystemClock())
    try:
        assert [type(e).__name__ for e in relay.stream(executor_stream_id("local", "app", "A"))][:2] == [
            "Registered", "Connected"]
    finally:
        relay.close()


def test_the_files_of_relay_serve_s_store_are_private(tmp_path) -> None:
    # The database, its -wal and -shm, and the lease's lock file were created 0644.
    server = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/data/relay.db"], env=FAST)
    old = os.umask(0o022)  # the umask Relay is usually started with; the child inherits it
    try:
        server.start()
    finally:
        os.umask(old)
    try:
        _connect_one(server, "A")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "data").iterdir()}
    finally:
        server.stop()
    assert {"relay.db", "relay.db-wal", "relay.db-shm", "relay.db.lock"} <= set(modes), modes
    assert modes == dict.fromkeys(modes, 0o600), modes
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
