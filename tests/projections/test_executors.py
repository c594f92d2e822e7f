"""The executors read model on both stores: rows as folded, the executor's own JSON kept as sent."""

from __future__ import annotations

import pytest

from relay_es.projections.executors import all_rows
from relay_es.engine.queries import executor_history
from tests.support import World, info


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


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
    assert executor_history(world.relay, "local", "app", "P")[1]["data"]["executorMetadata"] == meta
    world.drop("P")
    world.advance(11)  # the stream still loads: P can be declared dead and its work recovered
    assert world.status("P") == "DEAD"


def test_a_batch_folds_each_stream_as_the_pure_fold_does_and_leaves_rows_handed_out_unchanged(world: World) -> None:
    """Within a batch the projection applies a stream's later events to the row it made for the
    first, in place; the rows match :func:`fold` of the same events, and a row that
    :meth:`changes` handed out is never changed by the next batch."""
    from relay_es.aggregates.executor import Executor
    from relay_es.projections.executors import ExecutorsProjection, fold
    from tests.projections.history import busy_history

    busy_history(world)
    world.connect("A")  # A, recovered dead, comes back
    items = [it for it in world.relay.notifications(0, 100_000) if type(it[2]).__qualname__.startswith("Executor.")]
    streams: dict[str, list] = {}
    for _, sid, e in items:
        streams.setdefault(sid, []).append(e)
    assert max(len(es) for es in streams.values()) >= 6
    assert {type(e) for es in streams.values() for e in es} >= {
        Executor.Registered, Executor.Connected, Executor.Disconnected, Executor.DeclaredDead,
        Executor.RecoveryDispatched, Executor.RecoveryFailed, Executor.RecoveryConfirmed}

    whole = ExecutorsProjection()
    whole.loaded(list(streams), {})
    for it in items:
        whole.apply(*it)
    assert {r.stream_id: r for r in whole.changes()} == {sid: fold(es) for sid, es in streams.items()}

    halves = ExecutorsProjection()
    halves.loaded(list(streams), {})
    cut = len(items) // 2
    for it in items[:cut]:
        halves.apply(*it)
    first = halves.changes()
    before = [dict(r.__dict__) for r in first]
    for it in items[cut:]:
        halves.apply(*it)
    assert [dict(r.__dict__) for r in first] == before
    assert {r.stream_id: r for r in halves.changes()} == {
        sid: fold(es) for sid, es in streams.items() if any(e in es for _, _, e in items[cut:])}
