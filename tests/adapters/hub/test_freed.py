"""A closed executor socket leaves no reference cycle: whatever closed it, reference counting
frees its objects (uvicorn's protocol, websockets' parser, the hub's connection) once Relay lets
go of them, so a storm of closes does not call for a full collection, which holds the GIL for
seconds at 20,000 sockets (ADR 13).

Real WebSockets on loopback to a Relay runtime served in the test's loop (``serving``; uvloop, as
``relay serve`` runs: asyncio's own selector transport leaves a cycle of its own), with the cyclic
collector disabled for the test: an object in a cycle would stay alive. Each socket's protocol
objects are reported lost to the runtime's collector, as in ``relay serve``, which watches them
until they are freed; then a collection that keeps what it finds finds none of the server's."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from relay_es.protocol.limits import MAX_HANDSHAKE_FRAME
from tests.adapters.hub.test_calls import join, serving
from tests.adapters.test_uvicorn_ws_lean import upgrade
from tests.fake_executor import FakeExecutor
from tests.support import until


@pytest.fixture
def no_cycle_collection() -> Iterator[None]:
    gc.collect()  # what the tests before left
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# A socket's objects on the server's side: the protocols, the hub's connection, the transport.
# (Not every type of Relay's: tests that ran before in this process may leave garbage of their own
# late, from threads still ending; nor the test's clients, which are websockets' too.)
SOCKET_SIDE = ("relay_es.adapters.uvicorn_ws.", "relay_es.adapters.hub.connection.", "uvicorn.protocols.",
               "uvloop.loop.TCPTransport", "websockets.server.")


def cyclic_garbage() -> list[str]:
    """The types of a socket's objects on the server's side that only the cyclic collector would
    free (found by a collection that keeps what it finds)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(0)
    found = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                    if f"{type(o).__module__}.{type(o).__qualname__}".startswith(SOCKET_SIDE)})
    gc.garbage.clear()
    return found


@pytest.mark.usefixtures("no_cycle_collection")
def test_sockets_closed_every_way_are_freed_by_reference_counting(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            collector = s.runtime.collector
            assert cyclic_garbage() == []  # none before (this server's start made no socket)

            closes = await join(s)  # the executor closes (1000)
            await closes.ws.close()

            drops = await join(s)  # the executor's socket drops, no close frame
            drops.ws.transport.abort()

            silent = await join(s)  # stops reading: Relay's pings go unanswered (1011)
            silent.ws.transport.pause_reading()

            big = FakeExecutor(s.ws, answer=False)  # a first message over the handshake's cap (1009)
            await big.connect(wait_registered=False)
            await big.wait_for("executor_info")
            await big.ws.send("x" * (MAX_HANDSHAKE_FRAME + 1))

            first = await join(s)  # superseded by a newer connection with its executor id (4001)
            newer = await join(s, executor_id=first.executor_id)
            await until(lambda: first.ws.close_code is not None, what="the first connection closed")

            garbled = await join(s)  # text that is not UTF-8 (1007)
            await garbled.ws.send(b"\xff\xfe", text=True)

            reader, writer = await asyncio.open_connection(*s.ws.removeprefix("ws://").split(":"))
            writer.write(upgrade().replace(b"/websocket/app/k", b"/not-a-websocket-path"))
            assert (await reader.readline()).startswith(b"HTTP/1.1 4")  # a handshake refused with an HTTP answer
            writer.close()

            await until(lambda: collector.losses >= 7 and collector.unfreed() == 0, timeout=10,
                        what="seven sockets lost, and their objects freed without the cyclic collector")
            await newer.ws.close()
            await until(lambda: collector.losses >= 8 and collector.unfreed() == 0, timeout=10,
                        what="the newer one too")
            await until(lambda: len(s.runtime.registry) == 0, timeout=5, what="the hub let go of them")
            assert collector.tracking
            assert cyclic_garbage() == []
            silent.ws.transport.abort()

    uvloop.run(asyncio.wait_for(main(), 60))  # relay serve's loop
