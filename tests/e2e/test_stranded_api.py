"""End to end: Relay's stranded-work extension (``/stranded-workflows``) through a real ``relay serve``
to real ``dbos==3.2.0`` and ``@dbos-inc/dbos-sdk@5.2.11`` executors, Relay's store on SQLite and
on Postgres.

Executor A (version v1) runs the workflow ground (a workflow blocked on a message, a queue of
concurrency 1 with one workflow PENDING and two ENQUEUED behind it) and is killed; the only
other executor, B, runs v2, so A's recovery is deferred. The listing, asked of B, shows A's
PENDING workflows, why, the queue they block, and the fixes that apply; recover is refused
(no v1 executor); fork really runs the workflow on v2 (B) after cancelling it, cancel really
cancels, in the executors' system database; each fix is in Relay's audit log. And "recover
now": a killed executor's workflows are recovered by an executor of its version at once (forced:
it is only DISCONNECTED), not two minutes later when Relay would declare it dead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import postgres_admin_url, url_of
from tests.e2e import harness
from tests.e2e.scene import FAST, Scene, TsScene, on_stage
from tests.rest_client import as_records
from tests.server import RelayServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def staged(kind: type[Scene], tmp_path: Any, store_url: str) -> Iterator[Scene]:
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield from on_stage(kind(server, postgres_admin_url()))


# Each SDK on one store here and on the other in test_relay_e2e.py (pairs, not the full product).
@pytest.fixture(params=[("python", "sqlite"), ("typescript", "postgres")], ids=["python-sqlite", "typescript-postgres"])
def any_sdk_scene(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Scene]:
    sdk, kind = request.param
    yield from staged(Scene if sdk == "python" else TsScene, tmp_path, url_of(kind, request, tmp_path))


def stranded(s: Scene, **params: Any) -> dict[str, Any]:
    r = s.api("GET", f"/v2/orgs/local/apps/{s.app}/stranded-workflows", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def fix(s: Scene, body: dict[str, Any]) -> Any:
    return s.api("POST", f"/v2/orgs/local/apps/{s.app}/stranded-workflows/fix", json=body)


def actions(s: Scene, operation: str) -> list[dict[str, Any]]:
    r = s.api("GET", "/v2/orgs/local/audit-logs", params={"operation": operation, "limit": 1000})
    assert r.status_code == 200, r.text
    return [done for _, done in as_records(r.json(), s.app) if done is not None]


def test_a_killed_executor_s_stranded_work_is_listed_and_fixed_for_real(any_sdk_scene: Scene) -> None:
    """Python and TypeScript executors alike."""
    scene = any_sdk_scene
    scene.set_grace(2)
    a = scene.spawn("A", "v1")
    b = scene.spawn("B", "v2")  # registered last: v2 is the latest version
    ids = a.ground("st")["workflow_ids"]
    running, (q0, q1, q2) = ids["running"], ids["queued"]
    done = [ids["steps"], ids["parent"], *ids["children"]]
    blocked = {running: "PENDING", q0: "PENDING", q1: "ENQUEUED", q2: "ENQUEUED"}
    scene.wait(lambda: harness.workflow_statuses(scene.sys_db, blocked) == blocked, "the ground to block")
    scene.wait(lambda: set(harness.workflow_statuses(scene.sys_db, done).values()) == {"SUCCESS"},
               "the ground's finished workflows to finish")
    a.kill()
    scene.wait(lambda: (scene.executor(a.executor_id) or {}).get("status") == "DEAD", "A to be DEAD", timeout=30)

    def deferred() -> dict[str, Any] | None:
        got = stranded(scene)
        mine = {w["workflowId"]: w for w in got["workflows"]}
        if {running, q0} <= set(mine) and all(mine[w]["reason"] == "recovery_deferred" for w in (running, q0)):
            return got
        return None

    got = scene.wait(deferred, "A's workflows listed, their recovery deferred", timeout=30)
    listed = {w["workflowId"]: w for w in got["workflows"]}
    assert {w["executorId"] for w in listed.values()} == {a.executor_id}, listed  # B's are alive: not listed
    w = listed[q0]
    assert (w["name"], w["status"], w["queueName"], w["appVersion"]) == ("blocked_workflow", "PENDING",
                                                                         "ground_queue", "v1")
    assert w["fixes"] == ["fork", "cancel"]  # no v1 executor: neither recover nor resume can run it
    assert w["relayState"]["status"] == "DEAD" and w["relayState"]["recoveryPhase"] == "deferred"
    assert w["relayState"]["recoveryVersion"] == "v1" and w["relayState"]["declaredDeadAt"]
    (queue,) = [q for q in got["queues"] if q["queueName"] == "ground_queue"]
    assert queue == {"queueName": "ground_queue", "strandedWorkflows": 1, "enqueued": 2, "enqueuedCapped": False}
    (ex,) = [e for e in got["executors"] if e["executorId"] == a.executor_id]
    assert ex["reason"] == "recovery_deferred" and ex["strandedWorkflows"] == len(listed)
    alone = stranded(scene, relayOnly="true")
    assert [e["executorId"] for e in alone["executors"]] == [a.executor_id] and alone["workflows"] is None

    # recover needs an executor of v1: refused, nothing sent, fork named as the fix
    r = fix(scene, {"fix": "recover", "executorIds": [a.executor_id]})
    assert r.status_code == 409, r.text
    assert "fork is the fix" in r.json()["detail"].lower()

    # cancel: the blocked workflow is CANCELLED
    r = fix(scene, {"fix": "cancel", "workflowIds": [running]})
    assert r.status_code == 200, r.text
    assert harness.workflow_statuses(scene.sys_db, [running]) == {running: "CANCELLED"}
    assert running not in {w["workflowId"] for w in stranded(scene)["workflows"]}

    # fork: q0 is cancelled, then forked from its last step on v2, where B runs it
    r = fix(scene, {"fix": "fork", "workflowIds": [q0]})
    assert r.status_code == 200, r.text
    (forked,) = r.json()["forkedWorkflowIds"]
    assert harness.workflow_statuses(scene.sys_db, [q0]) == {q0: "CANCELLED"}
    scene.wait(lambda: harness.workflow_rows(scene.sys_db, [forked]).get(forked, {}).get("executor_id")
               == b.executor_id, "the fork to run on B", timeout=30)
    assert harness.workflow_rows(scene.sys_db, [forked])[forked]["application_version"] == "v2"
    b.release(forked)
    scene.wait(lambda: harness.workflow_statuses(scene.sys_db, [forked]) == {forked: "SUCCESS"}, "the fork to end")

    assert q0 not in {w["workflowId"] for w in stranded(scene)["workflows"]}

    scene.wait(lambda: [x["outcome"] for x in actions(scene, "strandedFork")] == ["succeeded"], "the fork audited")
    scene.wait(lambda: [x["outcome"] for x in actions(scene, "strandedCancel")] == ["succeeded", "succeeded"],
               "both cancels audited (the fix's, and the fork's first step)")


def test_recover_now_has_an_executor_of_the_version_take_a_killed_executor_s_workflows_before_its_deadline(
        any_sdk_scene: Scene) -> None:
    """Python and TypeScript executors alike."""
    scene = any_sdk_scene
    scene.set_grace(120)  # Relay alone would wait two minutes before recovering A
    a = scene.spawn("A", "v1")
    c = scene.spawn("C", "v1")
    ids = a.start_workflows(count=2, steps=8, step_secs=0.5)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 1), 0) for wf in ids),
               "every workflow to start")
    a.kill()
    scene.wait(lambda: (scene.executor(a.executor_id) or {}).get("status") == "DISCONNECTED",
               "A to be DISCONNECTED", timeout=30)
    got = stranded(scene)
    listed = {w["workflowId"]: w for w in got["workflows"]}
    assert set(ids) <= set(listed)
    w = listed[ids[0]]
    assert w["reason"] == "disconnected" and w["fixes"] == ["recover", "resume", "fork", "cancel"]
    assert w["relayState"]["deadline"] and w["relayState"]["disconnectReason"] == "socket_closed"

    r = fix(scene, {"fix": "recover", "executorIds": [a.executor_id]})
    assert r.status_code == 409 and "force=true" in r.text
    r = fix(scene, {"fix": "recover", "executorIds": [a.executor_id], "force": True})
    assert r.status_code == 200, r.text
    assert r.json() == {"fix": "recover", "recovered": [{"appVersion": "v1", "executorIds": [a.executor_id]}]}
    scene.wait(lambda: set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"SUCCESS"},
               "every workflow to end SUCCESS on C", timeout=60)
    assert {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {c.executor_id}
    assert (scene.executor(a.executor_id) or {}).get("status") == "DISCONNECTED"  # Relay's own clock is untouched
    assert not {wf for wf in ids if wf in {x["workflowId"] for x in stranded(scene)["workflows"]}}
    (done,) = scene.wait(lambda: actions(scene, "strandedRecover"), "the recovery audited")
    assert done["outcome"] == "succeeded" and done["result"] == {"executorCount": 1}
