"""The hub's dispatcher (``relay_es.adapters.hub.dispatcher``): recovery and retention
conversations, on the wire against a real ``relay serve`` (both stores), and at hub level
with a fake clock for the one recovery deadline."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any

import pytest

from tests.adapters.hub.support import FAST, actions, build, registered, set_grace
from tests.fake_executor import FakeExecutor
from tests.rest_client import events, listing as executors, rest as api
from tests.server import RelayServer
from tests.support import until


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
        confirmed = [x for x in events(server, executorId="A") if x["action"] == "recovery.confirmed"]
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
        failed = [x for x in events(server, executorId="A") if x["action"] == "recovery.failed"]
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
        deferred = [x for x in events(server, executorId="A") if x["action"] == "recovery.deferred"][0]
        assert "v1" in deferred["detail"]["reason"]
        await asyncio.sleep(1.0)  # a window in which a wrong dispatch (to the v2 executor) would have happened
        assert [r["type"] for r in v2.requests] == ["executor_info"]
        v1 = await FakeExecutor(server.ws, executor_id="C", version="v1").connect()
        await v1.wait_for("recovery")
        await until(lambda: "executor.deleted" in actions(server, "A"))  # A recovered and gone (not merely not projected yet)
        await v1.close()
        await v2.close()

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
            await until(lambda: any(x["action"] == "retention.answered" for x in events(s, app="app")))
            sent = [x for x in events(s, app="app") if x["action"] == "retention.dispatched"][0]
            assert sent["detail"]["targetExecutorId"] == "A"
            assert sent["detail"]["timeoutCutoffEpochMs"] == body["timeout_cutoff_epoch_ms"]
            await a.close()

        asyncio.run(main())
    finally:
        s.stop()


def test_a_graceful_stop_during_a_recovery_records_nothing_and_the_next_relay_sends_it_again(tmp_path,
                                                                                           store_url) -> None:
    """SIGTERM while a recovery waits for its target's answer: the shutdown closed the target's socket and
    the attempt was recorded failed ('target connection lost'), the healthy target blamed and a failed
    attempt counted (ADR 3: a graceful shutdown records nothing). Now it stays outstanding, as after a
    kill, and the restarted Relay sends it again."""
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.adapters.clock import SystemClock
    from relay_es.engine.service import Relay

    env = {**FAST, "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "5"}  # longer than the stop takes
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=env).start()
    try:
        set_grace(s, 1)

        async def before_the_stop() -> None:
            b = await FakeExecutor(s.ws, executor_id="B").connect()
            b.answer = False  # keeps its socket but takes its time
            a = await FakeExecutor(s.ws, executor_id="A").connect()
            a.abort()
            await b.wait_for("exist_pending_workflows", timeout=15)  # the recovery is in flight
            await asyncio.to_thread(s.stop)
            await b.close()

        asyncio.run(before_the_stop())
        relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
        try:
            history = [type(e).__name__ for e in relay.stream(relay.get_executor("local", "app", "A").id)]
        finally:
            relay.close()
        assert history[-2:] == ["DeclaredDead", "RecoveryDispatched"]  # outstanding, as after a kill

        s = RelayServer(tmp_path, args=["--database-url", store_url], env=env).start()

        async def after_the_restart() -> None:
            b = await FakeExecutor(s.ws, executor_id="B").connect()
            await b.wait_for("recovery", timeout=20)  # sent again
            await until(lambda: "executor.deleted" in actions(s, "A"), timeout=15)
            await b.close()

        asyncio.run(after_the_restart())
        failed = [x["detail"]["reason"] for x in events(s, executorId="A") if x["action"] == "recovery.failed"]
        assert failed and not any("connection lost" in r for r in failed), failed
    finally:
        s.stop()


# ------------------------------------------------ one recovery deadline (hub level)


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _hub_with_target(clock: _Clock) -> tuple[Any, Any, list[dict[str, Any]], list[Any]]:
    """The hub's parts (no store) with one registered target connection whose frames are
    recorded; the outcomes are what the dispatcher put in the process manager's inbox."""
    frames: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        frames.append(json.loads(message["text"]))

    parts = build(monotonic=clock)
    conn = registered(send)
    parts.registry.add(conn)
    parts.registry.claim(("local", "app", "T"), conn)
    return parts, conn, frames, Outcomes(parts.answers)


class Outcomes:
    """The answers inbox, read as a list."""

    def __init__(self, answers: Any) -> None:
        self.answers = answers
        self.taken: list[Any] = []

    def _all(self) -> list[Any]:
        self.taken += self.answers.take(100)
        return self.taken

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i: int) -> Any:
        return self._all()[i]



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
    observed: list[tuple[str, str]] = []

    async def main() -> tuple[list[dict[str, Any]], list[Any]]:
        parts, conn, frames, outcomes = _hub_with_target(clock)
        hub, dispatcher = parts.hub, parts.dispatcher
        dispatcher.observe = lambda kind, outcome, took: observed.append((kind, outcome))
        try:
            def late() -> None:
                if how == "deadline_passed":
                    clock.t += 31.0
                else:
                    dispatcher.expire("r1")  # from the process manager's timer, just before it records the failure

            answering = asyncio.ensure_future(_answer_exist_when_asked(hub, conn, frames, late))
            await asyncio.wait_for(dispatcher._recover(_request(deadline=clock.t + 30.0)), 10)
            await answering
            return frames, outcomes
        finally:
            parts.close()

    frames, outcomes = asyncio.run(main())
    assert [f["type"] for f in frames] == ["exist_pending_workflows"]
    assert len(outcomes) == 1 and not outcomes[0].ok and "no answer within" in (outcomes[0].reason or "")
    assert observed[-1][1] == "timeout" and ("recovery", "ok") not in observed


