"""The send deadline of Relay's h11 protocol (relay_es/adapters/uvicorn_ws.py, ``http_protocol_class``):
a connection whose peer takes nothing of a waiting reply for ``send_timeout`` is reset, which frees its
slot under ``max_connections``; a slow peer that keeps taking some is never cut.

Without it a client that pipelined requests for large replies and never read held its socket for ever
(uvicorn's request cycle waits for the buffer to drain before it writes, and its keep-alive timer starts
only once a reply is complete): 40 such sockets took every slot of ``--max-open-connections 40``.

The first test runs a real server on loopback with a raw socket client; the others run the protocol on
a fake transport whose buffer the test drains, with the clock of ``ClockLoop`` (moved by the test).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from relay_es.adapters.uvicorn_ws import http_protocol_class, protocol_class
from tests.adapters.test_uvicorn_ws import UPGRADE
from tests.adapters.test_uvicorn_ws_keepalive import ClockLoop, settle
from tests.adapters.test_uvicorn_ws_lean import Transport as HeldTransport

SEND_TIMEOUT = 0.2
BIG = 512 * 1024  # a reply well over the transport's high-water mark
HUGE = 8 * 1024 * 1024  # a reply well over what the kernel buffers on loopback (tcp_wmem: up to 4 MiB)
HIGH, LOW = 64 * 1024, 16 * 1024  # asyncio's default high- and low-water marks


def reply_app(size: int, *, pieces: int = 1) -> Any:
    """Answers an HTTP request with ``size`` bytes in ``pieces`` body messages; accepts a WebSocket."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            while (await receive())["type"] != "websocket.disconnect":
                pass
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(size).encode())]})
        piece = size // pieces
        for i in range(pieces):
            last = i == pieces - 1
            await send({"type": "http.response.body", "body": b"x" * (size - piece * i if last else piece),
                        "more_body": not last})

    return app


def get(path: str = "/", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


async def until(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def closed_by_peer(sock: socket.socket) -> bool:
    """Reads what is there without blocking: True once the server's EOF or reset arrived."""
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_a_client_that_pipelines_and_never_reads_is_reset_and_its_slot_freed() -> None:
    async def main() -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))  # held until the server serves it: no one else can take the port
        http = http_protocol_class(first_request_timeout=30, request_timeout=30, max_connections=1,
                                   send_timeout=SEND_TIMEOUT)
        config = uvicorn.Config(app=reply_app(HUGE), http=http, ws=protocol_class(1.0), lifespan="off",
                                log_config=None)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[listener]))
        client = socket.socket()
        try:
            await until(lambda: server.started or task.done(), "the server to start")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.setblocking(False)
            try:
                client.connect(listener.getsockname())
            except BlockingIOError:
                pass
            await until(lambda: server.server_state.connections, "the connection to be accepted")
            client.send(get() * 3)  # three replies of 8 MiB asked for; none read
            await until(lambda: not server.server_state.connections, "the server to drop the connection")
            await until(lambda: closed_by_peer(client), "the reset (or EOF) to reach the client")
            # The only slot (max_connections=1) is free: a new connection is served, not refused with 503.
            reader, writer = await asyncio.open_connection(*listener.getsockname())
            writer.write(get(extra="Connection: close\r\n"))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 20)
            assert head.startswith(b"HTTP/1.1 200"), head
            writer.close()
        finally:
            client.close()
            server.should_exit = True
            await task
            listener.close()

    asyncio.run(main())


class Transport(HeldTransport):
    """A transport with a write buffer the test drains (as the peer reads), which pauses and
    resumes its protocol's writing at asyncio's water marks."""

    def __init__(self) -> None:
        super().__init__()
        self.buffered = 0
        self.paused = False

    def write(self, data: bytes) -> None:
        super().write(data)
        self.buffered += len(data)
        if not self.paused and self.buffered > HIGH:
            self.paused = True
            self.protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def drain(self, n: int) -> None:
        """The peer took ``n`` bytes (at most what waits)."""
        self.buffered -= min(n, self.buffered)
        if self.paused and self.buffered <= LOW:
            self.paused = False
            self.protocol.resume_writing()


