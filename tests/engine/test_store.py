"""Relay's event store plumbing: listeners, snapshots that never fail a save, the executor cache,
many streams at once, on the in-memory store (the library's public API) and on both real stores."""

from __future__ import annotations

import logging

import pytest

from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates.executor import executor_stream_id
from relay_es.engine.service import Relay
from relay_es.engine.store import SNAPSHOT_EVERY, LibraryReads
from tests.support import POPO, info


@pytest.fixture(params=["popo", "sqlite", "postgres"])
def relay(request: pytest.FixtureRequest, clock, tmp_path) -> Relay:
    if request.param == "popo":
        r = Relay(POPO, clock=clock)
        assert isinstance(r.reads, LibraryReads)
    else:
        url = f"sqlite:///{tmp_path}/relay.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
        r = Relay(event_store_env(parse_database_url(url)), clock=clock)
    yield r
    r.close()


def test_listeners_hear_the_highest_notification_id_and_never_fail_a_save(relay: Relay) -> None:
    heard = []
    relay.add_listener(heard.append)
    relay.add_listener(lambda top: 1 / 0)
    assert relay.executor_connected("local", "app", info("A"), connection_id="c", owner="o")
    assert heard == [relay.recorder.max_notification_id()]


def test_a_saves_observers_count_it_before_its_listeners_wake_anyone(relay: Relay) -> None:
    """/metrics counts the transitions with an observer and the executors from the process manager's
    rows, which a listener wakes: a scrape must not see the executor before its transition."""
    heard: list[str] = []
    relay.add_listener(lambda top: heard.append("listener"))
    relay.save_observers.append(lambda took, events: heard.append("observer"))
    assert relay.executor_connected("local", "app", info("A"), connection_id="c", owner="o")
    assert heard == ["observer", "listener"]


def test_a_snapshot_is_taken_every_interval_and_failing_to_take_one_fails_no_save(relay: Relay, caplog) -> None:
    sid = executor_stream_id("local", "app", "A")
    relay.executor_connected("local", "app", info("A"), connection_id="c0", owner="o")  # versions 1, 2
    for i in range(SNAPSHOT_EVERY // 2 - 2):  # up to version 98
        relay.executor_disconnected(sid, connection_id=f"c{i}", reason="socket_closed")
        relay.executor_connected("local", "app", info("A"), connection_id=f"c{i + 1}", owner="o")
    relay.executor_disconnected(sid, connection_id=f"c{SNAPSHOT_EVERY // 2 - 2}", reason="socket_closed")
    assert [s.originator_version for s in relay.snapshots.recorder.select_events(sid)] == []  # version 99
    relay.executor_connected("local", "app", info("A"), connection_id="c-last", owner="o")
    assert relay.get_executor("local", "app", "A").version == SNAPSHOT_EVERY
    assert [s.originator_version for s in relay.snapshots.recorder.select_events(sid)] == [SNAPSHOT_EVERY]
    relay.take_snapshot = lambda *a, **k: 1 / 0  # the store goes away just after the events are recorded
    with caplog.at_level(logging.WARNING):
        for i in range(SNAPSHOT_EVERY // 2):
            assert relay.executor_disconnected(sid, connection_id="c-last" if i == 0 else f"d{i}",
                                               reason="socket_closed")
            assert relay.executor_connected("local", "app", info("A"), connection_id=f"d{i + 1}", owner="o")
    assert relay.get_executor("local", "app", "A").version == 2 * SNAPSHOT_EVERY
    assert "snapshot not taken" in caplog.text


def test_load_many_mixes_cached_and_stored_streams(relay: Relay) -> None:
    for name in ("A", "B"):
        relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="o")
    a, b = (executor_stream_id("local", "app", n) for n in ("A", "B"))
    relay._forget([b])
    loaded = relay.load_many([a, b])
    assert set(loaded) == {a, b}
    assert loaded[a] is not relay._cache[a] and vars(loaded[a]) == vars(relay._cache[a])
    assert vars(loaded[b]) == vars(relay.repository.get(b)) and b in relay._cache


def test_warm_reads_the_executors_the_cache_lacks_in_batches(relay: Relay) -> None:
    for name in "ABCDE":
        relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="o")
    ids = [executor_stream_id("local", "app", n) for n in "ABCDE"]
    relay._forget(ids[1:])
    held = relay._cache[ids[0]]
    read_in: list[int] = []
    load_many = relay.load_many
    relay.load_many = lambda chunk: read_in.append(len(chunk)) or load_many(chunk)  # type: ignore[method-assign]
    unknown = executor_stream_id("local", "app", "never-seen")
    assert relay.warm([*ids, unknown], batch=2) == 4
    assert read_in == [1, 2, 2]  # A was held: its batch read B alone; the unknown stream is read, not held
    assert relay._cache[ids[0]] is held
    for sid in ids[1:]:
        assert vars(relay._cache[sid]) == {**vars(relay.repository.get(sid)), "_pending_events": []}
    assert unknown not in relay._cache
    assert relay.warm(ids) == 0  # all held: nothing read


