"""Relay's WebSocket keepalive (relay_es/adapters/uvicorn_ws.py): a socket is failed with 1011,
and its application told, once nothing at all has been read from the peer for
``RELAY_PING_WAIT_SECS``; Relay pings after each ``RELAY_PING_INTERVAL_SECS`` of silence.

uvicorn's keepalive gave each ping's pong a deadline of its own, 4 s with the defaults (20 s,
25 s): an executor busy 5 s (building a 32 MB export, its pong queued behind it), or whose
large reply was still arriving, was recorded ``ping_timeout`` though its bytes were flowing.

The protocol runs on a fake transport with the clock of :class:`ClockLoop` (the running loop,
whose time and timers the test moves), but for the last test: a real server on loopback and a
peer trickling a large message, slower than the ping wait as a whole.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import socket
import time
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from relay_es.adapters.uvicorn_ws import http_protocol_class, protocol_class, split_ping_wait
from relay_es.protocol.limits import MAX_FRAME
from tests.adapters.test_uvicorn_ws import UPGRADE, Transport, frame

INTERVAL, WAIT = 20.0, 25.0  # Relay's defaults
PING = b"\x89\x00"  # Relay's ping as written: final, opcode 9, no payload


class Timer:
    """What the protocol uses of an asyncio.TimerHandle."""

    def __init__(self, when: float, callback: Any, args: tuple[Any, ...]) -> None:
        self._when, self.callback, self.args, self.cancelled = when, callback, args, False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


class ClockLoop:
    """The running event loop, but for ``time``, ``call_at`` and ``call_later``: a clock that only
    :meth:`advance` moves, running each timer that falls due at its own time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.now = loop, 1000.0
        self.timers: list[tuple[float, int, Timer]] = []
        self.order = itertools.count()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any, *args: Any) -> Timer:
        timer = Timer(when, callback, args)
        heapq.heappush(self.timers, (when, next(self.order), timer))
        return timer

    def call_later(self, delay: float, callback: Any, *args: Any) -> Timer:
        return self.call_at(self.now + delay, callback, *args)

    def advance(self, secs: float, *, late: bool = False) -> None:
        """Moves the clock ``secs`` on. Each timer runs at its time, or, ``late``, all at the end
        (an event loop busy all that while)."""
        end = self.now + secs
        while self.timers and self.timers[0][0] <= end:
            when, _, timer = heapq.heappop(self.timers)
            if not timer.cancelled:
                self.now = end if late else max(self.now, when)
                timer.callback(*timer.args)
        self.now = end


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class Socket:
    """Relay's protocol on a fake transport and a fake clock, upgraded, its application
    accepting and collecting what it receives (reading only while ``reading``)."""

    def __init__(self, clock: ClockLoop, *, interval: float = INTERVAL, wait: float = WAIT) -> None:
        self.clock, self.received, self.reading = clock, [], asyncio.Event()
        self.reading.set()
        ping_timeout, close_timeout = split_ping_wait(interval, wait)

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "websocket.accept"})
            scope["extensions"]["relay.frame_cap"](MAX_FRAME)
            while True:
                await self.reading.wait()
                message = await receive()
                self.received.append(message)
                if message["type"] == "websocket.disconnect":
                    return

        config = uvicorn.Config(app=app, ws_max_size=MAX_FRAME, ws_per_message_deflate=False, log_config=None,
                                ws_ping_interval=interval, ws_ping_timeout=ping_timeout)
        config.load()
        self.proto = protocol_class(close_timeout)(config=config, server_state=ServerState(), app_state={},
                                                   _loop=clock)
        self.transport = Transport()
        self.proto.connection_made(self.transport)

    async def open(self) -> Socket:
        self.proto.data_received(UPGRADE)
        await settle()
        assert self.transport.written[0].startswith(b"HTTP/1.1 101")
        self.mark = 1
        return self

    async def feed(self, data: bytes) -> None:
        self.proto.data_received(data)
        await settle()

    async def advance(self, secs: float, **kwargs: Any) -> None:
        self.clock.advance(secs, **kwargs)
        await settle()

    def pings(self) -> int:
        """Relay's pings written since the last call."""
        new, self.mark = self.transport.written[self.mark:], len(self.transport.written)
        return b"".join(new).count(PING)

    @property
    def failed(self) -> bool:
        close = self.proto.conn.close_sent
        return close is not None and close.code == 1011

    def disconnects(self) -> list[dict[str, Any]]:
        return [m for m in self.received if m["type"] == "websocket.disconnect"]


