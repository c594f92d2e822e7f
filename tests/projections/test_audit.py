"""The audit log on both stores: its entries in the store's order, who registered an executor, old events."""

from __future__ import annotations

import pytest

from relay_es.projections import audit
from tests.projections.history import tables
from tests.support import World, info


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def test_audit_log_tells_the_story_in_order(world: World) -> None:
    world.connect("A")
    world.connect("B")
    world.drop("A")
    world.advance(10)
    world.answer(world.dispatcher.last())
    world.drop("B")
    world.connect("B")
    world.runner.catch_up()
    a = [e.action for e in audit.query(world.db, org="local", app="app", executor_id="A")]
    assert a == ["executor.connected", "executor.disconnected", "executor.declared_dead", "recovery.dispatched",
                 "recovery.confirmed", "executor.deleted"]
    b = [e.action for e in audit.query(world.db, org="local", app="app", executor_id="B")]
    assert b == ["executor.connected", "executor.disconnected", "executor.reconnected"]
    everything = audit.query(world.db, org="local", limit=1000)
    assert [e.seq for e in everything] == sorted(e.seq for e in everything)
    assert everything[0].action == "app.registered"
    assert everything[1].action == "app.updated"
    assert everything[1].detail == {"changes": {"executorTimeoutSecs": 10}}
    page1 = audit.query(world.db, org="local", limit=3)
    page2 = audit.query(world.db, org="local", after=page1[-1].seq, limit=3)
    assert [e.seq for e in page1 + page2] == [e.seq for e in everything[:6]]


# ------------------------------------------------------------ who registered an executor (issue 11)


def test_the_audit_of_a_connect_names_the_token_and_the_address_it_came_with(world: World) -> None:
    # A second socket with another key superseded an executor, and the audit named neither key nor address.
    world.relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1",
                                   token="deploy", peer="10.0.0.7")
    world.relay.executor_connected("local", "app", info("A"), connection_id="c2", owner="relay-1",
                                   token="laptop", peer="2001:db8::9")
    world.relay.executor_connected("local", "app", info("B"), connection_id="c3", owner="relay-1")  # development mode
    world.sync()
    first, second = audit.query(world.db, org="local", app="app", executor_id="A")
    assert first.action == second.action == "executor.connected"
    assert (first.detail["token"], first.detail["peer"]) == ("deploy", "10.0.0.7")
    assert (second.detail["token"], second.detail["peer"]) == ("laptop", "2001:db8::9")
    assert second.detail["supersededConnectionId"] == "c1"
    (b,) = audit.query(world.db, org="local", app="app", executor_id="B")
    assert b.detail["token"] is None and b.detail["peer"] is None
    world.drop("A")
    world.relay.executor_connected("local", "app", info("A"), connection_id="c4", owner="relay-1",
                                   token="deploy", peer="10.0.0.8")
    world.sync()
    again = audit.query(world.db, org="local", app="app", executor_id="A")[-1]
    assert again.action == "executor.reconnected" and (again.detail["token"], again.detail["peer"]) == (
        "deploy", "10.0.0.8")
    live = tables(world)
    world.runner.rebuild()
    assert tables(world) == live


def test_a_connected_event_stored_before_token_and_peer_reads_as_unknown(world: World) -> None:
    """Events recorded by an older Relay carry neither field: they still load, replay and project."""
    import json

    from eventsourcing.persistence import StoredEvent

    from relay_es.aggregates.executor import Executor, executor_stream_id

    sid = executor_stream_id("local", "app", "Old")
    relay = world.relay
    registered = Executor(org="local", app="app", executor_id="Old", timestamp=world.clock.now())
    registered.connect(connection_id="c-old", owner="relay-1", app_version="v1", hostname="h", language="python",
                       dbos_version="3", executor_metadata=None, at=world.clock.now(), token="x", peer="y")
    stored = [relay.mapper.to_stored_event(e) for e in registered.collect_events()]
    state = json.loads(stored[1].state)
    assert state.pop("token") == "x" and state.pop("peer") == "y"
    stored[1] = StoredEvent(stored[1].originator_id, stored[1].originator_version, stored[1].topic,
                            json.dumps(state).encode())
    relay.recorder.insert_events(stored)
    (event,) = [e for e in relay.stream(sid) if type(e).__name__ == "Connected"]
    assert event.token is None and event.peer is None
    assert world.relay.get_executor("local", "app", "Old").status == "HEALTHY"
    world.sync()
    (entry,) = audit.query(world.db, org="local", app="app", executor_id="Old")
    assert entry.detail["token"] is None and entry.detail["peer"] is None and entry.detail["connectionId"] == "c-old"
    live = tables(world)
    world.runner.rebuild()
    assert tables(world) == live


# ------------------------------------------------------------ operators' actions (issue 13)

from relay_es.engine.action_commands import Actor, Outcome  # noqa: E402
from tests.projections.history import busy_history  # noqa: E402


def _cancel(world: World, request_id: str, **overrides):
    fields = dict(request_id=request_id, operation="cancelWorkflow", actor=Actor.token("deploy"), source="10.0.0.7",
                  target_type="workflow", target_ids=["wf-1"])
    fields.update(overrides)
    return world.relay.record_action_requested("local", "app", **fields)


