"""The hub's endpoint (``relay_es.adapters.hub.endpoint``): against a real ``relay serve``
(real WebSockets on loopback, lightweight protocol clients that answer like the SDKs, on
both stores), and built from its parts with a fake store for what a server cannot show
deterministically."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import websockets

from tests.adapters.hub.support import FAST, Handshake, actions, at, build, set_grace, settle
from tests.conftest import WIRE_ONLY
from tests.fake_executor import FakeExecutor
from tests.rest_client import events, listing as executors, rest as api
from tests.server import RelayServer
from tests.support import until


def test_connect_registers_with_everything_executor_info_reports(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, executor_id="A", version="v7").connect()
        rows = await until(lambda: executors(server).get("A"))
        assert rows["status"] == "HEALTHY"
        assert (rows["appVersion"], rows["hostname"], rows["language"], rows["dbosVersion"]) == (
            "v7", "fakehost", "python", "3.2.0")
        assert rows["executorMetadata"] == {"fake": True}
        assert rows["createdAt"].endswith("Z") and len(rows["createdAt"]) == 24
        app = api(server, "GET", "/v2/orgs/local/apps/app").json()  # registered on first connection
        assert app["status"] == "AVAILABLE" and app["language"] == "python"
        assert actions(server, "A") == ["executor.connected"]
        entry = events(server, executorId="A")[0]
        assert entry["detail"]["peer"] == "127.0.0.1" and entry["detail"]["token"] is None  # who registered it
        await a.close()

    asyncio.run(main())


def test_drop_and_return_within_grace_means_no_recovery(server: RelayServer) -> None:
    set_grace(server, 30)

    async def main() -> None:
        b = await FakeExecutor(server.ws, executor_id="B").connect()
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        await until(lambda: executors(server).get("A"))
        a.abort()
        await until(lambda: executors(server).get("A", {}).get("status") == "DISCONNECTED")
        a2 = await FakeExecutor(server.ws, executor_id="A").connect()
        await until(lambda: executors(server).get("A", {}).get("status") == "HEALTHY")
        # the audit read model may trail the executors listing: wait for the return to be recorded there too
        got = await until(lambda: (x := actions(server, "A")) and "executor.reconnected" in x and x,
                          what="A's return audited")
        assert got == ["executor.connected", "executor.disconnected", "executor.reconnected"]
        assert [r["type"] for r in b.requests] == ["executor_info"]  # nobody was asked to recover
        await a2.close()
        await b.close()

    asyncio.run(main())


def test_open_but_silent_socket_is_disconnected_within_the_ping_wait(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        await until(lambda: executors(server).get("A"))
        frozen_at = time.time()
        a.freeze()
        # Relay's own record of the disconnect, not when this test saw it: the read model and polling lag do not count
        gone = await until(lambda: [x for x in events(server, executorId="A") if x["action"] == "executor.disconnected"],
                           timeout=10, what="A recorded disconnected")
        assert [x["detail"]["reason"] for x in gone] == ["ping_timeout"]
        took = at(gone[0]) - frozen_at
        assert took <= 2.0 + 0.5  # RELAY_PING_WAIT_SECS, plus scheduling slack
        await until(lambda: executors(server).get("A", {}).get("status") == "DISCONNECTED")
        a.thaw()
        await a.close()

    asyncio.run(main())


def test_second_live_connection_supersedes_the_first(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        old = await FakeExecutor(server.ws, executor_id="A").connect()
        new = await FakeExecutor(server.ws, executor_id="A").connect()
        assert await old.closed() == 4001
        await until(lambda: len(events(server, executorId="A")) == 2, what="both connections recorded")
        await asyncio.sleep(2.0)  # longer than the grace: nothing may be declared dead
        assert executors(server)["A"]["status"] == "HEALTHY"
        entries = events(server, executorId="A")
        assert [x["action"] for x in entries] == ["executor.connected", "executor.connected"]
        assert entries[1]["detail"]["supersededConnectionId"] == entries[0]["detail"]["connectionId"]
        await new.close()

    asyncio.run(main())


@WIRE_ONLY
def test_hostile_input_is_refused_audited_and_disturbs_no_one(server: RelayServer) -> None:
    async def main() -> None:
        bystander = await FakeExecutor(server.ws, executor_id="B").connect()
        bad = await FakeExecutor(server.ws, executor_id="A").connect()
        await bad.send_raw("this is not json")
        await bad.send_raw(b"\x00\x01binary")
        await bad.send_raw(json.dumps({"type": "recovery", "request_id": "nobody-asked", "success": True}))
        await bad.send_raw(json.dumps({"type": "executor_info"}))  # missing request_id
        await bad.send_raw("x" * 100_000)
        await until(lambda: {"invalid_frame", "binary_frame", "unsolicited"} <= {
            x["detail"]["kind"] for x in events(server, app="app") if x["action"] == "protocol.violation"})
        # a handshake that never completes
        silent = await websockets.connect(f"{server.ws}/websocket/app/k", ping_interval=None)
        try:
            await asyncio.wait_for(silent.wait_closed(), 15)
        finally:
            await silent.close()
        assert silent.close_code == 4002
        # an unusable executor_info reply closes with 1008
        broken = await websockets.connect(f"{server.ws}/websocket/app/k", ping_interval=None)
        req = json.loads(await broken.recv())
        await broken.send(json.dumps({"type": "executor_info", "request_id": req["request_id"], "executor_id": 5}))
        await asyncio.wait_for(broken.wait_closed(), 5)
        assert broken.close_code == 1008
        # bad paths are refused before the upgrade
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"{server.ws}/websocket/only-one-segment")
        assert refused.value.response.status_code == 404
        assert executors(server)["A"]["status"] == "HEALTHY"
        assert executors(server)["B"]["status"] == "HEALTHY"
        assert api(server, "GET", "/healthz").status_code == 200
        await bad.close()
        await bystander.close()

    asyncio.run(main())


def test_deleting_an_application_closes_its_executors_with_4007(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        b = await FakeExecutor(server.ws, executor_id="B").connect()
        other = await FakeExecutor(server.ws, app="other", executor_id="O").connect()
        await until(lambda: len(executors(server)) == 2)
        assert api(server, "DELETE", "/v2/orgs/local/apps/app").status_code == 204
        assert await a.closed() == 4007 and await b.closed() == 4007
        reasons = await until(lambda: [x["detail"]["reason"] for x in events(server, executorId="A")
                                       if x["action"] == "executor.disconnected"])
        assert reasons == ["app_deleted"]
        assert other.ws is not None and other.ws.close_code is None  # another application's executor stays
        # nor are they counted on /metrics, where they stayed DISCONNECTED for ever (alerts firing for an
        # application that is gone); the other application's are
        scraped = await until(lambda: t if 'app="other"' in (t := server.get("/metrics").text) else None)
        assert 'relay_executors{app="app"' not in scraped
        await other.close()

    asyncio.run(main())


@pytest.mark.parametrize("path", ["/websocket/app/relay_secretsecret", "/WebSocket/app/relay_secretsecret",
                                  "/%57ebsocket/app/relay_secretsecret", "/x/WEBSOCKET/app/relay_secretsecret"])
def test_a_key_in_a_refused_path_never_reaches_the_log_however_spelt(path: str) -> None:
    from relay_es.adapters.hub.endpoint import scrub

    assert "secretsecret" not in scrub(path) and scrub(path).endswith("/app/***")


def test_a_refusal_naming_no_org_is_not_audited() -> None:
    """A key no token ever had names no org: counted and logged, never written into an
    audit log (not even development mode's "local")."""
    from relay_es.adapters.hub.admission import Refused

    recorded: list[tuple[Any, ...]] = []

    class Store:
        def record_refusal(self, org: str, **kw: Any) -> None:
            recorded.append((org, kw["app"], kw["status"]))

    async def main() -> None:
        parts = build(Store())
        try:
            await parts.hub._audit_refusal("app", "10.0.0.1", Refused(401, "Unauthorized", "unknown key"))
            await parts.hub._audit_refusal("app", "10.0.0.1", Refused(403, "Forbidden", "not covered", org="acme"))
        finally:
            parts.close()

    asyncio.run(main())
    assert recorded == [("acme", "app", 403)]


def test_refused_handshakes_are_audited_once_per_org_and_address_whatever_application_they_name() -> None:
    """The path's application is the client's choice: a revoked key sent under a new name each time
    must not write an entry each time (500 made-up names wrote 500 entries before)."""
    from relay_es.adapters.hub.admission import Refused

    recorded: list[tuple[Any, ...]] = []

    class Store:
        def record_refusal(self, org: str, **kw: Any) -> None:
            recorded.append((org, kw["app"], kw["peer"]))

    async def main() -> None:
        parts = build(Store())
        try:
            for i in range(50):
                await parts.hub._audit_refusal(f"made-up-{i}", "10.0.0.1", Refused(401, "Unauthorized", "revoked",
                                                                                 org="acme"))
            await parts.hub._audit_refusal("app", "10.0.0.2", Refused(401, "Unauthorized", "revoked", org="acme"))
            await parts.hub._audit_refusal("app", "10.0.0.1", Refused(403, "Forbidden", "not covered", org="acme"))
        finally:
            parts.close()

    asyncio.run(main())
    assert recorded == [("acme", "made-up-0", "10.0.0.1"), ("acme", "app", "10.0.0.2"), ("acme", "app", "10.0.0.1")]


def test_handshakes_are_refused_with_503_while_the_outbox_holds_its_cap() -> None:
    """The store is away and transitions pile up: past RELAY_MAX_QUEUED_TRANSITIONS a new
    executor is answered 503 (try again later) instead of queueing more."""
    from relay_es.adapters.hub import Hub
    from relay_es.protocol.limits import ResourceLimits

    class Away:
        def execute(self, ops: list[Any]) -> list[bool]:
            raise OSError("connection refused")

    async def handshake(hub: Hub) -> int:
        sent: list[dict[str, Any]] = []
        inbox = [{"type": "websocket.connect"}]

        async def receive() -> dict[str, Any]:
            return inbox.pop(0) if inbox else {"type": "websocket.disconnect", "code": 1000}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        task = asyncio.ensure_future(hub({"type": "websocket", "path": "/websocket/app/key",
                                          "client": ("127.0.0.1", 5)}, receive, send))
        while not sent:
            await asyncio.sleep(0.001)
        task.cancel()
        return 101 if sent[0]["type"] == "websocket.accept" else sent[0]["status"]

    async def main() -> list[int]:
        parts = build(Away(), limits=ResourceLimits(queued_transitions=2))
        hub = parts.hub
        hub.gate.known_apps.add(("local", "app"))
        try:
            seen = [await handshake(hub)]
            hub.outbox.submit("a", "op-a")
            seen.append(await handshake(hub))
            hub.outbox.submit("b", "op-b")
            seen.append(await handshake(hub))
            return seen
        finally:
            parts.close()

    assert asyncio.run(main()) == [101, 101, 503]


def test_a_socket_that_ends_leaves_the_registry_fails_its_calls_and_records_its_disconnect() -> None:
    """The read loop's end (``_cleanup``): the socket leaves the registry (the count is
    reported), calls waiting on it fail, and its disconnect goes to the outbox with the
    reason (1011: ping_timeout) -- except while Relay shuts down, when nothing is recorded."""
    import uuid

    from relay_es.adapters.hub import ConnectionLost
    from relay_es.protocol import messages as m
    from tests.adapters.hub.support import registered

    recorded: list[Any] = []

    class Store:
        class clock:  # noqa: N801
            @staticmethod
            def now() -> None:
                return None

        def op_disconnected(self, sid: Any, **kw: Any) -> tuple[str, str]:
            return ("disconnected", kw["reason"])

        def execute(self, ops: list[Any]) -> list[bool]:
            recorded.extend(ops)
            return [True] * len(ops)

    async def main() -> list[int]:
        counts: list[int] = []
        parts = build(Store())
        parts.hub.on_connection_change = counts.append

        async def send(message: dict[str, Any]) -> None:
            pass

        try:
            for shutting_down in (False, True):
                parts.hub.shutting_down = shutting_down
                conn = registered(send, id=f"c-{shutting_down}")
                conn.stream_id = uuid.uuid4()
                parts.registry.add(conn)
                parts.registry.claim(("local", "app", "T"), conn)
                call = asyncio.ensure_future(conn.call(
                    lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]), 5))
                await asyncio.sleep(0)
                await parts.hub._cleanup(conn, 1011)
                with pytest.raises(ConnectionLost):
                    await call
                assert parts.registry.executor(("local", "app", "T")) is None and len(parts.registry) == 0
            assert await parts.outbox.drained(timeout=5)
            return counts
        finally:
            parts.close()

    assert asyncio.run(main()) == [0, 0]
    assert recorded == [("disconnected", "ping_timeout")]


