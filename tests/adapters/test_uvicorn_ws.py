"""Relay's uvicorn WebSocket protocol, fed bytes directly: the frame caps by
stage (first message, before registration, after), deterministic."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from typing import Any

import pytest
import uvicorn

from relay_es.adapters.uvicorn_ws import CONTROL_BURST, MAX_FRAGMENTS, protocol_class
from relay_es.protocol.limits import MAX_FRAME, MAX_HANDSHAKE_FRAME, MAX_PENDING_FRAME

UPGRADE = ("GET /websocket/app/k HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n"
           ).encode()


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    n = len(payload)
    head = struct.pack("!BB", 0x80 | opcode, 0x80 | n) if n < 126 else \
        struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n) if n < 65536 else \
        struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\x00\x00\x00\x00" + payload  # a zero mask: the payload as is


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True  # "closing": asyncio's close() would wait for the write buffer to drain

    def abort(self) -> None:
        self.closed = self.aborted = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8090)}.get(name, default)


def run_socket(chunks: list[bytes], *, register_after: int | None = None,
               before: Any = None, after: Any = None) -> tuple[list[dict[str, Any]], Any]:
    """Feeds ``chunks`` (after the upgrade) to a protocol whose application accepts,
    collects what it receives and, after ``register_after`` messages, raises the
    cap as the hub does; ``before(protocol)`` runs before the chunks, ``after(protocol)``
    after them, while the application still runs. Returns (messages received, the protocol)."""
    received: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            m = await receive()
            received.append(m)
            if m["type"] == "websocket.disconnect":
                return
            if register_after is not None and len(received) == register_after:
                scope["extensions"]["relay.frame_cap"](MAX_FRAME)

    async def main() -> Any:
        config = uvicorn.Config(app=app, ws_max_size=MAX_FRAME, ws_per_message_deflate=False, log_config=None)
        config.load()

        class State:
            connections: set[Any] = set()
            tasks: set[Any] = set()
            default_headers: list[Any] = []

        proto = protocol_class(1.0)(config=config, server_state=State(), app_state={})
        proto.app = app
        proto.connection_made(Transport())
        proto.data_received(UPGRADE)
        for _ in range(20):
            await asyncio.sleep(0)
        if before is not None:
            before(proto)
        for chunk in chunks:
            proto.data_received(chunk)
            for _ in range(20):
                await asyncio.sleep(0)
        if after is not None:
            after(proto)
            for _ in range(20):
                await asyncio.sleep(0)
        return proto

    proto = asyncio.run(main())
    return received, proto


def texts(received: list[dict[str, Any]]) -> list[int]:
    return [len(m["text"]) for m in received if m["type"] == "websocket.receive"]


def test_the_first_message_is_capped_at_the_handshake_cap() -> None:
    received, proto = run_socket([frame(b"x" * (MAX_HANDSHAKE_FRAME + 1))])
    assert texts(received) == []
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1009
    assert received[-1].get("relay.too_big") is True


def test_a_frame_behind_the_reply_in_the_same_read_is_parsed_under_the_pending_cap() -> None:
    reply = json.dumps({"type": "executor_info"}).encode()
    received, proto = run_socket([frame(reply) + frame(b"y" * 200_000)], register_after=1)
    assert texts(received) == [len(reply), 200_000] and proto.conn.close_sent is None
    received, proto = run_socket([frame(reply) + frame(b"y" * (MAX_PENDING_FRAME + 1))], register_after=1)
    assert texts(received) == [] or texts(received) == [len(reply)]
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1009


def test_once_registered_the_cap_is_the_large_one() -> None:
    reply = json.dumps({"type": "executor_info"}).encode()
    received, proto = run_socket([frame(reply), frame(b"z" * (MAX_PENDING_FRAME + 10))], register_after=1)
    assert texts(received) == [len(reply), MAX_PENDING_FRAME + 10] and proto.conn.close_sent is None


def test_unregistered_messages_after_the_first_stay_capped() -> None:
    received, proto = run_socket([frame(b"a"), frame(b"b" * (MAX_PENDING_FRAME + 1))])
    assert texts(received) == [1]
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1009


def test_unregistered_messages_add_up_to_the_two_caps_at_most() -> None:
    """Each under its cap, many of them in one read: the parser takes them all at once (deflated, 250
    messages of 1 MiB fit in 270 KB on the wire), so together they are capped too until registration."""
    many = [frame(b"a")] + [frame(b"b" * (MAX_PENDING_FRAME // 4)) for _ in range(8)]
    received, proto = run_socket([b"".join(many)])
    assert len(texts(received)) < 6  # the handshake cap and the pending cap's worth: 1 + 4 at most
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1009
    reply = json.dumps({"type": "executor_info"}).encode()
    received, proto = run_socket([frame(reply)] + many[1:], register_after=1)  # registered first: no total
    assert texts(received) == [len(reply)] + [MAX_PENDING_FRAME // 4] * 8 and proto.conn.close_sent is None


def test_a_peer_that_does_not_read_gets_one_pong_once_the_buffer_drains() -> None:
    """A pong is the one thing a peer can make Relay write: while the write buffer is over its
    high-water mark, pings are not answered at once, so a flood of them costs no memory. The latest
    is answered once the buffer drains (RFC 6455 5.5.2, 5.5.3): an executor's keepalive ping that
    came in while Relay wrote an 8 MiB import was never answered, and the SDK closes 20 s later."""
    seen: list[bytes] = []

    def written(proto: Any) -> bytes:
        return b"".join(proto.transport.written)

    def paused(proto: Any) -> None:
        proto.pause_writing()
        seen.append(written(proto))

    def drained(proto: Any) -> None:
        seen.append(written(proto))
        proto.resume_writing()
        seen.append(written(proto))
        proto.pause_writing()
        proto.resume_writing()  # no ping in between: nothing owed
        seen.append(written(proto))
        proto.data_received(frame(b"q", opcode=0x9))
        seen.append(written(proto))

    pings = [frame(b"%03d" % i + b"p" * 122, opcode=0x9) for i in range(CONTROL_BURST - 1)]
    run_socket(pings, before=paused, after=drained)
    upgraded, while_paused, resumed, again, writable = seen
    assert while_paused == upgraded  # not one pong while the buffer is full
    latest = b"%03d" % (CONTROL_BURST - 2) + b"p" * 122
    assert resumed == upgraded + b"\x8a\x7d" + latest  # one pong, the latest ping's, once it drains
    assert again == resumed
    assert writable == resumed + b"\x8a\x01q"  # writable: answered at once


def test_a_flood_of_pings_fails_the_connection() -> None:
    """Every frame of a read is parsed at once: one socket's 6-byte pings held the event loop for seconds
    and every other executor missed its keepalive. A burst is answered; past it the connection fails
    with 1002, and what else came in that read is not parsed."""
    pings = b"".join(frame(b"p", opcode=0x9) for _ in range(CONTROL_BURST - 1))
    _, proto = run_socket([pings])
    assert proto.conn.close_sent is None and b"".join(proto.transport.written).count(b"\x8a\x01p") == CONTROL_BURST - 1
    received, proto = run_socket([pings + b"".join(frame(b"p", opcode=0x9) for _ in range(50_000))
                                  + frame(b"after")])
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1002
    assert "pings" in proto.conn.close_sent.reason and texts(received) == []
    assert b"".join(proto.transport.written).count(b"\x8a\x01p") == CONTROL_BURST  # then no pong


def test_a_message_of_endless_fragments_fails_the_connection() -> None:
    """Empty continuation frames add nothing to a message's size, so no cap stopped them: the server grew
    without bound. A message may have :data:`MAX_FRAGMENTS` frames."""
    def part(payload: bytes, opcode: int, fin: bool) -> bytes:
        return struct.pack("!BB", (0x80 if fin else 0) | opcode, 0x80 | len(payload)) + b"\x00" * 4 + payload

    ok = part(b"{", 0x1, False) + b"".join(part(b"", 0x0, False) for _ in range(MAX_FRAGMENTS - 3)) \
        + part(b"}", 0x0, True)
    received, proto = run_socket([ok])
    assert texts(received) == [2] and proto.conn.close_sent is None
    endless = part(b"{", 0x1, False) + b"".join(part(b"", 0x0, False) for _ in range(100_000))
    received, proto = run_socket([endless])
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1002 and texts(received) == []
    assert len(proto.frames) < MAX_FRAGMENTS


def test_every_close_the_peer_or_uvicorn_starts_is_bounded() -> None:
    """uvicorn closes the transport itself on the peer's close frame (and on a frame over the cap, and
    as the application ends); a peer that stopped reading would hold that close open for ever, since
    close() waits for the write buffer to drain. The protocol aborts it ``close_timeout`` later."""
    _, proto = run_socket([frame(b"\x03\xe8", opcode=0x8)])  # the peer's close frame, code 1000
    assert proto.transport.closed and not proto.transport.aborted
    assert proto._abort_timer is not None  # armed for close_timeout later
    proto._abort()
    assert proto.transport.aborted


def test_an_executor_s_own_close_with_1009_is_not_taken_for_relay_s_frame_cap() -> None:
    """websockets echoes the peer's close code in its reply: an executor closing with 1009 itself
    was audited as a ``frame_too_large`` of Relay's."""
    received, proto = run_socket([frame(struct.pack("!H", 1009) + b"my own reason", opcode=0x8)])
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == 1009  # the echo
    assert received[-1]["type"] == "websocket.disconnect" and received[-1]["code"] == 1009
    assert "relay.too_big" not in received[-1]