def test_warm_stops_when_asked_and_never_fills_the_cache_past_its_bound(relay: Relay, monkeypatch) -> None:
    from relay_es.engine import store

    for name in "ABC":
        relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="o")
    ids = [executor_stream_id("local", "app", n) for n in "ABC"]
    relay._forget(ids)
    assert relay.warm(ids, stop=lambda: True) == 0 and not relay._cache
    monkeypatch.setattr(store, "CACHE_MAX", 2)
    assert relay.warm(ids, batch=1) == 2  # past the bound the cache would be emptied: the third waits
    assert set(relay._cache) == set(ids[:2])


def test_a_read_overtaken_by_a_save_and_an_eviction_does_not_put_the_older_copy_back(relay: Relay) -> None:
    """A read of version 2 is on its way; meanwhile a disconnect saves version 3 and a conflicting
    batch evicts the stream. The read must not be held: a disconnect of the connection the store
    has as current would meet a copy that has another, refuse, and save nothing to correct it."""
    relay.executor_connected("local", "app", info("A"), connection_id="c-1", owner="o")  # versions 1, 2
    sid = executor_stream_id("local", "app", "A")
    relay._forget([sid])
    real = relay.reads.streams

    def overtaken(ids: list) -> dict:
        got = real(ids)  # version 2, as the store holds it now
        relay.reads.streams = real  # type: ignore[method-assign]
        assert relay.executor_disconnected(sid, connection_id="c-1", reason="socket_closed")  # version 3, held
        assert relay.executor_connected("local", "app", info("A"), connection_id="c-2", owner="o")  # version 4
        relay._forget([sid])  # a conflicting batch evicts it
        return got

    relay.reads.streams = overtaken  # type: ignore[method-assign]
    assert relay.load_many([sid])[sid].version == 2  # the command that read it is refused by the store
    assert sid not in relay._cache  # not held: the next read gets version 4
    assert relay.executor_disconnected(sid, connection_id="c-2", reason="socket_closed")
    assert relay.get_executor("local", "app", "A").status == "DISCONNECTED"


def test_evictions_are_bounded_and_a_read_begun_before_the_bound_holds_nothing(relay: Relay, monkeypatch) -> None:
    from relay_es.engine import store

    for name in "ABC":
        relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="o")
    ids = [executor_stream_id("local", "app", n) for n in "ABC"]
    monkeypatch.setattr(store, "CACHE_MAX", 2)
    relay._forget(ids[:1])
    real = relay.reads.streams

    def overtaken(wanted: list) -> dict:
        got = real(wanted)
        relay._forget(ids[1:])  # three streams evicted in all: more than the bound keeps track of
        return got

    relay.reads.streams = overtaken  # type: ignore[method-assign]
    relay.load_many(ids[:1])
    assert not relay._evicted and not relay._cache
    relay.reads.streams = real  # type: ignore[method-assign]
    relay.load_many(ids)  # begun after: held
    assert set(relay._cache) == set(ids)


def test_a_read_that_finds_the_cache_full_and_empties_it_is_not_held(relay: Relay, monkeypatch) -> None:
    """Emptying the cache evicts what it held, the newer copy of the stream being read too."""
    from relay_es.engine import store

    for name in "AB":
        relay.executor_connected("local", "app", info(name), connection_id=f"c-{name}", owner="o")
    a = executor_stream_id("local", "app", "A")
    relay._forget([a])
    monkeypatch.setattr(store, "CACHE_MAX", 2)
    real = relay.reads.streams

    def overtaken(ids: list) -> dict:
        got = real(ids)  # version 2
        relay.reads.streams = real  # type: ignore[method-assign]
        assert relay.executor_disconnected(a, connection_id="c-A", reason="socket_closed")  # version 3, held
        relay.executor_connected("local", "app", info("C"), connection_id="c-C", owner="o")  # three held
        return got

    relay.reads.streams = overtaken  # type: ignore[method-assign]
    relay.load_many([a])  # finds three held, past the bound of two: empties the cache, version 3 with it
    assert a not in relay._cache  # and does not put version 2 back


def test_is_store_error_comes_from_the_store(relay: Relay) -> None:
    assert relay.is_store_error(TimeoutError())
    assert not relay.is_store_error(AttributeError("a bug"))


