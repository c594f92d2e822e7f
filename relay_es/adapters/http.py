"""The HTTP side: one ASGI application serving the REST API and the hub.

WebSocket scopes go straight to the hub (any path ending in
``/websocket/{app}/{key}``); everything else goes to the Litestar app.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Litestar, get

from relay_es.runtime import Runtime


def build_rest(runtime: Runtime) -> Litestar:
    @get("/healthz", sync_to_thread=False)
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "instance": runtime.settings.instance, "store": runtime.store.kind}

    async def on_startup() -> None:
        runtime.start(asyncio.get_running_loop())

    async def on_shutdown() -> None:
        await runtime.stop()

    return Litestar(route_handlers=[healthz], on_startup=[on_startup], on_shutdown=[on_shutdown], logging_config=None)


class RelayASGI:
    def __init__(self, runtime: Runtime, rest: Litestar | None = None) -> None:
        self.runtime = runtime
        self.rest = rest or build_rest(runtime)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self.runtime.hub(scope, receive, send)
        else:
            await self.rest(scope, receive, send)
