"""The runtime while the store is away or came back as another: ``/readyz`` says ``store_unavailable``
whatever part of Relay the outage stops (the leader lease, the outbox, the process manager); after a
store failure nothing is decided or written through the outbox before the lease is confirmed again;
and a store that came back behind the log this process saw (a restored backup) stops the server."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from relay_es.composition import runtime as rt_module
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from relay_es.engine.process_manager import STORE_UNAVAILABLE_SECS


def settings(url: str) -> Settings:
    return Settings(database_url=url)  # type: ignore[arg-type]


def answering(rt: Runtime, monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> list[Any]:
    """The lease's checks answer ``answers`` in turn (an exception is raised); returns the list of those asked."""
    asked: list[Any] = []

    def check() -> str:
        answer = answers.pop(0)
        asked.append(answer)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(rt.lease, "check", check)
    return asked


def test_readiness_is_store_unavailable_while_the_lease_cannot_be_confirmed(tmp_path: Path, clock,
                                                                            monkeypatch) -> None:
    """Postgres down: the process manager waits for the lease and so fails nothing on the store, and
    /readyz said ready through the whole outage. Unconfirmed for STORE_UNAVAILABLE_SECS while its checks
    find the store unreachable, or hang (a silent network), the instance is not ready; confirmed, it is."""
    monkeypatch.setattr(rt_module.time, "monotonic", clock.monotonic)
    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"), clock=clock)
    try:
        rt._pm_tick()
        assert rt.readiness() is None
        asked = answering(rt, monkeypatch, ["unreachable"] * 10 + ["retaken", "held"])
        for _ in range(4):  # the lease worker, every 2 s
            clock.advance(2)
            rt._check_lease()
            rt._pm_tick()  # asks too, and decides nothing: no step fails on the store
            assert rt.readiness() is None and not rt.pm.store_unavailable
        assert len(asked) == 8
        clock.advance(2)
        rt._check_lease()  # unconfirmed for 10 s
        assert rt.readiness() == "store_unavailable" and not rt.lease_lost
        clock.advance(2)
        rt._check_lease()
        assert rt.readiness() == "store_unavailable"
        rt._check_lease()  # Postgres is back
        assert rt.readiness() is None
        # a check that hangs (a silent network: the lease worker holds the lock) leaves it unconfirmed too
        clock.advance(2)
        rt._check_lease()
        assert rt._lease_lock.acquire()
        try:
            clock.advance(STORE_UNAVAILABLE_SECS - 1)
            assert rt.readiness() is None
            clock.advance(1)
            assert rt.readiness() == "store_unavailable"
        finally:
            rt._lease_lock.release()
    finally:
        rt.close()


def _driven(rt: Runtime, main: Any, release: Any = None) -> None:
    """``main()`` run on a loop of its own after a step of the process manager; then ``release`` set (the
    threads a test holds let go) and the runtime closed."""
    try:
        rt._pm_tick()
        asyncio.run(main())
    finally:
        if release is not None:
            release.set()
        rt.close()


def test_readiness_counts_the_outbox_s_failures_on_the_store(tmp_path: Path, clock) -> None:
    """A read-only Postgres fails writes only: the executors' transitions failed in the outbox, retried
    for ever, and /readyz said ready. Failing for STORE_UNAVAILABLE_SECS, none recorded since, the
    instance is not ready; the next batch recorded makes it ready again."""
    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"), clock=clock)
    read_only = psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")

    def fail() -> None:
        raise read_only

    async def main() -> None:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await rt.outbox.run(fail)
        for _ in range(4):
            clock.advance(STORE_UNAVAILABLE_SECS / 5)
            assert rt.readiness() is None
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                await rt.outbox.run(fail)
        clock.advance(STORE_UNAVAILABLE_SECS / 5)
        assert rt.readiness() == "store_unavailable" and not rt.pm.store_unavailable
        assert await rt.outbox.run(lambda: "recorded") == "recorded"
        assert rt.readiness() is None

    _driven(rt, main)


