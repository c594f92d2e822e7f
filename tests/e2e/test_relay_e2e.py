"""End to end: ``relay serve`` as a process, real ``dbos==3.2.0`` executors as
processes, their system database on Postgres; Relay's own store on SQLite and
on Postgres."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import postgres_admin_url, url_of
from tests.e2e import harness
from tests.e2e.scene import FAST, Scene, TsScene
from tests.server import RelayServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def scene(tmp_path, store_url) -> Iterator[Scene]:
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    s = Scene(server, postgres_admin_url())
    try:
        yield s
    finally:
        s.close()
        server.stop()


# Each SDK on one store here and on the other in test_stranded_api.py, whose kill-and-recover
# scenarios pair them the other way round: every SDK meets every store, at half the runs.
@pytest.fixture(params=[("python", "postgres"), ("typescript", "sqlite")], ids=["python-postgres", "typescript-sqlite"])
def any_sdk_scene(request: pytest.FixtureRequest, tmp_path) -> Iterator[Scene]:
    sdk, kind = request.param
    server = RelayServer(tmp_path, args=["--database-url", url_of(kind, request, tmp_path)], env=FAST).start()
    s = (Scene if sdk == "python" else TsScene)(server, postgres_admin_url())
    try:
        yield s
    finally:
        s.close()
        server.stop()


def at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))


def test_killed_executor_is_recovered_by_its_peer(any_sdk_scene: Scene) -> None:
    """Python and TypeScript executors alike: kill -9 A, B recovers its workflows."""
    scene = any_sdk_scene
    grace = 3
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
    assert a.executor_id != b.executor_id
    ids = a.start_workflows(count=3, steps=6, step_secs=0.4)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 2), 0) for wf in ids),
               "every workflow to reach step 2")
    a.kill()
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered and deleted", timeout=60)
    scene.wait(lambda: set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"SUCCESS"},
               "every workflow to end SUCCESS", timeout=60)
    # each completed step ran once (only the step in flight at the kill may have run twice), the rest on B
    runs = harness.step_runs(scene.steps_db)
    counts = harness.step_run_counts(scene.steps_db)
    for wf in ids:
        in_flight = max(r["step_no"] for r in runs if r["workflow_id"] == wf and r["executor_id"] == a.executor_id)
        for step in range(1, 7):
            allowed = (1, 2) if step == in_flight else (1,)
            assert counts[(wf, step)] in allowed, (wf, step, in_flight, counts)
        assert {r["executor_id"] for r in runs if r["workflow_id"] == wf and r["step_no"] > in_flight} <= \
            {b.executor_id}, (wf, runs)
    assert {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {b.executor_id}
    # the story, in order, and the timing of the death
    entries = scene.events(a.executor_id)
    assert [e["action"] for e in entries] == ["executor.connected", "executor.disconnected", "executor.declared_dead",
                                              "recovery.dispatched", "recovery.confirmed", "executor.deleted"]
    late = (at(entries[2]) - at(entries[1])).total_seconds() - grace
    assert 0 <= late < 1.0, f"declared dead {late:.3f}s after the grace ended"
    assert entries[3]["detail"]["targetExecutorId"] == b.executor_id
    assert entries[4]["detail"]["pendingFound"] is True
    # A is gone from the live list, but its history is still readable
    history = scene.api("GET", f"/v2/orgs/local/apps/{scene.app}/executors/{a.executor_id}/history").json()
    assert [h["type"] for h in history] == ["Registered", "Connected", "Disconnected", "DeclaredDead",
                                           "RecoveryDispatched", "RecoveryConfirmed", "Deleted"]
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"


def test_executor_that_comes_back_within_grace_is_not_recovered(scene: Scene) -> None:
    """A frozen executor back before its deadline: the deadline passes and it is still HEALTHY,
    never declared dead nor recovered, and the workflow it was running finishes on it."""
    grace = 8  # the SDK reconnects about a second after its thaw: room for a loaded machine
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
    [wf] = a.start_workflows(count=1, steps=30, step_secs=0.5)  # 15 s: runs past the deadline
    scene.wait(lambda: harness.step_run_counts(scene.steps_db).get((wf, 1)), "the workflow to start")
    a.stop()  # frozen: pings go unanswered and Relay drops the socket
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "DISCONNECTED", "A to be DISCONNECTED", timeout=15)
    a.cont()  # thawed: the SDK notices and reconnects with the same executor id
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "HEALTHY", "A to be HEALTHY again", timeout=grace)
    # the audit is written with the executors table (one transaction): the reconnect is in it already
    entries = scene.events(a.executor_id)
    assert [e["action"] for e in entries][:3] == ["executor.connected", "executor.disconnected",
                                                  "executor.reconnected"]
    deadline = datetime.fromisoformat(entries[1]["detail"]["deadline"].replace("Z", "+00:00"))
    assert at(entries[2]) < deadline
    # past the deadline the Disconnected recorded, by more than a death takes to be declared (< 1 s)
    time.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds() + 1.5))
    assert harness.workflow_statuses(scene.sys_db, [wf])[wf] == "PENDING", "the workflow ended before the deadline"
    actions = [e["action"] for e in scene.events(a.executor_id)]
    assert not any(x.startswith("recovery.") or x == "executor.declared_dead" for x in actions), actions
    history = scene.api("GET", f"/v2/orgs/local/apps/{scene.app}/executors/{a.executor_id}/history").json()
    assert [h["type"] for h in history] == ["Registered", "Connected", "Disconnected", "Connected"], history
    assert scene.executor(a.executor_id)["status"] == "HEALTHY"
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"
    # what A was running finishes on A, each step once
    scene.wait(lambda: harness.workflow_statuses(scene.sys_db, [wf])[wf] == "SUCCESS", "the workflow to end SUCCESS")
    assert harness.workflow_rows(scene.sys_db, [wf])[wf]["executor_id"] == a.executor_id
    runs = harness.step_runs(scene.steps_db)
    assert sorted(r["step_no"] for r in runs) == list(range(1, 31)), runs
    assert {r["executor_id"] for r in runs} == {a.executor_id}


def test_no_executor_of_the_version_means_waiting_until_one_connects(scene: Scene) -> None:
    scene.set_grace(2)
    a = scene.spawn("A", "v1")
    scene.spawn("B", "v2")
    ids = a.start_workflows(count=2, steps=20, step_secs=0.5)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 1), 0) for wf in ids),
               "every workflow to start")
    a.kill()
    scene.wait(lambda: (scene.executor(a.executor_id) or {}).get("status") == "DEAD", "A to be DEAD", timeout=30)
    scene.wait(lambda: "recovery.deferred" in [e["action"] for e in scene.events(a.executor_id)], "the wait to be audited")
    time.sleep(2)
    assert "recovery.dispatched" not in [e["action"] for e in scene.events(a.executor_id)]
    assert set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"PENDING"}
    c = scene.spawn("C", "v1")
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered by C", timeout=60)
    dispatched = [e for e in scene.events(a.executor_id) if e["action"] == "recovery.dispatched"]
    assert [d["detail"]["targetExecutorId"] for d in dispatched] == [c.executor_id]
    scene.wait(lambda: {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {c.executor_id},
               "the workflows to run on C", timeout=30)
