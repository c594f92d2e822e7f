"""End to end: the ground of the workflow operations holds, in each executor's own system database,
one workflow of every kind, on a real ``relay serve`` with a Python and a TypeScript executor;
Relay's own store on SQLite and on Postgres. Releasing the blocked workflow finishes it."""

from __future__ import annotations

import pytest

from tests.e2e.ground import QUEUE, Ground
from tests.e2e.sysdb import STREAM_CLOSED, decode, text

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def names(steps: list[dict]) -> list[str]:
    return [s["function_name"] for s in steps]


def check(g: Ground) -> None:
    db, ids = g.db, g.ids
    rows = {wf: db.workflow(wf) for wf in [ids["running"], ids["failed"], ids["steps"], ids["parent"],
                                           *ids["queued"], *ids["children"]]}
    assert {r["name"] for r in rows.values()} == {"blocked_workflow", "failing_workflow", "steps_workflow",
                                                  "parent_workflow", "child_workflow"}, rows
    assert {r["executor_id"] for r in rows.values() if r["status"] != "ENQUEUED"} == {g.executor.executor_id}
    assert {r["application_version"] for r in rows.values() if r["status"] != "ENQUEUED"} == {"v1"}
    # queued: on the queue of concurrency 1, one runs (blocked) and two wait
    assert {rows[wf]["queue_name"] for wf in ids["queued"]} == {QUEUE}
    assert sorted(rows[wf]["status"] for wf in ids["queued"]) == ["ENQUEUED", "ENQUEUED", "PENDING"]
    # running: blocked in recv, its event set
    assert rows[ids["running"]]["status"] == "PENDING"
    assert decode(db.events(ids["running"])["state"]) == "waiting"
    # failed: its error is recorded, after one successful step
    assert rows[ids["failed"]]["status"] == "ERROR"
    assert text(db.outcome(ids["failed"])["error"]) == "failing_workflow failed on purpose"
    assert names(db.steps(ids["failed"]))[:1] == ["plain_step"]
    # with steps: four steps of its own (the retried one once, the failed one with its error)
    steps = db.steps(ids["steps"])
    own = [s for s in steps if not s["function_name"].startswith("DBOS.")]
    assert names(own) == ["plain_step", "flaky_step", "failing_step", "plain_step"], names(steps)
    assert [decode(s["output"]) for s in own] == [10, "ok after 2 attempts", None, 20]
    assert [text(s["error"]) for s in own] == [None, None, "failing_step always fails", None]
    assert text(db.outcome(ids["steps"])["output"]) == "steps done"
    assert {"DBOS.setEvent", "DBOS.writeStream", "DBOS.closeStream", "DBOS.send"} <= set(names(steps)), \
        names(steps)
    # events, stream, notification
    assert {k: decode(v) for k, v in db.events(ids["steps"]).items()} == \
        {"progress": {"done": 3}, "result": "steps done"}
    stream = db.streams(ids["steps"])
    assert [(s["key"], s["offset"], decode(s["value"])) for s in stream] == \
        [("numbers", 0, 0), ("numbers", 1, 1), ("numbers", 2, 2), ("numbers", 3, STREAM_CLOSED)]
    notes = db.notifications(ids["running"])
    assert [(n["topic"], decode(n["message"])) for n in notes] == [("note", "a note for you")], notes
    # children
    assert db.children(ids["parent"]) == sorted(ids["children"])
    assert {db.status(c) for c in ids["children"]} == {"SUCCESS"}
    assert [(s["function_name"], s["child_workflow_id"]) for s in db.steps(ids["parent"])] == \
        [("child_workflow", c) for c in ids["children"]] + [("DBOS.getResult", c) for c in ids["children"]]
    # the schedule, and a tick it fired
    schedule = db.schedule(g.schedule)
    assert schedule is not None and schedule["status"] == "ACTIVE" and schedule["workflow_name"] == "tick_workflow"
    assert any(w["status"] == "SUCCESS" for w in db.workflows(name="tick_workflow"))


def test_every_kind_of_workflow_is_on_the_ground(grounds: dict[str, Ground]) -> None:
    for sdk, g in grounds.items():
        try:
            check(g)
        except AssertionError as e:
            raise AssertionError(f"{sdk}: {e}") from e
    # the running workflow and the queue's head finish when released; the queue then moves on
    for g in grounds.values():
        g.executor.release(g.ids["running"])
        head = next(wf for wf in g.ids["queued"] if g.db.status(wf) == "PENDING")
        g.executor.release(head)
    for g in grounds.values():
        g.scene.wait(lambda g=g: g.db.status(g.ids["running"]) == "SUCCESS", f"{g.sdk} running to finish")
        g.scene.wait(lambda g=g: sorted(map(str, g.db.statuses(g.ids["queued"]).values())) ==
                     ["ENQUEUED", "PENDING", "SUCCESS"], f"{g.sdk} queue to move on")
        assert decode(g.db.events(g.ids["running"])["state"]) == "released"
        assert text(g.db.outcome(g.ids["running"])["output"]) == "running: go"