def test_an_answer_in_time_sends_the_recovery() -> None:
    clock = _Clock()
    observed: list[tuple[str, str]] = []

    async def main() -> tuple[list[dict[str, Any]], list[Any]]:
        parts, conn, frames, outcomes = _hub_with_target(clock)
        hub, dispatcher = parts.hub, parts.dispatcher
        dispatcher.observe = lambda kind, outcome, took: observed.append((kind, outcome))
        try:
            async def target() -> None:
                await _answer_exist_when_asked(hub, conn, frames, lambda: None)
                while len(frames) < 2:
                    await asyncio.sleep(0.001)
                for ev in conn.session.receive(json.dumps({"type": "recovery", "request_id": frames[1]["request_id"],
                                                           "success": True})):
                    await hub._on_event(conn, ev)

            answering = asyncio.ensure_future(target())
            await asyncio.wait_for(dispatcher._recover(_request(deadline=clock.t + 30.0)), 10)
            await answering
            return frames, outcomes
        finally:
            parts.close()

    frames, outcomes = asyncio.run(main())
    assert [f["type"] for f in frames] == ["exist_pending_workflows", "recovery"]
    assert len(outcomes) == 1 and outcomes[0].ok and outcomes[0].pending_found
    assert observed == [("exist_pending_workflows", "ok"), ("recovery", "ok")]  # the dispatch latency