@pytest.mark.parametrize("code,reason", [(1000, "clean_close"), (1001, "clean_close"), (1005, "clean_close"),
                                         (1011, "ping_timeout"), (1006, "socket_closed"), (None, "socket_closed"),
                                         (4000, "socket_closed"), (1002, "socket_closed"), (1007, "socket_closed")])
def test_why_a_socket_ended_is_read_from_its_close_code(code: int | None, reason: str) -> None:
    from relay_es.adapters.hub.endpoint import _reason

    assert _reason(code) == reason


def test_an_executor_that_closes_its_socket_itself_stopped_cleanly_and_a_dropped_one_did_not(server: RelayServer) -> None:
    """A shutdown (a deploy) closes with 1000, TypeScript's with a close frame that has no code (1005); a
    kill sends no close frame. Stranded work tells them apart."""

    async def main() -> None:
        polite = await FakeExecutor(server.ws, executor_id="P").connect()
        typescript = await FakeExecutor(server.ws, executor_id="T").connect()
        dropped = await FakeExecutor(server.ws, executor_id="K").connect()
        await until(lambda: {"P", "T", "K"} <= set(executors(server)))
        await polite.close()
        assert typescript.ws is not None
        await typescript.ws.close(code=None)  # type: ignore[arg-type]  # a close frame with no payload
        dropped.abort()
        for executor_id, reason in (("P", "clean_close"), ("T", "clean_close"), ("K", "socket_closed")):
            gone = await until(lambda e=executor_id: [x for x in events(server, executorId=e)
                                                      if x["action"] == "executor.disconnected"],
                               timeout=10, what=f"{executor_id} recorded disconnected")
            assert [x["detail"]["reason"] for x in gone] == [reason]

    asyncio.run(main())


