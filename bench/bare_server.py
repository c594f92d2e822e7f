"""The baselines of section 1: servers that accept and hold connections and answer nothing.

Variants (``--variant``):

``ws-nodeflate`` the baseline: a minimal asyncio ``websockets`` server
                 without compression.
``websockets``   the same server with the library's default permessage-deflate
                 (context takeover, 12-bit window, memLevel 5): a compressor
                 and a decompressor kept per socket.
``uvicorn``      uvicorn configured exactly as ``relay serve`` configures it
                 (Relay's protocol classes: lean deflate with no context
                 takeover, bounded closing handshake, 128 MiB frames) around an
                 ASGI app that accepts and holds: Relay minus Relay.
``uvicorn-nodeflate`` the same without compression.
``uvicorn-echo`` the ``uvicorn`` server whose app sends every message back (the
                 bandwidth measurement of section 1).

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

    kw: dict[str, Any] = {}
    if variant == "ws-nodeflate":
        kw["compression"] = None
    from relay_es.adapters.uvicorn_ws import LISTEN_BACKLOG  # as relay serve listens: a shorter queue overflows sooner

    async with serve(hold, "127.0.0.1", port, ping_interval=20, ping_timeout=4, close_timeout=1, max_size=MAX_FRAME,
                     backlog=LISTEN_BACKLOG, **kw):
        print("ready", flush=True)
        await asyncio.Future()


def uvicorn_server(port: int, variant: str) -> None:
    import uvicorn

    from relay_es.adapters.uvicorn_ws import LISTEN_BACKLOG, http_protocol_class, protocol_class, split_ping_wait

    echo = variant == "uvicorn-echo"

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
        if echo:
            scope["extensions"]["relay.frame_cap"](MAX_FRAME)  # as the hub does once the executor is registered
        while True:
            m = await receive()
            if m["type"] == "websocket.disconnect":
                return
            if echo:
                await send({"type": "websocket.send", "text": m.get("text"), "bytes": m.get("bytes")})

    ping_timeout, close_timeout = split_ping_wait(20.0, 25.0)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, ws=protocol_class(close_timeout),
                            http=http_protocol_class(first_request_timeout=10.0, request_timeout=10.0),
                            ws_max_size=MAX_FRAME, ws_ping_interval=20.0, ws_ping_timeout=ping_timeout,
                            ws_per_message_deflate=variant != "uvicorn-nodeflate", access_log=False, log_config=None,
                            lifespan="on", timeout_keep_alive=5, backlog=LISTEN_BACKLOG)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--variant", default="ws-nodeflate", choices=["websockets", "ws-nodeflate", "uvicorn", "uvicorn-nodeflate", "uvicorn-echo"])
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 200_000), max(hard, 200_000)))
    except (ValueError, PermissionError):  # without CAP_SYS_RESOURCE the hard limit stays
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        if a.variant.startswith("uvicorn"):
            uvicorn_server(a.port, a.variant)
        else:
            asyncio.run(websockets_server(a.port, a.variant))
    except KeyboardInterrupt:
        sys.exit(0)
