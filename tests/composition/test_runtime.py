"""The composition root (``relay_es.composition.runtime``) on SQLite: every part is built with
what it needs, in dependency order, and none is wired afterwards; a runtime starts, stops,
and gives the store's lease back when it closes."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from relay_es.adapters.hub import AuthGate, Gate
from relay_es.adapters.lease import LeaseHeld
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from relay_es.domain import defaults


def settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path}/relay.db", **kw)  # type: ignore[arg-type]


def test_each_part_is_built_with_the_parts_it_works_with(tmp_path: Path) -> None:
    rt = Runtime(settings(tmp_path, retention_interval=timedelta(seconds=42),
                          recovery_response_timeout=timedelta(seconds=7)))
    try:
        # the process manager and the hub's dispatcher share one answers inbox, which wakes the worker
        assert rt.pm.dispatcher is rt.dispatcher
        assert rt.dispatcher.answers is rt.pm.answers
        assert rt.pm.wake == rt.pm_worker.wake
        assert not rt.pm_worker._wake.is_set()
        rt.pm.answers.put(object())  # type: ignore[arg-type]
        assert rt.pm_worker._wake.is_set()
        # the endpoint and the dispatcher share the sockets and the outbox; the roster is the process manager
        assert rt.hub.registry is rt.dispatcher.registry is rt.registry
        assert rt.hub.outbox is rt.dispatcher.outbox is rt.outbox
        assert rt.hub.quotas.roster is rt.pm
        assert rt.hub.gate is rt.gate and type(rt.gate) is Gate
        assert rt.hub.pool is rt.pool
        # the REST operations' calls go over the same sockets, versions ranked by the process manager's rows
        assert rt.calls.registry is rt.registry and rt.calls.first_seen == rt._first_registered
        from relay_es.composition.asgi import rest_context

        assert rest_context(rt).calls is rt.calls
        # timing from the settings (their defaults from relay_es.domain.defaults)
        assert rt.pm.retention_interval == 42.0
        assert rt.dispatcher.response_timeout == 7.0
        assert rt.hub.handshake_timeout == defaults.HANDSHAKE_TIMEOUT.total_seconds()
        assert rt.dispatcher.monotonic == rt.clock.monotonic
        assert not rt.started
    finally:
        rt.close()


def test_auth_mode_admits_with_the_auth_gate(tmp_path: Path) -> None:
    rt = Runtime(settings(tmp_path, auth=True))
    try:
        assert isinstance(rt.gate, AuthGate) and rt.hub.gate is rt.gate and rt.gate.credentials is not None
    finally:
        rt.close()


def test_a_key_the_read_models_do_not_hold_before_the_start_is_unavailable_not_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A start on empty read models fills them in processes before the process manager starts (up to a
    minute on a large store), and serves meanwhile: a live key the tokens read model does not hold yet
    was refused (401) by every request; it is a 503 (try again) until the start is done."""
    from relay_es.adapters import authz
    from relay_es.composition import runtime

    monkeypatch.setattr(runtime, "CATCH_UP_SECS", 0.05)
    rt = Runtime(settings(tmp_path, auth=True))
    try:
        secret = rt.relay.create_token("acme", "ci")  # in the store, not yet in the read models
        credentials = rt.gate.credentials  # type: ignore[attr-defined]
        with pytest.raises(authz.StoreUnavailable, match="starting"):
            credentials.identify(secret)
        with pytest.raises(authz.StoreUnavailable, match="starting"):
            credentials.identify("relay_unknown")  # no key is refused before the start: none can be looked up
        rt._pm_started.set()  # started: the read models follow the log
        rt.runner.catch_up()
        assert credentials.check(secret) is not None
        assert credentials.check("relay_unknown") is None
    finally:
        rt.close()