def test_a_handshake_that_timed_out_is_closed_before_its_violation_is_recorded() -> None:
    """An executor_info reply that arrives while the timeout's violation is being written must not
    register an executor that is then closed (a spurious Connected and Disconnected, and a forced
    reconnect): the socket is closed first."""
    import datetime
    import threading

    writing = threading.Event()
    release = threading.Event()

    class Store:
        log: list[tuple[Any, ...]] = []

        class clock:  # noqa: N801
            @staticmethod
            def now() -> datetime.datetime:
                return datetime.datetime.now(datetime.timezone.utc)

        def app_exists(self, org: str, app: str) -> bool:
            return True

        def record_violation(self, org: str, app: str, **kw: Any) -> bool:
            writing.set()
            release.wait(10)  # the audit write under way
            self.log.append(("violation", kw["kind"]))
            return True

        def op_connected(self, org: str, app: str, info: Any, **kw: Any) -> Any:
            self.log.append(("connected", info.executor_id))
            return ("op", "connected")

        def op_disconnected(self, stream_id: Any, **kw: Any) -> Any:
            self.log.append(("disconnected", kw["reason"]))
            return ("op", "disconnected")

        def execute(self, ops: list[Any]) -> list[bool]:
            return [True] * len(ops)

    store = Store()

    async def main() -> list[Any]:
        parts = build(store)
        h = Handshake(parts)
        sent, inbox, task = h.sent, h.inbox, h.task
        try:
            while not any(m["type"] == "websocket.send" for m in sent):
                await asyncio.sleep(0.001)
            req = json.loads([m for m in sent if m["type"] == "websocket.send"][0]["text"])
            (conn,) = parts.registry.connections.values()
            timed_out = asyncio.ensure_future(parts.hub._handshake_timed_out(conn))  # the timer fired
            await asyncio.to_thread(writing.wait, 10)
            await inbox.put({"type": "websocket.receive", "text": json.dumps({
                "type": "executor_info", "request_id": req["request_id"], "executor_id": "X",
                "application_version": "v1"})})
            await settle()
            release.set()
            await asyncio.wait_for(timed_out, 10)
            await asyncio.wait_for(task, 10)
            return [(m["type"], m.get("code")) for m in sent if m["type"] == "websocket.close"]
        finally:
            release.set()
            parts.close()

    closes = asyncio.run(main())
    assert closes == [("websocket.close", 4002)]
    assert ("connected", "X") not in store.log and ("violation", "handshake_timeout") in store.log


