"""The read models followed in a process of their own (``relay_es.adapters.readmodels.follower``, ADR 8),
on both stores: the child folds what this process records, reports its positions and its skips
here, is started again after it exits, stops when asked, and dies with its server."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay_es.adapters.readmodels.follower import ProjectionProcess
from relay_es.adapters.stores import parse_database_url
from relay_es.domain.clock import FakeClock
from relay_es.projections.apps import list_apps
from relay_es.projections.runner import Poison
from tests.projections.test_poison import huge_setting
from tests.server import RelayServer, children_of
from tests.support import World

SPAWN_SECS = 30.0  # a child's interpreter and imports, on a loaded two-core machine


@pytest.fixture
def world(clock, store_url) -> Iterator[World]:
    w = World(clock, store_url, grace=10)
    w.runner.catch_up()  # the server folds what was there before it starts the child
    yield w
    w.close()


@pytest.fixture
def follower(world: World) -> Iterator[tuple[ProjectionProcess, FakeClock, list[Poison]]]:
    seen: list[Poison] = []
    world.runner.on_poison.append(seen.append)
    # It reads the log only when woken: whatever a test sees folded, a wake made it so.
    f = ProjectionProcess(parse_database_url(world.store_url), reached=world.runner.reached_elsewhere,
                          poisoned=world.runner.poisoned_elsewhere, log_level="WARNING", monotonic=world.clock.monotonic,
                          poll_secs=3600)
    yield f, world.clock, seen
    f.stop()


def until(what: Callable[[], bool], timeout: float = SPAWN_SECS) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "not within the bound"
        time.sleep(0.02)


def following(f: ProjectionProcess) -> Callable[[], bool]:
    def check() -> bool:
        f.follow()  # as the runtime's projection worker calls it, woken or once a second
        return f.following
    return check


def is_follower(pid: int) -> bool:
    """A living multiprocessing child (a zombie's cmdline is empty)."""
    try:
        return "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()
    except FileNotFoundError:
        return False


def ignores_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def head(world: World) -> int:
    return world.relay.recorder.max_notification_id() or 0


def test_the_child_folds_what_this_process_records_and_reports_it(world: World, follower) -> None:
    f, _, _ = follower
    assert f.follow() is False  # started: until it reports, this process's runner folds
    until(following(f))
    assert f.starts == 1 and f._process.pid != os.getpid()
    world.relay.register_app("local", "elsewhere")
    assert f.follow() is True  # it follows: woken, and this process's runner rests
    # this process never ran a batch since: the child folded it, and its report woke wait_for
    assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)
    assert {a.name for a in list_apps(world.db, "local")} == {"app", "elsewhere"}
    assert min(world.runner.reached.values()) >= head(world)  # the lag on /metrics, from its reports


def test_woken_while_busy_it_makes_one_more_pass(world: World, follower) -> None:
    """One wake outstanding at a time; events recorded meanwhile are not lost: when the child answers,
    it is woken once more (its own reading of the log is an hour away here)."""
    f, _, _ = follower
    until(following(f))
    world.relay.register_app("local", "first")
    with f._lock:  # the reader thread takes the child's answer to this wake only once we let go
        f._wake()
        assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)  # folded: its answer is on its way
        world.relay.register_app("local", "second")  # recorded while that wake is outstanding
        assert f._asked
        f._pending = True  # what follow() does now (below)
    assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)  # the answer woke it once more
    assert {a.name for a in list_apps(world.db, "local")} >= {"first", "second"}
    until(lambda: not f._asked)
    f._asked = True  # a wake outstanding: follow() does not send another, it leaves one pending
    assert f.follow() is True and f._pending


def test_a_wake_while_it_starts_is_kept_for_its_first_answer(world: World, follower) -> None:
    f, _, _ = follower
    assert f.follow() is False  # started
    world.relay.register_app("local", "while-starting")
    assert f.follow() is False and f._pending  # alive, not answering yet: kept, not dropped
    until(lambda: not f._pending)  # its first answer sent it
    assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)