def test_readiness_counts_an_outbox_write_that_hangs(tmp_path: Path, clock) -> None:
    """A frozen file system (``fsfreeze``) or a paused Postgres fails nothing: the outbox's write hangs,
    and /readyz said ready through 40 s of it (a helper's storage-fault hunt). A write under way for
    STORE_UNAVAILABLE_SECS makes the instance not ready; once it returns, ready again."""
    import threading

    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"), clock=clock)
    began, release = threading.Event(), threading.Event()

    def hang() -> str:
        began.set()
        assert release.wait(30)
        return "recorded"

    async def main() -> None:
        write = asyncio.create_task(rt.outbox.run(hang))
        assert await asyncio.to_thread(began.wait, 30)
        clock.advance(STORE_UNAVAILABLE_SECS * 0.9)
        assert rt.readiness() is None
        clock.advance(STORE_UNAVAILABLE_SECS * 0.1)
        assert rt.readiness() == "store_unavailable" and not rt.pm.store_unavailable
        release.set()
        assert await write == "recorded"
        assert rt.readiness() is None

    _driven(rt, main, release)


def test_an_outbox_write_queued_behind_others_is_not_taken_for_a_hung_one(tmp_path: Path, clock) -> None:
    """The outbox shares its pool's threads with the hub's other commands (admissions, audit records,
    retention records): a write waiting 10 s for a thread is a busy instance, not a hung store (a second
    reading's find: stamped before it was queued, it took the instance out of rotation in a storm)."""
    import threading

    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"), clock=clock)
    release, started = threading.Event(), threading.Event()
    holding = threading.Semaphore(0)

    def hold() -> None:
        holding.release()
        assert release.wait(30)

    def write() -> str:
        started.set()
        return "recorded"

    async def main() -> None:
        holders = [asyncio.create_task(rt.pool.run(hold)) for _ in range(rt_module.COMMAND_WORKERS)]
        for _ in holders:  # every thread of the pool holds one
            assert await asyncio.to_thread(holding.acquire, True, 30)
        queued = asyncio.create_task(rt.outbox.run(write))
        for _ in range(20):  # a few turns of the loop: it is handed to the pool, and queued behind the holders
            await asyncio.sleep(0)
        clock.advance(STORE_UNAVAILABLE_SECS * 2)
        assert not started.is_set() and rt.readiness() is None
        release.set()
        assert await queued == "recorded"
        await asyncio.gather(*holders)

    _driven(rt, main, release)


def test_after_a_store_failure_nothing_is_written_or_decided_before_the_lease_is_confirmed_again(
        tmp_path: Path, monkeypatch) -> None:
    """A store that failed may come back as another one (a restored backup, a new cluster), which the lease
    tells only when it is taken again: the outbox's retry wrote the executors' transitions on it within a
    second, before the lease worker looked. After a failure, a write through the outbox and a step of the
    process manager wait for a confirmation asked after it (the outbox's retry fails as an outage meanwhile)."""
    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"))
    cut = psycopg.OperationalError("server closed the connection unexpectedly")
    written: list[str] = []

    def write(what: str) -> str:
        written.append(what)
        return what

    def fail() -> None:
        raise cut

    async def outbox() -> None:
        assert await rt.outbox.run(write, "a") == "a"  # confirmed lately: not asked
        assert asked == []
        with pytest.raises(psycopg.OperationalError):
            await rt.outbox.run(fail)
        with pytest.raises(rt_module.LeaseUnconfirmed):  # a store error: the outbox retries it as an outage
            await rt.outbox.run(write, "b")
        assert rt.relay.is_store_error(rt_module.LeaseUnconfirmed("x"))
        assert await rt.outbox.run(write, "c") == "c"
        assert await rt.outbox.run(write, "d") == "d"  # confirmed since the failure: not asked again

    try:
        rt._pm_tick()
        asked = answering(rt, monkeypatch, ["unreachable", "retaken"])
        asyncio.run(outbox())
        assert written == ["a", "c", "d"] and asked == ["unreachable", "retaken"]

        steps: list[str] = []

        def step() -> None:
            steps.append("step")
            if len(steps) == 1:
                raise cut

        monkeypatch.setattr(rt.pm, "step", step)
        monkeypatch.setattr(rt.alerts, "step", lambda: None)
        asked = answering(rt, monkeypatch, ["unreachable", "held"])
        with pytest.raises(psycopg.OperationalError):
            rt._pm_tick()
        rt._pm_tick()  # the confirmation is fresh, but older than the failure: asked, unreachable
        assert steps == ["step"] and asked == ["unreachable"]
        rt._pm_tick()
        assert steps == ["step", "step"] and asked == ["unreachable", "held"]
    finally:
        rt.close()


