"""One socket as the hub holds it (``relay_es.adapters.hub.connection``): guarded writes,
calls and their answers, a socket lost under its waiting calls."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from relay_es.adapters.hub.connection import ConnectionLost
from relay_es.protocol import messages as m
from tests.adapters.hub.support import registered


def test_the_socket_writes_a_guarded_frame_only_if_the_guard_allows() -> None:
    """The last check sits in the socket itself (uvicorn_ws): between the guard's
    answer and the write there is no await, and an expiry waits for the write."""
    import threading

    from relay_es.adapters.hub.connection import Guard
    from relay_es.adapters.uvicorn_ws import Withdrawn, protocol_class

    written: list[bytes] = []

    class Transport:
        def write(self, data: bytes) -> None:
            written.append(data)

        def is_closing(self) -> bool:
            return False

    async def main() -> None:
        import uvicorn

        cls = protocol_class(1.0)
        config = uvicorn.Config(app=lambda *a: None, ws_max_size=1 << 20)
        config.load()

        class State:
            connections: set[Any] = set()
            tasks: set[Any] = set()
            default_headers: list[Any] = []

        proto = cls(config=config, server_state=State(), app_state={})
        proto.transport = Transport()
        proto.handshake_complete = True
        proto.conn.state = __import__("websockets").protocol.State.OPEN
        lock = threading.Lock()
        allowed = {"yes": True}
        guard = Guard(lock, lambda: allowed["yes"])
        await proto.send({"type": "websocket.send", "text": "one", "relay.guard": guard})
        assert len(written) == 1
        allowed["yes"] = False
        with pytest.raises(Withdrawn):
            await proto.send({"type": "websocket.send", "text": "two", "relay.guard": guard})
        assert len(written) == 1 and not lock.locked()

    asyncio.run(main())


def test_a_call_returns_its_answer_and_a_lost_socket_fails_the_calls_waiting() -> None:
    frames: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        frames.append(json.loads(message["text"]))

    async def main() -> tuple[Any, BaseException | None]:
        conn = registered(send)
        first = asyncio.ensure_future(conn.call(
            lambda rid: m.ExistPendingWorkflowsRequest(request_id=rid, executor_id="D", application_version="v1"), 5))
        while not frames:
            await asyncio.sleep(0.001)
        for ev in conn.session.receive(json.dumps({"type": "exist_pending_workflows",
                                                   "request_id": frames[0]["request_id"], "exist": False})):
            conn.answered(ev.request_id, ev.response)
        answer = await first
        second = asyncio.ensure_future(conn.call(
            lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 5))
        while len(frames) < 2:
            await asyncio.sleep(0.001)
        conn.lost()
        try:
            await second
        except ConnectionLost as e:
            return answer, e
        return answer, None

    answer, lost = asyncio.run(main())
    assert answer.exist is False
    assert isinstance(lost, ConnectionLost)


def test_nothing_is_sent_on_a_closed_or_unregistered_socket() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        from relay_es.adapters.hub.connection import Connection

        fresh = Connection(id="c0", org="local", app="app", peer="p", token=None, send_message=send)
        assert not fresh.registered
        with pytest.raises(ConnectionLost):
            await fresh.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 5)
        conn = registered(send)
        assert conn.registered
        await conn.close(4001, "superseded")
        await conn.close(4001, "superseded")  # once
        assert not conn.registered
        with pytest.raises(ConnectionLost):
            await conn.send_text("{}")

    asyncio.run(main())
    assert sent == [{"type": "websocket.close", "code": 4001, "reason": "superseded"}]


def test_a_socket_that_fails_under_a_write_is_lost() -> None:
    async def gone(message: dict[str, Any]) -> None:
        raise OSError("reset by peer")

    async def main() -> bool:
        conn = registered(gone)
        with pytest.raises(ConnectionLost):
            await conn.send_text("{}")
        return conn.closed

    assert asyncio.run(main())


def test_a_socket_relay_closes_fails_its_waiting_calls_at_once() -> None:
    """Nothing more is read from a socket Relay closed (superseded, revoked, a fatal
    violation): its calls fail at once, not at their timeouts."""
    async def send(message: dict[str, Any]) -> None:
        pass

    async def main() -> None:
        conn = registered(send)
        call = asyncio.ensure_future(conn.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 60))
        while not conn.waiters:
            await asyncio.sleep(0.001)
        await conn.close(4001, "superseded")
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(call, 1)
        assert not conn.waiters

    asyncio.run(main())


def test_a_session_closed_by_a_fatal_violation_still_fails_the_calls_when_the_socket_goes() -> None:
    async def send(message: dict[str, Any]) -> None:
        pass

    async def main() -> None:
        conn = registered(send)
        call = asyncio.ensure_future(conn.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 60))
        while not conn.waiters:
            await asyncio.sleep(0.001)
        conn.session.close()  # what a fatal violation does: the session forgets its requests
        conn.lost()
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(call, 1)

    asyncio.run(main())


def test_a_calls_timeout_covers_its_write() -> None:
    """A write stuck behind another (the socket's lock held by a huge frame) counts against
    the call's one timeout."""
    async def stuck(message: dict[str, Any]) -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        conn = registered(stuck)
        with pytest.raises(TimeoutError):
            await conn.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 0.05)
        assert not conn.waiters and not conn.session.pending

    asyncio.run(main())


def test_a_call_whose_own_write_fails_leaves_no_unretrieved_exception(caplog: pytest.LogCaptureFixture) -> None:
    """The write failing fails every waiting call, the caller's own included, and the caller raises at
    once: its own future's exception was never retrieved, and asyncio logged it as an ERROR ("Future
    exception was never retrieved") for an executor that merely went away mid-call."""
    import gc
    import logging

    class ClientDisconnected(Exception):
        pass

    async def send(_: Any) -> None:
        raise ClientDisconnected()

    async def main() -> None:
        conn = registered(send)
        with pytest.raises(ConnectionLost):
            await conn.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 5)
        del conn
        gc.collect()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
