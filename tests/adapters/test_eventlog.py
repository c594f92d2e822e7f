"""The fast notification reader gives the library's domain events, field for field, on both stores."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from eventsourcing.persistence import StoredEvent

from relay_es.adapters.eventlog import EventLog
from relay_es.aggregates.executor import OpaqueJSON
from relay_es.aggregates import SettingsPatch
from tests.projections.history import busy_history
from tests.support import World, info


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def library_events(world: World) -> list[tuple[int, Any]]:
    return [(n.id, world.relay.mapper.to_domain_event(n))
            for n in world.relay.recorder.select_notifications(start=0, limit=100_000, inclusive_of_start=False)]


def same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a.__dict__ == b.__dict__ and type(a.originator_id) is type(b.originator_id)


def test_every_event_type_reads_back_as_the_library_reads_it(world: World) -> None:
    busy_history(world)
    world.relay.update_app("local", "app", SettingsPatch(executor_timeout=timedelta(seconds=7)))
    # Executor metadata is the executor's own JSON. Relay records it as one string now (OpaqueJSON), but
    # streams written before hold it as plain JSON: values shaped like the transcoder's wrappers, nested lists
    # of objects, the wrapper's text inside a string. Those events are read as the library reads them.
    odd = {"_type_": "timedelta_us", "_data_": 1500000}
    meta = {"wrapped": odd, "deep": [{"x": [odd, {"_type_": "datetime_iso", "_data_": "2026-01-01T00:00:00+00:00"}]}],
            "text": '{"_type_":"timedelta_us","_data_":1}', "three": {"_type_": "timedelta_us", "_data_": 1, "z": 2}}
    world.relay.executor_connected("local", "app", info("M", executor_metadata=meta), connection_id="c-M",
                                   owner="relay-1")
    old_stream = UUID(int=12345)
    ts = {"_type_": "datetime_iso", "_data_": "2026-11-28T15:49:18.908857+00:00"}
    world.relay.recorder.insert_events([
        StoredEvent(old_stream, 1, "relay_es.aggregates.executor:Executor.Registered", json.dumps(
            {"timestamp": ts, "originator_topic": "relay_es.aggregates.executor:Executor", "org": "local",
             "app": "app", "executor_id": "OLD"}, separators=(",", ":")).encode()),
        StoredEvent(old_stream, 2, "relay_es.aggregates.executor:Executor.Connected", json.dumps(
            {"timestamp": ts, "connection_id": "c", "owner": "relay-1", "app_version": "v1", "hostname": "h",
             "language": "python", "dbos_version": "3.2.0", "executor_metadata": meta, "previous_status": None,
             "superseded_connection": None, "incarnation": 1}, separators=(",", ":")).encode()),
    ])
    expected = library_events(world)
    kinds = {type(e).__qualname__ for _, e in expected}
    assert {"Executor.Registered", "Executor.Connected", "Executor.Disconnected", "Executor.DeclaredDead",
            "Executor.RecoveryDispatched", "Executor.RecoveryFailed", "Executor.RecoveryConfirmed",
            "Executor.Deleted", "Application.Registered", "Application.SettingsChanged", "Application.Deleted",
            "Token.Created", "Token.Revoked"} <= kinds
    log = EventLog(world.relay)
    got: list[tuple[int, Any]] = []
    after = 0
    while batch := log.read(after, 7):  # small pages: paging must neither skip nor repeat
        assert all(sid == str(e.originator_id) for _, sid, e in batch)
        got += [(n, e) for n, _, e in batch]
        after = batch[-1][0]
    assert [n for n, _ in got] == [n for n, _ in expected]
    for (n, mine), (_, theirs) in zip(got, expected):
        assert same(mine, theirs), (n, mine, theirs)
    connected = [e for _, e in got if type(e).__qualname__ == "Executor.Connected"]
    assert connected[-2].executor_metadata == OpaqueJSON(meta)  # recorded now: kept as it came
    old = connected[-1].executor_metadata  # recorded before: what the library makes of it, too
    assert old["wrapped"] == timedelta(seconds=1.5)
    assert old["three"] == {"_type_": "timedelta_us", "_data_": 1, "z": 2}


def test_an_unreadable_state_fails_as_the_library_fails(world: World) -> None:
    world.connect("A")
    log = EventLog(world.relay)
    with pytest.raises(Exception) as mine:
        log.event("0" * 32, 1, "relay_es.aggregates.executor:Executor.Connected", b"{nope")
    with pytest.raises(Exception) as theirs:
        world.relay.mapper.to_domain_event(StoredEvent(UUID(int=0), 1, "relay_es.aggregates.executor:Executor.Connected",
                                                       b"{nope"))
    assert type(mine.value) is type(theirs.value)
