"""End to end: the workflow actions of the Conductor API (``relay_es/adapters/rest/workflow_actions.py``)
through a real ``relay serve`` to a real Python (``dbos==3.2.0``) and a real TypeScript
(``@dbos-inc/dbos-sdk@5.2.11``) executor, on the ground of ``tests/e2e/ground.py``; Relay's own
store on SQLite and on Postgres.

Each action really happens in the executor's own system database (read with ``tests/e2e/sysdb.py``):
a cancelled workflow is CANCELLED, a resumed one finishes, a fork runs from the given step under a
new id with the steps before it copied, a delete with children removes them, the bulk forms act on
every workflow named, and an exported workflow imports into another application of the same SDK
language (a Python export is a pickle, a TypeScript one JSON: the other language refuses it, 422).
Each action is on record in the audit log, with its outcome.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conductor_schema import check_response
from tests.e2e.ground import Ground
from tests.e2e.scene import Scene, TsScene
from tests.e2e.sysdb import SystemDb, decode
from tests.rest_client import as_records

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]


def ok(operation: str, r: httpx.Response, status: int) -> Any:
    assert r.status_code == status, (operation, r.status_code, r.text[:2000])
    body = r.json() if r.content else None
    check_response(operation, status, body)
    return body


def own_steps(rows: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    return [(s["function_id"], s["function_name"], decode(s["output"])) for s in rows]


def step_id(g: Ground, workflow_id: str, name: str, last: bool = False) -> int:
    ids = [s["function_id"] for s in g.db.steps(workflow_id) if s["function_name"] == name]
    return ids[-1] if last else ids[0]


def actions(g: Ground, app: str, count: int) -> list[dict[str, Any]]:
    """``app``'s actions in the audit log once ``count`` have completed: operation, outcome, message."""
    def done() -> list[dict[str, Any]] | None:
        r = g.scene.api("GET", "/v2/orgs/local/audit-logs", params={"limit": 1000})
        assert r.status_code == 200, r.text
        found = []
        for req, completed in as_records(r.json(), app):
            if req["operation"] == "registerApp":  # the scene's own
                continue
            a = {"operation": req["operation"], "actor": req["actor"], "ids": req["target"]["ids"]}
            if completed is not None:
                a.update(outcome=completed["outcome"], message=completed["message"], result=completed["result"])
            found.append(a)
        return found if len([a for a in found if "outcome" in a]) >= count else None

    return g.scene.wait(done, f"{count} actions of {app} on record", timeout=20)


class OtherPyScene(Scene):
    app = "e2e-app-2"


class OtherTsScene(TsScene):
    app = "e2e-ts-app-2"


def other_app(g: Ground) -> Scene:
    """A second application of ``g``'s SDK language, with its own system database and one executor."""
    scene = (OtherPyScene if g.sdk == "python" else OtherTsScene)(g.scene.server, g.scene.admin_url)
    scene.spawn(f"{g.sdk}-importer")
    return scene


def test_cancel_resume_fork_delete_export_import(grounds: dict[str, Ground]) -> None:
    blobs: dict[str, str] = {}
    others: list[Scene] = []
    try:
        for sdk, g in grounds.items():
            try:
                others.append(other_app(g))
                blobs[sdk] = check_single_actions(g, others[-1])
            except AssertionError as e:
                raise AssertionError(f"{sdk}: {e}") from e
        # a workflow exported by one SDK does not import into the other's application
        for sdk, g in grounds.items():
            foreign = blobs["typescript" if sdk == "python" else "python"]
            r = ok("importWorkflow", g.scene.api("POST", f"/v2/orgs/local/apps/{g.app}/workflows/import",
                                                  json={"serializedWorkflow": foreign}), 422)
            assert r["title"] == "executor reported an error" and "import" in r["detail"].lower(), r
            ok("exportWorkflow", g.scene.api("GET", f"/v2/orgs/local/apps/{g.app}/workflows/{g.ids['steps']}/export"),
               200)
            on_record = actions(g, g.app, 7)
            assert [(a["operation"], a["outcome"]) for a in on_record] == [
                ("cancelWorkflow", "succeeded"), ("resumeWorkflow", "succeeded"), ("forkWorkflow", "succeeded"),
                ("forkWorkflow", "succeeded"), ("deleteWorkflow", "succeeded"), ("deleteWorkflow", "succeeded"),
                ("importWorkflow", "failed")], on_record
            assert on_record[-1]["message"] and not on_record[-1]["result"]
    finally:
        for s in others:
            s.close()


