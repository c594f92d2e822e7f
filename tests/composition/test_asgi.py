"""The process's one ASGI application: WebSocket scopes to the hub, everything else to REST."""

from __future__ import annotations

import asyncio
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
