"""uvicorn's WebSocket and HTTP protocols, as Relay runs them.

Executors connect through uvicorn's Sans-I/O ``websockets`` protocol: no task
per connection, lean deflate, a peer's disconnect reported at once, and a
silent socket failed with 1011 and reported to the application once nothing
at all has come from it for ``RELAY_PING_WAIT_SECS``.

Keepalive: the clock is the last bytes read from the peer, whatever they are
(a pong, the peer's own ping, a message, part of a large message still
arriving). Relay pings a socket after each ``RELAY_PING_INTERVAL_SECS`` of
silence; its pong is only the likeliest bytes to come back. uvicorn's own
keepalive gave each ping's pong a deadline of its own: with the defaults
(20 s, 25 s) a pong had 4 s, so an executor busy for 5 s (building a 32 MB
export, its pong queued behind it) or whose reply was still arriving was
DISCONNECTED though its bytes were flowing. A socket is not silent while
Relay itself is not reading it (a message waits for the application), and a
check that runs late because the event loop was busy looks again once the
loop has read its sockets: bytes that came meanwhile are not silence.

Compression: permessage-deflate is negotiated with *no context takeover in
both directions* (RFC 7692 7.1.1: the server may require it of the client even
if the offer did not ask), so no zlib state outlives a message: an idle socket
holds none (it held about 50 KiB with context takeover). A message Relay sends
is compressed only from ``COMPRESS_MIN_BYTES`` on; smaller ones go as they
are (RFC 7692 6: a message without RSV1 is not compressed), which spares the
per-message compressor for the many small requests. A message over
``SLICED_FROM`` is not compressed in one go: deflate costs 0.1 s a MiB of
base64 text, and one 60 MiB import held the event loop for 6 s (every REST
call and every executor's socket with it). It is made ready in slices of
``DEFLATE_SLICE``, the loop free between them, and compressed only if its
first slice shrinks to ``DEFLATE_PAYS`` of its size or less (a workflow list
shrinks to 7-13 %; base64 blobs, to 76 %, go as they are), and only while fewer
than ``DEFLATE_AT_ONCE`` such messages are being compressed (ADR 26). What
executors send is decompressed whatever its size.

Frame cap: a socket accepts a first message of at most ``handshake_frame_cap``
bytes and later ones of at most ``pending_frame_cap`` until the application
raises the cap (the hub does once the executor is registered), so an
unregistered client cannot make Relay buffer a 128 MiB message. The second
stage exists because the parser reads every frame of a TCP read at once: a
client that sends a reply right behind its ``executor_info`` answer has it
parsed before the application has seen the answer. A message over the cap
fails the connection with 1009, and so do messages that add up to more than
the two caps together before registration: the parser decompresses every
message of a TCP read at once, and 250 deflated messages of 1 MiB each fit in
270 KB on the wire (one socket grew the server by 230 MiB; 16 stalled its
event loop for seconds).

Frames that carry nothing are bounded too, registered or not: a peer may send
:data:`CONTROL_BURST` pings and pongs at once and :data:`CONTROL_RATE` a second
after that (or two for each of Relay's own pings, if it pings faster), and a
message may have at most :data:`MAX_FRAGMENTS` frames; past
either the connection fails with 1002. The parser takes every frame of a read
at once, about 3 us each, and uvicorn stops reading a socket only once a whole
message is queued: one registered socket sending 6-byte pings, or a message of
endless empty continuation frames, held the event loop for seconds on end
(``/healthz`` answered in 11-15 s, every other executor missed its keepalive
and was declared dead), and the empty frames grew the server without bound.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory
from websockets.exceptions import InvalidState, PayloadTooBig, ProtocolError
from websockets.frames import CONT, CTRL_OPCODES, PONG, Frame
from websockets.protocol import State
from websockets.server import ServerProtocol

from relay_es.protocol.limits import MAX_HANDSHAKE_FRAME, MAX_PENDING_FRAME

COMPRESS_MIN_BYTES = 1024
# A message over SLICED_FROM characters (bytes, for a binary one) is made ready in slices, the event loop free
# between two. Deflating 32 KiB costs at most about 2 ms here (base64 text; a JSON list 0.5 ms), 64 KiB 6 ms
# and 1 MiB 115 ms (ADR 26): up to SLICED_FROM a message is compressed in one go, as websockets does.
SLICED_FROM = 32 * 1024
DEFLATE_SLICE = 32 * 1024  # characters deflated between two turns of the loop
PLAIN_SLICE = 1024 * 1024  # characters encoded between two turns of the loop, for a message sent as it is
DEFLATE_PAYS = 0.5  # a sliced message is compressed only if its first slice shrinks to this fraction or less
DEFLATE_AT_ONCE = 4  # sliced messages being compressed at once, in the process; one more goes as it is
_deflating = 0  # sliced messages being compressed now
_EMPTY_BLOCK = b"\x00\x00\xff\xff"  # the end of a sync flush, which RFC 7692 7.2.1 strips from a message
# A keepalive check that runs this much later than it was due ran behind a busy event loop: the peer's bytes may
# be waiting unread in the socket, so it looks again _RECHECK later, once the loop has polled its sockets.
_LATE = 0.1
_RECHECK = 0.05
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection, dropping what is unsent
# Connections the kernel holds for the server before it accepts them (the kernel caps it at
# net.core.somaxconn: 4,096 by default). uvicorn's default, 2,048, overflowed when a fleet reconnected
# at once while the process was busy: a client whose handshake the kernel drops tries again 1 s, then
# 3 s, 7 s later, so one overflow stretched a storm of 5,000 reconnects from about 1.5 s to 6 s (ADR 2).
LISTEN_BACKLOG = 65_535
CONTROL_BURST = 100  # pings and pongs a peer may send at once...
CONTROL_RATE = 10.0  # ...and a second after that (the SDKs ping every 20 s; Relay's pings are answered once each)
MAX_FRAGMENTS = 1024  # frames of one message (the SDKs send each message in one)


class _PerMessageDeflate(PerMessageDeflate):
    """websockets' permessage-deflate, sending a message under
    ``COMPRESS_MIN_BYTES`` (and its continuation frames) uncompressed."""

    _plain = False

    def encode(self, frame: Frame) -> Frame:
        if frame.opcode in CTRL_OPCODES:
            return frame
        if frame.opcode is not CONT:
            self._plain = frame.fin and len(frame.data) < COMPRESS_MIN_BYTES
        return frame if self._plain else super().encode(frame)


class DeflateFactory(ServerPerMessageDeflateFactory):
    """Accepts a client's permessage-deflate offer with no context takeover in
    both directions, whatever the offer said of it; zlib's default window and
    memory level for the messages that are compressed (the state lives only
    while one message is encoded or decoded)."""

    def __init__(self) -> None:
        super().__init__(server_no_context_takeover=True, client_no_context_takeover=True)

    def process_request_params(self, params: Any, accepted_extensions: Any) -> Any:
        response, extension = super().process_request_params(params, accepted_extensions)
        extension.__class__ = _PerMessageDeflate
        return response, extension


DEFLATE = DeflateFactory()


def _frame_head(opcode: int, compressed: bool, size: int) -> bytes:
    """The header of a final, unmasked (server) frame of ``size`` bytes (RFC 6455 5.2)."""
    b0 = 0x80 | (0x40 if compressed else 0) | opcode
    if size < 126:
        return struct.pack("!BB", b0, size)
    if size < 65536:
        return struct.pack("!BBH", b0, 126, size)
    return struct.pack("!BBQ", b0, 127, size)


async def sliced_frame(data: str | bytes, extension: PerMessageDeflate | None) -> list[bytes]:
    """One final frame carrying ``data`` (text if a str), as the pieces to write in order: made
    ready a slice at a time, yielding to the event loop between two, so that a message of any size
    never holds the loop longer than one slice. Compressed with ``extension`` (no context takeover:
    a compressor of its own) only if the first slice shrinks to :data:`DEFLATE_PAYS` or less, and
    only while fewer than :data:`DEFLATE_AT_ONCE` are being compressed; else as it is."""
    global _deflating
    text = isinstance(data, str)
    opcode = 0x1 if text else 0x2
    whole = data if text else memoryview(data).cast("B")  # a bytes slice would be a copy

    def piece(i: int, n: int) -> Any:
        part = whole[i:i + n]
        return part.encode() if isinstance(part, str) else part

    pieces: list[Any] = []
    done = 0  # characters (bytes) of data in pieces
    if extension is not None and _deflating < DEFLATE_AT_ONCE:
        _deflating += 1
        try:
            encoder = zlib.compressobj(wbits=-extension.local_max_window_bits, **extension.compress_settings)
            first = piece(0, DEFLATE_SLICE)
            # A sync flush mid-message (an empty stored block, RFC 1951) is valid DEFLATE: the receiver's
            # inflater reads through it. It makes the first slice's compressed size known.
            out = encoder.compress(first) + encoder.flush(zlib.Z_SYNC_FLUSH)
            if len(out) <= DEFLATE_PAYS * len(first):
                pieces.append(out)
                for i in range(DEFLATE_SLICE, len(whole), DEFLATE_SLICE):
                    await asyncio.sleep(0)
                    out = encoder.compress(piece(i, DEFLATE_SLICE))
                    if out:
                        pieces.append(out)
                end = encoder.flush(zlib.Z_SYNC_FLUSH)
                if end[-4:] != _EMPTY_BLOCK:  # zlib's sync flush always ends so; websockets asserts it too
                    raise RuntimeError("deflate's sync flush did not end with an empty block")
                pieces.append(end[:-4])
                return [_frame_head(opcode, True, sum(map(len, pieces))), *pieces]
            pieces.append(first)  # it does not pay: the message goes as it is, this slice first
            done = min(DEFLATE_SLICE, len(whole))
        finally:
            _deflating -= 1
    if not text:
        pieces.append(whole[done:])  # bytes go as they are: nothing to make ready
    else:
        for i in range(done, len(whole), PLAIN_SLICE):
            if pieces:
                await asyncio.sleep(0)
            pieces.append(piece(i, PLAIN_SLICE))
    return [_frame_head(opcode, False, sum(map(len, pieces))), *pieces]


class _StagedCap(ServerProtocol):
    """websockets' server protocol with the frame cap's stages (the module's docstring): while
    ``staged``, the first message is capped as the protocol was made, and once it is complete
    the cap becomes ``pending_frame_cap``; :meth:`raise_frame_cap` sets the cap for good.
    A subclass, not a function stored on the object: such a function closes over the object
    (or its owner), a reference cycle that keeps a closed socket's objects until a full collection."""

    staged = False
    pending_frame_cap: int | None = None
    budget: int | None = None  # message bytes (decompressed) it may still receive until the cap is raised
    # Set on the object by its first ping or fragment (an idle socket holds none): the control frames it
    # may still send now (a bucket refilled at CONTROL_RATE), when it was last filled, the frames of the
    # message under way.
    controls = float(CONTROL_BURST)
    controls_at = 0.0
    fragments = 0
    control_rate = CONTROL_RATE  # set on the object where Relay pings more often: its pongs come back
    # Set on the object while the transport's write buffer is over its high-water mark: pongs are not
    # queued, the latest ping's payload (125 bytes at most) is kept for the pong written once it drains.
    holding_pongs = False
    held_pong: bytes | None = None

    def recv_frame(self, frame: Frame) -> None:  # called by the parser after each frame, before the next is read
        op = frame.opcode.value
        if op == 0:
            self.fragments += 1
            if self.fragments >= MAX_FRAGMENTS:  # the parser fails the connection with 1002
                raise ProtocolError(f"a message of more than {MAX_FRAGMENTS} frames")
        elif op in (1, 2):
            if self.fragments:
                self.fragments = 0
        elif op in (9, 10):
            now = time.monotonic()
            self.controls = min(CONTROL_BURST, self.controls + (now - self.controls_at) * self.control_rate) - 1
            self.controls_at = now
            if self.controls < 0:
                raise ProtocolError(f"more than {self.control_rate:g} pings and pongs a second")
        if self.budget is not None and op in (0, 1, 2):
            self.budget -= len(frame.data)
            if self.budget < 0:  # the parser's own handling of a cap: fails the connection with 1009
                raise PayloadTooBig(len(frame.data), len(frame.data) + self.budget)
        super().recv_frame(frame)
        if self.staged and frame.fin and frame.opcode.value in (0, 1, 2):
            self.staged = False
            self.max_message_size = self.pending_frame_cap  # the first message is complete

    def raise_frame_cap(self, size: int | None) -> None:
        """Takes effect from the next frame parsed."""
        self.staged = False
        self.budget = None
        self.max_message_size = size

    def send_frame(self, frame: Frame) -> None:
        if self.holding_pongs and frame.opcode is PONG:  # a ping's answer, queued by recv_frame
            self.held_pong = bytes(frame.data)  # RFC 6455 5.5.3: answering only the latest ping is enough
            return
        super().send_frame(frame)


def _forget_tracebacks(error: BaseException | None) -> None:
    """Drops the tracebacks of ``error`` and of the errors it was raised from or during."""
    if error is None:  # the common case, at every lost connection: nothing to walk
        return
    seen: set[int] = set()
    left = [error]
    while left:
        e = left.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        left += (e.__cause__, e.__context__)


class _Inbox:
    """What uvicorn's protocol uses of ``asyncio.Queue`` (``put_nowait``, ``get``,
    ``empty``, ``qsize``) for its one reader, the application: a list and at most
    one future, where a Queue holds three deques and an Event (about 3 KiB per
    socket). Taken from the front by an index, not ``pop(0)``: one read of the
    socket may queue tens of thousands of tiny frames, and moving the list down
    for each one cost quadratic time on the event loop (43,000 items, 0.13 s)."""

    __slots__ = ("_items", "_head", "_waiter")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._head = 0  # the next item to take
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        while self._head == len(self._items):
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        items, head = self._items, self._head
        item = items[head]
        head += 1
        if head == len(items):  # drained: the list starts again
            items.clear()
            head = 0
        elif head >= 64 and 2 * head >= len(items):  # never drained: what was taken goes, in amortized O(1)
            del items[:head]
            head = 0
        else:
            items[head - 1] = None
        self._head = head
        return item

    def empty(self) -> bool:
        return self._head == len(self._items)

    def qsize(self) -> int:
        return len(self._items) - self._head


class _Flag:
    """``asyncio.Event`` (``set``, ``clear``, ``is_set``, ``wait``) holding no
    deque until somebody waits: the socket's "writable" flag, which is set
    nearly always."""

    __slots__ = ("_value", "_waiters")

    def __init__(self, value: bool = False) -> None:
        self._value = value
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        self._value = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if self._value:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
        return True


def _reset(transport: Any) -> None:
    """Aborts ``transport`` with a reset, not a FIN behind the unread bytes: without SO_LINGER 0 the
    kernel keeps the closed socket and what it could not send (megabytes) while it probes a zero window."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        except OSError:
            pass
    transport.abort()


class Withdrawn(Exception):
    """A guarded frame (``relay.guard`` in a ``websocket.send``) was not written:
    the guard said no right before the write."""


def split_ping_wait(interval: float, wait: float) -> tuple[float, float]:
    """``(ping_timeout, close_timeout)`` for ``RELAY_PING_INTERVAL_SECS`` and ``RELAY_PING_WAIT_SECS``:
    :func:`protocol_class`'s sockets fail one from which nothing has come for ``interval +
    ping_timeout`` (== wait), and bound every close by ``close_timeout``."""
    budget = wait - interval
    return budget, min(1.0, budget / 2)


def protocol_class(close_timeout: float, handshake_frame_cap: int | None = MAX_HANDSHAKE_FRAME,
                   pending_frame_cap: int | None = MAX_PENDING_FRAME,
                   lost: Callable[..., None] | None = None) -> type:
    """uvicorn's Sans-I/O ``websockets`` protocol (``websockets-sansio``), as Relay needs it.

    * It keeps no task per connection (the legacy protocol kept three), and on a
      peer's EOF or reset tells the application at once.
    * Deflate, when enabled, is :data:`DEFLATE`'s: no state between messages.
    * Per socket it holds what it needs and no more: an :class:`_Inbox` for
      the queue, a :class:`_Flag` for "writable", and the handshake's request
      and response only until the response is written.
    * Keepalive (the module's docstring): a ping after each ``ws_ping_interval`` with nothing read
      from the peer, and once nothing has been read for ``ws_ping_interval + ws_ping_timeout``
      (:func:`split_ping_wait`: ``RELAY_PING_WAIT_SECS``) the connection fails with 1011 and
      the application is told at once, with the 1011 it is (uvicorn would say 1005 once the
      transport closed), so the executor is recorded ``ping_timeout``.
    * ``close_timeout`` bounds the closing handshake Relay starts (4001-4005), and every close:
      once a close has begun (Relay's close frame sent, a keepalive ping unanswered, or uvicorn
      closing the transport itself: the peer's close frame, a frame over the cap, the
      application's end, shutdown), the transport is aborted ``close_timeout`` later if the
      connection is not lost by then. asyncio's ``close()`` waits for the write buffer to drain,
      and a peer that stopped reading (a frozen process, a zero receive window) never drains it:
      without the abort such a socket was never reported lost, and its executor stayed HEALTHY
      for ever.
    * While the transport's write buffer is over its high-water mark, a ping gets no pong at once:
      the latest ping's payload is kept (125 bytes at most) and its pong written when the buffer
      drains (RFC 6455 5.5.3 lets an endpoint answer only the latest ping; 5.5.2 wants an answer,
      and an SDK closes the socket 20 s after a ping without one). A pong is the one thing a peer
      can make Relay write, and a ping flood from a client that never reads grew the server by
      59 MiB; held, a flood costs one pong. The socket is read as before: a DBOS executor sends its
      answer before it reads again, so not reading while Relay's writes back up would stall a busy,
      healthy executor until the keepalive gave up on it.
    * The first message is capped at ``handshake_frame_cap`` bytes, later ones at
      ``pending_frame_cap``, until the application calls
      ``scope["extensions"]["relay.frame_cap"](n)``; a disconnect caused by our
      own 1009 (a message over the cap) carries ``"relay.too_big": True``, by our own 1007
      (text that is not UTF-8) ``"relay.invalid_utf8": True``, by our own 1002 (a frame that
      breaks RFC 6455 or the bounds on control frames and fragments) ``"relay.protocol_error": True``.
    * A disconnect with no close frame from the peer (a drop: EOF or reset) is reported as 1006,
      where uvicorn says 1005; 1005 is left to a close frame of the peer's that carried no code
      (RFC 6455 7.1.5), such as a TypeScript executor's on shutdown.
    * A ``websocket.send`` with ``"relay.guard"`` (a context manager giving a bool)
      is written under the guard, only if it says yes, else :class:`Withdrawn`.
    * A message over :data:`SLICED_FROM` is made ready by :func:`sliced_frame`, a slice per turn of
      the event loop, and written whole; sends that come meanwhile wait for it, in order.
    * Nothing it adds makes a reference cycle, so once the application lets go of
      a closed socket, reference counting frees its objects; ``lost(protocol, parser)``
      is called once its connection is lost and the application's task for it has
      ended (Relay's collector watches that they are freed, ADR 13).
    """
    from uvicorn.protocols.utils import ClientDisconnected
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class RelayWebSocketProtocol(WebSocketsSansIOProtocol):
        app_running = False  # the application's task for this socket is under way (set on the object)
        invalid_utf8 = False  # it failed the connection with 1007 (set on the object)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.close_timeout = close_timeout
            self.keepalive_timed_out = False
            self.heard_at = 0.0  # the loop's time when bytes were last read from the peer
            self.making_ready: _Flag | None = None  # while a large message is made ready: later sends wait
            self._abort_timer: asyncio.TimerHandle | None = None
            if self.conn.available_extensions:  # uvicorn's factory keeps a compressor per socket
                self.conn.available_extensions = [DEFLATE]
            self.queue = _Inbox()  # type: ignore[assignment]
            self.writable = _Flag(True)  # type: ignore[assignment]
            if type(self.conn) is not ServerProtocol:  # a subclass's overrides would be lost below
                raise TypeError(f"uvicorn made a {type(self.conn).__qualname__}; Relay's frame cap "
                                "extends websockets' ServerProtocol")
            self.conn.__class__ = _StagedCap  # the object uvicorn made, with the frame cap's stages
            interval = self.config.ws_ping_interval
            if interval and 2 / interval > CONTROL_RATE:  # a pong for each of Relay's pings, and the peer's own
                self.conn.control_rate = 2 / interval
            if handshake_frame_cap is not None:
                self.conn.max_message_size = handshake_frame_cap
                self.conn.pending_frame_cap = pending_frame_cap
                self.conn.staged = True
                self.conn.budget = None if pending_frame_cap is None else handshake_frame_cap + pending_frame_cap

        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            scope = getattr(self, "scope", None)
            if scope is not None:  # the upgrade was accepted; the application's task has not started yet
                self.app_running = True
                # The parser's method, not this protocol's: the scope is this protocol's, and a method
                # bound to the protocol would close a reference cycle that only a full collection frees.
                scope["extensions"]["relay.frame_cap"] = self.conn.raise_frame_cap

        def on_task_complete(self, task: asyncio.Task[None]) -> None:
            super().on_task_complete(task)
            self.app_running = False
            if self.transport.is_closing():  # uvicorn closes the transport as the application's task ends
                self._abort_later()
            self._report_lost()

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            if self._abort_timer is not None:  # the handle holds this protocol: let go of it
                self._abort_timer.cancel()
                self._abort_timer = None
            # Nothing is parsed once the connection is lost, and websockets' parser is a generator
            # kept on the object it parses for, whose frame holds that object: a cycle, since the
            # generator never ends (after EOF, discard() waits at its last yield). Closed, it lets go.
            # The error that failed the parser (a message over the cap, a protocol error) or the
            # handshake is kept, and its traceback holds the parser's frame too: the errors stay,
            # without their tracebacks.
            self.conn.parser.close()
            for error in (self.conn.parser_exc, self.conn.handshake_exc):
                _forget_tracebacks(error)
            self._report_lost()

        def _report_lost(self) -> None:
            """``lost(protocol, parser)`` once the connection is lost and the application's task for it
            has ended, whichever comes last (each happens once, so this reports once): from then on
            nothing should hold this socket's objects."""
            if lost is not None and self.disconnected and not self.app_running:
                lost(self, self.conn)

        def start_keepalive(self) -> None:  # called as the accept is written
            if self.ping_interval:
                self.heard_at = self.loop.time()
                self._keepalive_at(self.heard_at + self.ping_interval)

        def _keepalive_at(self, due: float) -> None:
            # The time it was due goes along: uvloop's handle for a time already past (a call_soon) has no when().
            self.ping_timer = self.loop.call_at(due, self._keepalive, due)

        def _keepalive(self, due: float) -> None:
            """Due when a ping or the give-up may be due: pings a peer silent for ``ping_interval``,
            fails one silent for ``ping_interval + ping_timeout``, else looks again when one may be."""
            self.ping_timer = None
            if self.close_sent or self.transport.is_closing():
                return
            now = self.loop.time()
            late = now - due > _LATE
            now = max(now, due)  # a timer may run a hair before its time (the clock's resolution)
            if self.read_paused:  # Relay is not reading it (a message waits for the application): not its silence
                self.heard_at = now
            interval, heard = self.ping_interval, self.heard_at
            assert interval is not None
            give_up = None if self.ping_timeout is None else heard + interval + self.ping_timeout
            if give_up is not None and now >= give_up:
                if late:  # the event loop was busy: what the peer sent meanwhile is read first
                    self._keepalive_at(now + _RECHECK)
                    return
                self.keepalive_timeout()
                return
            if now >= heard + interval:  # as the timer's time was reckoned: no rounding between the two
                self.conn.send_ping(b"")
                self.transport.write(b"".join(self.conn.data_to_send()))
                ping = now + interval
            else:
                ping = heard + interval
            self._keepalive_at(ping if give_up is None else min(ping, give_up))

        def handle_pong(self, event: Any) -> None:
            pass  # bytes read: data_received counted them

        def keepalive_timeout(self) -> None:
            self.keepalive_timed_out = True
            super().keepalive_timeout()
            if not self.disconnected:  # told now, not once the transport is gone (up to close_timeout later)
                self.queue.put_nowait({"type": "websocket.disconnect", "code": 1011})
            self._abort_later()

        def _abort_later(self) -> None:
            """The transport aborted ``close_timeout`` from now unless the connection is lost first."""
            if self._abort_timer is None and not self.disconnected:
                self._abort_timer = self.loop.call_later(self.close_timeout, self._abort)

        def _abort(self) -> None:
            self._abort_timer = None
            if not self.disconnected:
                _reset(self.transport)  # connection_lost follows: the application hears the disconnect

        def pause_writing(self) -> None:
            super().pause_writing()
            self.conn.holding_pongs = True

        def resume_writing(self) -> None:
            super().resume_writing()
            self.conn.holding_pongs = False
            pong, self.conn.held_pong = self.conn.held_pong, None
            if pong is not None and not self.disconnected and not self.transport.is_closing():
                try:
                    self.conn.send_pong(pong)  # the latest ping held while the buffer was full
                except InvalidState:  # the connection is closed: no pong is owed
                    return
                self.transport.write(b"".join(self.conn.data_to_send()))

        def data_received(self, data: bytes) -> None:
            self.heard_at = self.loop.time()
            super().data_received(data)
            if self.transport.is_closing():  # uvicorn closed it (the peer's close, a frame over the cap...)
                self._abort_later()

        def shutdown(self) -> None:
            super().shutdown()
            self._abort_later()

        async def receive(self) -> Any:
            message = await super().receive()
            if message.get("type") == "websocket.disconnect":
                message = self._why_disconnected(message)
            return message

        def _why_disconnected(self, message: Any) -> Any:
            """The disconnect as Relay reports it: the module's own failures flagged (not the
            peer's close with the same code, echoed), a drop told from a close frame without a code."""
            code, error = message.get("code"), self.conn.parser_exc
            if self.keepalive_timed_out:
                return {**message, "code": 1011, "reason": "keepalive ping timeout"}
            if code == 1009 and isinstance(error, PayloadTooBig):
                return {**message, "relay.too_big": True}
            if code == 1007 and (self.invalid_utf8 or isinstance(error, UnicodeDecodeError)):
                return {**message, "relay.invalid_utf8": True}  # a text frame, or a close frame's reason
            if code == 1002 and isinstance(error, ProtocolError):
                return {**message, "relay.protocol_error": True}
            if code == 1005 and self.conn.close_rcvd is None:  # uvicorn's connection_lost: no close frame came
                return {**message, "code": 1006}
            return message

        async def send(self, message: Any) -> None:
            kind = message.get("type")
            if kind == "websocket.close":
                self._abort_later()  # the close frame may wait behind what the peer has not read
            while self.making_ready is not None:  # a large message is made ready: what follows goes after it
                await self.making_ready.wait()
            guard = message.get("relay.guard")
            if kind == "websocket.send" and self.handshake_complete and not self.close_sent \
                    and self.initial_response is None:
                data = message.get("bytes")
                if data is None:
                    data = message.get("text")
                if data is not None and len(data) > SLICED_FROM:
                    await self._send_sliced(data, guard)
                    return
            if guard is not None:
                await self.writable.wait()
                # No await between the guard's answer and the write: super().send finds
                # the transport writable and writes at once.
                with guard as allowed:
                    if not allowed:
                        raise Withdrawn()
                    await super().send(message)
                return
            await super().send(message)
            if message.get("type") == "websocket.accept" and self.handshake_complete:
                # Written: the headers are the scope's now. websockets' parser keeps the request in
                # its generator's frame for the socket's life, so its headers are emptied in place.
                self.request.headers.clear()
                self.request = self.response = None
            elif message.get("type") == "websocket.http.response.body" and not message.get("more_body", False):
                # A handshake refused with an HTTP response is complete: uvicorn would log
                # "ASGI callable returned without completing handshake" for every refusal.
                self.handshake_complete = True

        async def _send_sliced(self, data: str | bytes, guard: Any) -> None:
            """A message over :data:`SLICED_FROM`, made ready by :func:`sliced_frame` (the event loop
            free between its slices; later sends wait), then written whole: its frame at once, the
            guard's answer right before, as for any other."""
            ready = self.making_ready = _Flag()
            try:
                (extension,) = [e for e in self.conn.extensions if isinstance(e, PerMessageDeflate)] or [None]
                pieces = await sliced_frame(data, extension)
                await self.writable.wait()
                if guard is None:
                    self._write_frame(pieces)
                    return
                with guard as allowed:
                    if not allowed:
                        raise Withdrawn()
                    self._write_frame(pieces)
            finally:
                self.making_ready = None
                ready.set()

        def _write_frame(self, pieces: list[Any]) -> None:
            # What websockets' send_text would check; its frame is written as it is (no extension
            # touches it), and nothing is pending in the parser's output: uvicorn writes it at once.
            if self.disconnected or self.close_sent or self.conn.state is not State.OPEN:
                raise ClientDisconnected()
            for piece in pieces:
                self.transport.write(piece)

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
                    self.invalid_utf8 = True
                    self.conn.send_close(1007, "invalid UTF-8 in a text frame")
                    self.handle_parser_exception()
                    return
            super().send_receive_event_to_app()

    return RelayWebSocketProtocol


_UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: 34\r\n\r\ntoo many open connections; retry\r\n")


class _Counted:
    """An HTTP connection's transport, counting the bytes written through it: ``sent()``, the bytes
    that left the transport's buffer for the kernel, grows only as the peer reads. The rest is the
    transport's own (uvicorn's HTTP protocol and its request cycles write only through ``write``)."""

    __slots__ = ("raw", "written")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        self.raw.write(data)

    def writelines(self, pieces: Any) -> None:
        for data in pieces:
            self.write(data)

    def sent(self) -> int:
        return self.written - self.raw.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def http_protocol_class(first_request_timeout: float, request_timeout: float | None = None,
                        max_connections: int | None = None, send_timeout: float | None = None) -> type:
    """uvicorn's h11 protocol with deadlines for requests and replies and a cap on open sockets.

    * **First request**: uvicorn starts its keep-alive timer only after a
      response; a client that opens a connection and never starts a request
      would hold a file descriptor forever. Such a connection is closed
      ``first_request_timeout`` seconds after it was made.
    * **Every request**: from its first byte, a request (headers *and* body, a
      WebSocket upgrade included) must be received whole within
      ``request_timeout`` seconds, or the connection is closed. Without it a
      ``Content-Length: 100000000`` sent a byte a second held the socket for
      ever (uvicorn's timers do not run while a request is being read).
    * **Every reply**: while a reply waits unsent in the transport's buffer, the
      peer must take some of it every ``send_timeout`` seconds, or the connection
      is reset (aborted: ``close()`` would wait for the buffer to drain). The
      rule is *no progress for ``send_timeout``*, not a deadline for the whole
      reply, so a slow client that keeps reading a large export is never cut.
      Without it a client that pipelined requests with large replies and never
      read held its socket for ever: uvicorn's request cycle waits for the
      buffer to drain before it writes, and its keep-alive timer starts only
      once a reply is complete; 40 such sockets took every slot of
      ``max_connections``.
    * **Open sockets**: a connection made while ``max_connections`` sockets
      (HTTP and WebSocket, of this server) are open is answered 503 and closed
      at once, so that Relay never runs out of file descriptors (uvicorn's
      ``limit_concurrency`` lets WebSocket upgrades through and answers only
      after the request arrived).

    Once a connection is upgraded to a WebSocket its timers here are cancelled:
    the WebSocket protocol has its own (:func:`protocol_class`).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    received = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.SWITCHED_PROTOCOL)

    class RelayH11Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            self._request_deadline: Any = None
            self._send_deadline: Any = None
            self._sent_at_check = 0  # the transport's sent() when the send deadline was armed
            if max_connections is not None and len(self.server_state.connections) >= max_connections:
                # Not counted, no task: written and closed before anything is read.
                self.transport = transport
                self._first_request_deadline = None
                self._refused = True
                transport.write(_UNAVAILABLE)
                transport.close()
                self.logger.warning("refused a connection: %d open (RELAY_MAX_OPEN_CONNECTIONS)", max_connections)
                return
            self._refused = False
            super().connection_made(_Counted(transport))  # type: ignore[arg-type]
            self._first_request_deadline = self.loop.call_later(first_request_timeout, self._drop_if_idle)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if request_timeout is not None and self._request_deadline is None and self.conn.their_state is h11.IDLE:
                self._request_deadline = self.loop.call_later(request_timeout, self._drop_if_unfinished)
            super().data_received(data)
            if self._request_deadline is not None and self.conn.their_state in received:
                self._request_deadline.cancel()  # the request is in: the next one gets its own deadline
                self._request_deadline = None

        def handle_websocket_upgrade(self, event: Any) -> None:
            self.transport = self.transport.raw  # the WebSocket protocol gets the socket's own transport
            super().handle_websocket_upgrade(event)
            # The socket is the WebSocket protocol's now: without this the timers would
            # keep this protocol (its parser, its flow control) alive until they fire.
            self._first_request_deadline.cancel()
            if self._request_deadline is not None:
                self._request_deadline.cancel()
                self._request_deadline = None
            self._disarm_send_deadline()

        def pause_writing(self) -> None:
            super().pause_writing()
            self._arm_send_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # The reply is all in the transport; some of it may wait in its buffer (under the high-water
            # mark, or behind a close: uvicorn closes after the reply, or at the keep-alive's end).
            self._arm_send_deadline()

        def _arm_send_deadline(self) -> None:
            """Armed, unless it is already, while bytes wait in the transport's buffer."""
            if send_timeout is None or self._send_deadline is not None or not self._unsent():
                return
            self._sent_at_check = self.transport.sent()
            self._send_deadline = self.loop.call_later(send_timeout, self._drop_if_stalled)

        def _unsent(self) -> bool:
            """Bytes of this protocol's wait in the transport's buffer. A refused connection's
            transport, or an upgraded one's (the WebSocket protocol's now), is not counted."""
            return isinstance(self.transport, _Counted) and self.transport.raw.get_write_buffer_size() > 0

        def _disarm_send_deadline(self) -> None:
            if self._send_deadline is not None:
                self._send_deadline.cancel()
                self._send_deadline = None

        def _drop_if_stalled(self) -> None:
            """``send_timeout`` after the deadline was armed: nothing waits unsent (disarmed), or bytes
            left meanwhile (armed again, from now), or the peer took nothing for ``send_timeout`` (reset).
            Looked at once a period, not moved at each byte: a peer that stops reading is reset between
            one and two periods after the last bytes it took."""
            self._send_deadline = None
            if not self._unsent():
                return
            if self.transport.sent() > self._sent_at_check:
                self._arm_send_deadline()
                return
            self.logger.info("%s:%d - reset: the peer took nothing of a reply for %gs",
                             *(self.client or ("?", 0)), send_timeout)
            _reset(self.transport.raw)  # connection_lost follows: the slot is free, the request cycle told

        def _drop_if_idle(self) -> None:
            upgraded = self.transport.get_protocol() is not self
            if not upgraded and self.cycle is None and not self.transport.is_closing():
                self.logger.info("%s:%d - closed: no complete request within %gs",
                                 *(self.client or ("?", 0)), first_request_timeout)
                self.transport.close()

        def _drop_if_unfinished(self) -> None:
            self._request_deadline = None
            upgraded = self.transport.get_protocol() is not self
            if not upgraded and self.conn.their_state not in received and not self.transport.is_closing():
                self.logger.info("%s:%d - closed: request not received whole within %gs",
                                 *(self.client or ("?", 0)), request_timeout)
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._request_deadline is not None:
                self._request_deadline.cancel()
            self._disarm_send_deadline()
            if self._refused:
                return
            self._first_request_deadline.cancel()
            super().connection_lost(exc)

    return RelayH11Protocol