def test_relay_s_own_fast_pings_are_not_taken_for_a_flood() -> None:
    """Each of Relay's pings is answered with a pong: pinging 20 times a second, its executors' pongs
    alone were past the bound and every one was failed with 1002 after 10 s. The bound follows."""
    from relay_es.adapters.uvicorn_ws import CONTROL_RATE

    class State:
        connections: set[Any] = set()
        tasks: set[Any] = set()
        default_headers: list[Any] = []

    def rate(interval: float) -> float:
        config = uvicorn.Config(app=lambda *a: None, ws_ping_interval=interval, ws_per_message_deflate=False,
                                log_config=None)
        config.load()

        async def made() -> float:  # a protocol is made on the running loop
            return protocol_class(1.0)(config=config, server_state=State(), app_state={}).conn.control_rate

        return asyncio.run(made())

    assert rate(20.0) == CONTROL_RATE and rate(1.0) == CONTROL_RATE
    assert rate(0.05) == 40.0  # two a ping: its pong, and room for the peer's own


def test_a_close_frame_without_a_code_is_told_from_a_dropped_connection() -> None:
    """TypeScript's ``DBOS.shutdown()`` sends a close frame with no code (1005); a dropped TCP
    connection sends none, and uvicorn reported 1005 for it too. The drop is reported as the 1006
    it is (RFC 6455 7.1.5), so that the hub can take the first for a clean close."""
    received, _ = run_socket([frame(b"", opcode=0x8)])
    assert received[-1]["type"] == "websocket.disconnect" and received[-1]["code"] == 1005
    received, _ = run_socket([frame(b"{}")], after=lambda proto: proto.connection_lost(None))
    assert received[-1]["type"] == "websocket.disconnect" and received[-1]["code"] == 1006
    received, _ = run_socket([frame(struct.pack("!H", 1000), opcode=0x8)])
    assert received[-1]["code"] == 1000


