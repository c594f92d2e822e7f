"""uvicorn's ``websockets`` protocol with a bounded closing handshake.

When a keepalive pong does not come back, the protocol sends a close frame
and then waits ``close_timeout`` (10 s by default) for the peer's answer
before the application hears of the disconnect. A frozen executor never
answers, so Relay shortens that wait and takes it out of the ping budget:
a silent socket reaches the application within ``RELAY_PING_WAIT_SECS``.
"""

from __future__ import annotations

import inspect
from typing import Any

from uvicorn.protocols.websockets.websockets_impl import WebSocketProtocol
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory


def split_ping_wait(interval: float, wait: float) -> tuple[float, float]:
    """``(ping_timeout, close_timeout)`` such that interval + both == wait."""
    budget = wait - interval
    close_timeout = min(1.0, budget / 2)
    return budget - close_timeout, close_timeout


_ONE_ARGUMENT = inspect.Signature([
    inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
    inspect.Parameter("protocol", inspect.Parameter.POSITIONAL_OR_KEYWORD),
])


def protocol_class(close_timeout: float) -> type[WebSocketProtocol]:
    class RelayWebSocketProtocol(WebSocketProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.close_timeout = close_timeout
            self.keepalive_timed_out = False
            if self.available_extensions:
                # websockets' own memory-lean defaults (uvicorn asks for zlib's
                # largest window): about 32 KiB of zlib state per connection
                # instead of about 256 KiB, for frames that are mostly small JSON.
                self.available_extensions = [ServerPerMessageDeflateFactory(
                    server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5})]

        async def ws_handler(self, protocol: Any, path: str = "") -> Any:  # type: ignore[override]
            # uvicorn's handler takes (protocol, path); websockets inspects it on every connection,
            # finds two arguments and wraps it with a DeprecationWarning each time: a fifth of the
            # event loop's time in a storm of handshakes. Callable with one argument, and with its
            # signature given, it is taken as it is.
            return await super().ws_handler(protocol, path)

        ws_handler.__signature__ = _ONE_ARGUMENT  # type: ignore[attr-defined]

        def fail_connection(self, code: int = 1006, reason: str = "") -> None:
            if code == 1011 and "keepalive" in reason:
                self.keepalive_timed_out = True
            super().fail_connection(code, reason)

        async def asgi_receive(self) -> Any:
            # The peer never answers the close frame, so the code the application
            # would see is 1006; report the keepalive timeout as the 1011 it is.
            message = await super().asgi_receive()
            if message.get("type") == "websocket.disconnect" and self.keepalive_timed_out:
                message = {**message, "code": 1011, "reason": "keepalive ping timeout"}
            return message

    return RelayWebSocketProtocol


def http_protocol_class(request_timeout: float) -> type:
    """uvicorn's h11 protocol with a deadline for the first request.

    uvicorn starts its keep-alive timer only after a response; a client that
    opens a connection and never completes its request (or its WebSocket
    upgrade) would hold a file descriptor forever. Here such a connection is
    closed ``request_timeout`` seconds after it was made.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class RelayH11Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._first_request_deadline = self.loop.call_later(request_timeout, self._drop_if_idle)

        def _drop_if_idle(self) -> None:
            upgraded = self.transport.get_protocol() is not self
            if not upgraded and self.cycle is None and not self.transport.is_closing():
                self.logger.info("%s:%d - closed: no complete request within %gs",
                                 *(self.client or ("?", 0)), request_timeout)
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._first_request_deadline.cancel()
            super().connection_lost(exc)

    return RelayH11Protocol
