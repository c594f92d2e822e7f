"""The process's one ASGI application: WebSocket scopes to the hub, everything else to REST."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from relay_es.composition import asgi
from relay_es.composition.asgi import RelayASGI, ScopeRouter, rest_context
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings


class Recorder:
    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scopes.append(scope)


def test_websocket_scopes_go_to_the_hub_and_every_other_scope_to_rest() -> None:
    hub, rest = Recorder(), Recorder()
    app = ScopeRouter(websocket=hub, http=rest)

    async def main() -> None:
        async def receive() -> dict[str, Any]:
            return {}

        async def send(message: dict[str, Any]) -> None:
            pass

        for scope in ({"type": "websocket", "path": "/websocket/orders/key"},
                      {"type": "websocket", "path": "/v2/orgs/acme/websocket/orders/key"},
                      {"type": "http", "path": "/healthz"},
                      {"type": "http", "path": "/websocket/orders/key"},  # a plain GET there is REST's 404
                      {"type": "lifespan"}):
            await app(scope, receive, send)

    asyncio.run(main())
    assert [s["path"] for s in hub.scopes] == ["/websocket/orders/key", "/v2/orgs/acme/websocket/orders/key"]
    assert [s["type"] for s in rest.scopes] == ["http", "http", "lifespan"]


# ------------------------------------------------------------ for a runtime


@pytest.fixture
def runtime(tmp_path) -> Iterator[Runtime]:
    """A Runtime on SQLite whose workers never start: the read models move when the test says."""
    rt = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", instance="test-instance"))
    yield rt
    rt.close()


def test_relay_asgi_serves_the_runtimes_hub_and_its_rest_api(runtime: Runtime) -> None:
    from litestar.testing import TestClient

    app = RelayASGI(runtime)
    assert app.websocket is runtime.hub
    client = TestClient(app.http, base_url="http://127.0.0.1")  # no lifespan: the runtime is not started
    assert client.get("/healthz").json() == {"status": "ok", "instance": "test-instance", "store": "sqlite"}


def test_rest_context_waits_for_the_read_models_and_says_when_they_lag(runtime: Runtime, monkeypatch,
                                                                      caplog) -> None:
    ctx = rest_context(runtime)
    assert (ctx.relay, ctx.db, ctx.metrics, ctx.auth, ctx.store_kind) == (runtime.relay, runtime.db, runtime.metrics,
                                                                         False, "sqlite")
    assert ctx.credentials is None  # development mode checks no keys
    monkeypatch.setattr(asgi, "READ_YOUR_WRITES_TIMEOUT", 0.1)
    runtime.relay.register_app("local", "orders")
    with caplog.at_level(logging.WARNING, logger=asgi.__name__):
        ctx.read_your_writes()  # nobody projects: it gives up and says so
    assert "lagging" in caplog.text
    caplog.clear()
    runtime.runner.catch_up()
    with caplog.at_level(logging.WARNING, logger=asgi.__name__):
        ctx.read_your_writes()
    assert caplog.text == ""


def test_writes_waiting_for_the_read_models_leave_threads_for_every_other_call(runtime: Runtime, monkeypatch,
                                                                              caplog) -> None:
    """Every blocking REST call runs on the event loop's default executor: asyncio.to_thread (the
    guard's key checks, the writes and their wait for the read models) and Litestar's sync handlers
    alike. Python's default is 6 threads on two cores: with the read models stuck, six writes waiting
    took them all, and an unrelated read waited 9 s behind them (129 s behind 80). The server's start
    sets REST_THREADS, and at most READ_YOUR_WRITES_WAITERS writes wait at once (the others are answered
    at once, as one whose wait ran out)."""
    import time

    monkeypatch.setattr(runtime, "start", lambda loop: None)  # no worker: the read models stay where they are
    monkeypatch.setattr(asgi, "READ_YOUR_WRITES_TIMEOUT", 60.0)
    ctx = rest_context(runtime)
    runtime.relay.register_app("local", "orders")  # the read models do not hold it: a write's wait waits
    n = 80

    async def until(what: Any) -> None:
        end = time.monotonic() + 30
        while not what():
            assert time.monotonic() < end, "not within the bound"
            await asyncio.sleep(0.02)

    async def main() -> None:
        ctx.on_startup()  # as the server's lifespan does
        writes = [asyncio.ensure_future(asyncio.to_thread(ctx.read_your_writes)) for _ in range(n)]
        try:
            # a key check, a read: answered while the writes wait (the bound only ends a failing run)
            assert await asyncio.wait_for(asyncio.to_thread(str, "answered"), 30) == "answered"
            assert not all(w.done() for w in writes)
            await until(lambda: sum(w.done() for w in writes) == n - asgi.READ_YOUR_WRITES_WAITERS)
        finally:
            runtime.runner.catch_up()  # the read models move: the waits end
            await asyncio.gather(*writes)

    with caplog.at_level(logging.WARNING, logger=asgi.__name__):
        asyncio.run(main())
    assert caplog.text.count("this one is answered without waiting") == n - asgi.READ_YOUR_WRITES_WAITERS
    assert asgi.REST_THREADS >= 2 * asgi.READ_YOUR_WRITES_WAITERS


def test_a_request_cut_short_before_its_answer_is_a_503_not_a_500() -> None:
    """uvicorn cancels the requests still running when its graceful shutdown's time is up (a write
    waiting through a store outage as the server stops without its lease): answered 500, a traceback
    logged. Now a 503 with Retry-After; one whose answer had begun is cut as before."""
    from relay_es.composition.asgi import AnswerCancelled

    async def waits(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.Event().wait()

    async def begins(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.Event().wait()

    async def run(app: Any) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        task = asyncio.ensure_future(AnswerCancelled(app)({"type": "http", "method": "PATCH", "path": "/x"},
                                                          None, send))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            sent.append({"type": "cancelled"})
        return sent

    first, *rest = asyncio.run(run(waits))
    assert first["status"] == 503 and (b"retry-after", b"5") in first["headers"]
    assert [m["type"] for m in rest] == ["http.response.body"]
    assert json.loads(rest[0]["body"]) == {"type": "about:blank", "title": "Service unavailable", "status": 503,
                                           "detail": "Relay is stopping; this request may or may not have taken effect"}
    assert [m.get("status") or m["type"] for m in asyncio.run(run(begins))] == [200, "cancelled"]


def test_a_write_recorded_is_answered_as_done_though_the_store_fails_its_wait_for_the_read_models(
        runtime: Runtime, monkeypatch, caplog) -> None:
    """After the commit, the wait for the read models reads the store; failing, it made the write a 503,
    and a client retrying a create on it made a second one."""
    from eventsourcing.persistence import OperationalError

    ctx = rest_context(runtime)

    def away(timeout: float) -> bool:
        raise OperationalError("couldn't get a connection after 5.00 sec")

    monkeypatch.setattr(runtime, "wait_for_read_models", away)
    with caplog.at_level(logging.WARNING, logger=asgi.__name__):
        ctx.read_your_writes()
    assert "answered as done" in caplog.text
