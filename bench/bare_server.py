"""The baselines of section 1: servers that accept and hold connections and answer nothing.

Variants (``--variant``):

``websockets``   the baseline: a minimal asyncio ``websockets`` server with
                 the library defaults (permessage-deflate negotiated with its
                 memory-saving defaults: 12-bit window, memLevel 5).
``ws-uvdeflate`` the same server with uvicorn's permessage-deflate settings
                 (``ServerPerMessageDeflateFactory()``: 15-bit window, zlib's
                 default memLevel 8), to isolate what that setting costs.
``ws-nodeflate`` the same server without compression.
``uvicorn``      uvicorn configured exactly as ``relay serve`` configures it
                 (its ``websockets`` protocol with Relay's bounded closing
                 handshake, deflate on, 128 MiB frames) around an ASGI app
                 that accepts and holds: Relay minus Relay.
``uvicorn-lowmem`` the same, with the protocol's deflate extension replaced by
                 the ``websockets`` defaults (12-bit window, memLevel 5): what
                 the change proposed in docs/benchmarks.md would give.

Ping settings are Relay's defaults everywhere: a ping every 20 s, the pong due
within 4 s, a 1 s closing handshake (``split_ping_wait(20, 25)``).
Prints ``ready`` on stdout once listening.

    python -m bench.bare_server --port 8091 [--variant websockets]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from typing import Any

MAX_FRAME = 128 * 1024 * 1024


async def hold(ws: Any) -> None:
    try:
        async for _ in ws:
            pass
    except Exception:
        pass


async def websockets_server(port: int, variant: str) -> None:
    from websockets.asyncio.server import serve
    from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory

    kw: dict[str, Any] = {}
    if variant == "ws-nodeflate":
        kw["compression"] = None
    elif variant == "ws-uvdeflate":
        kw["compression"] = None
        kw["extensions"] = [ServerPerMessageDeflateFactory()]
    async with serve(hold, "127.0.0.1", port, ping_interval=20, ping_timeout=4, close_timeout=1, max_size=MAX_FRAME,
                     backlog=2048, **kw):
        print("ready", flush=True)
        await asyncio.Future()


def uvicorn_server(port: int, lowmem: bool) -> None:
    import warnings

    warnings.filterwarnings("ignore", message=".*websockets.* implementation is deprecated")
    import uvicorn
    from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory

    from relay_es.adapters.uvicorn_ws import protocol_class, split_ping_wait

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                m = await receive()
                if m["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                    print("ready", flush=True)
                elif m["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "websocket":
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            m = await receive()
            if m["type"] == "websocket.disconnect":
                return

    ping_timeout, close_timeout = split_ping_wait(20.0, 25.0)
    proto = protocol_class(close_timeout)
    if lowmem:
        base = proto

        class LowMem(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                # (uvicorn's Sans-I/O protocol, which Relay uses, negotiates these settings already)
                if getattr(self, "available_extensions", None):
                    self.available_extensions = [ServerPerMessageDeflateFactory(
                        server_max_window_bits=12, compress_settings={"memLevel": 5})]

        proto = LowMem
    config = uvicorn.Config(app, host="127.0.0.1", port=port, ws=proto, ws_max_size=MAX_FRAME,
                            ws_ping_interval=20.0, ws_ping_timeout=ping_timeout, ws_per_message_deflate=True,
                            access_log=False, log_config=None, lifespan="on", timeout_keep_alive=5)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--variant", default="websockets", choices=["websockets", "ws-uvdeflate", "ws-nodeflate", "uvicorn", "uvicorn-lowmem"])
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 200_000), max(hard, 200_000)))
    except (ValueError, PermissionError):  # without CAP_SYS_RESOURCE the hard limit stays
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        if a.variant.startswith("uvicorn"):
            uvicorn_server(a.port, a.variant == "uvicorn-lowmem")
        else:
            asyncio.run(websockets_server(a.port, a.variant))
    except KeyboardInterrupt:
        sys.exit(0)
