"""uvicorn's ``websockets`` protocol with a bounded closing handshake.

When a keepalive pong does not come back, the protocol sends a close frame
and then waits ``close_timeout`` (10 s by default) for the peer's answer
before the application hears of the disconnect. A frozen executor never
answers, so Relay shortens that wait and takes it out of the ping budget:
a silent socket reaches the application within ``RELAY_PING_WAIT_SECS``.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_impl import WebSocketProtocol


def split_ping_wait(interval: float, wait: float) -> tuple[float, float]:
    """``(ping_timeout, close_timeout)`` such that interval + both == wait."""
    budget = wait - interval
    close_timeout = min(1.0, budget / 2)
    return budget - close_timeout, close_timeout


def protocol_class(close_timeout: float) -> type[WebSocketProtocol]:
    class RelayWebSocketProtocol(WebSocketProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.close_timeout = close_timeout
            self.keepalive_timed_out = False

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
