"""The memory-lean parts of Relay's uvicorn protocols (relay_es/adapters/uvicorn_ws.py).

* Deflate (``DEFLATE``): negotiated with no context takeover in both directions
  whatever the client offered; a message Relay sends under ``COMPRESS_MIN_BYTES``
  goes uncompressed (RSV1 unset), a bigger one compressed; what the client sends
  compressed is decoded at any size; no zlib object is left between messages.
  Checked against a real uvicorn server on loopback with a ``websockets``
  client, and on the protocol fed bytes through a fake transport.
* ``_Inbox`` and ``_Flag``, the protocol's queue and "writable" flag.
* The WebSocket protocol drops the handshake's request and response once the
  accept is written.
* The h11 protocol cancels its deadlines on a WebSocket upgrade, so nothing
  keeps it alive afterwards.

All deterministic: the loop is only run with ``asyncio.sleep(0)``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import hashlib
import os
import socket
import struct
import weakref
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.asyncio.client import connect
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import CONT, PING, TEXT, Frame

from relay_es.adapters.uvicorn_ws import (
    COMPRESS_MIN_BYTES,
    DEFLATE,
    _Flag,
    _Inbox,
    _PerMessageDeflate,
    http_protocol_class,
    protocol_class,
)
from relay_es.protocol.limits import MAX_FRAME
from tests.adapters.test_uvicorn_ws import Transport as PlainTransport
from tests.server import free_port

SMALL = ("relay " * 20)[:100]  # 100 bytes: under COMPRESS_MIN_BYTES
BIG = "".join(f'{{"workflow_id":"wf-{i}","status":"PENDING"}},' for i in range(6000))[:200 * 1024]  # 200 KiB
INCOMING = "".join(f'{{"step":{i},"output":null}},' for i in range(20000))[:300 * 1024]  # 300 KiB
EMPTY_BLOCK = b"\x00\x00\xff\xff"  # the tail RFC 7692 strips from a compressed message


def upgrade(extensions: str | None = None) -> bytes:
    """A WebSocket upgrade request, offering ``extensions`` if given."""
    offer = f"Sec-WebSocket-Extensions: {extensions}\r\n" if extensions else ""
    return ("GET /websocket/app/k HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n"
            f"{offer}\r\n").encode()


SDK_OFFER = "permessage-deflate; client_max_window_bits"  # what the DBOS SDKs offer


def deflate(data: bytes) -> bytes:
    """``data`` compressed as one message with no context takeover."""
    encoder = zlib.compressobj(wbits=-15)
    out = encoder.compress(data) + encoder.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(EMPTY_BLOCK)
    return out[:-4]


def inflate(data: bytes) -> bytes:
    return zlib.decompressobj(wbits=-15).decompress(data + EMPTY_BLOCK)


def client_frame(payload: bytes, *, rsv1: bool = False, opcode: int = 0x1) -> bytes:
    """A final client frame (masked with a zero mask: the payload as is)."""
    n = len(payload)
    b0 = 0x80 | (0x40 if rsv1 else 0) | opcode
    head = struct.pack("!BB", b0, 0x80 | n) if n < 126 else \
        struct.pack("!BBH", b0, 0x80 | 126, n) if n < 65536 else \
        struct.pack("!BBQ", b0, 0x80 | 127, n)
    return head + b"\x00\x00\x00\x00" + payload


def server_frames(data: bytes) -> list[tuple[bool, int, bytes]]:
    """``(rsv1, opcode, payload)`` of each (unmasked) frame in ``data``."""
    frames, i = [], 0
    while i < len(data):
        b0, n = data[i], data[i + 1] & 0x7F
        i += 2
        if n == 126:
            (n,), i = struct.unpack_from("!H", data, i), i + 2
        elif n == 127:
            (n,), i = struct.unpack_from("!Q", data, i), i + 8
        frames.append((bool(b0 & 0x40), b0 & 0x0F, data[i:i + n]))
        i += n
    return frames


def digest(text: str) -> str:
    return f"{len(text)} {hashlib.sha256(text.encode()).hexdigest()}"


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Accepts and raises the frame cap (as the hub does once an executor is
    registered); then answers "small" with SMALL, "big" with BIG and anything
    else with its size and SHA-256."""
    assert scope["type"] == "websocket"
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    scope["extensions"]["relay.frame_cap"](MAX_FRAME)
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message["text"]
        reply = SMALL if text == "small" else BIG if text == "big" else digest(text)
        await send({"type": "websocket.send", "text": reply})


