"""The audit log's fold: an action's request makes its row, its completion finishes it; Conductor's
target; and on both stores, through the runner: bounded and escaped, rebuilt identical, resumed
mid-action after a restart."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from relay_es.aggregates.action import TARGET_IDS_BYTES, Action
from relay_es.engine.action_commands import Actor, Outcome
from relay_es.projections import actions
from relay_es.projections.actions import ActionRow, ActionsProjection, conductor_target
from tests.projections.history import busy_history, tables
from tests.support import World

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def request(n: int = 1, **kw: object) -> Action:
    fields: dict = dict(org="acme", app="orders", request_id=f"r{n}", operation="cancelWorkflow", actor_kind="token",
                        actor="ci", source="10.0.0.1", target_type="workflow", target_ids=["wf-1"],
                        parameters={"startStep": 2}, at=T0)
    fields.update(kw)
    return Action.request(**fields)


def test_a_request_makes_a_row_and_its_completion_finishes_it() -> None:
    a = request()
    a.complete(outcome="succeeded", executor_id="A", result={"workflowId": "wf-2"}, at=T0 + timedelta(seconds=1))
    asked, done = a.collect_events()
    p = ActionsProjection()
    sid = str(a.id)
    assert p.missing([(7, sid, asked)]) == []  # a request makes its row: nothing to read
    p.apply(7, sid, asked)
    (made,) = p.changes()
    assert made == ActionRow(sid, 7, 1, "acme", "orders", T0, "cancelWorkflow", "token", "ci", "10.0.0.1",
                             "workflow", ["wf-1"], 1, {"startStep": 2})
    assert made.outcome is None  # not completed yet: the log says pending
    p.apply(9, sid, done)
    p.apply(9, sid, done)  # folded once
    (finished,) = p.changes()
    assert finished.seq == 7  # the request's place in the log
    assert (finished.outcome, finished.executor_id, finished.result) == ("succeeded", "A", {"workflowId": "wf-2"})
    assert finished.completed_at == T0 + timedelta(seconds=1)
    assert p.changes() == []


def test_a_completion_of_an_uncached_action_asks_for_its_row() -> None:
    a = request()
    a.complete(outcome="failed", message="no such workflow", at=T0)
    asked, done = a.collect_events()
    sid = str(a.id)
    first = ActionsProjection()
    first.apply(1, sid, asked)
    stored = first.changes()[0]

    p = ActionsProjection()  # a later batch, after a restart
    assert p.missing([(2, sid, done)]) == [sid]
    p.loaded([sid], {sid: stored})
    p.apply(2, sid, done)
    (row,) = p.changes()
    assert row.outcome == "failed" and row.message == "no such workflow" and row.seq == 1

    lost = ActionsProjection()  # its request was skipped as unstorable: nothing to complete
    lost.loaded([sid], {})
    lost.apply(2, sid, done)
    assert lost.changes() == []


def test_an_event_recorded_before_the_ids_budget_folds_within_it() -> None:
    """A store holds Requested events of 100 ids of 255 emoji (100 KB an entry): the row, live or
    rebuilt, keeps the first that fit in the budget, and the true count."""
    wide = ["\U0001F600" * 255 + f"{i}" for i in range(100)]
    old = Action(org="acme", app="orders", request_id="r1", operation="bulkCancelWorkflows", actor_kind="token",
                 actor="ci", source=None, target_type="workflow", target_ids=wide, target_count=100, parameters={},
                 timestamp=T0)  # as recorded then, not through request()
    (asked,) = old.collect_events()
    p = ActionsProjection()
    p.apply(1, str(old.id), asked)
    (row,) = p.changes()
    assert row.target_ids == wide[:4] and row.target_count == 100
    assert sum(len(t.encode()) for t in row.target_ids) <= TARGET_IDS_BYTES


def test_conductor_s_target_is_the_one_target_named_else_the_application_else_the_org() -> None:
    def target(**kw: object) -> tuple[str, str]:
        a = request(**kw)
        p = ActionsProjection()
        p.apply(1, str(a.id), a.collect_events()[0])
        return conductor_target(p.changes()[0])

    assert target() == ("workflow", "wf-1")
    assert target(target_ids=["w1", "w2"]) == ("application", "orders")  # a bulk action
    assert target(target_type="version", target_ids=["v2"]) == ("application", "orders")  # not Conductor's type
    assert target(target_type="executor", target_ids=["A"]) == ("application", "orders")
    assert target(app=None, operation="createToken", target_type="token", target_ids=["ci"]) == ("token", "ci")
    assert target(app=None, target_type="organization", target_ids=[]) == ("organization", "acme")


# ------------------------------------------------------------ through the runner, both stores


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def _cancel(world: World, request_id: str, **overrides: object):
    fields: dict = dict(request_id=request_id, operation="cancelWorkflow", actor=Actor.token("deploy"),
                        source="10.0.0.7", target_type="workflow", target_ids=["wf-1"])
    fields.update(overrides)
    return world.relay.record_action_requested("local", "app", **fields)


def test_an_action_is_on_record_who_asked_what_on_what_and_how_it_ended(world: World) -> None:
    world.connect("A")
    action_id = _cancel(world, "r1", parameters={"reason": "stuck"})
    world.advance(1)
    world.relay.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="A")
    dev = world.relay.record_action_requested("local", "app", request_id="r2", operation="setLatestAppVersion",
                                              actor=Actor.development(), source="127.0.0.1", target_type="version",
                                              target_ids=["v2"])
    world.relay.record_action_completed(dev, outcome=Outcome.NO_HEALTHY_EXECUTOR)
    world.sync()
    dev_row, row = actions.query(world.db, org="local")  # newest first
    assert (row.action_id, row.org, row.app, row.operation) == (str(action_id), "local", "app", "cancelWorkflow")
    assert (row.actor_kind, row.actor, row.source) == ("token", "deploy", "10.0.0.7")
    assert (row.target_type, row.target_ids, row.target_count, row.parameters) == (
        "workflow", ["wf-1"], 1, {"reason": "stuck"})
    assert (row.outcome, row.executor_id, row.message, row.result) == ("succeeded", "A", None, {})
    assert row.completed_at - row.at == world.clock.now() - row.at
    assert (dev_row.actor_kind, dev_row.actor, dev_row.outcome) == ("user", "development", "no_healthy_executor")
    assert conductor_target(dev_row) == ("application", "app")  # a version is not one of Conductor's targets


def test_a_bulk_action_and_a_hostile_one_are_on_record_bounded_and_escaped(world: World) -> None:
    ids = [f"wf-{i}" for i in range(1000)]
    bulk = _cancel(world, "r1", operation="bulkCancelWorkflows", target_ids=ids)
    world.relay.record_action_completed(bulk, outcome=Outcome.SUCCEEDED, executor_id="A",
                                        result={"cancelled": 999, "failed": 1})
    hostile = _cancel(world, "r2", target_ids=["wf\x00\n\x1b[2J" + "x" * 5000], source="1.2.3.4\r\nX: y",
                      parameters={"note": "\u202eevil"})
    world.relay.record_action_completed(hostile, outcome=Outcome.FAILED, executor_id="A",
                                        message="no such workflow: wf\x00\n" + "y" * 10_000)
    world.sync()
    row, bulk_row = actions.query(world.db, org="local")
    assert (bulk_row.target_ids, bulk_row.target_count) == (ids[:100], 1000)
    assert bulk_row.result == {"cancelled": 999, "failed": 1}
    (target,) = row.target_ids
    assert target.startswith("wf\\x00\\n\\x1b[2J") and target.endswith("…")
    assert row.source == "1.2.3.4\\r\\nX: y" and row.parameters == {"note": "\\u202eevil"}
    assert row.message.startswith("no such workflow: wf\\x00\\n") and len(row.message) == 2001
    assert row.outcome == "failed"


def test_a_rebuild_gives_identical_rows_and_the_log_resumes_mid_action(world: World) -> None:
    busy_history(world)
    for i, outcome in enumerate(Outcome):
        action_id = _cancel(world, f"r{i}", target_ids=[f"wf-{i}"])
        world.advance(1)
        world.relay.record_action_completed(action_id, outcome=outcome, executor_id=None if i == 3 else "B",
                                            message=None if i == 0 else f"because {i}")
    pending = _cancel(world, "still-running")  # requested, not completed yet
    world.sync()
    newest = actions.query(world.db, org="local", limit=1)[0]
    assert newest.action_id == str(pending) and newest.outcome is None
    live = tables(world)
    assert len(live["relay_actions"]) == len(Outcome) + 1 + 3  # busy_history's three
    world.runner.rebuild()
    assert tables(world) == live
    # an action requested before a restart completes after it
    world.restart()
    world.relay.record_action_completed(pending, outcome=Outcome.SUCCEEDED, executor_id="B")
    world.sync()
    done = actions.query(world.db, org="local", limit=1)[0]
    assert (done.action_id, done.outcome, done.executor_id) == (str(pending), "succeeded", "B")
    live = tables(world)
    world.runner.rebuild()
    assert tables(world) == live
