"""End to end: the workflow reads of the Conductor API (``relay_es/adapters/rest/workflows.py``)
through a real ``relay serve`` to a real Python (``dbos==3.2.0``) and a real TypeScript
(``@dbos-inc/dbos-sdk@5.2.11``) executor, on the ground of ``tests/e2e/ground.py`` (one workflow
of every kind); Relay's own store on SQLite and on Postgres.

Every operation answers what the executor's own system database holds (read directly with
``tests/e2e/sysdb.py``), in the reference's shape (``tests/conductor_schema.py``): the list and
its filters, pagination and order, one workflow, its steps, events, messages and stream, the
aggregates, and the metrics Relay collected (``listMetrics``).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conductor_schema import check_response
from tests.e2e.ground import QUEUE, Ground
from tests.e2e.sysdb import STREAM_CLOSED, decode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def rfc(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def ok(operation: str, r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, (operation, r.text[:2000])
    body = r.json()
    check_response(operation, status, body)
    return body


def ids_of(workflows: list[dict[str, Any]]) -> list[str]:
    return [w["workflowId"] for w in workflows]


def check_reads(g: Ground) -> None:
    db, ids = g.db, g.ids
    A = f"/v2/orgs/local/apps/{g.app}"
    prefix = ids["running"].rsplit("-", 1)[0] + "-"  # "py-" / "ts-"
    mine = [ids["running"], ids["failed"], ids["steps"], ids["parent"], *ids["queued"], *ids["children"]]

    def api(method: str, path: str, **kw: Any) -> httpx.Response:
        return g.scene.api(method, A + path, **kw)

    # --- listWorkflows: every workflow, as the system database has it ------------------------
    listed = {w["workflowId"]: w for w in ok("listWorkflows", api("GET", "/workflows", params={
        "loadInput": "true", "loadOutput": "true"}))}
    assert set(mine) <= set(listed), sorted(set(mine) - set(listed))
    for wf in mine:
        row, w = db.workflow(wf), listed[wf]
        assert row is not None
        assert (w["status"], w["workflowName"], w["queueName"], w["appVersion"]) == (
            row["status"], row["name"], row["queue_name"], row["application_version"]), (wf, w)
        assert (w["executorId"], w["parentWorkflowId"], w["createdAt"]) == (
            row["executor_id"], row["parent_workflow_id"], rfc(row["created_at"])), (wf, w)
        assert w["wasForkedFrom"] is False and w["forkedFrom"] is None
    assert "steps done" in (listed[ids["steps"]]["output"] or "")
    assert "failed on purpose" in (listed[ids["failed"]]["error"] or "")
    assert listed[ids["steps"]]["input"] is not None and listed[ids["steps"]]["completedAt"] is not None
    assert {listed[c]["parentWorkflowId"] for c in ids["children"]} == {ids["parent"]}
    # without loadInput / loadOutput, neither comes
    bare = {w["workflowId"]: w for w in ok("listWorkflows", api("GET", "/workflows"))}
    assert (bare[ids["steps"]]["input"], bare[ids["steps"]]["output"]) == (None, None)

    # filters, pagination and order
    assert ids_of(ok("listWorkflows", api("GET", "/workflows", params={"status": "ERROR"}))) == [ids["failed"]]
    assert ids_of(ok("listWorkflows", api("GET", "/workflows", params={"workflowName": "steps_workflow"}))) == \
        [ids["steps"]]
    blocked = [r["workflow_uuid"] for r in db.workflows(name="blocked_workflow")]  # oldest first
    assert set(blocked) == {ids["running"], *ids["queued"]}
    assert ids_of(ok("listWorkflows", api("GET", "/workflows", params={"workflowName": "blocked_workflow"}))) == blocked
    assert ids_of(ok("listWorkflows", api("GET", "/workflows", params={
        "workflowName": "blocked_workflow", "sortDesc": "true", "limit": 2, "offset": 1}))) == blocked[::-1][1:3]

    # --- searchWorkflows: WorkflowSearchBody's filters ------------------------------------
    def search(**body: Any) -> list[str]:
        return ids_of(ok("searchWorkflows", api("POST", "/workflows/search", json=body)))

    assert set(search(workflowIdPrefix=[prefix])) == set(mine)
    assert search(workflowIds=[ids["failed"], ids["parent"]], sortDesc=True) == sorted(
        [ids["failed"], ids["parent"]], key=lambda wf: db.workflow(wf)["created_at"], reverse=True)
    assert search(workflowIdPrefix=[prefix], status=["ERROR"]) == [ids["failed"]]
    assert sorted(search(parentWorkflowId=[ids["parent"]])) == sorted(ids["children"])
    assert sorted(search(workflowIdPrefix=[prefix], hasParent=True)) == sorted(ids["children"])
    assert set(search(workflowIdPrefix=[prefix], hasParent=False, wasForkedFrom=False)) == \
        set(mine) - set(ids["children"])
    assert search(workflowIdPrefix=[prefix], wasForkedFrom=True) == []
    # queuesOnly: the queue's workflows still waiting or running, not those done. The one running
    # is released to finish SUCCESS, the next one then runs, the last one waits.
    [first] = [wf for wf in ids["queued"] if db.status(wf) == "PENDING"]
    g.executor.release(first)
    g.scene.wait(lambda: sorted(map(str, db.statuses(ids["queued"]).values())) == ["ENQUEUED", "PENDING", "SUCCESS"],
                 "the queue's first workflow to finish and the next one to run")
    assert set(search(queueName=[QUEUE])) == set(ids["queued"])
    assert set(search(queuesOnly=True, queueName=[QUEUE])) == set(ids["queued"]) - {first}
    assert set(search(workflowName=["child_workflow", "parent_workflow"], workflowIdPrefix=[prefix])) == \
        {ids["parent"], *ids["children"]}
    assert set(search(executorId=[g.executor.executor_id], appVersion=["v1"], workflowIdPrefix=[prefix])) == {
        wf for wf in mine if (db.workflow(wf)["executor_id"], db.workflow(wf)["application_version"]) ==
        (g.executor.executor_id, "v1")}
    created = db.workflow(ids["parent"])["created_at"]
    later = {wf for wf in mine if db.workflow(wf)["created_at"] >= created}
    assert set(search(workflowIdPrefix=[prefix], startTime=rfc(created))) == later
    assert search(workflowIdPrefix=[prefix], endTime="2000-01-01T00:00:00Z") == []
    assert search(workflowIdPrefix=[prefix], completedBefore="2000-01-01T00:00:00Z") == []
    assert len(search(workflowIdPrefix=[prefix], limit=3, offset=2)) == 3
    assert search(scheduleName=[g.schedule], workflowIdPrefix=[prefix]) == []
    ticks = search(scheduleName=[g.schedule])
    assert ticks and all(db.workflow(t)["name"] == "tick_workflow" for t in ticks)
    found = ok("searchWorkflows", api("POST", "/workflows/search", json={
        "workflowIds": [ids["steps"]], "loadInput": True, "loadOutput": True}))
    assert "steps done" in found[0]["output"]

    # --- getWorkflow -----------------------------------------------------------------------
    for wf in (ids["running"], ids["failed"], ids["steps"], ids["queued"][2], ids["children"][0]):
        w = ok("getWorkflow", api("GET", f"/workflows/{wf}"))
        row = db.workflow(wf)
        assert (w["workflowId"], w["status"], w["workflowName"], w["createdAt"], w["queueName"]) == (
            wf, row["status"], row["name"], rfc(row["created_at"]), row["queue_name"])
    assert "failed on purpose" in ok("getWorkflow", api("GET", f"/workflows/{ids['failed']}"))["error"]
    tick = ticks[0]  # sched-<schedule>-<ISO time>: ':' and '+' in a workflow id
    w = ok("getWorkflow", api("GET", "/workflows/" + quote(tick, safe="")))
    assert (w["workflowId"], w["scheduleName"], w["workflowName"]) == (tick, g.schedule, "tick_workflow")
    ok("listWorkflowSteps", api("GET", "/workflows/" + quote(tick, safe="") + "/steps"))
    r = api("GET", f"/workflows/{prefix}no-such-workflow")
    assert r.status_code == 404 and "no-such-workflow" in r.json()["detail"], r.text
    check_response("getWorkflow", 404, r.json())

    # --- listWorkflowSteps ----------------------------------------------------------------
    steps = ok("listWorkflowSteps", api("GET", f"/workflows/{ids['steps']}/steps"))
    rows = db.steps(ids["steps"])
    assert [(s["stepId"], s["stepName"]) for s in steps] == [(r["function_id"], r["function_name"]) for r in rows]
    by_name = [s for s in steps if not s["stepName"].startswith("DBOS.")]
    assert [s["stepName"] for s in by_name] == ["plain_step", "flaky_step", "failing_step", "plain_step"]
    assert "failing_step always fails" in (by_name[2]["error"] or "") and by_name[2]["output"] is None
    assert "10" in by_name[0]["output"] and by_name[0]["error"] is None
    assert all(s["completedAt"] is not None for s in by_name)
    page = ok("listWorkflowSteps", api("GET", f"/workflows/{ids['steps']}/steps", params={"limit": 2, "offset": 1}))
    assert [s["stepId"] for s in page] == [s["stepId"] for s in steps[1:3]]
    children = ok("listWorkflowSteps", api("GET", f"/workflows/{ids['parent']}/steps"))
    assert [s["childWorkflowId"] for s in children if s["stepName"] == "child_workflow"] == ids["children"]

    # --- events, notifications, streams ---------------------------------------------------
    events = {e["key"]: e["value"] for e in ok("listWorkflowEvents", api("GET", f"/workflows/{ids['steps']}/events"))}
    assert set(events) == set(db.events(ids["steps"])) == {"progress", "result"}
    assert "steps done" in events["result"] and "3" in events["progress"]
    running = ok("listWorkflowEvents", api("GET", f"/workflows/{ids['running']}/events"))
    assert [e["key"] for e in running] == ["state"] and "waiting" in running[0]["value"]
    notes = ok("listWorkflowNotifications", api("GET", f"/workflows/{ids['running']}/notifications"))
    rows = db.notifications(ids["running"])
    assert [(n["topic"], n["consumed"], n["createdAt"]) for n in notes] == [
        (r["topic"], bool(r["consumed"]), rfc(r["created_at_epoch_ms"])) for r in rows]
    assert len(notes) == 1 and "a note for you" in notes[0]["message"]
    streams = ok("listWorkflowStreams", api("GET", f"/workflows/{ids['steps']}/streams"))
    written = [decode(r["value"]) for r in db.streams(ids["steps"])]
    assert [s["key"] for s in streams] == ["numbers"]
    assert streams[0]["values"][:3] == ["0", "1", "2"] and len(streams[0]["values"]) in (3, len(written))
    assert written[-1] == STREAM_CLOSED
    assert ok("listWorkflowEvents", api("GET", f"/workflows/{ids['failed']}/events")) == []

    # --- aggregates --------------------------------------------------------------------------
    counts = ok("getWorkflowAggregates", api("POST", "/workflows/aggregates", json={
        "groupByStatus": True, "selectCount": True, "selectMinCreatedAt": True, "workflowIdPrefix": [prefix]}))
    want: dict[str, int] = {}
    for st in db.statuses(mine).values():
        want[str(st)] = want.get(str(st), 0) + 1
    assert {a["group"]["status"]: a["count"] for a in counts} == want
    oldest = min(db.workflow(wf)["created_at"] for wf in mine)
    assert min(a["minCreatedAt"] for a in counts) == rfc(oldest)
    by_name = ok("getWorkflowAggregates", api("POST", "/workflows/aggregates", json={
        "groupByWorkflowName": True, "workflowIdPrefix": [prefix], "hasParent": True}))
    assert [(a["group"]["name"], a["count"]) for a in by_name] == [("child_workflow", 2)]
    step_counts = ok("getStepAggregates", api("POST", "/steps/aggregates", json={
        "groupByFunctionName": True, "selectCount": True, "workflowIdPrefix": [ids["steps"]]}))
    want = {}
    for r in db.steps(ids["steps"]):
        want[r["function_name"]] = want.get(r["function_name"], 0) + 1
    assert {a["group"]["function_name"]: a["count"] for a in step_counts} == want
    by_status = ok("getStepAggregates", api("POST", "/steps/aggregates", json={
        "groupByStatus": True, "workflowIdPrefix": [ids["steps"]], "status": ["ERROR"]}))
    assert [(a["group"]["status"], a["count"]) for a in by_status] == [("ERROR", 1)]


# --- listMetrics: collected every second (the grounds' RELAY_METRICS_INTERVAL_SECS) ---------------


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def bucket(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def truth(g: Ground, start: int, end: int) -> Counter[tuple[str, str, str]]:
    """What the system database holds for the buckets of ``[start, end)``, counted as the SDKs count."""
    counted: Counter[tuple[str, str, str]] = Counter()
    for r in g.db._rows("SELECT name, created_at FROM {s}.workflow_status WHERE created_at >= %s AND "
                        "created_at < %s AND application_name = %s", (start * 1000, end * 1000, g.scene.app)):
        counted[(bucket(int(r["created_at"]) // 1000), "workflow_count", r["name"])] += 1
    for r in g.db._rows("SELECT function_name, completed_at_epoch_ms FROM {s}.operation_outputs WHERE "
                        "completed_at_epoch_ms >= %s AND completed_at_epoch_ms < %s AND application_name = %s",
                        (start * 1000, end * 1000, g.scene.app)):
        counted[(bucket(int(r["completed_at_epoch_ms"]) // 1000), "step_count", r["function_name"])] += 1
    return counted


def answered(g: Ground, start: int, end: int) -> tuple[Counter[tuple[str, str, str]], list[dict[str, Any]]]:
    r = g.scene.api("GET", f"/v2/orgs/local/apps/{g.scene.app}/metrics",
                    params={"startTime": iso(start), "endTime": iso(end)})
    assert r.status_code == 200, r.text
    body = r.json()
    check_response("listMetrics", 200, body)
    return Counter({(m["timeBucket"], m["metricType"], m["metricName"]): m["value"] for m in body
                    if m["metricType"] != "recovery_count"}), body


def check_metrics(g: Ground) -> None:
    """For a window Relay has collected, ``listMetrics`` holds exactly what the system database
    holds (workflows created per name, steps completed per function, per one-second bucket,
    counted as the SDKs count), and ``/metrics`` has the application's workflows by name."""
    first = min(int(w["created_at"]) for w in g.db.workflows()) // 1000
    # the scheduled tick goes on creating workflows: compare a window that ended a little ago
    end = int(time.time()) - 2
    want = truth(g, first, end)
    assert any(k[1] == "workflow_count" for k in want) and any(k[1] == "step_count" for k in want), want
    deadline = time.monotonic() + 30
    while True:
        got, body = answered(g, first, end)
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == want, {"missing": want - got, "extra": got - want}
    app_id = g.scene.api("GET", f"/v2/orgs/local/apps/{g.scene.app}").json()["id"]
    assert {m["appId"] for m in body} == {app_id} and {m["granularity"] for m in body} == {1}

    text = g.scene.api("GET", "/metrics").text
    fams = {f.name: f.samples for f in text_string_to_metric_families(text)}
    by_name = {s.labels["workflow"]: s.value for s in fams["relay_app_workflows"]
               if s.name == "relay_app_workflows_total" and s.labels["app"] == g.scene.app}
    for (_, kind, name), n in want.items():
        if kind == "workflow_count":
            assert by_name.get(name, 0) >= n, (name, by_name)


def test_every_workflow_read_answers_what_the_system_database_holds(grounds: dict[str, Ground]) -> None:
    for sdk, g in grounds.items():
        try:
            check_reads(g)
            check_metrics(g)
        except AssertionError as e:
            raise AssertionError(f"{sdk}: {e}") from e