def test_once_a_check_found_the_store_unreachable_nothing_is_written_before_the_lease_is_taken_again(
        tmp_path: Path, monkeypatch) -> None:
    """Postgres swapped for a restored copy within the 5 s a confirmation lasts: the first transition after
    it was written there before the lease looked. A check that found the store unreachable (the session
    ended) voids the confirmation before it."""
    rt = Runtime(settings(f"sqlite:///{tmp_path}/relay.db"))
    written: list[str] = []

    def write(what: str) -> str:
        written.append(what)
        return what

    async def outbox() -> None:
        with pytest.raises(rt_module.LeaseUnconfirmed):
            await rt.outbox.run(write, "a")
        assert await rt.outbox.run(write, "b") == "b"

    try:
        rt._pm_tick()
        asked = answering(rt, monkeypatch, ["unreachable", "unreachable", "retaken"])
        rt._check_lease()  # the lease worker, a moment after the last confirmation
        asyncio.run(outbox())
        assert written == ["b"] and asked == ["unreachable", "unreachable", "retaken"]
    finally:
        rt.close()


def test_a_server_whose_store_came_back_behind_the_log_it_saw_stops(postgres_url: str, caplog) -> None:
    """Postgres restored from an older copy of its data directory under a running server: the lease was
    taken again and the server wrote on, over what its executor cache held (streams with gaps, skipped as
    poison by every read model). It stops (``relay serve`` exits 3), in one line saying why, and the
    outbox writes nothing more."""
    from tests.adapters.test_lease import cut

    lost: list[bool] = []
    rt = Runtime(settings(postgres_url), on_lease_lost=lambda: lost.append(True))
    try:
        for name in ("a", "b", "c"):
            rt.relay.register_app("local", name)
        head = rt.relay.head()
        assert rt._seen() == head > 0
        cut(rt.lease, postgres_url)  # Postgres restarted, with the same data
        rt._check_lease()
        assert not rt.lease_lost and rt._lease_state == "retaken"
        cut(rt.lease, postgres_url)  # and again, from a copy taken before the last application was registered
        with psycopg.connect(postgres_url, autocommit=True) as c:
            c.execute("DELETE FROM relay_events WHERE notification_id = (SELECT max(notification_id) FROM relay_events)")
            behind = c.execute("SELECT max(notification_id) FROM relay_events").fetchone()[0]
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger=rt_module.__name__):
            rt._check_lease()
        assert rt.lease_lost and lost == [True]
        [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert record.getMessage() == (
            f"the store at {postgres_url} came back with its log ending at event {behind}, before event {head} "
            "this instance saw: restored from an older copy (a backup, a replica that lagged), it is not the store "
            "this instance led; this instance stops serving")

        async def outbox() -> None:
            with pytest.raises(rt_module.LeaseUnconfirmed):
                await rt.outbox.run(rt.relay.register_app, "local", "d")

        asyncio.run(outbox())
        assert rt.relay.head() == behind
    finally:
        rt.close()


def test_a_call_waits_a_few_seconds_for_a_pooled_connection_not_half_a_minute(postgres_url: str) -> None:
    """While Postgres is away the pools have no connection to give: a REST call waited the read models'
    pool's 30 s, and the event store's 10 s (twice for a write and its record), for its 503."""
    from relay_es.adapters.stores import POOL_WAIT_SECS

    rt = Runtime(settings(postgres_url))
    try:
        assert POOL_WAIT_SECS <= 5
        assert rt.db.pool.timeout == POOL_WAIT_SECS
        assert rt.relay.recorder.datastore.pool.timeout == POOL_WAIT_SECS
    finally:
        rt.close()