def part(payload: bytes, opcode: int, *, fin: bool = True, masked: bool = True, rsv: int = 0) -> bytes:
    head = struct.pack("!BB", (0x80 if fin else 0) | rsv | opcode, (0x80 if masked else 0) | len(payload))
    return head + (b"\x00" * 4 if masked else b"") + payload


@pytest.mark.parametrize("chunk,code,flag", [
    (frame(b'{"type": "x\xff"}'), 1007, "relay.invalid_utf8"),  # text that is not UTF-8
    (frame(struct.pack("!H", 1000) + b"\xff", opcode=0x8), 1007, "relay.invalid_utf8"),  # a close reason
    (part(b"{}", 0x1, masked=False), 1002, "relay.protocol_error"),  # an unmasked frame
    (part(b"{}", 0x1, rsv=0x40), 1002, "relay.protocol_error"),  # a reserved bit, no extension
    (part(b"{", 0x1, fin=False) + part(b"", 0x0, fin=False) * MAX_FRAGMENTS, 1002, "relay.protocol_error"),
    (frame(b"p", opcode=0x9) * (CONTROL_BURST + 1), 1002, "relay.protocol_error"),  # a flood of pings
    (frame(b"x" * (MAX_HANDSHAKE_FRAME + 1)), 1009, "relay.too_big"),
], ids=["text", "close-reason", "unmasked", "rsv", "fragments", "pings", "too-big"])
def test_a_connection_the_socket_fails_for_the_peer_s_frames_is_flagged(chunk: bytes, code: int, flag: str) -> None:
    """Only a frame over the cap was flagged (and audited): the socket's other fatal closes were recorded
    as a plain disconnect, though the hub audits every fatal violation."""
    received, proto = run_socket([chunk])
    assert proto.conn.close_sent is not None and proto.conn.close_sent.code == code
    last = received[-1]
    assert last["type"] == "websocket.disconnect" and last["code"] == code and last.get(flag) is True
    assert [k for k in last if k.startswith("relay.")] == [flag]


@pytest.mark.parametrize("code", [1002, 1007])
def test_an_executor_s_own_close_with_a_violation_code_is_not_flagged(code: int) -> None:
    received, proto = run_socket([frame(struct.pack("!H", code), opcode=0x8)])
    assert received[-1]["code"] == code and not [k for k in received[-1] if k.startswith("relay.")]