def test_a_runtime_starts_and_stops_and_closing_gives_the_lease_back(tmp_path: Path) -> None:
    lost: list[bool] = []
    rt = Runtime(settings(tmp_path), on_lease_lost=lambda: lost.append(True))
    with pytest.raises(LeaseHeld):
        Runtime(settings(tmp_path))  # one instance leads a store

    async def main() -> None:
        rt.start(asyncio.get_running_loop())
        assert rt.started and rt.pm_worker.is_alive() and rt.projection_worker.is_alive()
        assert rt.hub.loop is rt.dispatcher.loop is asyncio.get_running_loop()
        rt.begin_shutdown()
        assert rt.hub.shutting_down
        await rt.stop()

    asyncio.run(main())
    assert not rt.pm_worker.is_alive() and not rt.projection_worker.is_alive()
    assert not lost
    again = Runtime(settings(tmp_path))  # the lease was released by stop (close)
    again.close()


def test_the_collector_worker_puts_cpython_s_pauses_on_metrics(tmp_path: Path) -> None:
    """Each collector tick hands the collections its hook timed to ``relay_gc_pause_seconds``
    (the hook itself: tests/adapters/test_collector.py)."""
    from prometheus_client.parser import text_string_to_metric_families

    rt = Runtime(settings(tmp_path))
    try:
        rt.collector._on_gc("start", {"generation": 1})
        rt.collector._on_gc("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
        rt._collect()
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(rt.metrics.render().decode()) for s in f.samples}
        assert got[("relay_gc_pause_seconds_count", (("generation", "1"),))] == 1.0
        assert rt.collector.pauses() == []  # handed over once
    finally:
        rt.close()


def test_a_worker_counts_its_thread_s_cpu_a_failing_tick_included() -> None:
    """``relay_worker_cpu_seconds_total``: each worker adds its thread's CPU in ``fn`` to ``cpu_seconds``,
    however ``fn`` ends; the runtime exposes every worker's."""
    import time

    from relay_es.composition.runtime import Worker

    def busy() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        w.stop()
        raise RuntimeError("a failing tick")

    w = Worker("relay-test", busy, lambda: 0.0)
    w.start()
    w.join(10)
    assert not w.is_alive() and w.errors == 1
    assert w.cpu_seconds >= 0.05


def test_a_worker_failing_on_the_store_says_so_in_one_line_a_minute_and_a_bug_each_time(
        caplog: pytest.LogCaptureFixture) -> None:
    """A store that is away fails every tick (every half second): one warning line, no traceback, then
    one a minute with the count; the run's end is told; a bug keeps its traceback every time."""
    import sqlite3

    from relay_es.adapters.failures import STORE_ERROR_LOG_SECS
    from relay_es.composition.runtime import Worker

    now = [1000.0]
    w = Worker("relay-test", lambda: None, lambda: 0.0, monotonic=lambda: now[0])
    caplog.set_level(logging.INFO, logger="relay_es.composition.runtime")
    away = sqlite3.OperationalError("database is locked")
    for _ in range(5):
        w.failed(away)
        now[0] += 0.5
    now[0] += STORE_ERROR_LOG_SECS
    w.failed(away)
    w.succeeded()
    w.failed(RuntimeError("a bug"))
    w.failed(RuntimeError("a bug"))
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("WARNING", "relay-test failed on the store (OperationalError: database is locked); retrying", False),
        ("WARNING", "relay-test failed on the store (OperationalError: database is locked); retrying "
                    "(4 more failures since the last line)", False),
        ("INFO", "relay-test works on the store again (0 failures since the last line)", False),
        ("ERROR", "relay-test failed; retrying", True),
        ("ERROR", "relay-test failed; retrying", True),
    ]
    assert w.errors == 8


