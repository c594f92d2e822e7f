"""Read models on both stores: exactly-once tracking, rebuilds, time travel, history."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest

from relay_es.adapters.lease import Lease
from relay_es.adapters.stores import parse_database_url
from relay_es.aggregates import SettingsPatch
from relay_es.projections import audit
from relay_es.projections.executors import all_rows
from relay_es.engine.queries import executor_history, executors_as_of
from tests.support import World, info


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def tables(world: World) -> dict[str, list[Any]]:
    out = {}
    with world.db.read() as cur:
        for t, key in (("relay_executors", "stream_id"), ("relay_audit", "seq"), ("relay_apps", "stream_id"),
                       ("relay_tokens", "stream_id"), ("relay_audit_streams", "stream_id")):
            cur.execute(f"SELECT * FROM {t} ORDER BY {key}")
            out[t] = [tuple(r) for r in cur.fetchall()]
    return out


def busy_history(world: World) -> None:
    """A bit of everything: deaths, recoveries, retries, reconnects, settings, tokens."""
    for name in ("A", "B", "C", "D"):
        world.connect(name)
    world.connect("E", "v2")
    world.drop("A")
    world.drop("D")
    world.advance(5)
    world.connect("D")  # back within grace
    world.advance(5)
    first = world.dispatcher.last()
    world.answer(first, ok=False, reason="boom")
    world.advance(1)
    world.answer(world.dispatcher.last())
    world.drop("E")
    world.advance(10)  # E (v2) dead, no candidate: waiting
    world.relay.update_app("local", "app", SettingsPatch(gc_rows_threshold=1000, global_timeout=timedelta(hours=1)))
    world.relay.register_app("local", "other", private_mode=True)
    world.relay.create_token("local", "ci", app_names=["app"])
    world.relay.revoke_token("local", "ci")
    world.relay.delete_app("local", "other")
    world.sync()


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


def test_rebuild_matches_the_live_tables_row_for_row(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    assert live["relay_audit"] and live["relay_executors"] and live["relay_apps"] and live["relay_tokens"]
    n = world.runner.rebuild()
    assert n >= len(live["relay_audit"])
    assert tables(world) == live
    world.runner.rebuild(["audit"])
    assert tables(world) == live


def test_rebuild_command_a_user_can_run(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    world.close()  # the command runs against the store, as a user would
    env = {**os.environ, "RELAY_DATABASE_URL": world.store_url}
    out = subprocess.run([sys.executable, "-m", "relay_es", "projections", "rebuild"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rebuilt executors, audit, apps from" in out.stdout
    world._open()
    assert tables(world) == live


def test_rebuild_command_refuses_while_relay_is_running(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    held = Lease(parse_database_url(world.store_url))
    held.acquire()  # what a running `relay serve` holds
    try:
        env = {**os.environ, "RELAY_DATABASE_URL": world.store_url}
        out = subprocess.run([sys.executable, "-m", "relay_es", "projections", "rebuild"], env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        held.release()
    assert out.returncode == 1
    assert "cannot rebuild while Relay is running" in out.stderr and "Stop `relay serve` first" in out.stderr
    assert tables(world) == live  # nothing was dropped


def test_each_event_is_applied_once_even_with_crashes_and_concurrent_runners(world: World) -> None:
    busy_history(world)
    world.runner.rebuild()
    expected = tables(world)
    # A crash in the middle of a batch: nothing of it is kept, the position does not move.
    world.runner.rebuild([])  # no-op rebuild leaves everything as is
    with world.db.transaction() as cur:
        for t in ("relay_executors", "relay_audit", "relay_audit_streams", "relay_apps", "relay_tokens"):
            cur.execute(f"DELETE FROM {t}")
        cur.execute("UPDATE relay_tracking SET position = 0")
    projection = world.runner.projections[1]
    original = projection.write
    calls = {"n": 0}

    def crash_once(cur: Any, **kw: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("power cut")
        original(cur, **kw)

    projection.write = crash_once
    with pytest.raises(RuntimeError):
        world.runner.run_batch()
    assert world.runner.position() == 0
    # Two runners racing over the same store.
    errors: list[BaseException] = []

    def run() -> None:
        try:
            world.runner.catch_up()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    world.runner.catch_up()
    assert tables(world) == expected


def test_executors_table_as_of_any_past_instant(world: World) -> None:
    snapshots = []

    def snap() -> None:
        world.runner.catch_up()
        live = sorted((r.executor_id, r.status, r.incarnation, r.deadline) for r in all_rows(world.db, org="local")
                      if r.visible)
        snapshots.append((world.clock.now(), live))
        world.clock.advance(0.5)  # the next change happens strictly later

    snap()
    world.connect("A")
    world.connect("B")
    snap()
    world.drop("A")
    snap()
    world.advance(10)
    snap()
    world.answer(world.dispatcher.last())
    snap()
    world.advance(1)
    world.connect("A")  # same id again: a new incarnation in the same stream
    snap()
    for at, expected in snapshots:
        past = executors_as_of(world.relay, world.db, "local", "app", at)
        assert sorted((r.executor_id, r.status, r.incarnation, r.deadline) for r in past) == expected, at


def test_history_is_readable_in_order_after_deletion(world: World) -> None:
    world.connect("A")
    world.connect("B")
    world.drop("A")
    world.advance(10)
    world.answer(world.dispatcher.last())
    assert world.status("A") == "DELETED"
    h = executor_history(world.relay, "local", "app", "A")
    assert [x["version"] for x in h] == list(range(1, len(h) + 1))
    assert [x["type"] for x in h] == ["Registered", "Connected", "Disconnected", "DeclaredDead", "RecoveryDispatched",
                                     "RecoveryConfirmed", "Deleted"]
    assert h[2]["data"]["reason"] == "socket_closed"
    assert h[2]["data"]["deadline"].endswith("Z")
    assert h[4]["data"]["target_executor_id"] == "B"
    assert all(x["at"].endswith("Z") and len(x["at"]) == 24 for x in h)


def test_executor_metadata_shaped_like_the_stores_own_wrappers_is_kept_as_sent(world: World) -> None:
    # An executor's metadata is its own JSON. Objects shaped like the event store's type wrappers once made
    # the stream unreadable (an unknown _type_) or changed type (a known one) when read back.
    meta = {"x": {"_type_": "nope", "_data_": 1}, "y": [{"_type_": "timedelta_us", "_data_": 5}],
            "z": {"_type_": "datetime_iso", "_data_": "2026-01-01T00:00:00+00:00"}}
    world.relay.executor_connected("local", "app", info("P", executor_metadata=meta), connection_id="c-P",
                                   owner="relay-1")
    world.sync()
    assert world.relay.get_executor("local", "app", "P").executor_metadata == meta
    world.runner.catch_up()
    (row,) = [r for r in all_rows(world.db, org="local") if r.executor_id == "P"]
    assert row.executor_metadata == meta
    assert executor_history(world.relay, "local", "app", "P")[1]["data"]["executor_metadata"] == meta
    world.drop("P")
    world.advance(11)  # the stream still loads: P can be declared dead and its work recovered
    assert world.status("P") == "DEAD"


def test_a_storm_s_batch_is_written_in_bulk_and_replaying_it_changes_nothing(world: World) -> None:
    """Batches of many rows take the bulk path (Postgres: COPY into a staging table, one
    INSERT ... SELECT ... ON CONFLICT); a batch replayed over rows already written keeps the
    newer rows (version guard) and adds no audit entry twice."""
    from relay_es.adapters.stores import COPY_MIN_ROWS
    from relay_es.aggregates.executor import executor_stream_id

    n = 3 * COPY_MIN_ROWS
    relay = world.relay
    relay.execute([relay.op_connected("local", "app", info(f"x{i}"), connection_id=f"c{i}", owner=world.owner)
                   for i in range(n)])
    relay.execute([relay.op_disconnected(executor_stream_id("local", "app", f"x{i}"), connection_id=f"c{i}",
                                         reason="socket_closed") for i in range(0, n, 2)])
    world.runner.catch_up()
    live = tables(world)
    assert sum(1 for r in all_rows(world.db) if r.status == "DISCONNECTED") == n // 2
    assert len([e for e in audit.query(world.db, org="local", limit=1000) if (e.executor_id or "").startswith("x")]) \
        == n + n // 2  # one entry per connect, one per disconnect
    # the same events once more, over the rows they produced (and the Connected ones over newer rows)
    with world.db.transaction() as cur:
        cur.execute("UPDATE relay_tracking SET position = 0")
    for p in world.runner.projections:
        p.forget()
    world.runner._cached_at.clear()
    world.runner.catch_up()
    assert tables(world) == live
    world.runner.rebuild()
    assert tables(world) == live


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