def run(test: Any) -> None:
    async def main() -> None:
        await test(ClockLoop(asyncio.get_running_loop()))

    asyncio.run(main())


def test_the_ping_wait_is_split_into_the_silence_before_the_give_up_and_a_close_bound() -> None:
    assert split_ping_wait(20, 25) == (5.0, 1.0)
    assert split_ping_wait(1, 2) == (1.0, 0.5)
    assert split_ping_wait(2, 30) == (28.0, 1.0)


def test_a_silent_peer_is_pinged_after_the_interval_and_failed_after_the_whole_wait() -> None:
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock).open()
        await s.advance(INTERVAL - 0.01)
        assert s.pings() == 0
        await s.advance(0.01)
        assert s.pings() == 1
        await s.advance(WAIT - INTERVAL - 0.01)  # 4 s after the ping, 24.99 s of silence: uvicorn gave up at 24
        assert not s.failed and s.disconnects() == []
        await s.advance(0.01)
        assert s.failed
        # told at once, as the 1011 it is, before the transport is gone
        assert s.disconnects() == [{"type": "websocket.disconnect", "code": 1011, "reason": "keepalive ping timeout"}]
        assert s.transport.closed and not s.transport.aborted and not s.proto.disconnected
        await s.advance(1.0)  # close_timeout: a peer that reads nothing cannot hold it open
        assert s.transport.aborted

    run(test)


def test_any_bytes_from_the_peer_count_the_parts_of_a_large_message_too() -> None:
    """A large message arriving over 100 s, a part every 15 s: never 20 s of silence, so never
    pinged, never failed; uvicorn pinged at 20 s and failed the socket 4 s later, its pong behind
    the message."""
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock).open()
        payload = b"x" * 70_000
        whole = frame(payload)
        parts = [whole[i:i + 10_000] for i in range(0, len(whole), 10_000)]
        for part in parts:
            await s.advance(15.0)
            await s.feed(part)
        assert (len(parts) - 1) * 15 > 4 * WAIT
        assert s.pings() == 0 and not s.failed
        assert [m.get("text") for m in s.received] == [payload.decode()]
        # the peer's own pings count as well (answered with pongs, which are not Relay's pings)
        for _ in range(5):
            await s.advance(INTERVAL - 1)
            await s.feed(frame(b"p", opcode=0x9))
        assert s.pings() == 0 and not s.failed
        await s.advance(WAIT)
        assert s.failed

    run(test)


def test_a_peer_that_answers_is_pinged_after_each_interval_of_silence_and_kept() -> None:
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock).open()
        for _ in range(4):
            await s.advance(INTERVAL)
            assert s.pings() == 1
            await s.advance(3.9)  # a pong 3.9 s after the ping
            await s.feed(frame(b"", opcode=0xA))
            assert not s.failed
        await s.advance(INTERVAL - 0.01)  # silence counts from the pong, not from the ping
        assert s.pings() == 0
        await s.advance(0.01)
        assert s.pings() == 1 and not s.failed

    run(test)


def test_a_long_wait_pings_after_every_interval_of_silence() -> None:
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock, interval=2.0, wait=7.0).open()
        await s.advance(1.0)
        await s.feed(frame(b"{}"))  # silence from here
        counts = []
        for _ in range(3):
            await s.advance(2.0)
            counts.append(s.pings())
        assert counts == [1, 1, 1] and not s.failed
        await s.advance(0.99)
        assert not s.failed
        await s.advance(0.01)  # 7 s since the message
        assert s.failed and s.pings() == 0

    run(test)