def check_single_actions(g: Ground, other: Scene) -> str:
    """Cancel, resume, fork (twice), delete with children, export then import into ``other``; the export."""
    ids, db = g.ids, g.db
    W = f"/v2/orgs/local/apps/{g.app}/workflows"

    # cancel: the running workflow is CANCELLED
    ok("cancelWorkflow", g.scene.api("POST", f"{W}/{ids['running']}/cancel", json={"cancelChildren": False}), 204)
    g.scene.wait(lambda: db.status(ids["running"]) == "CANCELLED", "running to be CANCELLED", timeout=20)
    # resume: it runs again, and finishes once released
    ok("resumeWorkflow", g.scene.api("POST", f"{W}/{ids['running']}/resume"), 204)
    g.scene.wait(lambda: db.status(ids["running"]) in ("ENQUEUED", "PENDING"), "running to be resumed", timeout=20)
    g.scene.wait(lambda: db.status(ids["running"]) == "PENDING", "running to run again", timeout=30)
    g.executor.release(ids["running"])
    g.scene.wait(lambda: db.status(ids["running"]) == "SUCCESS", "the resumed workflow to finish", timeout=30)

    # fork from the failing step: a new workflow, the steps before it copied, the rest run again
    k = step_id(g, ids["steps"], "failing_step")
    r = g.scene.api("POST", f"{W}/{ids['steps']}/fork", json={"startStep": k})
    new = ok("forkWorkflow", r, 201)["workflowId"]
    assert new != ids["steps"] and r.headers["location"] == f"{W}/{new}"
    g.scene.wait(lambda: db.status(new) == "SUCCESS", "the fork to finish", timeout=30)
    assert db.workflow(new)["forked_from"] == ids["steps"]
    before = [s for s in own_steps(db.steps(ids["steps"])) if s[0] < k]
    assert before and [s for s in own_steps(db.steps(new)) if s[0] < k] == before
    assert [s[1] for s in own_steps(db.steps(new))] == [s[1] for s in own_steps(db.steps(ids["steps"]))]
    # without startStep, under a chosen id: the whole workflow again (the flaky step is retried anew)
    chosen = f"{ids['steps']}-again"
    got = ok("forkWorkflow", g.scene.api("POST", f"{W}/{ids['steps']}/fork", json={"newWorkflowId": chosen}), 201)
    assert got == {"workflowId": chosen}
    g.scene.wait(lambda: db.status(chosen) == "SUCCESS", "the whole fork to finish", timeout=30)
    assert db.workflow(chosen)["forked_from"] == ids["steps"]
    flaky = [s for s in own_steps(db.steps(chosen)) if s[1] == "flaky_step"]
    assert len(flaky) == 1 and flaky[0][2] == "ok after 2 attempts", flaky

    # delete with children: the parent and its children are gone; without, only the one named
    ok("deleteWorkflow", g.scene.api("DELETE", f"{W}/{ids['parent']}", params={"deleteChildren": "true"}), 204)
    g.scene.wait(lambda: db.statuses([ids["parent"], *ids["children"]]) ==
                 {w: None for w in [ids["parent"], *ids["children"]]}, "parent and children deleted", timeout=20)
    assert db.steps(ids["parent"]) == [] and db.steps(ids["children"][0]) == []
    ok("deleteWorkflow", g.scene.api("DELETE", f"{W}/{chosen}"), 204)
    g.scene.wait(lambda: db.status(chosen) is None, "the fork deleted", timeout=20)
    assert db.status(new) == "SUCCESS"

    # export, and import into another application of the same SDK: it lands in that one's database
    blob = ok("exportWorkflow", g.scene.api("GET", f"{W}/{ids['steps']}/export"), 200)["serializedWorkflow"]
    assert blob
    ok("exportWorkflow", g.scene.api("GET", f"{W}/{g.ids['running']}-nonexistent/export"), 404)
    there = SystemDb(other.sys_db)
    assert there.workflow(ids["steps"]) is None
    ok("importWorkflow", other.api("POST", f"/v2/orgs/local/apps/{other.app}/workflows/import",
                                   json={"serializedWorkflow": blob}), 201)
    row = there.workflow(ids["steps"])
    assert row is not None and row["status"] == "SUCCESS" and row["name"] == "steps_workflow", row
    assert own_steps(there.steps(ids["steps"])) == own_steps(db.steps(ids["steps"]))
    assert there.events(ids["steps"]) == db.events(ids["steps"])
    # importing it again: it exists there already
    ok("importWorkflow", other.api("POST", f"/v2/orgs/local/apps/{other.app}/workflows/import",
                                   json={"serializedWorkflow": blob}), 409)
    [first, again] = actions(g, other.app, 2)
    assert (first["operation"], first["outcome"], again["outcome"]) == ("importWorkflow", "succeeded", "failed")
    return blob