def connection(clock: ClockLoop, app: Any) -> tuple[Any, Transport]:
    config = uvicorn.Config(app=app, ws=protocol_class(1.0), ws_ping_interval=None, lifespan="off", log_config=None,
                            timeout_keep_alive=3600)  # uvicorn's keep-alive close stays out of these tests
    config.load()
    proto = http_protocol_class(first_request_timeout=30, request_timeout=30, send_timeout=SEND_TIMEOUT)(
        config=config, server_state=ServerState(), app_state={}, _loop=clock)
    transport = Transport()
    transport.set_protocol(proto)
    proto.connection_made(transport)
    return proto, transport


def run(test: Any) -> None:
    async def main() -> None:
        await test(ClockLoop(asyncio.get_running_loop()))

    asyncio.run(main())


def test_a_slow_reader_is_never_cut_and_one_that_stops_reading_is() -> None:
    async def test(clock: ClockLoop) -> None:
        proto, transport = connection(clock, reply_app(BIG, pieces=8))
        proto.data_received(get())
        await settle()
        assert transport.paused and proto._send_deadline is not None
        # 1 KiB every 0.15 s: the whole reply takes 75 s of the clock, 375 times the send deadline.
        while not proto.cycle.response_complete or transport.buffered:
            clock.advance(0.75 * SEND_TIMEOUT)
            transport.drain(1024)
            await settle()
            assert not transport.aborted
        # The next reply is taken up to a point, then not at all.
        proto.data_received(get())
        await settle()
        transport.drain(1024)
        clock.advance(0.75 * SEND_TIMEOUT)
        await settle()
        assert not transport.aborted  # it has not been silent for a whole deadline yet
        # Cut once the peer took nothing for a whole deadline between two looks: at most two deadlines
        # after its last read (the deadline is looked at every send_timeout, not moved at each read).
        clock.advance(2 * SEND_TIMEOUT)
        await settle()
        assert transport.aborted
        proto.connection_lost(None)  # as the real transport reports the abort
        await settle()
        assert proto._send_deadline is None and proto.cycle.disconnected

    run(test)


def test_a_reply_left_unread_behind_a_close_is_cut() -> None:
    """A reply under the high-water mark never pauses writing; uvicorn closes after it (the client
    asked), and ``close()`` would wait for the buffer to drain for ever."""

    async def test(clock: ClockLoop) -> None:
        proto, transport = connection(clock, reply_app(10_000))
        proto.data_received(get(extra="Connection: close\r\n"))
        await settle()
        assert transport.closed and not transport.paused and transport.buffered
        clock.advance(2 * SEND_TIMEOUT)
        await settle()
        assert transport.aborted

    run(test)


def test_a_fast_reply_arms_nothing() -> None:
    async def test(clock: ClockLoop) -> None:
        proto, transport = connection(clock, reply_app(BIG))
        proto.data_received(get())
        await settle()
        transport.drain(BIG * 2)  # the peer took it all
        clock.advance(2 * SEND_TIMEOUT)
        await settle()
        assert not transport.aborted and proto._send_deadline is None

    run(test)


def test_an_upgrade_disarms_the_send_deadline() -> None:
    """A WebSocket upgrade pipelined behind a reply that waits unsent: the socket is the WebSocket
    protocol's now, which has its own keepalive; the HTTP protocol's deadline must not cut it."""

    async def test(clock: ClockLoop) -> None:
        proto, transport = connection(clock, reply_app(BIG))
        proto.data_received(get() + UPGRADE)
        await settle()
        ws = transport.get_protocol()
        assert ws is not proto and transport.buffered > HIGH
        assert proto._send_deadline is None and ws.transport is transport  # not the counting wrapper
        clock.advance(10 * SEND_TIMEOUT)
        await settle()
        assert not transport.aborted
        ws.connection_lost(None)
        await settle()

    run(test)