def test_a_call_without_events_does_not_wake_it(world: World, follower) -> None:
    """The runtime's worker calls it once a second besides the saves: only a save wakes the child."""
    f, _, _ = follower
    until(following(f))
    until(lambda: not f._asked)  # its last wake answered
    world.relay.register_app("local", "unannounced")
    assert f.follow(wake=False) is True
    assert not world.runner.wait_for(head(world), timeout=1.0)  # not woken, and its own poll is an hour away
    f.follow()
    assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)


def test_an_event_the_child_skips_is_counted_here(world: World, follower) -> None:
    f, _, seen = follower
    until(following(f))
    huge_setting(world)  # a number wider than 64 bits: neither store holds it in the apps table
    f.follow()
    until(lambda: bool(seen))
    assert seen[0].projection == "apps" and world.runner.poisoned == 1
    assert world.runner.wait_for(head(world), timeout=SPAWN_SECS)  # and moved past it


def test_a_child_that_exits_is_counted_and_started_again_after_a_backoff(world: World, follower) -> None:
    f, clock, _ = follower
    until(following(f))
    first = f._process
    os.kill(first.pid, signal.SIGKILL)
    first.join(10)
    assert f.follow() is False and f.exits == 1 and not f.following  # this process folds meanwhile
    world.relay.register_app("local", "meanwhile")
    world.runner.catch_up()
    assert f.follow() is False and f.starts == 1  # not before its backoff (1 s, doubling to 30 s)
    clock.advance(1.0)
    until(following(f))
    assert f.starts == 2 and f._process is not first
    os.kill(f._process.pid, signal.SIGKILL)
    f._process.join(10)
    f.follow()
    clock.advance(1.0)
    assert f.follow() is False and f.starts == 2  # it exited again: 2 s now
    clock.advance(1.0)
    until(following(f))
    assert f.exits == 2 and f.starts == 3


def test_a_child_that_cannot_be_started_is_tried_again_after_a_backoff(world: World, follower, monkeypatch) -> None:
    """No process to be had (EAGAIN, EMFILE): the server goes on folding, and the failure is counted."""
    import multiprocessing

    f, clock, _ = follower
    real = multiprocessing.get_context

    class NoProcesses:
        def __init__(self, ctx) -> None:
            self.Pipe = ctx.Pipe

        def Process(self, *a, **kw):
            raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing, "get_context", lambda name: NoProcesses(real(name)))
    assert f.follow() is False and f.failures == 1 and f.starts == 0
    clock.advance(0.5)
    assert f.follow() is False and f.failures == 1  # not before its backoff
    monkeypatch.setattr(multiprocessing, "get_context", real)
    clock.advance(0.5)
    until(following(f))
    assert f.starts == 1 and f.exits == 0


class Reports:
    """A child's end of the pipe as the reader thread sees it: these reports, then EOF."""

    def __init__(self, *items: object) -> None:
        self.items = list(items)
        self.closed = False

    def recv(self) -> object:
        if not self.items:
            raise EOFError
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


class Child:
    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True


def test_a_report_the_server_cannot_read_ends_the_child(world: World, follower) -> None:
    """Nobody would read its reports any more: it would fill the pipe and stall. It is ended, and the
    server folds until it is reaped and started again."""
    import pickle

    f, _, _ = follower
    child, reports = Child(), Reports(("idle", {}), pickle.UnpicklingError("not ours"), ("idle", {}))
    f._process, f._ready = child, True
    f._read(child, reports)
    assert child.killed and reports.closed and not f._ready
    assert reports.items == [("idle", {})]  # nothing read after it
    f._process = None


def test_a_failed_pass_of_the_child_is_counted_here(world: World, follower) -> None:
    """The store away, a bug: the child logs it and tries again; /metrics counts it here."""
    f, _, _ = follower
    child, reports = Child(), Reports(("failed", "OperationalError"), ("failed", "OperationalError"))
    f._read(child, reports)
    assert f.failures == 2 and reports.closed and not child.killed


def is_stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP): state T."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1] == "T"
    return False