def test_a_socket_relay_does_not_read_is_not_silent() -> None:
    """While a message waits for the application, uvicorn reads nothing more from the socket:
    the peer's pongs stay unread, and that is Relay's doing, not the peer's silence."""
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock).open()
        s.reading.clear()
        await s.feed(frame(b"{}"))
        await s.feed(frame(b"[]"))  # queued behind the first: reading is paused
        assert s.proto.read_paused
        await s.advance(3 * WAIT)
        assert not s.failed
        s.reading.set()
        await settle()
        assert [m.get("text") for m in s.received] == ["{}", "[]"] and not s.proto.read_paused
        await s.advance(WAIT)
        assert s.failed

    run(test)


def test_a_check_the_busy_loop_ran_late_reads_the_sockets_before_it_gives_up() -> None:
    """An event loop held for longer than the ping wait (uvloop runs its timers before it polls
    the sockets): what the peer sent meanwhile is read before the socket is judged silent."""
    async def test(clock: ClockLoop) -> None:
        s = await Socket(clock).open()
        await s.advance(WAIT + 5, late=True)  # every check due meanwhile runs only now
        assert not s.failed
        await s.feed(frame(b"", opcode=0xA))  # the pong that was waiting in the socket
        await s.advance(1.0)
        assert not s.failed
        await s.advance(WAIT + 5, late=True)
        assert not s.failed
        await s.advance(1.0)  # looked again once the loop had polled: nothing came
        assert s.failed

    run(test)


# -- a real server ----------------------------------------------------------------------


def test_a_peer_trickling_a_large_message_for_longer_than_the_ping_wait_is_not_disconnected() -> None:
    """A peer that reads nothing (so answers no ping) sends a 1 MiB message over about 3 s, a part
    every 0.1 s, to a server that gives up after 1 s of silence: the message arrives whole and the
    socket stays open. Once the peer stops sending, it is failed with 1011."""
    interval, wait = 0.5, 1.0
    received: list[Any] = []
    payload = b"y" * (1024 * 1024)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        scope["extensions"]["relay.frame_cap"](MAX_FRAME)
        while True:
            message = await receive()
            received.append(message)
            if message["type"] == "websocket.disconnect":
                return

    async def until(condition: Any, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)

    async def main() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))  # held until the server serves it: no one else can take the port
        ping_timeout, close_timeout = split_ping_wait(interval, wait)
        config = uvicorn.Config(app=app, ws=protocol_class(close_timeout), ws_max_size=MAX_FRAME,
                                http=http_protocol_class(first_request_timeout=30, request_timeout=30),
                                ws_ping_interval=interval, ws_ping_timeout=ping_timeout,
                                ws_per_message_deflate=False, lifespan="off", log_config=None)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await until(lambda: server.started or task.done(), "the server to start")
            reader, writer = await asyncio.open_connection(*sock.getsockname())
            writer.write(UPGRADE)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
            whole = frame(payload)
            step = len(whole) // 30 + 1
            started = time.monotonic()
            for i in range(0, len(whole), step):
                writer.write(whole[i:i + step])
                await writer.drain()
                await asyncio.sleep(0.1)  # the peer's pace, not a wait for a timer
            assert time.monotonic() - started > 2 * wait
            await until(lambda: received, "the message")
            assert received[0] == {"type": "websocket.receive", "text": payload.decode()}
            # it never read a ping, so never answered one: its bytes alone kept it
            await until(lambda: len(received) > 1, "the silent socket's disconnect")
            assert received[1]["type"] == "websocket.disconnect" and received[1]["code"] == 1011
            writer.close()
        finally:
            server.should_exit = True
            await task
            sock.close()

    asyncio.run(main())
