"""uvicorn's WebSocket and HTTP protocols, as Relay runs them.

Executors connect through uvicorn's Sans-I/O ``websockets`` protocol: no task
per connection, lean deflate, a peer's disconnect reported at once, and a
silent socket (no pong within the ping timeout) failed with 1011 so that it
reaches the application within ``RELAY_PING_WAIT_SECS``.
"""

from __future__ import annotations

from typing import Any



def split_ping_wait(interval: float, wait: float) -> tuple[float, float]:
    """``(ping_timeout, close_timeout)`` such that interval + both == wait."""
    budget = wait - interval
    close_timeout = min(1.0, budget / 2)
    return budget - close_timeout, close_timeout


def protocol_class(close_timeout: float) -> type:
    """uvicorn's Sans-I/O ``websockets`` protocol (``websockets-sansio``), as Relay needs it.

    * It keeps no task per connection (the legacy protocol kept three), already
      negotiates websockets' memory-lean deflate settings, and on a peer's EOF
      or reset tells the application at once.
    * A keepalive ping that is not answered fails the connection with 1011 and
      closes the transport; the application would hear 1005. Relay reports it
      as the 1011 it is, so the executor is recorded ``ping_timeout``.
    * ``close_timeout`` bounds the closing handshake Relay starts (4001-4003).
    """
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class RelayWebSocketProtocol(WebSocketsSansIOProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.close_timeout = close_timeout
            self.keepalive_timed_out = False

        def keepalive_timeout(self) -> None:
            self.keepalive_timed_out = True
            super().keepalive_timeout()

        async def receive(self) -> Any:
            message = await super().receive()
            if message.get("type") == "websocket.disconnect" and self.keepalive_timed_out:
                message = {**message, "code": 1011, "reason": "keepalive ping timeout"}
            return message

        async def send(self, message: Any) -> None:
            await super().send(message)
            if message.get("type") == "websocket.http.response.body" and not message.get("more_body", False):
                # A handshake refused with an HTTP response is complete: uvicorn would log
                # "ASGI callable returned without completing handshake" for every refusal.
                self.handshake_complete = True

        def send_receive_event_to_app(self) -> None:
            # Text that is not UTF-8 fails the connection with 1007, as uvicorn does, but
            # without its logged traceback: hostile input is expected, not an error of Relay's.
            if self.curr_msg_data_type == "text" and not self.close_sent:
                data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
                try:
                    data.decode()
                except UnicodeDecodeError:
                    self.frames = []
                    self.logger.info("%s:%d - invalid UTF-8 in a text frame; closing with 1007",
                                     *(self.client or ("?", 0)))
                    self.conn.send_close(1007)
                    self.handle_parser_exception()
                    return
            super().send_receive_event_to_app()

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