class Transport(PlainTransport):
    """What uvicorn's protocols use of an asyncio transport (test_uvicorn_ws's fake);
    this one also holds its protocol as a real one does (``set_protocol`` /
    ``get_protocol``)."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: Any = None

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_protocol(self) -> Any:
        return self.protocol


def ws_config(app: Any, *, compression: bool) -> uvicorn.Config:
    config = uvicorn.Config(app=app, ws=protocol_class(1.0), ws_max_size=MAX_FRAME, ws_per_message_deflate=compression,
                            lifespan="off", log_config=None)
    config.load()
    return config


async def open_socket(app: Any, request: bytes, *, compression: bool) -> tuple[Any, Transport]:
    """Relay's WebSocket protocol on a fake transport, fed ``request``."""
    transport = Transport()
    proto = protocol_class(1.0)(config=ws_config(app, compression=compression), server_state=ServerState(), app_state={})
    transport.set_protocol(proto)
    proto.connection_made(transport)
    proto.data_received(request)
    await settle()
    return proto, transport


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    """A real uvicorn server with Relay's protocols on loopback, as a task of
    the running loop; yields its port."""
    for _ in range(5):  # a port picked by free_port may be bound by someone else meanwhile
        port = free_port()
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            break
        except OSError:
            sock.close()
    else:
        raise RuntimeError("no free port")
    config = uvicorn.Config(app=app, host="127.0.0.1", port=port, ws=protocol_class(1.0),
                            http=http_protocol_class(first_request_timeout=30, request_timeout=30),
                            ws_per_message_deflate=True, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(10_000):
            if server.started or task.done():
                break
            await asyncio.sleep(0)
        if task.done():
            task.result()  # the startup's error
        assert server.started
        yield port
    finally:
        server.should_exit = True
        await task
        sock.close()


def record(ws: Any) -> tuple[list[tuple[int, bool, int]], list[tuple[int, bool, int]]]:
    """Wraps the client's deflate extension; returns the lists it fills with
    ``(opcode, rsv1, size)`` of each data frame as on the wire: (received, sent)."""
    (extension,) = ws.protocol.extensions
    received: list[tuple[int, bool, int]] = []
    sent: list[tuple[int, bool, int]] = []
    decode, encode = extension.decode, extension.encode

    def decoding(frame: Frame, **kwargs: Any) -> Frame:
        if frame.opcode in (TEXT, CONT):
            received.append((frame.opcode, frame.rsv1, len(frame.data)))
        return decode(frame, **kwargs)

    def encoding(frame: Frame) -> Frame:
        out = encode(frame)
        if out.opcode in (TEXT, CONT):
            sent.append((out.opcode, out.rsv1, len(out.data)))
        return out

    extension.decode, extension.encode = decoding, encoding
    return received, sent


# -- a real server, a real client ----------------------------------------------------------


def test_deflate_is_negotiated_without_context_takeover_for_the_sdks_offer() -> None:
    async def main() -> None:
        async with serving(echo_app) as port, connect(f"ws://127.0.0.1:{port}/websocket/app/k") as ws:
            offer = ws.request.headers["Sec-WebSocket-Extensions"]
            answer = ws.response.headers["Sec-WebSocket-Extensions"]
            assert "no_context_takeover" not in offer  # the client did not ask for it
            assert answer.startswith("permessage-deflate")
            assert "server_no_context_takeover" in answer and "client_no_context_takeover" in answer
            (extension,) = ws.protocol.extensions
            assert extension.local_no_context_takeover and extension.remote_no_context_takeover

    asyncio.run(main())


def test_the_server_compresses_only_messages_from_the_threshold_on() -> None:
    async def main() -> None:
        async with serving(echo_app) as port, connect(f"ws://127.0.0.1:{port}/websocket/app/k") as ws:
            received, _ = record(ws)
            await ws.send("small")
            assert await ws.recv() == SMALL
            await ws.send("big")
            assert await ws.recv() == BIG
            await ws.send("small")
            assert await ws.recv() == SMALL
            assert received[0] == (TEXT, False, len(SMALL))  # sent as it is
            assert received[1][:2] == (TEXT, True) and received[1][2] < len(BIG) // 4  # compressed
            assert received[2] == (TEXT, False, len(SMALL))
            assert len(received) == 3

    asyncio.run(main())


def test_compressed_messages_from_the_client_arrive_intact_whatever_their_size() -> None:
    async def main() -> None:
        async with serving(echo_app) as port, connect(f"ws://127.0.0.1:{port}/websocket/app/k") as ws:
            _, sent = record(ws)
            for text in (INCOMING, "ok", INCOMING, "x" * 10):
                await ws.send(text)
                assert await ws.recv() == digest(text)
            # the client compressed each (websockets has no threshold): the server decoded them all
            assert [(opcode, rsv1) for opcode, rsv1, _ in sent] == [(TEXT, True)] * 4
            assert sent[0][2] < len(INCOMING) // 4

    asyncio.run(main())


# -- the deflate extension on its own ------------------------------------------------------


@pytest.mark.parametrize("offer", [
    [],
    [("client_max_window_bits", None)],
    [("server_no_context_takeover", None)],
    [("client_max_window_bits", "10"), ("server_max_window_bits", "12")],
])
def test_any_offer_is_answered_with_no_context_takeover_both_ways(offer: list[tuple[str, str | None]]) -> None:
    response, extension = DEFLATE.process_request_params(offer, [])
    names = [name for name, _ in response]
    assert "server_no_context_takeover" in names and "client_no_context_takeover" in names
    assert type(extension) is _PerMessageDeflate
    assert extension.local_no_context_takeover and extension.remote_no_context_takeover
    assert not hasattr(extension, "encoder") and not hasattr(extension, "decoder")


def test_encode_leaves_small_messages_and_control_frames_plain() -> None:
    _, extension = DEFLATE.process_request_params([], [])
    peer = PerMessageDeflate(True, True, 15, 15)  # the client's side of the same agreement

    def roundtrip(frame: Frame) -> Frame:
        out = extension.encode(frame)
        assert hasattr(extension, "encoder") is not frame.fin  # kept only within a compressed message
        return out

    below = roundtrip(Frame(TEXT, b"a" * (COMPRESS_MIN_BYTES - 1)))
    assert not below.rsv1 and below.data == b"a" * (COMPRESS_MIN_BYTES - 1)
    at = roundtrip(Frame(TEXT, b"a" * COMPRESS_MIN_BYTES))
    assert at.rsv1 and len(at.data) < COMPRESS_MIN_BYTES
    assert peer.decode(at).data == b"a" * COMPRESS_MIN_BYTES
    ping = extension.encode(Frame(PING, b"p"))
    assert not ping.rsv1 and ping.data == b"p"
    # a fragmented message is compressed whatever its first frame's size, its continuations too
    first = roundtrip(Frame(TEXT, b"ab", fin=False))
    rest = roundtrip(Frame(CONT, b"cd"))
    assert first.rsv1 and not rest.rsv1
    assert peer.decode(first).data + peer.decode(rest).data == b"abcd"
    # and the next small message is plain again
    assert not roundtrip(Frame(TEXT, b"z")).rsv1


# -- _Inbox and _Flag ------------------------------------------------------------------------


def test_inbox_is_fifo_and_counts() -> None:
    async def main() -> None:
        inbox = _Inbox()
        assert inbox.empty() and inbox.qsize() == 0
        for item in ("a", "b", "c"):
            inbox.put_nowait(item)
        assert not inbox.empty() and inbox.qsize() == 3
        assert [await inbox.get() for _ in range(3)] == ["a", "b", "c"]
        assert inbox.empty() and inbox.qsize() == 0

    asyncio.run(main())


def test_inbox_takes_in_constant_time_and_holds_only_what_is_not_taken() -> None:
    """One read of a socket may queue tens of thousands of tiny frames: each is taken without moving the
    rest (list.pop(0) moved them all), and a queue that never drains does not keep what was taken."""

    class Counted(list):  # type: ignore[type-arg]
        moved = 0

        def pop(self, i: int = -1) -> Any:
            Counted.moved += len(self) - 1 if i == 0 else 0
            return super().pop(i)

    async def main() -> None:
        inbox = _Inbox()
        inbox._items = Counted()
        for i in range(40_000):
            inbox.put_nowait(i)
        assert [await inbox.get() for _ in range(40_000)] == list(range(40_000))
        assert Counted.moved == 0 and inbox.empty()
        inbox.put_nowait("first")
        for i in range(10_000):  # one behind for ever: never drained
            inbox.put_nowait(i)
            assert await inbox.get() == ("first" if i == 0 else i - 1)
            assert inbox.qsize() == 1
        assert len(inbox._items) <= 130

    asyncio.run(main())


def test_inbox_get_waits_for_a_put() -> None:
    async def main() -> None:
        inbox = _Inbox()
        getter = asyncio.create_task(inbox.get())
        await settle()
        assert not getter.done()
        inbox.put_nowait("x")
        await settle()
        assert getter.result() == "x" and inbox.empty()

    asyncio.run(main())


def test_a_cancelled_get_leaves_the_inbox_usable_and_loses_nothing() -> None:
    async def main() -> None:
        inbox = _Inbox()
        getter = asyncio.create_task(inbox.get())
        await settle()
        getter.cancel()
        await settle()
        assert getter.cancelled() and inbox._waiter is None
        # cancelled after the put woke it, before it ran: the item stays
        getter = asyncio.create_task(inbox.get())
        await settle()
        inbox.put_nowait("kept")
        getter.cancel()
        await settle()
        assert getter.cancelled() and inbox.qsize() == 1
        assert await inbox.get() == "kept"
        getter = asyncio.create_task(inbox.get())
        await settle()
        inbox.put_nowait("next")
        await settle()
        assert getter.result() == "next"

    asyncio.run(main())


def test_flag_wait_returns_at_once_when_set() -> None:
    flag = _Flag(True)
    assert flag.is_set()
    waiting = flag.wait()
    with pytest.raises(StopIteration) as stop:  # finished without suspending: no loop needed
        waiting.send(None)
    assert stop.value.value is True
    assert _Flag().is_set() is False


def test_flag_set_wakes_every_waiter_and_clear_makes_them_wait() -> None:
    async def main() -> None:
        flag = _Flag(True)
        flag.clear()
        assert not flag.is_set()
        waiters = [asyncio.create_task(flag.wait()) for _ in range(3)]
        await settle()
        assert not any(w.done() for w in waiters)
        flag.set()
        await settle()
        assert [w.result() for w in waiters] == [True] * 3
        assert flag.is_set() and flag._waiters is None

    asyncio.run(main())


def test_a_cancelled_flag_waiter_is_removed() -> None:
    async def main() -> None:
        flag = _Flag()
        gone = asyncio.create_task(flag.wait())
        stays = asyncio.create_task(flag.wait())
        await settle()
        assert flag._waiters is not None and len(flag._waiters) == 2
        gone.cancel()
        await settle()
        assert gone.cancelled() and len(flag._waiters) == 1
        flag.set()
        await settle()
        assert stays.result() is True and flag._waiters is None

    asyncio.run(main())


# -- the WebSocket protocol on a fake transport ----------------------------------------------


def test_after_the_accept_the_socket_keeps_only_the_lean_parts() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(), compression=False)
        assert transport.written[0].startswith(b"HTTP/1.1 101")
        assert proto.handshake_complete
        assert proto.request is None and proto.response is None
        assert isinstance(proto.queue, _Inbox) and isinstance(proto.writable, _Flag)
        assert proto.writable.is_set()
        proto.data_received(client_frame(b"hi"))
        await settle()
        assert server_frames(b"".join(transport.written[1:])) == [(False, 0x1, digest("hi").encode())]
        proto.connection_lost(None)
        await settle()

    asyncio.run(main())


