"""The hub against a real ``relay serve``: real WebSockets on loopback,
lightweight protocol clients that answer like the SDKs, on both stores."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import websockets

from tests.fake_executor import FakeExecutor
from tests.server import RelayServer
from tests.rest_client import audit, listing as executors, rest as api
from tests.support import until

FAST = {
    "RELAY_PING_INTERVAL_SECS": "1",
    "RELAY_PING_WAIT_SECS": "2",
    "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "2",
    "RELAY_RESTART_SETTLE_SECS": "0.5",
    "RELAY_RETENTION_INTERVAL_SECS": "3600",
    "RELAY_DEFAULT_EXECUTOR_TIMEOUT_SECS": "60",
}


@pytest.fixture
def server(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield s
    s.stop()


def at(entry: dict[str, Any]) -> float:
    """The time Relay recorded an audit entry, as a Unix timestamp."""
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).timestamp()


def actions(server: RelayServer, executor_id: str) -> list[str]:
    return [a["action"] for a in audit(server, executorId=executor_id)]


def set_grace(server: RelayServer, secs: int, app: str = "app") -> None:
    assert api(server, "PUT", f"/v2/orgs/local/apps/{app}").status_code == 204
    r = api(server, "PATCH", f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": secs})
    assert r.status_code == 204, r.text


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
        entry = audit(server, executorId="A")[0]
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


def test_dead_executor_is_recovered_on_the_wire_by_a_same_version_peer(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        other = await FakeExecutor(server.ws, executor_id="C", version="v2").connect()
        b = await FakeExecutor(server.ws, executor_id="B", version="v1").connect()
        a = await FakeExecutor(server.ws, executor_id="A", version="v1").connect()
        await until(lambda: len(executors(server)) == 3)
        a.abort()
        recovery = (await b.wait_for("recovery", timeout=10))[0]
        assert recovery["executor_ids"] == ["A"]
        exist = (await b.wait_for("exist_pending_workflows"))[0]
        assert (exist["executor_id"], exist["application_version"]) == ("A", "v1")
        await until(lambda: "executor.deleted" in actions(server, "A"))  # A recovered and gone (not merely not projected yet)
        assert actions(server, "A") == ["executor.connected", "executor.disconnected", "executor.declared_dead",
                                        "recovery.dispatched", "recovery.confirmed", "executor.deleted"]
        assert [r["type"] for r in other.requests] == ["executor_info"]  # never another version
        history = api(server, "GET", "/v2/orgs/local/apps/app/executors/A/history").json()
        assert [h["type"] for h in history][-1] == "Deleted"
        await b.close()
        await other.close()

    asyncio.run(main())


def test_nothing_pending_is_confirmed_without_a_recovery_message(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        b = await FakeExecutor(server.ws, executor_id="B", pending=False).connect()
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        a.abort()
        await until(lambda: "executor.deleted" in actions(server, "A"))  # A recovered and gone (not merely not projected yet)
        assert [r["type"] for r in b.requests] == ["executor_info", "exist_pending_workflows"]
        confirmed = [x for x in audit(server, executorId="A") if x["action"] == "recovery.confirmed"]
        assert confirmed[0]["detail"]["pendingFound"] is False
        await b.close()

    asyncio.run(main())


def test_failed_recovery_is_retried_on_another_candidate(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        bad = await FakeExecutor(server.ws, executor_id="B1", recovery_success=False, style="typescript").connect()
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        a.abort()
        await bad.wait_for("recovery", timeout=15)  # the only candidate first (ties are not broken by name)
        good = await FakeExecutor(server.ws, executor_id="B2").connect()
        await until(lambda: "executor.deleted" in actions(server, "A"), timeout=15)  # A recovered and gone (not merely not projected yet)
        acts = actions(server, "A")
        assert acts.count("recovery.dispatched") == 2 and acts.count("recovery.failed") == 1
        assert acts[-2:] == ["recovery.confirmed", "executor.deleted"]
        assert any(r["type"] == "recovery" for r in bad.requests)
        assert any(r["type"] == "recovery" for r in good.requests)
        await bad.close()
        await good.close()

    asyncio.run(main())


def test_silent_target_times_out_and_another_recovers(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        mute = await FakeExecutor(server.ws, executor_id="B1").connect()
        mute.answer = False  # keeps its socket (and its pongs) but never answers a request
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        a.abort()
        await mute.wait_for("exist_pending_workflows", timeout=15)  # the only candidate first
        good = await FakeExecutor(server.ws, executor_id="B2").connect()
        await until(lambda: "executor.deleted" in actions(server, "A"), timeout=20)  # A recovered and gone (not merely not projected yet)
        failed = [x for x in audit(server, executorId="A") if x["action"] == "recovery.failed"]
        assert failed and "no answer within" in failed[0]["detail"]["reason"]
        await mute.close()
        await good.close()

    asyncio.run(main())


def test_version_skew_waits_then_recovers_when_the_version_appears(server: RelayServer) -> None:
    set_grace(server, 1)

    async def main() -> None:
        v2 = await FakeExecutor(server.ws, executor_id="B", version="v2").connect()
        a = await FakeExecutor(server.ws, executor_id="A", version="v1").connect()
        a.abort()
        await until(lambda: executors(server).get("A", {}).get("status") == "DEAD")
        await until(lambda: "recovery.deferred" in actions(server, "A"))
        deferred = [x for x in audit(server, executorId="A") if x["action"] == "recovery.deferred"][0]
        assert "v1" in deferred["detail"]["reason"]
        await asyncio.sleep(1.0)  # a window in which a wrong dispatch (to the v2 executor) would have happened
        assert [r["type"] for r in v2.requests] == ["executor_info"]
        v1 = await FakeExecutor(server.ws, executor_id="C", version="v1").connect()
        await v1.wait_for("recovery")
        await until(lambda: "executor.deleted" in actions(server, "A"))  # A recovered and gone (not merely not projected yet)
        await v1.close()
        await v2.close()

    asyncio.run(main())


def test_open_but_silent_socket_is_disconnected_within_the_ping_wait(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        await until(lambda: executors(server).get("A"))
        frozen_at = time.time()
        a.freeze()
        # Relay's own record of the disconnect, not when this test saw it: the read model and polling lag do not count
        gone = await until(lambda: [x for x in audit(server, executorId="A") if x["action"] == "executor.disconnected"],
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
        await until(lambda: len(audit(server, executorId="A")) == 2, what="both connections recorded")
        await asyncio.sleep(2.0)  # longer than the grace: nothing may be declared dead
        assert executors(server)["A"]["status"] == "HEALTHY"
        entries = audit(server, executorId="A")
        assert [x["action"] for x in entries] == ["executor.connected", "executor.connected"]
        assert entries[1]["detail"]["supersededConnectionId"] == entries[0]["detail"]["connectionId"]
        await new.close()

    asyncio.run(main())


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
            x["detail"]["kind"] for x in audit(server, app="app") if x["action"] == "protocol.violation"})
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


def test_retention_carries_cutoffs_from_relays_clock(tmp_path, store_url) -> None:
    s = RelayServer(tmp_path, args=["--database-url", store_url],
                    env={**FAST, "RELAY_RETENTION_INTERVAL_SECS": "1"}).start()
    try:
        assert api(s, "PUT", "/v2/orgs/local/apps/app").status_code == 204
        r = api(s, "PATCH", "/v2/orgs/local/apps/app",
                json={"gcTimeThresholdMs": 86_400_000, "globalTimeoutMs": 3_600_000, "gcRowsThreshold": 5000})
        assert r.status_code == 204

        async def main() -> None:
            a = await FakeExecutor(s.ws, executor_id="A", style="typescript").connect()
            msg = (await a.wait_for("retention", timeout=10))[0]
            now_ms = time.time() * 1000
            body = msg["body"]
            assert set(body) == {"gc_cutoff_epoch_ms", "gc_rows_threshold", "gc_batch_size", "timeout_cutoff_epoch_ms"}
            assert abs(body["gc_cutoff_epoch_ms"] - (now_ms - 86_400_000)) < 5_000
            assert abs(body["timeout_cutoff_epoch_ms"] - (now_ms - 3_600_000)) < 5_000
            assert body["gc_rows_threshold"] == 5000 and body["gc_batch_size"] is None
            await until(lambda: any(x["action"] == "retention.answered" for x in audit(s, app="app")))
            sent = [x for x in audit(s, app="app") if x["action"] == "retention.dispatched"][0]
            assert sent["detail"]["targetExecutorId"] == "A"
            assert sent["detail"]["timeoutCutoffEpochMs"] == body["timeout_cutoff_epoch_ms"]
            await a.close()

        asyncio.run(main())
    finally:
        s.stop()


# ------------------------------------------------ one recovery deadline (hub level)


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _hub_with_target(clock: _Clock) -> tuple[Any, Any, list[dict[str, Any]], list[Any]]:
    """A hub (no store) with one registered target connection whose frames are recorded."""
    from relay_es.adapters.hub import Connection, Hub

    outcomes: list[Any] = []
    frames: list[dict[str, Any]] = []

    class PM:
        def recovery_answered(self, outcome: Any) -> None:
            outcomes.append(outcome)

    async def send(message: dict[str, Any]) -> None:
        frames.append(json.loads(message["text"]))

    hub = Hub(None, owner="test", response_timeout=30.0, monotonic=clock)  # type: ignore[arg-type]
    hub.pm = PM()  # type: ignore[assignment]
    conn = Connection(id="c1", org="local", app="app", peer="127.0.0.1:1", token=None, send_message=send)
    req = json.loads(conn.session.open())
    conn.session.receive(json.dumps({"type": "executor_info", "request_id": req["request_id"],
                                     "executor_id": "T", "application_version": "v1"}))
    conn.executor_id = "T"
    hub.by_executor[("local", "app", "T")] = conn
    return hub, conn, frames, outcomes


def _request(deadline: float) -> Any:
    from relay_es.engine.process_manager import RecoveryRequest

    return RecoveryRequest(request_id="r1", org="local", app="app", dead_executor_id="D", app_version="v1",
                           target_executor_id="T", target_connection_id="c1", target_owner="test", deadline=deadline)


async def _answer_exist_when_asked(hub: Any, conn: Any, frames: list[dict[str, Any]], before: Any) -> None:
    while not frames:
        await asyncio.sleep(0.001)
    ask = frames[-1]
    assert ask["type"] == "exist_pending_workflows"
    before()
    for ev in conn.session.receive(json.dumps({"type": "exist_pending_workflows", "request_id": ask["request_id"],
                                               "exist": True, "error_message": None})):
        await hub._on_event(conn, ev)


@pytest.mark.parametrize("how", ["deadline_passed", "expired_by_the_process_manager"])
def test_no_recovery_is_sent_after_the_attempts_deadline(how: str) -> None:
    """Invariant: the hub sends exist_pending_workflows and recovery within the one
    deadline the process manager gave the attempt (RecoveryRequest.deadline):
    an exist answer that comes after it -- or after the process manager expired
    the attempt -- never leads to a recovery frame; the outcome is the timeout.
    (Before: each call had its own response timeout, so a recovery could go out
    after the process manager had recorded the attempt as failed.)"""
    clock = _Clock()

    async def main() -> tuple[list[dict[str, Any]], list[Any]]:
        hub, conn, frames, outcomes = _hub_with_target(clock)
        try:
            def late() -> None:
                if how == "deadline_passed":
                    clock.t += 31.0
                else:
                    hub.expire("r1")  # from the process manager's timer, just before it records the failure

            answering = asyncio.ensure_future(_answer_exist_when_asked(hub, conn, frames, late))
            await asyncio.wait_for(hub._recover(_request(deadline=clock.t + 30.0)), 10)
            await answering
            return frames, outcomes
        finally:
            hub.pool.shutdown(wait=False)

    frames, outcomes = asyncio.run(main())
    assert [f["type"] for f in frames] == ["exist_pending_workflows"]
    assert len(outcomes) == 1 and not outcomes[0].ok and "no answer within" in (outcomes[0].reason or "")


def test_an_answer_in_time_sends_the_recovery() -> None:
    clock = _Clock()

    async def main() -> tuple[list[dict[str, Any]], list[Any]]:
        hub, conn, frames, outcomes = _hub_with_target(clock)
        try:
            async def target() -> None:
                await _answer_exist_when_asked(hub, conn, frames, lambda: None)
                while len(frames) < 2:
                    await asyncio.sleep(0.001)
                for ev in conn.session.receive(json.dumps({"type": "recovery", "request_id": frames[1]["request_id"],
                                                           "success": True})):
                    await hub._on_event(conn, ev)

            answering = asyncio.ensure_future(target())
            await asyncio.wait_for(hub._recover(_request(deadline=clock.t + 30.0)), 10)
            await answering
            return frames, outcomes
        finally:
            hub.pool.shutdown(wait=False)

    frames, outcomes = asyncio.run(main())
    assert [f["type"] for f in frames] == ["exist_pending_workflows", "recovery"]
    assert len(outcomes) == 1 and outcomes[0].ok and outcomes[0].pending_found


def test_the_socket_writes_a_guarded_frame_only_if_the_guard_allows() -> None:
    """The last check sits in the socket itself (uvicorn_ws): between the guard's
    answer and the write there is no await, and an expiry waits for the write."""
    import threading

    from relay_es.adapters.hub import Guard
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


def test_executor_ids_remembered_per_key_are_forgotten_once_deleted() -> None:
    """Keys are the client's choice in development mode: the hub's table of
    executor ids per key (for RELAY_MAX_EXECUTORS_PER_KEY) drops ids once the
    process manager no longer lists them, and keys with none left."""
    from relay_es.adapters.hub import Hub

    listed: set[str] = set()

    class PM:
        def is_listed(self, stream_id: str) -> bool:
            return stream_id in listed

        def listed(self, org: str, app: str) -> int:
            return len(listed)

    async def main() -> None:
        hub = Hub(None, owner="test", response_timeout=5.0)  # type: ignore[arg-type]
        hub.pm = PM()  # type: ignore[assignment]
        try:
            from relay_es.adapters.hub import Connection
            from relay_es.aggregates.executor import executor_stream_id

            for i in range(100):
                conn = Connection(id=f"c{i}", org="local", app="app", peer="p", token=None,
                                  send_message=None, key_id=("key", "local", f"random-{i}"))  # type: ignore[arg-type]
                assert hub._over_limit(conn, f"E{i}") is None
                if i < 10:
                    listed.add(str(executor_stream_id("local", "app", f"E{i}")))
            assert hub.sweep_keys() == 10  # 90 ids never recorded (or deleted): gone with their keys
            listed.clear()
            assert hub.sweep_keys() == 0
        finally:
            hub.pool.shutdown(wait=False)

    asyncio.run(main())


@pytest.mark.parametrize("path", ["/websocket/app/relay_secretsecret", "/WebSocket/app/relay_secretsecret",
                                  "/%57ebsocket/app/relay_secretsecret", "/x/WEBSOCKET/app/relay_secretsecret"])
def test_a_key_in_a_refused_path_never_reaches_the_log_however_spelt(path: str) -> None:
    from relay_es.adapters.hub import scrub

    assert "secretsecret" not in scrub(path) and scrub(path).endswith("/app/***")


def test_a_refusal_naming_no_org_is_not_audited() -> None:
    """A key no token ever had names no org: counted and logged, never written into an
    audit log (not even development mode's "local")."""
    from relay_es.adapters.admission import Refused
    from relay_es.adapters.hub import Hub

    recorded: list[tuple[Any, ...]] = []

    class Store:
        def record_refusal(self, org: str, **kw: Any) -> None:
            recorded.append((org, kw["app"], kw["status"]))

    async def main() -> None:
        hub = Hub(Store(), owner="test", response_timeout=5.0)  # type: ignore[arg-type]
        try:
            await hub._audit_refusal("app", "10.0.0.1", Refused(401, "Unauthorized", "unknown key"))
            await hub._audit_refusal("app", "10.0.0.1", Refused(403, "Forbidden", "not covered", org="acme"))
        finally:
            hub.pool.shutdown(wait=False)

    asyncio.run(main())
    assert recorded == [("acme", "app", 403)]


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
        hub = Hub(Away(), owner="test", response_timeout=5.0,  # type: ignore[arg-type]
                  limits=ResourceLimits(queued_transitions=2))
        hub.gate.known_apps.add(("local", "app"))
        try:
            seen = [await handshake(hub)]
            hub.outbox.submit("a", "op-a")
            seen.append(await handshake(hub))
            hub.outbox.submit("b", "op-b")
            seen.append(await handshake(hub))
            return seen
        finally:
            hub.pool.shutdown(wait=False)

    assert asyncio.run(main()) == [101, 101, 503]


def test_deleting_an_application_closes_its_executors_with_4007(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, executor_id="A").connect()
        b = await FakeExecutor(server.ws, executor_id="B").connect()
        other = await FakeExecutor(server.ws, app="other", executor_id="O").connect()
        await until(lambda: len(executors(server)) == 2)
        assert api(server, "DELETE", "/v2/orgs/local/apps/app").status_code == 204
        assert await a.closed() == 4007 and await b.closed() == 4007
        reasons = await until(lambda: [x["detail"]["reason"] for x in audit(server, executorId="A")
                                       if x["action"] == "executor.disconnected"])
        assert reasons == ["app_deleted"]
        assert other.ws is not None and other.ws.close_code is None  # another application's executor stays
        await other.close()

    asyncio.run(main())