def test_the_bulk_actions(grounds: dict[str, Ground]) -> None:
    for sdk, g in grounds.items():
        try:
            check_bulk_actions(g)
        except AssertionError as e:
            raise AssertionError(f"{sdk}: {e}") from e


def check_bulk_actions(g: Ground) -> None:
    ids, db = g.ids, g.db
    W = f"/v2/orgs/local/apps/{g.app}/workflows"
    queued = ids["queued"]

    ok("bulkCancelWorkflows", g.scene.api("POST", f"{W}/bulk-cancel", json={"workflowIds": queued}), 204)
    g.scene.wait(lambda: set(db.statuses(queued).values()) == {"CANCELLED"}, "the queued cancelled", timeout=20)
    ok("bulkResumeWorkflows", g.scene.api("POST", f"{W}/bulk-resume", json={"workflowIds": queued}), 204)
    g.scene.wait(lambda: "CANCELLED" not in db.statuses(queued).values(), "the queued resumed", timeout=20)
    assert set(db.statuses(queued).values()) <= {"ENQUEUED", "PENDING"}

    # fork from failure: each from its own last failed step (the failed workflow has none: its last step)
    got = ok("bulkForkWorkflowsFromFailure", g.scene.api("POST", f"{W}/bulk-fork-from-failure",
                                                         json={"workflowIds": [ids["failed"], ids["steps"]]}), 200)
    forked_failed, forked_steps = got["workflowIds"]
    g.scene.wait(lambda: db.status(forked_failed) == "ERROR" and db.status(forked_steps) == "SUCCESS",
                 "the forks to finish", timeout=30)
    assert db.workflow(forked_failed)["forked_from"] == ids["failed"]
    assert db.workflow(forked_steps)["forked_from"] == ids["steps"]
    k = step_id(g, ids["steps"], "failing_step")
    before = [s for s in own_steps(db.steps(ids["steps"])) if s[0] < k]
    assert [s for s in own_steps(db.steps(forked_steps)) if s[0] < k] == before and len(before) == 2, before
    # from the last step of a name: every step before it copied
    got = ok("bulkForkWorkflowsFromFailure", g.scene.api("POST", f"{W}/bulk-fork-from-failure", json={
        "workflowIds": [ids["steps"]], "fromStepName": "plain_step"}), 200)
    [by_name] = got["workflowIds"]
    g.scene.wait(lambda: db.status(by_name) == "SUCCESS", "the fork by step name to finish", timeout=30)
    k = step_id(g, ids["steps"], "plain_step", last=True)
    before = [s for s in own_steps(db.steps(ids["steps"])) if s[0] < k]
    assert [s for s in own_steps(db.steps(by_name)) if s[0] < k] == before and len(before) == 3, before
    # a step name the workflow lacks: the executor's refusal, 422
    ok("bulkForkWorkflowsFromFailure", g.scene.api("POST", f"{W}/bulk-fork-from-failure", json={
        "workflowIds": [ids["steps"]], "fromStepName": "no_such_step"}), 422)

    # bulk delete (the queued ones cancelled first, so none is running when its rows go)
    ok("bulkCancelWorkflows", g.scene.api("POST", f"{W}/bulk-cancel", json={"workflowIds": queued}), 204)
    g.scene.wait(lambda: set(db.statuses(queued).values()) == {"CANCELLED"}, "the queued cancelled", timeout=20)
    gone = [*queued, forked_failed, forked_steps, by_name, ids["parent"]]
    ok("bulkDeleteWorkflows", g.scene.api("POST", f"{W}/bulk-delete",
                                          json={"workflowIds": gone, "deleteChildren": True}), 204)
    g.scene.wait(lambda: set(db.statuses([*gone, *ids["children"]]).values()) == {None}, "all deleted", timeout=20)
    assert db.status(ids["steps"]) == "SUCCESS" and db.status(ids["failed"]) == "ERROR"

    on_record = actions(g, g.app, 7)
    assert [(a["operation"], a["outcome"]) for a in on_record] == [
        ("bulkCancelWorkflows", "succeeded"), ("bulkResumeWorkflows", "succeeded"),
        ("bulkForkWorkflowsFromFailure", "succeeded"), ("bulkForkWorkflowsFromFailure", "succeeded"),
        ("bulkForkWorkflowsFromFailure", "failed"), ("bulkCancelWorkflows", "succeeded"),
        ("bulkDeleteWorkflows", "succeeded")], on_record
    assert on_record[0]["ids"] == queued and on_record[2]["result"] == {"forkedCount": 2,
                                                                       "firstWorkflowId": forked_failed}
    assert on_record[-1]["ids"] == gone