def test_no_zlib_state_is_left_on_the_socket_between_messages() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        head, _, _ = transport.written[0].partition(b"\r\n\r\n")
        answer = [value.strip() for name, _, value in (line.partition(":") for line in head.decode().split("\r\n"))
                  if name.lower() == "sec-websocket-extensions"]
        assert answer == ["permessage-deflate; server_no_context_takeover; client_no_context_takeover"]
        (extension,) = [e for e in proto.conn.extensions if isinstance(e, PerMessageDeflate)]
        assert type(extension) is _PerMessageDeflate
        sent = [client_frame(deflate(b"tiny"), rsv1=True),  # compressed, small
                client_frame(deflate(INCOMING.encode()), rsv1=True),  # compressed, big
                client_frame(b"plain"),  # not compressed
                client_frame(b"big"), client_frame(b"small")]  # answered with BIG, SMALL
        for chunk in sent:
            proto.data_received(chunk)
            await settle()
            assert not hasattr(extension, "encoder") and not hasattr(extension, "decoder")
        frames = server_frames(b"".join(transport.written[1:]))
        assert [rsv1 for rsv1, _, _ in frames] == [False, False, False, True, False]
        texts = [(inflate(payload) if rsv1 else payload).decode() for rsv1, _, payload in frames]
        assert texts == [digest("tiny"), digest(INCOMING), digest("plain"), BIG, SMALL]
        proto.connection_lost(None)
        await settle()

    asyncio.run(main())


# -- the h11 protocol's upgrade ----------------------------------------------------------------


def test_an_upgraded_h11_protocol_is_not_kept_alive_by_its_deadlines() -> None:
    async def main() -> None:
        transport = Transport()
        config = ws_config(echo_app, compression=False)
        h11 = http_protocol_class(first_request_timeout=30, request_timeout=30)(
            config=config, server_state=ServerState(), app_state={})
        transport.set_protocol(h11)
        h11.connection_made(transport)
        request = upgrade()
        h11.data_received(request[:20])  # a request begun: its deadline is armed
        deadlines = [h11._first_request_deadline, h11._request_deadline]
        assert all(d is not None and not d.cancelled() for d in deadlines)
        h11.data_received(request[20:])
        await settle()
        ws = transport.get_protocol()
        assert ws is not h11 and ws.handshake_complete
        assert all(d.cancelled() for d in deadlines)
        gone = weakref.ref(h11)
        del h11
        gc.collect()
        assert gone() is None
        ws.connection_lost(None)
        await settle()

    asyncio.run(main())