def test_retention_goes_to_the_newest_registered_connection_and_is_recorded() -> None:
    """The process manager's retention timer hands a plan over from its own thread: it is
    recorded, sent to the application's newest registered connection (not a closed one, not
    another application's), and its answer recorded. An application with no connection here
    gets nothing, and nothing is recorded."""
    import threading
    from datetime import datetime, timezone

    from relay_es.protocol.retention import RetentionPlan

    recorded: list[tuple[Any, ...]] = []

    class Store:
        def record_retention_plan(self, org: str, app: str, **kw: Any) -> Any:
            recorded.append(("dispatched", org, app, kw["target_executor_id"], kw["plan"].gc_rows_threshold))
            return kw["plan"]

        def record_retention_answered(self, org: str, app: str, **kw: Any) -> None:
            recorded.append(("answered", org, app, kw["success"], kw["error"]))

    frames: dict[str, list[dict[str, Any]]] = {}

    def sender(name: str) -> Any:
        frames[name] = []

        async def send(message: dict[str, Any]) -> None:
            frames[name].append(json.loads(message["text"]))

        return send

    plan = RetentionPlan(gc_cutoff=datetime(2026, 1, 1, tzinfo=timezone.utc), gc_rows_threshold=5000,
                         timeout_cutoff=None)

    async def main() -> None:
        parts = build(Store())
        parts.dispatcher.start(asyncio.get_running_loop())
        old, new, gone = registered(sender("old"), "A", id="c1"), registered(sender("new"), "B", id="c2"), \
            registered(sender("gone"), "C", id="c3")
        other = registered(sender("other"), "O", id="c4", app="other")
        old.connected_at, new.connected_at, gone.connected_at, other.connected_at = 1.0, 2.0, 3.0, 4.0
        gone.closed = True
        for c in (old, new, gone, other):
            parts.registry.add(c)
        try:
            threads = [threading.Thread(target=parts.dispatcher.send_retention, args=("local", app, plan))
                       for app in ("app", "nobody")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            await until(lambda: frames["new"], what="the retention message sent")
            ask = frames["new"][0]
            assert ask["type"] == "retention" and ask["body"]["gc_rows_threshold"] == 5000
            for ev in new.session.receive(json.dumps({"type": "retention", "request_id": ask["request_id"],
                                                      "success": True})):
                await parts.hub._on_event(new, ev)
            await until(lambda: len(recorded) == 2, what="the answer recorded")
        finally:
            parts.dispatcher.stop()
            parts.close()
        assert frames["old"] == frames["gone"] == frames["other"] == []

    asyncio.run(main())
    assert recorded == [("dispatched", "local", "app", "B", 5000), ("answered", "local", "app", True, None)]


def socket_states() -> list[tuple[bool, bool]]:
    """(``is_connected``, ``is_gone``) of executor T: with no socket, with a registered open one,
    once it closed, and once it closed with a transition waiting in the outbox."""

    async def main() -> list[tuple[bool, bool]]:
        parts = build()
        try:
            def ask() -> tuple[bool, bool]:
                return (parts.dispatcher.is_connected("local", "app", "T"),
                        parts.dispatcher.is_gone("local", "app", "T"))

            seen = [ask()]

            async def send(message: dict[str, Any]) -> None:
                pass

            conn = registered(send)
            parts.registry.add(conn)
            parts.registry.claim(("local", "app", "T"), conn)
            seen.append(ask())
            conn.closed = True
            seen.append(ask())
            parts.outbox._queues[("local", "app", "T")] = deque(["op"])
            seen.append(ask())
            return seen
        finally:
            parts.close()

    return asyncio.run(main())


def test_an_executor_is_connected_while_its_socket_is_registered_or_its_transitions_wait() -> None:
    """``is_connected``: a registered open socket, or transitions still on their way to the
    store (the store's view is stale): such an executor is never declared dead."""
    assert [connected for connected, _ in socket_states()] == [False, True, False, True]


def test_an_executor_is_gone_without_a_registered_open_socket_whatever_waits_in_the_outbox() -> None:
    """``is_gone``: no registered, open socket here. A peer whose socket closed is no recovery
    target even while its Disconnected waits in the outbox or in the log (unlike ``is_connected``,
    which keeps a deadline from firing while the store's view is stale)."""
    assert [gone for _, gone in socket_states()] == [True, False, True, True]


def test_the_process_manager_reads_how_many_sockets_the_hub_admitted() -> None:
    """``admissions``: every executor socket the hub admitted since start, registered or not,
    and counted for good (the settle window's pace after a restart). The process manager
    finds it by name (:class:`relay_es.engine.recovery.Dispatcher`); without it the window
    would go by the log alone."""

    async def main() -> list[int]:
        parts = build()
        try:
            async def send(message: dict[str, Any]) -> None:
                pass

            seen = [parts.dispatcher.admissions()]
            a, b = registered(send, "A", id="a"), registered(send, "B", id="b")
            parts.registry.add(a)
            parts.registry.add(b)
            seen.append(parts.dispatcher.admissions())
            parts.registry.remove(a)
            seen.append(parts.dispatcher.admissions())
            return seen
        finally:
            parts.close()

    assert asyncio.run(main()) == [0, 2, 2]


def _retention_log(caplog: Any) -> list[tuple[str, str, bool]]:
    """What the dispatcher logged: (level, message, with a traceback)."""
    return [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
            if r.name == "relay_es.adapters.hub.dispatcher"]


def test_retention_rounds_the_store_fails_are_one_outage_for_every_application_not_a_traceback_each(
        caplog: Any) -> None:
    """A full disk failed every application's retention round every interval with a traceback each (150
    tracebacks in a 30 s outage at a 1 s interval): told as an outage now, a line as it starts, one a
    minute with a count, one as it ends; a bug is still logged with its traceback."""
    import logging
    import sqlite3
    from datetime import datetime, timezone

    from relay_es.protocol.retention import RetentionPlan

    clock = _Clock()
    failure: list[Exception | None] = [sqlite3.OperationalError("database or disk is full")]

    class Store:
        def record_retention_plan(self, org: str, app: str, **kw: Any) -> Any:
            if failure[0] is not None:
                raise failure[0]
            return kw["plan"]

        def record_retention_answered(self, org: str, app: str, **kw: Any) -> None:
            if failure[0] is not None:
                raise failure[0]

    async def send(message: dict[str, Any]) -> None:
        pass

    plan = RetentionPlan(gc_cutoff=datetime(2026, 1, 1, tzinfo=timezone.utc), gc_rows_threshold=5000,
                         timeout_cutoff=None)
    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.dispatcher")

    async def main() -> None:
        parts = build(Store(), monotonic=clock)
        conns = [registered(send, f"E{i}", id=f"c{i}", app=f"app{i}") for i in range(5)]
        for c in conns:
            c.closed = True  # a round recorded is sent to no one: its answer is recorded at once
        try:
            for _ in range(30):  # a round a second for each application
                for c in conns:
                    await parts.dispatcher._send_retention(c, plan)
                clock.t += 1
            said = ("retention failed recording a round for local/app0 (not sent) on the store (OperationalError: "
                    "database or disk is full); tried again next round")
            assert _retention_log(caplog) == [("WARNING", said, False)]
            clock.t += 30
            await parts.dispatcher._send_retention(conns[0], plan)
            assert _retention_log(caplog)[1:] == [("WARNING", said + " (149 more failures since the last line)",
                                                   False)]
            failure[0] = None  # the store is back
            await parts.dispatcher._send_retention(conns[1], plan)
            assert _retention_log(caplog)[2:] == [
                ("INFO", "retention records on the store again (0 failures since the last line)", False)]
            caplog.clear()
            failure[0] = RuntimeError("a bug")
            await parts.dispatcher._send_retention(conns[2], plan)
            assert _retention_log(caplog) == [
                ("ERROR", "could not record a retention round for local/app2; not sending it", True)]
        finally:
            parts.close()

    asyncio.run(main())
