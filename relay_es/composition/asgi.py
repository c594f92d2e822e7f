"""The HTTP side: one ASGI application serving the REST API and the hub.

WebSocket scopes go straight to the hub (any path ending in
``/websocket/{app}/{key}``); everything else goes to the Litestar app.
"""

from __future__ import annotations

from typing import Any

from relay_es.adapters.rest import build_app
from relay_es.composition.runtime import Runtime


class RelayASGI:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.rest = build_app(runtime)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self.runtime.hub(scope, receive, send)
        else:
            await self.rest(scope, receive, send)