@pytest.mark.parametrize("closing", ["token", "app", "another token", "many others"])
def test_a_handshake_admitted_before_a_revocation_and_registered_after_it_is_closed(
        closing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Revoking a token (deleting an application) closes the sockets registered with it; a handshake whose
    admission read the token before the revocation and registered after it was not among them, and
    stayed open for good (a helper's run: about one revocation in five under a stream of handshakes)."""
    from relay_es.adapters.hub import endpoint

    monkeypatch.setattr(endpoint, "CLOSED_KEPT", 3, raising=False)

    async def main() -> list[dict[str, Any]]:
        parts = build()
        admitted, release = asyncio.Event(), asyncio.Event()

        async def admit(app: str, key: str, peer: str, headers: Any = None) -> tuple[str, str | None]:
            admitted.set()
            await release.wait()  # the token was read: valid then
            return "acme", "ci"

        monkeypatch.setattr(parts.hub.gate, "admit", admit)
        h = Handshake(parts, "/websocket/orders/key")
        sent, inbox, task = h.sent, h.inbox, h.task
        await admitted.wait()
        if closing == "token":
            await parts.hub.close_token("acme", "ci")
        elif closing == "app":
            await parts.hub.close_app("acme", "orders")
        elif closing == "another token":
            await parts.hub.close_token("acme", "other")
        else:  # more closings than are kept: whatever they were, it is closed
            for i in range(5):
                await parts.hub.close_token("acme", f"other-{i}")
        release.set()
        await settle()
        if closing == "another token":
            assert not any(m["type"] == "websocket.close" for m in sent)
            await inbox.put({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(task, 5)
        parts.close()
        return sent

    sent = asyncio.run(main())
    closes = [m["code"] for m in sent if m["type"] == "websocket.close"]
    assert closes == {"token": [4003], "app": [4007], "another token": [], "many others": [4003]}[closing]


class Recorded:
    """A store that records what the hub asks of it; while ``refusing``, ``op_connected`` fails
    the way the store's own checks do."""

    def __init__(self) -> None:
        self.refusing = False
        self.log: list[tuple[Any, ...]] = []

    class clock:  # noqa: N801
        @staticmethod
        def now() -> None:
            return None

    def app_exists(self, org: str, app: str) -> bool:
        return True

    def op_connected(self, org: str, app: str, info: Any, **kw: Any) -> Any:
        from relay_es.domain.errors import InvalidSetting

        if self.refusing:
            raise InvalidSetting("peer", "must be at most 1024 bytes of UTF-8, got 1100")
        return ("connected", info.executor_id, kw["connection_id"])

    def op_disconnected(self, stream_id: Any, **kw: Any) -> Any:
        return ("disconnected", kw["connection_id"])

    def record_violation(self, org: str, app: str, **kw: Any) -> bool:
        self.log.append(("violation", kw["kind"]))
        return True

    def execute(self, ops: list[Any]) -> list[bool]:
        self.log.extend(ops)
        return [True] * len(ops)


async def answer_info(h: Handshake, executor_id: str) -> None:
    """Answers the hub's executor_info request on ``h``."""
    while not any(m["type"] == "websocket.send" for m in h.sent):
        await asyncio.sleep(0.001)
    req = json.loads([m for m in h.sent if m["type"] == "websocket.send"][0]["text"])
    await h.inbox.put({"type": "websocket.receive", "text": json.dumps({
        "type": "executor_info", "request_id": req["request_id"], "executor_id": executor_id,
        "application_version": "v1"})})
    await settle()


def test_a_registration_the_store_refuses_is_closed_with_4004_and_the_live_connection_keeps_its_place() -> None:
    """A registration whose Connected the store cannot hold took the executor's index entry from its
    live connection and then crashed, so the entry was dropped: recovery found no HEALTHY executor
    although it was connected. It is refused before it claims anything."""
    store = Recorded()

    async def main() -> tuple[str, list[Any]]:
        parts = build(store)
        try:
            live = Handshake(parts)
            await answer_info(live, "X")
            key = ("local", "app", "X")
            (first_id,) = parts.registry.connections
            assert parts.registry.executor(key) is parts.registry.connections[first_id]
            store.refusing = True
            refused = Handshake(parts)
            await answer_info(refused, "X")
            await asyncio.wait_for(refused.task, 5)
            assert [(m["code"], m["reason"]) for m in refused.sent if m["type"] == "websocket.close"] == [
                (4004, "executor_info out of bounds")]
            held = parts.registry.executor(key)
            assert held is not None and held.id == first_id and held.registered and not held.superseded
            assert [c.id for c in parts.registry.registered("local", "app")] == [first_id]
            assert not any(m["type"] == "websocket.close" for m in live.sent)
            assert await parts.outbox.drained(timeout=5)
            await live.inbox.put({"type": "websocket.disconnect", "code": 1000})
            await asyncio.wait_for(live.task, 5)
            assert await parts.outbox.drained(timeout=5)
            return first_id, store.log
        finally:
            parts.close()

    first_id, log = asyncio.run(main())
    # nothing of the refused one reaches the store but its violation; no disconnect of it either
    assert log == [("connected", "X", first_id), ("violation", "info_out_of_bounds"), ("disconnected", first_id)]


class Stalled:
    """A socket whose peer stopped reading: a write waits until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        await self.release.wait()


@pytest.mark.parametrize("closing", ["token", "app", "stop"])
def test_sockets_that_stopped_reading_do_not_hold_up_the_close_of_the_others(closing: str) -> None:
    """Each close waited for the one before it, and a socket that stopped reading holds its close
    frame up to close_timeout: ten of them kept the revoked token's last socket open, registered and
    routable for 12 s. Every one is unroutable at once, and the close frames go out together."""
    from tests.adapters.hub.support import registered

    async def main() -> None:
        parts = build()
        stalled = [Stalled() for _ in range(3)]
        conns = [registered(s, f"S{i}", id=f"s{i}", org="acme", app="orders", token="ci")
                 for i, s in enumerate(stalled)]
        normal: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            normal.append(message)

        last = registered(send, "N", id="n", org="acme", app="orders", token="ci")
        for conn in [*conns, last]:
            parts.registry.add(conn)
            parts.registry.claim(("acme", "orders", conn.executor_id or ""), conn)
        run = {"token": lambda: parts.hub.close_token("acme", "ci"),
               "app": lambda: parts.hub.close_app("acme", "orders"),
               "stop": parts.hub.stop}[closing]
        task = asyncio.ensure_future(run())
        try:
            await settle()
            assert parts.registry.registered("acme", "orders") == []  # none routable
            assert [m["type"] for m in normal] == ["websocket.close"]  # not behind the stalled ones
            assert all(s.sent and s.sent[-1]["type"] == "websocket.close" for s in stalled)  # all under way
            assert not task.done()
        finally:
            for s in stalled:
                s.release.set()
        got = await asyncio.wait_for(task, 5)
        if closing != "stop":
            assert got == 4
        parts.close()

    asyncio.run(main())


def test_a_superseded_socket_that_stopped_reading_does_not_hold_up_its_successor() -> None:
    """The close of a superseded connection was awaited in the new connection's read loop: while the
    old socket did not read, the new one's answers were not read either."""
    from relay_es.protocol import messages as m
    from tests.adapters.hub.support import registered

    async def main() -> None:
        parts = build(Recorded())
        stalled = Stalled()
        old = registered(stalled, "X", id="old")
        parts.registry.add(old)
        parts.registry.claim(("local", "app", "X"), old)
        h = Handshake(parts)
        try:
            await answer_info(h, "X")
            new = parts.registry.executor(("local", "app", "X"))
            assert new is not None and new is not old and old.closed and old.superseded
            assert stalled.sent[-1]["code"] == 4001
            call = asyncio.ensure_future(new.call(lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=["D"]),
                                                  5))
            while len([x for x in h.sent if x["type"] == "websocket.send"]) < 2:
                await asyncio.sleep(0.001)
            req = json.loads(h.sent[-1]["text"])
            await h.inbox.put({"type": "websocket.receive", "text": json.dumps({
                "type": "recovery", "request_id": req["request_id"], "success": True})})
            got = await asyncio.wait_for(call, 2)  # answered while the old socket's close is still stuck
            assert got.success is True and not stalled.release.is_set()
        finally:
            stalled.release.set()
            await h.inbox.put({"type": "websocket.disconnect", "code": 1000})
            await asyncio.wait_for(h.task, 5)
            parts.close()

    asyncio.run(main())


def test_a_forwarded_address_that_is_not_an_address_is_refused_and_the_executor_keeps_its_place(
        tmp_path: Any, store_url: str) -> None:
    """Auth mode behind a proxy Relay trusts (127.0.0.1 by default): a handshake forwarded with an address
    of 1,100 characters registered an executor id already connected, crashed, and took the live
    connection's place in the hub: when a peer died, recovery found no HEALTHY executor to ask. It is
    refused before the upgrade; a real forwarded address is recorded as the executor's."""
    from tests.adapters.rest.servers import known
    from tests.server import admin_token

    token = admin_token(tmp_path, store_url, "acme", "admin")
    server = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"], env=FAST).start()
    try:
        known(server, "acme", token)
        assert api(server, "PUT", "/v2/orgs/acme/apps/app", token).status_code in (201, 204)
        assert api(server, "PATCH", "/v2/orgs/acme/apps/app", token, json={"executorTimeoutSecs": 1}).status_code == 204

        async def forwarded(address: str, executor_id: str) -> websockets.ClientConnection:
            ws = await websockets.connect(f"{server.ws}/websocket/app/{token}", ping_interval=None,
                                          additional_headers={"X-Forwarded-For": address})
            req = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "executor_info", "request_id": req["request_id"],
                                      "executor_id": executor_id, "application_version": "v1"}))
            return ws

        async def main() -> None:
            x = await FakeExecutor(server.ws, key=token, executor_id="X").connect()
            d = await FakeExecutor(server.ws, key=token, executor_id="D").connect()
            for address in ("h" * 1100, "h" * 254):
                with pytest.raises(websockets.InvalidStatus) as refused:
                    await forwarded(address, "X")
                assert refused.value.response.status_code == 400
            via = await forwarded("10.1.2.3", "F")
            got = await until(lambda: events(server, "acme", token, executorId="F"), what="F recorded")
            assert got[0]["detail"]["peer"] == "10.1.2.3"
            await via.close()
            d.abort()
            await x.wait_for("recovery", timeout=15)  # X is still the one Relay asks
            assert x.ws is not None and x.ws.close_code is None

        asyncio.run(main())
    finally:
        server.stop()