def test_a_stuck_child_is_killed_counted_and_started_again_and_the_server_folds_meanwhile(
        world: World, follower, caplog) -> None:
    """A child alive but stuck (stopped here: a lock, I/O, a deadlock alike) was never noticed: the
    server's runner rested for as long as it lasted. It owes the answer to a wake: late after
    LATE_SECS (waits for the read models stop waiting), killed after STALL_SECS (it may answer nothing
    else), counted, logged, and started again after the backoff; the server folds meanwhile."""
    import logging

    from relay_es.adapters.readmodels.follower import LATE_SECS, STALL_SECS

    f, clock, _ = follower
    until(following(f))
    until(lambda: not f._asked and not f._pending)  # its last pass answered: no report is on its way
    stuck = f._process
    os.kill(stuck.pid, signal.SIGSTOP)
    try:
        until(lambda: is_stopped(stuck.pid), timeout=10)
        world.relay.register_app("local", "while-stuck")
        assert f.follow() is True and not f.late  # woken: it owes the answer from now
        clock.advance(LATE_SECS)
        assert f.late and f.follow() is True  # late: not ended yet
        clock.advance(STALL_SECS - LATE_SECS - 0.01)
        assert f.follow() is True and f.stalls == 0
        clock.advance(0.01)
        with caplog.at_level(logging.ERROR, logger="relay_es.adapters.readmodels.follower"):
            assert f.follow() is False  # killed: this process's runner folds
        stuck.join(10)
        assert stuck.exitcode == -signal.SIGKILL
        assert f.stalls == 1 and f.failures == 1 and f.exits == 0 and not f.following and not f.late
        assert f"process {stuck.pid} has owed a report for 10 s" in caplog.text
        world.runner.catch_up()  # what the runtime's projection worker does now
        assert "while-stuck" in {a.name for a in list_apps(world.db, "local")}
        assert f.follow() is False and f.starts == 1  # not before its backoff
        clock.advance(1.0)
        until(following(f))
        assert f.starts == 2 and f._process is not stuck
    finally:
        if stuck.is_alive():  # not left behind, stopped
            os.kill(stuck.pid, signal.SIGKILL)


class FakeConn:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send(self, what: object) -> None:
        self.sent.append(what)


class Alive:
    """A running child, as follow() sees it."""

    pid = 4242
    exitcode = None

    def __init__(self) -> None:
        self.killed = False

    def is_alive(self) -> bool:
        return not self.killed

    def kill(self) -> None:
        self.killed = True

    def join(self, timeout: float | None = None) -> None:
        pass


def following_fake(f: ProjectionProcess, clock: FakeClock) -> Alive:
    child = Alive()
    f._process, f._conn, f._ready, f._started_at, f._heard_at = child, FakeConn(), True, clock.monotonic(), clock.monotonic()
    return child


def test_a_child_that_keeps_reporting_is_not_stuck_however_long_its_pass(world: World, follower) -> None:
    """A long pass reports after each batch: each report shows it working. Only silence counts."""
    from relay_es.adapters.readmodels.follower import STALL_SECS

    f, clock, _ = follower
    child = following_fake(f, clock)
    assert f.follow() is True and f._conn.sent == ["wake"]
    for _ in range(5):  # a pass of 45 s, a batch committed every 9 s
        clock.advance(STALL_SECS - 1)
        f._took(child, "reached", {})
        assert f.follow() is True and not f.late
    f._took(child, "failed", "OperationalError")  # a failed pass is a report too
    clock.advance(STALL_SECS - 1)
    assert f.follow() is True
    clock.advance(1)
    assert f.follow() is False and child.killed and f.stalls == 1
    f._process = None


def test_a_child_woken_after_a_long_silence_owes_its_answer_from_the_wake(world: World, follower) -> None:
    """An idle child reading the log unwoken every ``poll_secs`` owes a report each pass: with the
    runtime's 1 s it is stuck after 11 s of silence. Unwoken for an hour here, its silence is no
    stall; woken, it owes the answer from the wake, not from its last report."""
    from relay_es.adapters.readmodels.follower import LATE_SECS, STALL_SECS

    f, clock, _ = follower
    child = following_fake(f, clock)
    clock.advance(1800)
    assert f.follow(wake=False) is True and not f.late  # its next unwoken pass is half an hour away
    assert f.follow() is True and not f.late  # woken now
    clock.advance(LATE_SECS)
    assert f.late
    f._took(child, "idle", {})  # answered
    clock.advance(STALL_SECS)
    assert not f.late and f.follow(wake=False) is True and f.stalls == 0
    f.poll_secs = 1.0  # the runtime's: its unwoken pass was due 1 s after its answer, 9 s ago
    assert f.late and f.follow(wake=False) is True
    clock.advance(1)
    assert f.follow(wake=False) is False and child.killed and f.stalls == 1
    f._process = None


