"""Fault scenarios with real DBOS executors (dbos 3.2.0): killed and frozen executors,
a Relay that crashes in the middle of a recovery, and a recovering executor that dies
while it recovers.

Every scenario runs on both Relay stores (the ``store_url`` fixture: SQLite and Postgres),
checks what happened from Relay's REST API (executors table, history), its audit log and
the DBOS system database (workflow status) plus the ``step_runs`` table every step body
writes to, and ends with the invariant checker (:func:`tests.fault.invariants.check_store`).

What DBOS 3.2.0 itself guarantees, and what these tests therefore allow:

* A step body runs *before* its output is checkpointed, so the step that was in flight
  when an executor died (or froze) runs again on the executor that recovers the workflow:
  that one step may have run twice, every other step exactly once.
* Recovery (``recovery([dead])``) does not run anything itself: it flips the dead
  executor's PENDING workflows to ENQUEUED on the internal queue and clears their
  ``owner_xid``; an executor of the same application version dequeues them and becomes
  their owner. Asking again for the same dead executor matches nothing (its workflows no
  longer carry its id), so a repeated recovery is harmless.
* A process that was frozen while its workflows were recovered elsewhere and then thaws
  keeps its in-memory workflow threads: the step body it was in finishes, but recording
  its output fails the ``owner_xid`` check (``DBOSWorkflowConflictIDError``) and the thread
  parks, waiting for the new owner's outcome. If it was frozen between two steps it may
  run the body of the first step the new owner has not checkpointed yet before it parks.
  Either way at most one step per workflow -- the last one the frozen process ran -- ran
  on both processes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WIRE_ONLY, postgres_admin_url
from tests.e2e import harness
from tests.e2e.scene import APP, FAST, Scene
from tests.fault.invariants import check_store
from tests.server import RelayServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


# ---------------------------------------------------------------------------- the stage


class Stage:
    """A :class:`Scene` whose Relay can be started with extra settings, crashed and
    restarted on the same store and port."""

    def __init__(self, tmp_path: Path, store_url: str) -> None:
        self.tmp_path = tmp_path
        self.store_url = store_url
        self.servers: list[RelayServer] = []
        self.scene: Scene | None = None

    def relay(self, env: dict[str, str], port: int | None = None) -> RelayServer:
        server = RelayServer(self.tmp_path, port=port, args=["--database-url", self.store_url],
                             env={**FAST, **env})
        self.servers.append(server)
        return server.start()

    def open(self, **env: str) -> Scene:
        self.scene = Scene(self.relay(env), postgres_admin_url())
        return self.scene

    def restart(self, **env: str) -> RelayServer:
        """A new Relay on the same store and port (the old one must be gone)."""
        assert self.scene is not None
        old = self.scene.server
        assert old.proc is not None and old.proc.poll() is not None, "the old Relay still runs"
        self.scene.server = self.relay(env, port=old.port)
        return self.scene.server

    def finish(self, *, deaths: int, recoveries: int) -> None:
        """Stops Relay, then checks the store's invariants (the checker opens the store
        itself) and that it saw exactly ``deaths`` deaths and ``recoveries`` confirmed
        recoveries, with nothing left pending."""
        for server in self.servers:
            server.stop()
        report = check_store(self.store_url)
        report.assert_ok()
        assert (report.deaths, report.recoveries, report.pending) == (deaths, recoveries, []), report

    def debug(self) -> str:
        parts = [ex.stderr_tail(40) for ex in (self.scene.executors if self.scene else [])]
        for server in self.servers:
            parts.append(f"--- relay on port {server.port} (exit {server.proc and server.proc.poll()}) ---\n"
                         + server.log()[-8000:])
        return "\n".join(parts)

    def close(self) -> None:
        try:
            if self.scene is not None:
                self.scene.close()
        finally:
            for server in self.servers:
                server.stop()


@pytest.fixture
def stage(request: pytest.FixtureRequest, tmp_path: Path, store_url: str) -> Iterator[Stage]:
    s = Stage(tmp_path, store_url)
    failed_before = request.session.testsfailed
    try:
        yield s
    finally:
        if request.session.testsfailed > failed_before:
            print(s.debug())
        s.close()


# ---------------------------------------------------------------------------- helpers


def at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def of(entries: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["action"] == action]


def actions(entries: list[dict[str, Any]]) -> list[str]:
    return [e["action"] for e in entries]


def history(scene: Scene, executor_id: str) -> list[dict[str, Any]]:
    r = scene.api("GET", f"/v2/orgs/local/apps/{APP}/executors/{executor_id}/history")
    assert r.status_code == 200, r.text
    return r.json()


def app_audit(scene: Scene) -> list[dict[str, Any]]:
    r = scene.api("GET", "/v2/orgs/local/executor-events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()


def reached(scene: Scene, ids: Iterable[str], step: int) -> bool:
    counts = harness.step_run_counts(scene.steps_db)
    return all(counts.get((wf, step), 0) for wf in ids)


def all_success(scene: Scene, ids: Iterable[str]) -> bool:
    return set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"SUCCESS"}


def status_of(scene: Scene, executor_id: str) -> str | None:
    row = scene.executor(executor_id)
    return None if row is None else row["status"]


def assert_steps_once(scene: Scene, ids: Iterable[str], steps: int, interrupted: Iterable[str]) -> None:
    """Each step of each workflow ran exactly once, except the last step an interrupted
    executor ran for that workflow (the one in flight when it died or froze), which may
    have run twice: once there, once on the executor that took the workflow over."""
    interrupted = set(interrupted)
    runs = harness.step_runs(scene.steps_db)
    counts = harness.step_run_counts(scene.steps_db)
    for wf in ids:
        mine = [r["step_no"] for r in runs if r["workflow_id"] == wf and r["executor_id"] in interrupted]
        in_flight = max(mine) if mine else None
        for step in range(1, steps + 1):
            allowed = (1, 2) if step == in_flight else (1,)
            assert counts.get((wf, step), 0) in allowed, \
                f"{wf} step {step} ran {counts.get((wf, step), 0)} times (in flight: {in_flight}); {counts}"
        assert not any(s > steps for (w, s) in counts if w == wf)


def assert_one_recovery(entries: list[dict[str, Any]], targets: set[str]) -> list[dict[str, Any]]:
    """Exactly one confirmed recovery; every other dispatch ended in an audited failure of
    that very request, before the next dispatch; every dispatch went to one of ``targets``.
    Returns the dispatches."""
    story = [e for e in entries if e["action"] in ("recovery.dispatched", "recovery.failed", "recovery.confirmed")]
    dispatched = of(entries, "recovery.dispatched")
    failed = of(entries, "recovery.failed")
    confirmed = of(entries, "recovery.confirmed")
    assert len(confirmed) == 1, actions(entries)
    assert len(dispatched) == len(failed) + 1, actions(entries)
    # dispatched, failed, dispatched, failed, ..., dispatched, confirmed -- each answer for the request before it
    assert [e["action"] for e in story] == ["recovery.dispatched", "recovery.failed"] * len(failed) + \
        ["recovery.dispatched", "recovery.confirmed"], actions(entries)
    for d, outcome in zip(story[::2], story[1::2]):
        assert outcome["detail"]["requestId"] == d["detail"]["requestId"], (d, outcome)
    assert [d["detail"]["attempt"] for d in dispatched] == list(range(1, len(dispatched) + 1))
    assert {d["detail"]["targetExecutorId"] for d in dispatched} <= targets, (dispatched, targets)
    return dispatched


def sleep_until(wall: datetime) -> None:
    delay = (wall - datetime.now(timezone.utc)).total_seconds()
    if delay > 0:
        time.sleep(delay)


# ---------------------------------------------------------------------------- 1. SIGKILL


def test_killed_executor_is_recovered_once_by_a_peer_of_its_version(stage: Stage) -> None:
    """Invariant: an executor killed with SIGKILL is declared dead at its deadline (within
    [grace, grace + 1 s) of its disconnect) and recovered exactly once, by a HEALTHY
    executor of its own application version -- never by one of another version, even if
    that one is present; every workflow ends SUCCESS and every completed step ran once."""
    grace = 2
    scene = stage.open()
    scene.set_grace(grace)
    a = scene.spawn("A", "v1")
    b = scene.spawn("B", "v1")
    d = scene.spawn("D", "v2")
    ids = a.start_workflows(count=3, steps=5, step_secs=0.4)
    scene.wait(lambda: reached(scene, ids, 2), "every workflow of A to reach step 2")
    a.kill()

    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered and deleted", timeout=30)
    scene.wait(lambda: all_success(scene, ids), "every workflow to end SUCCESS", timeout=30)

    entries = scene.events(a.executor_id)
    assert actions(entries)[:3] == ["executor.connected", "executor.disconnected", "executor.declared_dead"]
    assert actions(entries)[-1] == "executor.deleted"
    assert entries[1]["detail"]["reason"] == "socket_closed"
    late = (at(entries[2]) - at(entries[1])).total_seconds()
    assert grace <= late < grace + 1.0, f"declared dead {late:.3f}s after the disconnect (grace {grace}s)"
    assert parse_time(entries[1]["detail"]["deadline"]) <= at(entries[2])
    dispatched = assert_one_recovery(entries, targets={b.executor_id})
    assert dispatched[0]["detail"]["appVersion"] == "v1"
    assert of(entries, "recovery.confirmed")[0]["detail"]["pendingFound"] is True

    # the executor of the other version was never asked, and never ran anything of A's
    assert not [e for e in app_audit(scene) if e["detail"].get("targetExecutorId") == d.executor_id]
    assert actions(scene.events(d.executor_id)) == ["executor.connected"]
    assert not [r for r in harness.step_runs(scene.steps_db) if r["executor_id"] == d.executor_id]

    rows = harness.workflow_rows(scene.sys_db, ids)
    assert {r["executor_id"] for r in rows.values()} == {b.executor_id}
    assert {r["application_version"] for r in rows.values()} == {"v1"}
    assert_steps_once(scene, ids, 5, interrupted=[a.executor_id])
    assert status_of(scene, b.executor_id) == "HEALTHY" and status_of(scene, d.executor_id) == "HEALTHY"
    assert [h["type"] for h in history(scene, a.executor_id)][-2:] == ["RecoveryConfirmed", "Deleted"]
    stage.finish(deaths=1, recoveries=1)


# ---------------------------------------------------------------------------- 2. SIGSTOP


@WIRE_ONLY
def test_executor_frozen_past_the_ping_wait_but_thawed_inside_grace_is_not_recovered(stage: Stage) -> None:
    """Invariant: an executor that goes silent (SIGSTOP) is DISCONNECTED within the ping
    wait; if it comes back before its deadline it is HEALTHY again in the same incarnation,
    nothing is declared dead or recovered, and its own workflows finish on it with every
    step run exactly once."""
    grace = 6  # room for the ping wait (2 s) plus the SDK's reconnect (1 s back-off)
    scene = stage.open()
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
    ids = a.start_workflows(count=2, steps=5, step_secs=0.4)
    scene.wait(lambda: reached(scene, ids, 2), "every workflow of A to reach step 2")
    a.stop()
    scene.wait(lambda: status_of(scene, a.executor_id) == "DISCONNECTED", "A to be DISCONNECTED", timeout=10)
    a.cont()
    scene.wait(lambda: status_of(scene, a.executor_id) == "HEALTHY", "A to be HEALTHY again", timeout=10)
    scene.wait(lambda: all_success(scene, ids), "A's workflows to end SUCCESS on A", timeout=20)

    entries = scene.events(a.executor_id)
    deadline = parse_time(entries[1]["detail"]["deadline"])
    sleep_until(deadline)
    time.sleep(1.0)  # past the old deadline: still nothing
    entries = scene.events(a.executor_id)
    assert actions(entries) == ["executor.connected", "executor.disconnected", "executor.reconnected"]
    assert entries[1]["detail"]["reason"] == "ping_timeout"
    assert entries[2]["detail"]["incarnation"] == 1
    assert status_of(scene, a.executor_id) == "HEALTHY" and status_of(scene, b.executor_id) == "HEALTHY"
    hist = history(scene, a.executor_id)
    assert [h["type"] for h in hist] == ["Registered", "Connected", "Disconnected", "Connected"]
    assert [h["data"]["incarnation"] for h in hist if h["type"] == "Connected"] == [1, 1]
    assert actions(scene.events(b.executor_id)) == ["executor.connected"]
    assert {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {a.executor_id}
    assert_steps_once(scene, ids, 5, interrupted=[])  # nothing ran twice: nobody took over
    assert not [r for r in harness.step_runs(scene.steps_db) if r["executor_id"] != a.executor_id]
    stage.finish(deaths=0, recoveries=0)


def test_executor_frozen_past_grace_is_recovered_once_and_returns_as_a_new_incarnation(stage: Stage) -> None:
    """Invariant: an executor frozen (SIGSTOP) past its grace period is declared dead and
    recovered exactly once, by its peer; when it thaws and reconnects with the same executor
    id it is a new incarnation (a second Connected, incarnation 2, HEALTHY in the table)
    and Relay neither recovers it again nor dispatches anything more for it.

    DBOS side (see the module docstring): the thawed process's in-memory workflow threads
    lose the ownership check and park, so at most the one step it was in ran on both
    processes; every workflow completes once, on the peer."""
    grace = 2
    scene = stage.open()
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
    ids = a.start_workflows(count=2, steps=6, step_secs=0.4)
    scene.wait(lambda: reached(scene, ids, 2), "every workflow of A to reach step 2")
    a.stop()
    scene.wait(lambda: "recovery.confirmed" in actions(scene.events(a.executor_id)),
               "A's recovery to be confirmed while A is frozen", timeout=20)
    # B owns every workflow now (dequeued from the recovery queue), some still running
    scene.wait(lambda: {(r["executor_id"], r["status"]) for r in harness.workflow_rows(scene.sys_db, ids).values()}
               <= {(b.executor_id, "PENDING"), (b.executor_id, "SUCCESS")}, "B to own A's workflows", timeout=10)
    a.cont()
    scene.wait(lambda: status_of(scene, a.executor_id) == "HEALTHY", "A to come back HEALTHY", timeout=15)
    scene.wait(lambda: all_success(scene, ids), "every workflow to end SUCCESS", timeout=20)
    time.sleep(grace + 0.5)  # long enough for any (wrong) second recovery to have begun

    entries = scene.events(a.executor_id)
    assert actions(entries)[:3] == ["executor.connected", "executor.disconnected", "executor.declared_dead"]
    assert entries[1]["detail"]["reason"] == "ping_timeout"
    assert_one_recovery(entries, targets={b.executor_id})
    back = entries[-1]
    assert actions(entries)[-2:] == ["executor.deleted", "executor.connected"], actions(entries)
    assert back["detail"]["incarnation"] == 2 and back["detail"]["previousStatus"] == "DELETED"
    hist = history(scene, a.executor_id)
    assert [h["type"] for h in hist][-3:] == ["RecoveryConfirmed", "Deleted", "Connected"]
    assert [h["data"]["incarnation"] for h in hist if h["type"] == "Connected"] == [1, 2]
    assert status_of(scene, a.executor_id) == "HEALTHY" and status_of(scene, b.executor_id) == "HEALTHY"
    assert not [e for e in app_audit(scene) if e["action"].startswith("recovery.")
                and e["detail"].get("targetExecutorId") == a.executor_id], "the new incarnation was asked to recover"
    assert actions(scene.events(b.executor_id)) == ["executor.connected"]

    rows = harness.workflow_rows(scene.sys_db, ids)
    assert {r["executor_id"] for r in rows.values()} == {b.executor_id}
    assert_steps_once(scene, ids, 6, interrupted=[a.executor_id])
    stage.finish(deaths=1, recoveries=1)


# ---------------------------------------------------------------------------- 5. Relay crashes


SETTLE_SECS = float(FAST["RELAY_RESTART_SETTLE_SECS"])


def recovery_rounds(target: harness.Executor, dead: harness.Executor) -> int:
    """How many times DBOS on ``target`` ran ``recovery`` for ``dead`` (its own log line)."""
    return target.stderr_text().count(f"workflows for executor {dead.executor_id} from version")


def _crash_relay_during_recovery(stage: Stage, crash_at: str) -> tuple[Scene, Any, Any, list[str], datetime]:
    """A and B (v1) on a Relay armed to crash at ``crash_at``; A runs workflows and is
    killed; returns once Relay has crashed (exit 137) and been restarted without the crash
    point on the same store and port, with the wall time of the restart."""
    scene = stage.open(RELAY_FAULT_CRASH_AT=crash_at, RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS="3")
    scene.set_grace(2)
    a = scene.spawn("A")
    b = scene.spawn("B")
    ids = a.start_workflows(count=2, steps=5, step_secs=0.4)
    scene.wait(lambda: reached(scene, ids, 2), "every workflow of A to reach step 2")
    a.kill()
    crashed = scene.server
    assert crashed.proc is not None
    crashed.proc.wait(20)
    assert crashed.proc.returncode == 137, crashed.log()[-3000:]
    assert f"fault injection: crashing at {crash_at}" in crashed.log()
    rows = harness.workflow_rows(scene.sys_db, ids)
    owned_by_a = {wf for wf, r in rows.items() if (r["executor_id"], r["status"]) == (a.executor_id, "PENDING")}
    if crash_at == "after_dispatch_recorded":  # the frame never left: nothing was recovered
        assert owned_by_a == set(ids), rows
    else:  # B recovered them (re-enqueued, then dequeued) before Relay died
        assert owned_by_a == set(), rows
    restarted_at = datetime.now(timezone.utc)
    stage.restart(RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS="3")
    return scene, a, b, ids, restarted_at


def assert_crashed_dispatch_failed(scene: Scene, entries: list[dict[str, Any]], target: harness.Executor,
                                   restarted_at: datetime, response_timeout: float) -> dict[str, Any]:
    """The dispatch the crashed Relay recorded (the first) ended in an audited failure of
    that very request, decided by the restarted Relay once its settle window had passed.
    Two orders are legitimate, and which one happens depends on how fast the target's
    SDK reconnects: the target is back before the settle window ends and the dispatch
    fails when no answer came within the response timeout; or it is not back yet, its
    socket on the crashed Relay is declared gone (``relay_restarted``) and the dispatch
    fails at once because its target became DISCONNECTED. Returns the failure."""
    dispatched = of(entries, "recovery.dispatched")
    failures = [f for f in of(entries, "recovery.failed")
                if f["detail"]["requestId"] == dispatched[0]["detail"]["requestId"]]
    assert len(failures) == 1, actions(entries)
    failure = failures[0]
    assert failure["detail"]["targetExecutorId"] == target.executor_id, failure
    # nothing is enforced before the settle window of the restarted Relay has passed
    assert (at(failure) - restarted_at).total_seconds() >= SETTLE_SECS, (failure, restarted_at)
    if "no answer" in failure["detail"]["reason"]:
        assert (at(failure) - at(dispatched[0])).total_seconds() >= response_timeout, failure
    else:  # the target was seen gone first: its old socket's disconnect is audited, no later than the failure
        gone = [e for e in of(scene.events(target.executor_id), "executor.disconnected") if at(e) <= at(failure)]
        assert gone and gone[-1]["detail"]["reason"] == "relay_restarted", (failure, gone)
        assert target.executor_id in failure["detail"]["reason"], failure
    return failure


def test_relay_crash_after_recording_a_dispatch_recovers_after_restart(stage: Stage) -> None:
    """Invariant: a dispatch recorded by a Relay that crashed before the frame left is not
    lost: after a restart on the same store, once the settle window has passed, the
    unanswered dispatch is audited as failed (no answer within the response timeout, or
    its target's old socket seen gone first: see :func:`assert_crashed_dispatch_failed`)
    and a new one recovers the dead executor -- exactly one recovery.confirmed, every
    workflow SUCCESS, every completed step run once."""
    scene, a, b, ids, restarted_at = _crash_relay_during_recovery(stage, "after_dispatch_recorded")
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered after the restart", timeout=30)
    scene.wait(lambda: all_success(scene, ids), "every workflow to end SUCCESS", timeout=20)

    entries = scene.events(a.executor_id)
    dispatched = assert_one_recovery(entries, targets={b.executor_id})
    assert len(dispatched) >= 2, actions(entries)
    assert_crashed_dispatch_failed(scene, entries, b, restarted_at, response_timeout=3.0)
    assert of(entries, "recovery.confirmed")[0]["detail"]["pendingFound"] is True
    assert actions(entries)[-1] == "executor.deleted"
    rows = harness.workflow_rows(scene.sys_db, ids)
    assert {r["executor_id"] for r in rows.values()} == {b.executor_id}
    assert_steps_once(scene, ids, 5, interrupted=[a.executor_id])
    assert status_of(scene, b.executor_id) == "HEALTHY"
    assert recovery_rounds(b, a) == 1  # only the restarted Relay's dispatch reached B
    stage.finish(deaths=1, recoveries=1)


def test_relay_crash_before_recording_the_answer_confirms_once_after_restart(stage: Stage) -> None:
    """Invariant: if Relay crashes after the target recovered but before the answer was
    recorded, the restarted Relay fails the unanswered dispatch (after the response timeout,
    or at once if the target's old socket is seen gone first) and asks again; DBOS recovery
    is idempotent (the workflows no longer carry the dead executor's id), so the second
    round finds nothing pending and confirms -- exactly one recovery.confirmed, no workflow
    runs twice beyond the step in flight at the kill."""
    scene, a, b, ids, restarted_at = _crash_relay_during_recovery(stage, "before_answer_recorded")
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A's recovery to be confirmed after the restart",
               timeout=30)
    scene.wait(lambda: all_success(scene, ids), "every workflow to end SUCCESS", timeout=20)

    entries = scene.events(a.executor_id)
    dispatched = assert_one_recovery(entries, targets={b.executor_id})
    assert len(dispatched) >= 2, actions(entries)
    assert_crashed_dispatch_failed(scene, entries, b, restarted_at, response_timeout=3.0)
    # the crashed Relay's round did the work; the new round found nothing left to recover
    assert of(entries, "recovery.confirmed")[0]["detail"]["pendingFound"] is False
    assert actions(entries)[-1] == "executor.deleted"
    rows = harness.workflow_rows(scene.sys_db, ids)
    assert {r["executor_id"] for r in rows.values()} == {b.executor_id}
    assert_steps_once(scene, ids, 5, interrupted=[a.executor_id])
    # DBOS ran recovery once (for the crashed Relay); the second round stopped at exist_pending_workflows
    assert recovery_rounds(b, a) == 1
    stage.finish(deaths=1, recoveries=1)


# ---------------------------------------------------------------------------- 8. the recoverer dies


FREEZE_LEAD = 1.0  # how long before the dead executor's deadline its chosen target is frozen


def _freeze_target_at_deadline(scene: Scene, dead: harness.Executor, target: harness.Executor) -> None:
    """Freezes ``target`` (SIGSTOP) :data:`FREEZE_LEAD` s before ``dead``'s deadline: Relay
    still sees it HEALTHY when the deadline comes, so it is the one chosen, but it can
    never answer. Relay notices a frozen socket no sooner than ``RELAY_PING_WAIT_SECS -
    RELAY_PING_INTERVAL_SECS`` after the freeze (its pong wait), which the scenarios set
    to 3 s or more: the dispatch may come up to 2 s late and still find the target
    HEALTHY, and this (test) process may wake up to 1 s late and still freeze it first."""
    scene.wait(lambda: of(scene.events(dead.executor_id), "executor.disconnected"), "the disconnect to be audited")
    deadline = parse_time(of(scene.events(dead.executor_id), "executor.disconnected")[0]["detail"]["deadline"])
    sleep_until(deadline - timedelta(seconds=FREEZE_LEAD))
    target.stop()
    assert datetime.now(timezone.utc) < deadline, "the target was frozen too late: Relay may have sent it the dispatch"


def _dispatched_to(scene: Scene, dead: harness.Executor, target: harness.Executor) -> bool:
    return any(d["detail"]["targetExecutorId"] == target.executor_id
               for d in of(scene.events(dead.executor_id), "recovery.dispatched"))


def _start_work(scene: Scene, a: harness.Executor, b: harness.Executor) -> tuple[list[str], list[str]]:
    a_ids = a.start_workflows(count=2, steps=5, step_secs=0.4)
    b_ids = b.start_workflows(count=1, steps=12, step_secs=0.4)
    scene.wait(lambda: reached(scene, a_ids, 2) and reached(scene, b_ids, 1), "the workflows to be under way")
    return a_ids, b_ids


def _check_handover(scene: Scene, a: harness.Executor, b: harness.Executor, c: harness.Executor,
                    a_ids: list[str], b_ids: list[str]) -> dict[str, Any]:
    """Common end state: A and B both recovered exactly once, by C in the end; every
    workflow SUCCESS on C; completed steps ran once. Returns A's first failure."""
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered by C", timeout=30)
    scene.wait(lambda: scene.executor(b.executor_id) is None, "B to be recovered by C", timeout=30)
    scene.wait(lambda: all_success(scene, a_ids + b_ids), "every workflow to end SUCCESS", timeout=30)

    a_entries = scene.events(a.executor_id)
    dispatched = assert_one_recovery(a_entries, targets={b.executor_id, c.executor_id})
    assert dispatched[0]["detail"]["targetExecutorId"] == b.executor_id, a_entries
    assert dispatched[-1]["detail"]["targetExecutorId"] == c.executor_id, a_entries
    assert of(a_entries, "recovery.confirmed")[0]["detail"]["pendingFound"] is True
    assert actions(a_entries)[-1] == "executor.deleted"

    b_entries = scene.events(b.executor_id)
    assert actions(b_entries)[:3] == ["executor.connected", "executor.disconnected", "executor.declared_dead"]
    assert_one_recovery(b_entries, targets={c.executor_id})
    assert of(b_entries, "recovery.confirmed")[0]["detail"]["pendingFound"] is True
    assert actions(b_entries)[-1] == "executor.deleted"

    rows = harness.workflow_rows(scene.sys_db, a_ids + b_ids)
    assert {r["executor_id"] for r in rows.values()} == {c.executor_id}
    assert_steps_once(scene, a_ids, 5, interrupted=[a.executor_id])
    assert_steps_once(scene, b_ids, 12, interrupted=[b.executor_id])
    assert status_of(scene, c.executor_id) == "HEALTHY"
    return of(a_entries, "recovery.failed")[0]


def test_recovering_executor_killed_mid_recovery_hands_over_to_a_newcomer(stage: Stage) -> None:
    """Invariant: if the executor chosen to recover a dead one dies before answering, the
    dispatch is audited as failed (its target is gone) and, once another executor of the
    version connects, that one recovers the first dead executor -- and the second one's
    own workflows too; each dead executor is recovered exactly once and all workflows end
    SUCCESS.

    B is made the chosen target by being the only v1 peer at A's deadline; it is frozen
    just before the deadline (so the dispatch can never be answered) and SIGKILLed as soon
    as the dispatch to it is audited."""
    # a frozen B is noticed by Relay's pings only 3-4 s later: long after the dispatch
    scene = stage.open(RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS="3", RELAY_PING_WAIT_SECS="4")
    scene.set_grace(2)
    a = scene.spawn("A")
    b = scene.spawn("B")
    a_ids, b_ids = _start_work(scene, a, b)
    a.kill()
    _freeze_target_at_deadline(scene, a, b)
    scene.wait(lambda: _dispatched_to(scene, a, b), "A's recovery to be dispatched to B", timeout=10)
    b.kill()
    c = scene.spawn("C")
    first_failure = _check_handover(scene, a, b, c, a_ids, b_ids)
    assert first_failure["detail"]["targetExecutorId"] == b.executor_id
    stage.finish(deaths=2, recoveries=2)


def test_recovering_executor_that_never_answers_is_timed_out_and_a_newcomer_recovers(stage: Stage) -> None:
    """Invariant: a chosen target that stays connected but never answers (frozen while
    Relay's ping wait is longer than the response timeout) costs one response timeout:
    the dispatch is audited as failed with no answer, the next attempt goes to the executor
    of the version that connected meanwhile (untried first), which recovers the dead
    executor; the frozen one, once killed, is recovered too. Exactly one confirmed
    recovery per dead executor; every workflow SUCCESS."""
    timeout = 3
    # B frozen is noticed only 28-30 s later (pong wait 28 s): long after C has connected and
    # recovered A, however long C takes to launch; B dies by SIGKILL (its socket closes at once)
    scene = stage.open(RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS=str(timeout), RELAY_PING_INTERVAL_SECS="2",
                       RELAY_PING_WAIT_SECS="30")
    scene.set_grace(2)
    a = scene.spawn("A")
    b = scene.spawn("B")
    a_ids, b_ids = _start_work(scene, a, b)
    a.kill()
    _freeze_target_at_deadline(scene, a, b)
    scene.wait(lambda: _dispatched_to(scene, a, b), "A's recovery to be dispatched to B", timeout=10)
    c = scene.spawn("C")
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered by C", timeout=30)
    assert status_of(scene, b.executor_id) == "HEALTHY", "B went silent too early for this scenario"
    b.kill()
    first_failure = _check_handover(scene, a, b, c, a_ids, b_ids)
    assert first_failure["detail"]["targetExecutorId"] == b.executor_id
    assert f"no answer within {timeout}s" in first_failure["detail"]["reason"], first_failure
    first_dispatch = of(scene.events(a.executor_id), "recovery.dispatched")[0]
    waited = (at(first_failure) - at(first_dispatch)).total_seconds()
    # The response timer runs from a deadline the process manager takes just before it records the
    # dispatch (so it is never earlier than the one the dispatcher obeys), and the feed's times are
    # cut to the millisecond: the failure can be stamped a few ms less than the timeout after the
    # dispatch's stamp (2.999 s was seen), never a whole batch's worth.
    assert timeout - 0.05 <= waited < timeout + 1.0, f"the dispatch failed {waited:.3f}s after it went out"
    stage.finish(deaths=2, recoveries=2)


# ---------------------------------------------------------------------------- 4. an executor id that survives restarts

FIXED_ID_LAUNCHER = '''
import os, runpy, sys
import dbos
import dbos._dbos as _d

_launch = dbos.DBOS.launch


def launch(*args, **kwargs):
    """DBOS__VMID's effect: launch() takes the executor id it generates first."""
    generate, first = _d.generate_uuid, [True]

    def fixed():
        if first[0]:
            first[0] = False
            return os.environ["FIXED_EXECUTOR_ID"]
        return generate()

    _d.generate_uuid = fixed
    return _launch(*args, **kwargs)


dbos.DBOS.launch = launch
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def test_an_executor_id_back_on_another_version_has_its_earlier_workflows_recovered_by_a_peer(
        stage: Stage, tmp_path: Path) -> None:
    """An executor id that survives restarts (a StatefulSet's pod name in a rolling update) comes back
    within its grace on v2: the v1 process is gone, its workflows (the v2 process recovers only its own
    version's) are recovered by the HEALTHY v1 peer, and end SUCCESS."""
    scene = stage.open()
    scene.set_grace(20)
    launcher = tmp_path / "fixed_id_app.py"
    launcher.write_text(FIXED_ID_LAUNCHER)

    def fixed(name: str, version: str) -> harness.Executor:
        ex = harness.Executor(scene.python, relay_url=scene.server.ws, app_name=scene.app, app_version=version,
                              system_database_url=scene.sys_db, steps_db_url=scene.steps_db, name=name,
                              extra_env={"FIXED_EXECUTOR_ID": "fixed-x"},
                              command=[str(scene.python), str(launcher), str(harness.DBOS_APP)])
        scene.executors.append(ex)
        scene.wait(lambda: (scene.executor("fixed-x") or {}).get("appVersion") == version
                   and status_of(scene, "fixed-x") == "HEALTHY", f"{name} to be HEALTHY on {version}")
        return ex

    a = fixed("A", "v1")
    assert a.executor_id == "fixed-x"
    p = scene.spawn("P", "v1")
    ids = a.start_workflows(count=2, steps=5, step_secs=0.4)
    scene.wait(lambda: reached(scene, ids, 1), "every workflow of A to reach step 1")
    a.kill()
    scene.wait(lambda: status_of(scene, "fixed-x") == "DISCONNECTED", "A to be DISCONNECTED", timeout=15)
    fixed("A2", "v2")  # well within the grace

    scene.wait(lambda: all_success(scene, ids), "every workflow of A to end SUCCESS", timeout=40)
    rows = harness.workflow_rows(scene.sys_db, ids)
    assert {r["executor_id"] for r in rows.values()} == {p.executor_id}
    entries = scene.events("fixed-x")
    dead = of(entries, "executor.declared_dead")
    assert [(e["detail"]["appVersion"], e["detail"].get("reason")) for e in dead] == [("v1", "version_changed")]
    dispatched = assert_one_recovery(entries, targets={p.executor_id})
    assert dispatched[0]["detail"]["appVersion"] == "v1"
    assert status_of(scene, "fixed-x") == "HEALTHY"
    assert (scene.executor("fixed-x") or {}).get("appVersion") == "v2"