@WIRE_ONLY
def test_frames_the_socket_itself_refuses_are_audited(server: RelayServer) -> None:
    """A text frame that is not UTF-8 (1007) and a frame that breaks RFC 6455 (1002, here unmasked) were
    recorded only as a disconnect, though every fatal violation is audited."""

    async def main() -> None:
        bad_text = await FakeExecutor(server.ws, executor_id="U").connect()
        unmasked = await FakeExecutor(server.ws, executor_id="M").connect()
        assert bad_text.ws is not None and unmasked.ws is not None
        await until(lambda: {"U", "M"} <= set(executors(server)), what="both registered")
        bad_text.ws.transport.write(b"\x81\x82\x00\x00\x00\x00\xff\xfe")  # masked (zero mask), not UTF-8
        unmasked.ws.transport.write(b"\x81\x02{}")
        assert await bad_text.closed() == 1007 and await unmasked.closed() == 1002
        got = await until(lambda: d if {"U", "M"} <= set(d := {x["executorId"]: x["detail"] for x in events(
            server, app="app") if x["action"] == "protocol.violation"}) else None, what="violations audited")
        assert (got["U"]["kind"], got["M"]["kind"]) == ("invalid_utf8", "protocol_error"), got
        assert "mask" in got["M"]["detail"]
        for executor_id in ("U", "M"):
            gone = await until(lambda e=executor_id: [x for x in events(server, executorId=e)
                                                      if x["action"] == "executor.disconnected"])
            assert [x["detail"]["reason"] for x in gone] == ["socket_closed"]

    asyncio.run(main())