def test_an_action_is_audited_who_asked_what_on_what_and_how_it_ended(world: World) -> None:
    world.connect("A")
    action_id = _cancel(world, "r1", parameters={"reason": "stuck"})
    world.advance(1)
    world.relay.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="A")
    dev = world.relay.record_action_requested("local", "app", request_id="r2", operation="setLatestAppVersion",
                                              actor=Actor.development(), source="127.0.0.1", target_type="version",
                                              target_ids=["v2"])
    world.relay.record_action_completed(dev, outcome=Outcome.NO_HEALTHY_EXECUTOR)
    world.sync()
    entries = [e for e in audit.query(world.db, org="local", limit=1000) if e.action.startswith("action.")]
    assert [e.action for e in entries] == ["action.requested", "action.completed"] * 2
    requested, completed, dev_requested, dev_completed = entries
    assert (requested.org, requested.app, requested.executor_id) == ("local", "app", None)
    assert requested.detail == {
        "actionId": str(action_id), "requestId": "r1", "operation": "cancelWorkflow",
        "actor": {"kind": "token", "id": "deploy"}, "source": "10.0.0.7",
        "target": {"type": "workflow", "ids": ["wf-1"], "count": 1}, "parameters": {"reason": "stuck"}}
    assert (completed.org, completed.app, completed.executor_id) == ("local", "app", "A")  # the executor that answered
    assert completed.detail == {"actionId": str(action_id), "operation": "cancelWorkflow", "outcome": "succeeded",
                                "message": None, "executorId": "A", "result": {}}
    assert completed.at - requested.at == world.clock.now() - requested.at
    assert dev_requested.detail["actor"] == {"kind": "user", "id": "development"}
    assert dev_requested.detail["target"] == {"type": "version", "ids": ["v2"], "count": 1}
    assert dev_completed.detail["outcome"] == "no_healthy_executor" and dev_completed.executor_id is None
    # the executor's own page of the log shows what it was asked to do
    a = [e.action for e in audit.query(world.db, org="local", app="app", executor_id="A")]
    assert a == ["executor.connected", "action.completed"]


def test_a_bulk_action_and_a_hostile_one_are_audited_bounded_and_escaped(world: World) -> None:
    ids = [f"wf-{i}" for i in range(1000)]
    bulk = _cancel(world, "r1", operation="bulkCancelWorkflows", target_ids=ids)
    world.relay.record_action_completed(bulk, outcome=Outcome.SUCCEEDED, executor_id="A",
                                        result={"cancelled": 999, "failed": 1})
    hostile = _cancel(world, "r2", target_ids=["wf\x00\n\x1b[2J" + "x" * 5000], source="1.2.3.4\r\nX: y",
                      parameters={"note": "\u202eevil"})
    world.relay.record_action_completed(hostile, outcome=Outcome.FAILED, executor_id="A",
                                        message="no such workflow: wf\x00\n" + "y" * 10_000)
    world.sync()
    entries = [e for e in audit.query(world.db, org="local", limit=1000) if e.action.startswith("action.")]
    bulk_requested, bulk_completed, requested, completed = entries
    assert bulk_requested.detail["target"] == {"type": "workflow", "ids": ids[:100], "count": 1000}
    assert bulk_completed.detail["result"] == {"cancelled": 999, "failed": 1}
    (target,) = requested.detail["target"]["ids"]
    assert target.startswith("wf\\x00\\n\\x1b[2J") and target.endswith("…")
    assert requested.detail["source"] == "1.2.3.4\\r\\nX: y"
    assert requested.detail["parameters"] == {"note": "\\u202eevil"}
    assert completed.detail["message"].startswith("no such workflow: wf\\x00\\n") and len(
        completed.detail["message"]) == 2001
    assert completed.detail["outcome"] == "failed"


def test_a_rebuild_gives_identical_rows_with_actions_among_everything_else(world: World) -> None:
    busy_history(world)
    for i, outcome in enumerate(Outcome):
        action_id = _cancel(world, f"r{i}", target_ids=[f"wf-{i}"])
        world.advance(1)
        world.relay.record_action_completed(action_id, outcome=outcome, executor_id=None if i == 3 else "B",
                                            message=None if i == 0 else f"because {i}")
    pending = _cancel(world, "still-running")  # requested, not completed yet
    world.sync()
    assert audit.query(world.db, org="local", limit=1000)[-1].detail["actionId"] == str(pending)
    live = tables(world)
    assert sum(row[5].startswith("action.") for row in live["relay_audit"]) == 2 * len(Outcome) + 1
    world.runner.rebuild()
    assert tables(world) == live
    # the log resumes mid-stream: an action requested before a restart completes after it
    world.restart()
    world.relay.record_action_completed(pending, outcome=Outcome.SUCCEEDED, executor_id="B")
    world.sync()
    last = audit.query(world.db, org="local", limit=1000)[-1]
    assert (last.action, last.app, last.detail["operation"]) == ("action.completed", "app", "cancelWorkflow")
    live = tables(world)
    world.runner.rebuild()
    assert tables(world) == live


def test_entry_for_an_action_is_pure_and_needs_its_requested_event_first() -> None:
    from datetime import datetime, timezone

    from relay_es.aggregates.action import Action

    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    action = Action.request(org="o", app=None, request_id="r", operation="createRole", actor_kind="token",
                            actor="admin", source=None, target_type="role", target_ids=["ops"], at=t0)
    action.complete(outcome=Outcome.FAILED, message="exists", at=t0)
    requested, completed = action.collect_events()
    assert audit.entry_for(completed, 2, context={}) is None  # where it belongs is not known yet
    context: dict = {}
    first = audit.entry_for(requested, 1, context=context)
    second = audit.entry_for(completed, 2, context=context)
    assert (first.org, first.app, first.action, second.action) == ("o", None, "action.requested", "action.completed")
    assert context == {str(action.id): ("o", None, "createRole")}
    assert second.detail["operation"] == "createRole" and second.detail["message"] == "exists"
