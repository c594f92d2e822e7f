"""Large messages Relay sends (relay_es/adapters/uvicorn_ws.py, ``sliced_frame``): made ready a
slice per turn of the event loop, compressed only where it pays, written whole and in order.

Deflating a 60 MiB import on the event loop held it for 6 s: every REST call and every executor's
socket stalled. Deterministic but for the last test: the protocol on a fake transport, the loop
turned with ``asyncio.sleep(0)``; how long the loop is held is counted in turns it gave others.
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import pytest
from uvicorn.protocols.utils import ClientDisconnected
from websockets.asyncio.client import connect
from websockets.frames import TEXT

from relay_es.adapters import uvicorn_ws
from relay_es.adapters.uvicorn_ws import DEFLATE_AT_ONCE, DEFLATE_SLICE, SLICED_FROM, Withdrawn, sliced_frame
from tests.adapters.test_uvicorn_ws_lean import (
    SDK_OFFER,
    echo_app,
    inflate,
    open_socket,
    record,
    server_frames,
    serving,
    upgrade,
)

LIST = "".join(f'{{"workflow_id":"wf-{i}","status":"PENDING","app_version":"v1"}},'
               for i in range(40_000))[:2 * 1024 * 1024]  # a 2 MiB workflow list: deflates to about 7 %
BLOB = base64.b64encode(os.urandom(1536 * 1024)).decode()  # 2 MiB of base64: to about 76 %, not worth it


async def turns_given(coro: Any) -> int:
    """How many turns of the event loop another task had while ``coro`` ran."""
    turns, done = 0, False

    async def other() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    start = turns
    try:
        await coro
    finally:
        done = True
        await task
    return turns - start


def frames(transport: Any) -> list[tuple[bool, int, bytes]]:
    return server_frames(b"".join(transport.written[1:]))  # after the 101


def text(message: str) -> dict[str, Any]:
    return {"type": "websocket.send", "text": message}


def test_a_large_list_is_deflated_a_slice_per_turn_of_the_loop() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        turns = await turns_given(proto.send(text(LIST)))
        assert turns >= len(LIST) // DEFLATE_SLICE - 1  # uvicorn deflated it in one go: 0 turns
        [(compressed, opcode, payload)] = frames(transport)
        assert compressed and opcode == 0x1 and len(payload) < len(LIST) // 8
        assert inflate(payload).decode() == LIST
        assert proto.making_ready is None and uvicorn_ws._deflating == 0
        proto.connection_lost(None)

    asyncio.run(main())


def test_a_large_message_that_deflate_would_not_halve_goes_as_it_is() -> None:
    """Deflating base64 costs 0.1 s a MiB to save a quarter: 60 MiB held the loop 6 s. Its first
    slice tells: the message goes uncompressed (RSV1 unset, RFC 7692 6), encoded a slice a turn."""
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        turns = await turns_given(proto.send(text(BLOB)))
        assert turns >= 2
        assert frames(transport) == [(False, 0x1, BLOB.encode())]
        proto.connection_lost(None)

    asyncio.run(main())


def test_without_deflate_a_large_message_is_encoded_a_slice_per_turn() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(), compression=False)
        message = "é" * (3 * 1024 * 1024)  # two bytes a character
        assert await turns_given(proto.send(text(message))) >= 2
        assert frames(transport) == [(False, 0x1, message.encode())]
        blob = os.urandom(SLICED_FROM + 1)
        await proto.send({"type": "websocket.send", "bytes": blob})
        assert frames(transport)[1:] == [(False, 0x2, blob)]
        proto.connection_lost(None)

    asyncio.run(main())


def test_a_large_binary_message_is_deflated_too() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        data = LIST.encode()
        await proto.send({"type": "websocket.send", "bytes": data})
        [(compressed, opcode, payload)] = frames(transport)
        assert compressed and opcode == 0x2 and inflate(payload) == data
        proto.connection_lost(None)

    asyncio.run(main())


def test_past_the_bound_of_messages_deflated_at_once_the_next_goes_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        monkeypatch.setattr(uvicorn_ws, "_deflating", DEFLATE_AT_ONCE)
        await proto.send(text(LIST))
        assert frames(transport) == [(False, 0x1, LIST.encode())]
        monkeypatch.setattr(uvicorn_ws, "_deflating", DEFLATE_AT_ONCE - 1)
        await proto.send(text(LIST))
        assert frames(transport)[1][0] is True
        assert uvicorn_ws._deflating == DEFLATE_AT_ONCE - 1
        proto.connection_lost(None)

    asyncio.run(main())


def test_what_is_sent_while_a_large_message_is_made_ready_goes_after_it() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        big = asyncio.create_task(proto.send(text(LIST)))
        await asyncio.sleep(0)
        assert proto.making_ready is not None
        small = asyncio.create_task(proto.send(text("after")))
        also_big = asyncio.create_task(proto.send(text(BLOB)))
        closing = asyncio.create_task(proto.send({"type": "websocket.close", "code": 1000}))
        await asyncio.gather(big, small, also_big, closing)
        sent = frames(transport)
        kinds = [(opcode, compressed) for compressed, opcode, _ in sent]
        assert kinds == [(1, True), (1, False), (1, False), (8, False)]  # text deflated, text, text, the close
        assert inflate(sent[0][2]).decode() == LIST and sent[1][2] == b"after" and sent[2][2] == BLOB.encode()
        proto.connection_lost(None)

    asyncio.run(main())


def test_a_guarded_large_message_is_written_only_if_its_guard_still_says_yes_once_ready() -> None:
    class Guard:
        def __init__(self, allowed: bool) -> None:
            self.allowed, self.asked_after = allowed, -1

        def __enter__(self) -> bool:
            self.asked_after = len(transport.written)
            return self.allowed

        def __exit__(self, *exc: Any) -> None:
            pass

    async def main() -> None:
        nonlocal transport
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        no = Guard(False)
        with pytest.raises(Withdrawn):
            await proto.send({**text(LIST), "relay.guard": no})
        assert frames(transport) == [] and proto.making_ready is None
        yes = Guard(True)
        await proto.send({**text(LIST), "relay.guard": yes})
        assert len(frames(transport)) == 1 and yes.asked_after == 1
        proto.connection_lost(None)

    transport: Any = None
    asyncio.run(main())


def test_a_socket_lost_while_a_large_message_is_made_ready_writes_nothing_and_holds_no_one() -> None:
    async def main() -> None:
        proto, transport = await open_socket(echo_app, upgrade(SDK_OFFER), compression=True)
        big = asyncio.create_task(proto.send(text(LIST)))
        await asyncio.sleep(0)
        proto.connection_lost(None)
        after = asyncio.create_task(proto.send(text("after")))
        with pytest.raises(ClientDisconnected):
            await big
        with pytest.raises(ClientDisconnected):
            await after
        assert frames(transport) == [] and proto.making_ready is None and uvicorn_ws._deflating == 0

    asyncio.run(main())


def test_a_frame_cut_in_slices_is_what_one_go_would_write() -> None:
    async def main() -> None:
        for data in (LIST, BLOB, LIST.encode(), "", "x" * (DEFLATE_SLICE + 1)):
            pieces = await sliced_frame(data, None)
            raw = data.encode() if isinstance(data, str) else data
            assert server_frames(b"".join(pieces)) == [(False, 0x1 if isinstance(data, str) else 0x2, raw)]

    asyncio.run(main())


# -- a real server, a real client ----------------------------------------------------------


def test_a_real_client_reads_large_messages_compressed_or_not() -> None:
    """websockets' client inflates a message with a sync flush inside (the first slice's), as
    every DEFLATE decoder does; what was not worth compressing arrives as it is."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            reply = {"list": LIST, "blob": BLOB}.get(message["text"], "small")
            await send(text(reply))

    async def main() -> None:
        async with serving(app) as port, connect(f"ws://127.0.0.1:{port}/websocket/app/k", max_size=None) as ws:
            received, _ = record(ws)
            for ask, expected in (("list", LIST), ("blob", BLOB), ("x", "small"), ("list", LIST)):
                await ws.send(ask)
                assert await ws.recv() == expected
            assert [(opcode, compressed) for opcode, compressed, _ in received] == \
                [(TEXT, True), (TEXT, False), (TEXT, False), (TEXT, True)]
            assert received[0][2] < len(LIST) // 8 and received[1][2] == len(BLOB)

    asyncio.run(main())