@pytest.mark.parametrize("flag,kind", [("relay.invalid_utf8", "invalid_utf8"),
                                       ("relay.protocol_error", "protocol_error"),
                                       ("relay.too_big", "frame_too_large")])
def test_a_disconnect_the_socket_caused_is_audited_as_a_violation_of_its_kind(flag: str, kind: str) -> None:
    store = Recorded()

    async def main() -> list[Any]:
        parts = build(store)
        try:
            h = Handshake(parts)
            await answer_info(h, "X")
            code = {"relay.invalid_utf8": 1007, "relay.protocol_error": 1002, "relay.too_big": 1009}[flag]
            await h.inbox.put({"type": "websocket.disconnect", "code": code, "reason": "why", flag: True})
            await asyncio.wait_for(h.task, 5)
            assert await parts.outbox.drained(timeout=5)
            return store.log
        finally:
            parts.close()

    log = asyncio.run(main())
    assert [x for x in log if x[0] == "violation"] == [("violation", kind)]
    assert log[-1][0] == "disconnected"


@pytest.mark.parametrize("raw_path,app,key", [
    (b"/websocket/app/%25%36%42ey", "app", "%6Bey"),  # "key" encoded twice: decoded once, it is not "key"
    (b"/websocket/my%20app/a%2Fb", "my app", "a/b"),  # an encoded slash stays in its segment
    (b"/conductor/v1/websocket/app/key", "app", "key"),
    (None, "app", "%6Bey"),  # no raw_path: the server's decoded path, not decoded again
])
def test_the_handshake_path_is_percent_decoded_once(raw_path: bytes | None, app: str, key: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn decodes ``path`` once and the hub decoded it again: a key encoded twice was accepted."""
    from urllib.parse import unquote

    from relay_es.adapters.hub.admission import Refused

    admitted: list[tuple[str, str]] = []

    async def main() -> None:
        parts = build()

        async def admit(app: str, key: str, peer: str, headers: Any = None) -> tuple[str, str | None]:
            admitted.append((app, key))
            raise Refused(401, "Unauthorized", "unknown key")

        monkeypatch.setattr(parts.hub.gate, "admit", admit)
        sent: list[dict[str, Any]] = []
        inbox = [{"type": "websocket.connect"}]

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return inbox.pop(0)

        path = unquote((raw_path or b"/websocket/app/%256Bey").decode())  # what uvicorn makes of it
        scope = {"type": "websocket", "path": path, "client": ("127.0.0.1", 5), "headers": []}
        if raw_path is not None:
            scope["raw_path"] = raw_path
        try:
            await asyncio.wait_for(parts.hub(scope, receive, send), 5)
        finally:
            parts.close()
        assert sent[0]["status"] == 401

    asyncio.run(main())
    assert admitted == [(app, key)]


def test_audit_entries_the_store_fails_are_one_outage_not_a_traceback_each(caplog: Any) -> None:
    """Refused handshakes and protocol violations each wrote a traceback when the store failed their
    audit entries (one per org, address and interval: a store away fails them all alike). Told as an
    outage now, a line as it starts, one a minute, one as it ends; a bug still with its traceback."""
    import logging
    import sqlite3

    from relay_es.adapters.hub.admission import Refused
    from relay_es.protocol.session import Violation
    from tests.adapters.hub.support import registered

    now = [100.0]
    failure: list[Exception | None] = [sqlite3.OperationalError("database or disk is full")]

    class Store:
        def record_refusal(self, org: str, **kw: Any) -> None:
            if failure[0] is not None:
                raise failure[0]

        def record_violation(self, org: str, app: str, **kw: Any) -> bool:
            if failure[0] is not None:
                raise failure[0]
            return True

    async def send(message: dict[str, Any]) -> None:
        pass

    def said() -> list[tuple[str, str, bool]]:
        return [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
                if r.name == "relay_es.adapters.hub.endpoint" and "executor" not in r.getMessage()]

    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.endpoint")

    async def main() -> None:
        parts = build(Store(), monotonic=lambda: now[0])
        hub = parts.hub
        try:
            for i in range(20):
                await hub._audit_refusal("app", f"10.0.0.{i}", Refused(401, "Unauthorized", "revoked", org="acme"))
                await hub._violation(registered(send, f"E{i}", app=f"app{i}"), Violation("bad_frame", "not JSON"))
            full = "on the store (OperationalError: database or disk is full); not in the audit log"
            assert said() == [("WARNING", f"the hub failed recording a refused handshake {full}", False)]
            now[0] += 60
            await hub._violation(registered(send, "E0", app="app0"), Violation("bad_frame", "not JSON"))
            assert said()[1:] == [("WARNING", f"the hub failed recording a protocol violation {full} (39 more "
                                              "failures since the last line)", False)]
            failure[0] = None  # the store is back
            await hub._audit_refusal("app", "10.0.1.1", Refused(401, "Unauthorized", "revoked", org="acme"))
            assert said()[2:] == [("INFO", "the hub records audit entries on the store again (0 failures since the "
                                           "last line)", False)]
            caplog.clear()
            failure[0] = RuntimeError("a bug")
            await hub._audit_refusal("app", "10.0.1.2", Refused(401, "Unauthorized", "revoked", org="acme"))
            await hub._violation(registered(send, "E1", app="other"), Violation("bad_frame", "not JSON"))
            assert said() == [("ERROR", "could not record a refused handshake", True),
                              ("ERROR", "could not record a protocol violation", True)]
        finally:
            parts.close()

    asyncio.run(main())