def test_a_stopped_child_is_not_started_again(world: World, follower) -> None:
    f, clock, _ = follower
    until(following(f))
    process = f._process
    f.stop()
    assert not process.is_alive() and process.exitcode == 0  # it stopped itself: not killed
    clock.advance(60)
    assert f.follow() is False and f.starts == 1 and f.exits == 0


def test_the_child_dies_with_its_server(tmp_path: Path) -> None:
    """SIGKILL leaves no writer behind: a restarted server, or a rebuild, is alone on the store. The
    child is stopped (SIGSTOP) first, so it cannot notice its pipe close: the kernel ends it
    (PR_SET_PDEATHSIG)."""
    srv = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/relay.db"]).start()
    try:
        children: list[int] = []

        def has_child() -> bool:  # of any thread: the child is started from the projection worker's
            children[:] = [p for p in children_of(srv.proc.pid) if is_follower(p)]
            return bool(children) and all(ignores_sigterm(p) for p in children)  # set just after PDEATHSIG

        until(has_child)
        for p in children:
            os.kill(p, signal.SIGSTOP)
        srv.kill()
        until(lambda: not any(is_follower(p) for p in children), timeout=10)
    finally:
        srv.kill()
        for p in children:  # a child that outlived it, stopped: not left behind
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_server_that_exits_without_stopping_it_is_not_held_up(tmp_path: Path) -> None:
    """uvicorn skips the shutdown on a second Ctrl-C: the interpreter exits with the child running.
    multiprocessing's exit handler would SIGTERM it (ignored) and join it for ever; the follower
    stops it first."""
    import subprocess
    import sys

    script = f"""
import time
from relay_es.adapters.clock import SystemClock
from relay_es.adapters.readmodels.follower import ProjectionProcess
from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
from relay_es.engine.service import Relay
from relay_es.projections import all_projections
from relay_es.projections.runner import ProjectionRunner

store = parse_database_url("sqlite:///{tmp_path}/relay.db")
relay = Relay(event_store_env(store), clock=SystemClock())
ProjectionRunner(relay, open_database(store), all_projections())  # the tables
f = ProjectionProcess(store, reached=lambda p: None, poisoned=lambda p: None)
end = time.monotonic() + 30
while not f.following:
    f.follow()
    assert time.monotonic() < end
    time.sleep(0.02)
print(f._process.pid, flush=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.split()[0])
    until(lambda: not is_follower(child), timeout=10)


def test_a_child_that_cannot_reach_the_store_as_it_starts_says_so_in_one_line() -> None:
    """The store away as the child makes its first connection (the library's recorder registers its
    types on one): one WARNING line and an exit the server counts and follows with another child,
    not multiprocessing's traceback."""
    import subprocess
    import sys

    from tests.server import free_port

    script = f"""
import multiprocessing, os
from relay_es.adapters.readmodels.follower import follow_in_child
from relay_es.adapters.stores import parse_database_url

ours, theirs = multiprocessing.Pipe()
follow_in_child(parse_database_url("postgresql://postgres@127.0.0.1:{free_port()}/nothing-listens"), theirs,
                "WARNING", 1.0, os.getppid())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "the read models' process stopped (OperationalError" in done.stderr, done.stderr


def test_a_child_that_ends_while_the_store_is_unreachable_is_a_warning_not_an_error(world: World, caplog) -> None:
    """In a Postgres outage the child waits on the store until it is killed as stuck, and the next one
    cannot reach the store as it starts: what an outage does, told as the outage's other lines are
    (a warning), where a child ending with the store there is an error."""
    import logging

    away = [True]
    f = ProjectionProcess(parse_database_url(world.store_url), reached=lambda _: None, poisoned=lambda _: None,
                          store_away=lambda: away[0])
    with caplog.at_level(logging.WARNING, logger="relay_es.adapters.readmodels.follower"):
        f._put_off("the read models' process exited (code 0)")
        away[0] = False
        f._put_off("the read models' process exited (code 0)")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "the read models' process exited (code 0), the store being unreachable; it is started again "
                    "in 1 s"),
        ("ERROR", "the read models' process exited (code 0); this process folds the log until it is started "
                  "again in 2 s"),
    ]


def _wrapped(driver: Exception) -> Exception:
    """``driver``'s error as the event store's library raises it: its own class, raised from it."""
    from eventsourcing.persistence import OperationalError

    try:
        try:
            raise driver
        except Exception as e:
            raise OperationalError(str(e)) from e
    except OperationalError as wrapped:
        return wrapped


LOCKED = ('canceling statement due to lock timeout\nLINE 1: ...r_id::text, originator_version, topic, state FROM '
          '"public"."...\n                                                             ^')


def test_the_childs_failed_passes_in_a_store_outage_are_one_line_a_minute_in_one_line_each(caplog) -> None:
    """A table locked for 15 s failed a pass every 0.7 s, each a WARNING carrying Postgres' whole
    message (the statement and a caret, on three lines): told as an outage now, its first line only."""
    import logging

    import psycopg.errors

    from relay_es.adapters.readmodels.follower import PassFailures

    clock = FakeClock()
    failures = PassFailures(monotonic=clock.monotonic)
    caplog.set_level(logging.INFO, logger="relay_es.adapters.readmodels.follower")
    for _ in range(22):  # 15 s of a pass every 0.7 s
        assert not failures.again_at_once(_wrapped(psycopg.errors.LockNotAvailable(LOCKED)))
        clock.advance(0.7)
    failures.worked()
    assert [(r.levelname, r.getMessage(), r.exc_info is None) for r in caplog.records] == [
        ("WARNING", "the read models' process failed on the store (OperationalError: canceling statement due to "
                    "lock timeout); retrying", True),
        ("INFO", "the read models' process works on the store again (21 failures since the last line)", True),
    ]


def test_a_bug_in_the_childs_pass_is_logged_with_its_traceback_every_time(caplog) -> None:
    import logging

    from relay_es.adapters.readmodels.follower import PassFailures

    failures = PassFailures(monotonic=FakeClock().monotonic)
    caplog.set_level(logging.INFO, logger="relay_es.adapters.readmodels.follower")
    for _ in range(2):
        try:
            raise RuntimeError("a bug")
        except RuntimeError as e:
            assert not failures.again_at_once(e)
    assert [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("ERROR", "the read models' process failed; retrying", True)] * 2


def test_a_connection_postgres_ended_for_idling_is_run_again_at_once_unsaid(caplog) -> None:
    """A role's idle_session_timeout ended the child's idle connection: its next pass failed (a WARNING
    every ~5 s, for ever). The pass runs again at once, once, on a connection the pool hands out anew;
    a second failure in a row is an outage like any other."""
    import logging

    import psycopg.errors

    from relay_es.adapters.readmodels.follower import PassFailures, ended_idle

    idle = _wrapped(psycopg.errors.IdleSessionTimeout("terminating connection due to idle-session timeout"))
    assert ended_idle(idle) and ended_idle(idle.__cause__)  # type: ignore[arg-type]
    assert not ended_idle(_wrapped(psycopg.errors.LockNotAvailable(LOCKED))) and not ended_idle(RuntimeError("x"))
    failures = PassFailures(monotonic=FakeClock().monotonic)
    caplog.set_level(logging.INFO, logger="relay_es.adapters.readmodels.follower")
    for _ in range(3):  # an idle connection ended before each of three passes, each run again at once
        assert failures.again_at_once(idle)
        failures.worked()
    assert caplog.records == []
    assert failures.again_at_once(idle)
    assert not failures.again_at_once(idle)  # twice in a row: not an idle connection's end alone
    assert [r.levelname for r in caplog.records] == ["WARNING"]