def test_a_worker_held_back_does_not_say_it_works_again(caplog: pytest.LogCaptureFixture) -> None:
    """The process manager's tick does nothing while the lease is not confirmed (the store away):
    that is not the store working again."""
    import sqlite3

    from relay_es.composition.runtime import HELD, Worker

    results: list[object] = [sqlite3.OperationalError("unable to open database file"), HELD, HELD, None]

    def tick() -> object:
        result = results.pop(0)
        if not results:
            w.stop()  # the last tick: the worker ends after it
        if isinstance(result, Exception):
            raise result
        return result

    w = Worker("relay-test", tick, lambda: 0.0, monotonic=lambda: 0.0)
    caplog.set_level(logging.INFO, logger="relay_es.composition.runtime")
    w.start()
    w.join(timeout=30)
    assert not w.is_alive() and not results
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "relay-test failed on the store (OperationalError: unable to open database file); retrying"),
        ("INFO", "relay-test works on the store again (0 failures since the last line)"),
    ]


def test_the_runtime_exposes_each_worker_s_cpu(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    rt = Runtime(settings(tmp_path))
    try:
        rt.pm_worker.cpu_seconds = 1.25
        got = {s.labels["worker"]: s.value for f in text_string_to_metric_families(rt.metrics.render().decode())
               if f.name == "relay_worker_cpu_seconds" for s in f.samples}
        assert got == {"projections": 0.0, "process-manager": 1.25, "lease": 0.0, "collector": 0.0}
    finally:
        rt.close()


def test_a_runtime_that_never_started_closes(tmp_path: Path) -> None:
    rt = Runtime(settings(tmp_path))
    rt.close()
    Runtime(settings(tmp_path)).close()


def test_an_executor_is_first_seen_when_the_process_manager_recorded_its_registration(tmp_path: Path) -> None:
    """What ranks application versions for the calls: the ``created_at`` of the executor's
    row (this incarnation's first Connected); None while that is not folded yet."""
    from datetime import datetime, timezone
    from uuid import uuid4

    from relay_es.adapters.hub import Connection
    from relay_es.projections.executors import ExecutorRow

    async def nowhere(message: object) -> None:
        pass

    rt = Runtime(settings(tmp_path))
    try:
        conn = Connection(id="c", org="local", app="app", peer="p", token=None, send_message=nowhere)
        assert rt._first_registered(conn) is None
        conn.stream_id = uuid4()
        assert rt._first_registered(conn) is None
        at = datetime(2026, 1, 1, tzinfo=timezone.utc)
        rt.pm.rows[str(conn.stream_id)] = ExecutorRow(stream_id=str(conn.stream_id), org="local", app="app",
                                                      executor_id="E", version=1, created_at=at)
        assert rt._first_registered(conn) == at.timestamp()
    finally:
        rt.close()


def _store_with_apps(s: Settings, n: int) -> int:
    """``s``'s store with ``n`` applications registered (and no read model folded); its head."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.engine.service import Relay

    relay = Relay(event_store_env(parse_database_url(s.database_url)), clock=SystemClock())
    try:
        for i in range(n):
            relay.register_app("local", f"app{i}")
        return relay.recorder.max_notification_id()
    finally:
        relay.close()


def test_a_start_on_a_log_its_read_models_never_folded_fills_them_in_processes(tmp_path: Path, monkeypatch) -> None:
    """``relay serve`` on an existing store whose read models are empty: before the process manager
    reads the executors table, the read models are filled by a process per share of the streams
    (``fill_at_start``; from 100,000 events, here from one)."""
    from relay_es.adapters.readmodels import rebuild
    from relay_es.projections import NAMES

    s = settings(tmp_path)
    head = _store_with_apps(s, 12)
    filled: list[int] = []

    def fill(*args: object) -> int:
        filled.append(rebuild.fill_at_start(*args, least=1, count=2))  # type: ignore[arg-type]
        return filled[-1]

    monkeypatch.setattr("relay_es.composition.runtime.fill_at_start", fill)
    rt = Runtime(s)
    try:
        assert rt.runner.positions() == dict.fromkeys(NAMES, 0)
        rt._project()  # the projection thread folds nothing before the process manager's start
        assert rt.runner.positions() == dict.fromkeys(NAMES, 0)
        rt.pm.start()  # the process manager's first step
        assert filled == [head]
        assert rt.runner.positions() == dict.fromkeys(NAMES, head)
        with rt.db.read() as cur:
            cur.execute("SELECT COUNT(*) FROM relay_apps")
            assert cur.fetchone()[0] == 12
    finally:
        rt.close()


def test_a_fill_at_start_that_fails_is_tried_once_and_the_server_folds_the_log_itself(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    from relay_es.projections import NAMES

    s = settings(tmp_path)
    head = _store_with_apps(s, 3)
    tried: list[int] = []

    def broken(*args: object) -> int:
        tried.append(1)
        raise RuntimeError("a share process was killed")

    monkeypatch.setattr("relay_es.composition.runtime.fill_at_start", broken)
    rt = Runtime(s)
    try:
        rt.pm.start()
        assert rt.runner.positions() == dict.fromkeys(NAMES, head)  # folded here instead
        assert rt._fill_at_start() == 0  # what a retried start calls: it does not try again
        assert tried == [1]
    finally:
        rt.close()


async def started_with_its_child(rt: Runtime) -> None:
    """``rt`` started on this loop, its read-model process following the log."""
    import time

    rt.start(asyncio.get_running_loop())
    end = time.monotonic() + 30
    while not rt.follower.following:
        assert time.monotonic() < end
        await asyncio.sleep(0.02)


def test_with_a_read_model_process_the_runtime_hands_it_the_log_and_stops_it(tmp_path: Path) -> None:
    """``relay serve``'s runtime (ADR 8): its projection worker starts the child, folds the log itself
    until the child reports, then only wakes it; a stop stops the child."""
    rt = Runtime(settings(tmp_path), projection_process=True)
    assert rt.follower is not None

    async def main() -> None:
        await started_with_its_child(rt)
        process = rt.follower._process

        def not_here(*a: object, **kw: object) -> int:
            raise AssertionError("the server folded while the child follows")

        rt.runner.catch_up = not_here  # type: ignore[method-assign]
        rt.relay.register_app("local", "folded-by-the-child")  # wakes the worker, which wakes the child
        head = rt.relay.recorder.max_notification_id()
        assert await asyncio.to_thread(rt.runner.wait_for, head, 30)
        assert rt.follower.starts == 1 and rt.follower.exits == 0 and rt.follower.failures == 0
        assert rt.projection_worker.errors == 0
        rt.begin_shutdown()
        await rt.stop()
        assert not process.is_alive() and process.exitcode == 0

    asyncio.run(main())


def test_readiness_follows_the_start_the_read_models_a_bug_and_the_shutdown(tmp_path: Path) -> None:
    """``/readyz`` (``Runtime.readiness``): not before the process manager started (it fills the read
    models first), not while they are more than a batch behind, then ready for good -- a storm's lag
    turns nobody away -- until a bug or the shutdown."""
    from relay_es.composition.runtime import READY_LAG

    rt = Runtime(settings(tmp_path))
    try:
        assert rt.readiness() == "starting"
        rt._pm_tick()  # the process manager's first step: it starts
        assert rt.readiness() is None
        rt._ready_once = False  # as if it had started far behind the log
        rt._head = min(rt.runner.reached.values()) + READY_LAG + 1
        assert rt.readiness() == "catching_up"
        rt._head -= 1
        assert rt.readiness() is None
        rt._head += 50 * READY_LAG  # a storm later
        assert rt.readiness() is None
        rt.pm.last_bug = "KeyError: 'x'"
        assert rt.readiness() == "unhealthy"
        rt.pm.last_bug = None
        rt.begin_shutdown()
        assert rt.readiness() == "shutting_down"
    finally:
        rt.close()


def test_readiness_is_store_unavailable_while_the_process_manager_keeps_failing_on_the_store(
        tmp_path: Path, clock) -> None:
    """A store that keeps failing (its tables gone) failed the process manager's every step, and every
    REST read, while /readyz said ready: ten seconds of steps failing on the store, none succeeding, and
    it is ``store_unavailable`` until the next step succeeds. Liveness is not its business."""
    import sqlite3

    from relay_es.engine.process_manager import STORE_UNAVAILABLE_SECS

    rt = Runtime(settings(tmp_path), clock=clock)

    def rename(old: str, new: str) -> None:
        with sqlite3.connect(tmp_path / "relay.db") as db:
            db.execute(f"ALTER TABLE {old} RENAME TO {new}")

    try:
        rt._pm_tick()
        assert rt.readiness() is None
        rename("stored_events", "stored_events_away")
        for _ in range(7):  # the worker's retries, 1.5 s apart
            assert rt.readiness() is None
            with pytest.raises(Exception) as e:
                rt._pm_tick()
            assert rt.relay.is_store_error(e.value), e.value
            clock.advance(1.5)
        assert rt.readiness() == "store_unavailable" and rt.pm.healthy
        rename("stored_events_away", "stored_events")
        rt._pm_tick()
        assert rt.readiness() is None
        assert STORE_UNAVAILABLE_SECS == 10.0
    finally:
        rt.close()


def test_an_event_another_process_wrote_wakes_the_read_model_process_when_waited_for(tmp_path: Path) -> None:
    """A token made by ``relay admin create-token`` and used at once: the tokens' catch-up waits
    for the read models, and the child must be woken for an event this process did not save (its
    own reading of the log is an hour away here)."""
    s = settings(tmp_path)
    rt = Runtime(s, projection_process=True)
    rt.follower.poll_secs = 3600

    async def main() -> None:
        await started_with_its_child(rt)
        _store_with_apps(s, 1)  # another process's write: no listener here heard it
        assert await asyncio.to_thread(rt.wait_for_read_models, 10) is True
        assert await asyncio.to_thread(rt.wait_for_read_models, 10) is None  # held already
        rt.begin_shutdown()
        await rt.stop()

    asyncio.run(main())


def test_a_key_checked_while_another_waits_for_the_read_models_is_not_refused_for_their_lag(tmp_path: Path) -> None:
    """Two requests at once with a key ``relay admin create-token`` just made: the first waits for the
    read models, and the second was answered 401 (8 of 12 tries). Answered at once still (unknown keys
    hold one thread at most), it is a 503 while they are behind the log, and looked up again once not."""
    from relay_es.adapters import authz

    s = settings(tmp_path)
    rt = Runtime(s, projection_process=True)
    rt.follower.poll_secs = 3600

    async def main() -> None:
        await started_with_its_child(rt)
        assert rt._catching_up.acquire(blocking=False)  # another caller waits
        try:
            _store_with_apps(s, 1)  # another process's write: the read models are behind it
            with pytest.raises(authz.StoreUnavailable, match="catching up"):
                await asyncio.to_thread(rt._read_models_caught_up)
            assert await asyncio.to_thread(rt.wait_for_read_models, 30) is not False
            assert await asyncio.to_thread(rt._read_models_caught_up) is True  # ask them again
        finally:
            rt._catching_up.release()
        rt.begin_shutdown()
        await rt.stop()

    asyncio.run(main())


def test_a_stuck_read_model_process_is_ended_and_the_server_folds_meanwhile(tmp_path: Path, clock) -> None:
    """A read-model process alive but stuck (SIGSTOP here; a lock, I/O, a deadlock alike) went
    unnoticed: the server's runner rested, the executors listing stayed stale, a token made meanwhile
    was refused (401), every write waited its 10 s for nothing, and relay_worker_failures_total said 0.
    Late, a wait for the read models does not wait and a key they do not hold is a 503; stuck, it is
    killed, counted, the server folds, and it is started again. The child's watchdog runs on a test
    clock."""
    import os
    import re
    import signal
    import time

    from relay_es.adapters import authz
    from relay_es.adapters.readmodels.follower import LATE_SECS, STALL_SECS

    rt = Runtime(settings(tmp_path), projection_process=True)
    rt.follower.poll_secs = 3600  # it passes only when woken: its silence is no stall
    rt.follower.monotonic = clock.monotonic

    def until(what: Any, bound: float = 30.0) -> None:
        end = time.monotonic() + bound
        while not what():
            assert time.monotonic() < end, "not within the bound"
            time.sleep(0.02)

    def failures() -> int:
        text = rt.metrics.render().decode()
        return int(float(re.search(r'relay_worker_failures_total\{worker="projections"\} (\S+)', text).group(1)))

    async def main() -> None:
        await started_with_its_child(rt)
        stuck = rt.follower._process
        until(lambda: not rt.follower._asked and not rt.follower._pending)  # no report on its way
        os.kill(stuck.pid, signal.SIGSTOP)
        try:
            await asyncio.to_thread(until, lambda: Path(f"/proc/{stuck.pid}/stat").read_text().split()[2] == "T")
            rt.relay.register_app("local", "while-stuck")  # wakes the worker, which wakes the child
            await asyncio.to_thread(until, lambda: rt.follower._asked)  # the wake is sent: it owes the answer
            clock.advance(LATE_SECS)
            waited = rt.runner.wait_for

            def no_wait(*a: object, **kw: object) -> bool:
                raise AssertionError("waited for a late read-model process")

            rt.runner.wait_for = no_wait  # type: ignore[method-assign]
            assert await asyncio.to_thread(rt.wait_for_read_models, 10) is False  # answered without waiting
            with pytest.raises(authz.StoreUnavailable, match="stalled"):  # a key made meanwhile: 503, not 401
                await asyncio.to_thread(rt._read_models_caught_up)
            rt.runner.wait_for = waited  # type: ignore[method-assign]
            assert rt.follower.stalls == 0 and failures() == 0  # late, not ended yet
            clock.advance(STALL_SECS - LATE_SECS)
            await asyncio.to_thread(until, lambda: rt.follower.stalls == 1)  # the projection worker's next call
            await asyncio.to_thread(stuck.join, 10)
            assert stuck.exitcode == -signal.SIGKILL and failures() == 1
            head = rt.relay.recorder.max_notification_id()
            assert await asyncio.to_thread(rt.wait_for_read_models, 30) is not False  # the server folds
            assert rt.runner.position() >= head
            clock.advance(1.0)  # its backoff
            await asyncio.to_thread(until, lambda: rt.follower.following)
            assert rt.follower.starts == 2 and rt.follower._process is not stuck
        finally:
            if stuck.is_alive():
                os.kill(stuck.pid, signal.SIGKILL)
        rt.begin_shutdown()
        await rt.stop()

    asyncio.run(main())


def test_a_started_runtime_reads_the_executors_the_store_holds_into_the_cache(tmp_path: Path) -> None:
    """After a restart every executor the store holds is read for its Connected (or its orphan's
    Disconnected, its death): the cache warmer reads them once the process manager has started."""
    import time

    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.aggregates.executor import executor_stream_id
    from relay_es.engine.service import Relay
    from tests.support import info

    s = settings(tmp_path)
    relay = Relay(event_store_env(parse_database_url(s.database_url)), clock=SystemClock())
    try:
        for name in "AB":  # connected to an instance that is gone
            relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="gone")
    finally:
        relay.close()
    rt = Runtime(s)
    assert not rt.relay._cache

    async def main() -> None:
        rt.start(asyncio.get_running_loop())
        end = time.monotonic() + 30
        while rt.warmed is None and time.monotonic() < end:
            await asyncio.sleep(0.01)
        assert rt.warmed == 2
        assert {executor_stream_id("local", "app", n) for n in "AB"} <= set(rt.relay._cache)
        rt.begin_shutdown()
        await rt.stop()

    asyncio.run(main())
    assert not rt.warmer.is_alive()


def test_a_cache_warmer_that_fails_is_logged_and_changes_nothing(tmp_path: Path, caplog) -> None:
    import logging

    rt = Runtime(settings(tmp_path))
    rt.relay.warm = lambda *a, **k: 1 / 0  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.WARNING):
            rt._warm_cache()
    finally:
        rt.close()
    assert rt.warmed is None
    assert "reading the executors into the cache failed (ZeroDivisionError" in caplog.text


def test_the_process_manager_decides_nothing_on_a_lease_not_confirmed_lately(tmp_path: Path, monkeypatch) -> None:
    """A paused instance (SIGSTOP, a stalled VM), resumed, recorded a death and its dispatch before its
    lease worker noticed another instance had taken the lease; and one whose store session ended and
    could not be opened again (its logins refused) led beside the new leader for good, each declaring
    the other's executors dead. The process manager now asks first, and a lease unconfirmed for 30 s
    is lost."""
    from relay_es.adapters.lease import LeaseLost
    from relay_es.composition import runtime as rt_module

    now = [1000.0]
    monkeypatch.setattr(rt_module.time, "monotonic", lambda: now[0])
    lost: list[bool] = []
    rt = Runtime(settings(tmp_path), on_lease_lost=lambda: lost.append(True))
    steps: list[str] = []
    monkeypatch.setattr(rt.pm, "start", lambda: steps.append("start"))
    monkeypatch.setattr(rt.pm, "step", lambda: steps.append("step"))
    monkeypatch.setattr(rt.alerts, "step", lambda: None)
    rt.alerts.started = True
    answers: list[Any] = []

    def check() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(rt.lease, "check", check)
    try:
        rt._pm_tick()
        assert steps == ["start"]  # confirmed at start: no question
        now[0] += 7  # paused: the confirmation is 7 s old
        answers[:] = [LeaseLost("another instance took the lease")]
        rt._pm_tick()
        assert steps == ["start"] and rt.lease_lost and lost == [True]  # asked first, and nothing decided

        rt.lease_lost, lost[:] = False, []
        answers[:] = ["unreachable"]
        rt._pm_tick()
        assert steps == ["start"] and not rt.lease_lost  # not confirmed: nothing decided, not lost yet
        answers[:] = ["retaken"]
        rt._pm_tick()
        assert steps == ["start", "step"]
        now[0] += 7
        assert rt._lease_lock.acquire()  # the lease worker's check hangs (a silent network)
        try:
            rt._pm_tick()  # the process manager does not wait behind it: it decides nothing, and asks later
            assert steps == ["start", "step"] and not rt.lease_lost
        finally:
            rt._lease_lock.release()
        now[0] += 31
        answers[:] = ["unreachable"]
        rt._check_lease()  # the lease worker, 38 s after the last confirmation
        assert rt.lease_lost and lost == [True]
    finally:
        rt.close()


def test_metrics_leave_out_deleted_applications_and_a_store_away_fails_no_scrape(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    import sqlite3
    from types import SimpleNamespace

    from relay_es.adapters.readmodels import apps

    rt = Runtime(settings(tmp_path))
    try:
        rows = {"a": SimpleNamespace(org="local", app="gone"), "b": SimpleNamespace(org="local", app="here")}
        monkeypatch.setattr(rt.pm, "rows", rows)
        monkeypatch.setattr(apps, "deleted_apps", lambda db: {("local", "gone")})
        assert [r.app for r in rt._listed_executors()] == ["here"]

        def away(db: Any) -> set[tuple[str, str]]:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(apps, "deleted_apps", away)
        assert [r.app for r in rt._listed_executors()] == ["here"]  # the last set read: the scrape goes on
    finally:
        rt.close()