def test_an_application_with_an_autoscaling_policy_is_snapshotted_and_loads_from_it(relay: Relay, caplog) -> None:
    from relay_es.aggregates.application import app_stream_id
    from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout

    relay.register_app("local", "shop")  # version 1
    for i in range(SNAPSHOT_EVERY - 2):  # set and cleared in turn: one event each
        if i % 2:
            assert relay.clear_autoscaling_policy("local", "shop")
        else:
            assert relay.set_autoscaling_policy("local", "shop", AutoscalingPolicy(f"q{i}", Rollout(i % 3, None)))
    final = AutoscalingPolicy("orders", Rollout(2, 0))
    with caplog.at_level(logging.WARNING):
        assert relay.set_autoscaling_policy("local", "shop", final)  # version SNAPSHOT_EVERY: a snapshot
    sid = app_stream_id("local", "shop")
    assert "snapshot not taken" not in caplog.text
    assert [s.originator_version for s in relay.snapshots.recorder.select_events(sid)] == [SNAPSHOT_EVERY]
    assert relay.get_app("local", "shop").version == SNAPSHOT_EVERY
    assert relay.autoscaling_policy("local", "shop") == final


def test_a_conflict_is_tried_again_after_a_random_wait_that_doubles(relay: Relay, monkeypatch) -> None:
    """Run again at once, the threads that conflicted on one stream conflicted again (8 threads recording
    refusals on one org's stream: 32 of 160 gave up after 8 attempts)."""
    from eventsourcing.persistence import IntegrityError

    from relay_es.engine import store

    waits: list[float] = []
    monkeypatch.setattr(store.time, "sleep", waits.append)
    monkeypatch.setattr(store.random, "uniform", lambda low, high: high)  # the longest wait each time
    tries = iter([IntegrityError("conflict")] * 7 + [None])

    def fn() -> str:
        if (e := next(tries)) is not None:
            raise e
        return "saved"

    assert relay.retrying(fn) == "saved"
    assert waits == [min(store.RETRY_WAIT * 2 ** a, store.RETRY_WAIT_MAX) for a in range(1, 8)]
    assert waits[0] == 0.002 and waits[-1] == 0.1


def test_a_conflict_is_given_up_once_the_waits_add_up_to_the_budget(relay: Relay, monkeypatch) -> None:
    """Eight attempts (about 0.2 s of waits) were too few: 32 clients changing one application at once
    on Postgres had 3-5 of them answered 503, and a member making keys in a loop made their own removal
    give up. Now the waits may add up to RETRY_BUDGET, and the conflict is raised after that."""
    from eventsourcing.persistence import IntegrityError

    from relay_es.engine import store

    waits: list[float] = []
    monkeypatch.setattr(store.time, "sleep", waits.append)
    monkeypatch.setattr(store.random, "uniform", lambda low, high: high)
    calls = [0]

    def fn() -> str:
        calls[0] += 1
        raise IntegrityError("conflict")

    with pytest.raises(IntegrityError):
        relay.retrying(fn)
    assert sum(waits[:-1]) < store.RETRY_BUDGET <= sum(waits)
    assert calls[0] == len(waits) + 1 > 8


def test_a_deleted_executor_is_not_held_and_one_registered_again_is_read(relay: Relay, clock) -> None:
    """A DELETED executor is acted on no more: held, the cache grew with every executor that ever was
    (1,828 held after 1,898 short-lived executors, 1,817 of them deleted) until it was emptied at
    CACHE_MAX. One that registers again is read from its stream."""
    sid = executor_stream_id("local", "app", "A")
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="o")
    assert relay.executor_connected("local", "app", info("B"), connection_id="c2", owner="o")
    assert relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    deadline = relay.get_executor("local", "app", "A").deadline
    clock.advance(3600)
    assert relay.declare_dead_if_due(sid, deadline)
    assert relay.dispatch_recovery(sid, request_id="r1", target_executor_id="B")
    assert sid in relay._cache
    read_since, dead = relay._evictions, relay.load_many([sid])[sid]  # a read begun before the deletion
    assert relay.confirm_recovery(sid, request_id="r1", pending_found=True)
    assert relay.get_executor("local", "app", "A").status == "DELETED"
    assert sid not in relay._cache
    relay._remember([dead], read_since=read_since)  # that read ends now: overtaken, not held
    assert sid not in relay._cache
    relay.load_many([sid])  # a read of it: not held either
    assert sid not in relay._cache
    assert relay.executor_connected("local", "app", info("A"), connection_id="c3", owner="o")  # a new incarnation
    assert relay._cache[sid].status == "HEALTHY" and relay.get_executor("local", "app", "A").incarnation == 2
