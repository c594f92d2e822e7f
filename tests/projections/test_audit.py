"""The audit log on both stores: its entries in the store's order, who registered an executor, old events."""

from __future__ import annotations

import pytest

from relay_es.engine.action_commands import Actor, Outcome
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


def test_operator_actions_are_not_in_the_lifecycle_feed(world: World) -> None:
    """They are the audit log (tests/projections/test_actions.py)."""
    world.connect("A")
    done = world.relay.record_action_requested("local", "app", request_id="r1", operation="cancelWorkflow",
                                               actor=Actor.token("deploy"), source=None, target_type="workflow",
                                               target_ids=["wf-1"])
    world.relay.record_action_completed(done, outcome=Outcome.SUCCEEDED, executor_id="A")
    world.sync()
    assert not [e for e in audit.query(world.db, org="local", limit=1000) if e.action.startswith("action.")]
    assert audit.query(world.db, org="local", limit=1000)[-1].action == "executor.connected"


def test_keys_that_passed_apart_are_checked_together() -> None:
    """org, app and executor id of 1,000 bytes each pass one by one (at most 1,024) and not together
    (at most 2,560): what passed may not depend on the values this process folded before, or a
    rebuild's share, which saw other streams, keeps or skips other entries than the live runner."""
    import pytest

    from relay_es.projections.audit import AuditProjection
    from relay_es.projections.storable import Unstorable
    from tests.aggregates.support import Driver

    connected = Driver("e").connect()
    big, small = "x" * 1000, "s"
    p = AuditProjection()
    p.context = {"1": (big, small, small), "2": (small, big, small), "3": (small, small, big), "4": (big, big, big)}
    for sid in "123":
        p.apply(1, sid, connected)
    with pytest.raises(Unstorable, match="together"):
        p.apply(2, "4", connected)
    assert [(e.org, e.app, e.executor_id) for e in p.entries] == [p.context[sid] for sid in "123"]
