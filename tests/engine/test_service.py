"""The application service's executor cache: fast when it is right, harmless when it is stale."""

from __future__ import annotations

from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates.executor import executor_stream_id
from relay_es.engine.service import Relay
from tests.support import info


def two_writers(clock, store_url: str) -> tuple[Relay, Relay]:
    env = event_store_env(parse_database_url(store_url))
    return Relay(env, clock=clock), Relay(env, clock=clock)


def test_commands_run_on_the_cached_executor_without_reading_the_store(clock, store_url) -> None:
    relay, _ = two_writers(clock, store_url)
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
    sid = executor_stream_id("local", "app", "A")
    reads = []
    original = relay.reads.event
    relay.reads.event = lambda *a: reads.append(a) or original(*a)
    assert relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert reads == []  # served from the cache
    assert [type(e).__name__ for e in relay.stream(sid)] == ["Registered", "Connected", "Disconnected"]


def test_a_stale_cached_executor_costs_a_retry_not_a_wrong_transition(clock, store_url) -> None:
    mine, other = two_writers(clock, store_url)
    assert mine.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
    sid = executor_stream_id("local", "app", "A")
    # Another writer moves the executor on: mine still holds version 2 in its cache.
    clock.advance(1)
    assert other.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert other.executor_connected("local", "app", info("A"), connection_id="c2", owner="relay-2")
    # A command on the stale copy is refused by the store's version check, then run on what the store holds:
    # c1 is not the current connection any more, so nothing is recorded (on the stale copy it would have been).
    assert not mine.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert mine.executor_disconnected(sid, connection_id="c2", reason="socket_closed")
    assert [type(e).__name__ for e in mine.stream(sid)] == [
        "Registered", "Connected", "Disconnected", "Connected", "Disconnected"]
    assert mine.get_executor("local", "app", "A").status == "DISCONNECTED"


# ------------------------------------------------------------ growing streams (ADR 16)

from datetime import timedelta  # noqa: E402

from relay_es.aggregates import SettingsPatch  # noqa: E402
from relay_es.aggregates.application import app_stream_id  # noqa: E402
from relay_es.aggregates.gate import gate_stream_id  # noqa: E402
from relay_es.engine.store import SNAPSHOT_EVERY  # noqa: E402
from relay_es.protocol.retention import RetentionPlan  # noqa: E402


def _counting(relay: Relay) -> list[int]:
    """How many events each read of a stream returns from the event store."""
    counts: list[int] = []
    recorder = relay.recorder
    original = recorder.select_events

    def select_events(*args, **kwargs):
        found = original(*args, **kwargs)
        counts.append(len(found))
        return found

    recorder.select_events = select_events
    return counts


def test_growing_streams_load_a_snapshot_and_a_bounded_tail(clock, store_url) -> None:
    n = 2 * SNAPSHOT_EVERY * 5 + 37  # thousands would do the same; this keeps Postgres quick
    relay, other = two_writers(clock, store_url)
    relay.register_app("local", "app")
    relay.update_app("local", "app", SettingsPatch(executor_timeout=timedelta(seconds=42),
                                                  gc_rows_threshold=1000))
    for i in range(n // 2):
        relay.record_refusal("local", app="app", peer=f"10.0.0.{i % 250}", status=401, reason="unknown key")
        relay.record_retention_plan("local", "app", request_id=f"r{i}", target_executor_id="A",
                                    plan=RetentionPlan(None, 1000, None))
    counts = _counting(other)  # another process: nothing of these streams in memory
    assert other.grace_for("local", "app") == timedelta(seconds=42)
    gate = other.repository.get(gate_stream_id("local"))
    assert gate.refusals == n // 2
    other.record_refusal("local", app="app", peer="10.0.0.1", status=401, reason="unknown key")
    other.record_retention_answered("local", "app", request_id="r1", success=True, error=None)
    assert counts and max(counts) <= SNAPSHOT_EVERY, counts  # not the whole stream: a snapshot and its tail
    # the events are all still there, for history, replay and the read models
    assert len(list(other.stream(gate_stream_id("local")))) == n // 2 + 2
    assert len(list(other.stream(app_stream_id("local", "app")))) == n // 2 + 3
    app = other.get_app("local", "app")
    assert app.settings.gc_rows_threshold == 1000 and app.version == n // 2 + 3


def test_a_snapshot_that_cannot_be_taken_fails_no_command(clock, store_url) -> None:
    relay, _ = two_writers(clock, store_url)

    def store_away(*args, **kwargs):
        raise OSError("the store went away just after the events were recorded")

    relay.take_snapshot = store_away
    for _ in range(SNAPSHOT_EVERY + 1):  # crosses a snapshot interval
        relay.record_refusal("local", app="app", peer="10.0.0.1", status=401, reason="unknown key")
    assert len(list(relay.stream(gate_stream_id("local")))) == SNAPSHOT_EVERY + 2  # each recorded once


def test_an_executor_that_reconnects_for_months_loads_from_a_snapshot(clock, store_url) -> None:
    relay, other = two_writers(clock, store_url)
    # what the executor chose, shaped like the transcoder's own wrappers: must come back as it was
    hostile = {"_type_": "timedelta_us", "_data_": 5, "nested": [{"_type_": "no_such_type", "_data_": 1}]}
    sid = executor_stream_id("local", "app", "A")
    # Registered is version 1, each reconnect two more: the last Connected is version 300, which is
    # snapshotted (with the metadata), and only its Disconnected comes after
    for i in range(3 * SNAPSHOT_EVERY // 2 - 1):
        assert relay.executor_connected("local", "app", info("A", executor_metadata={"n": i}),
                                        connection_id=f"c{i}", owner="relay-1")
        clock.advance(1)
        assert relay.executor_disconnected(sid, connection_id=f"c{i}", reason="socket_closed")
    assert relay.executor_connected("local", "app", info("A", executor_metadata=hostile), connection_id="last",
                                    owner="relay-1")
    assert relay.executor_disconnected(sid, connection_id="last", reason="socket_closed")

    replayed = None  # the executor as every event folds it, from the first
    for e in other.stream(sid):
        replayed = e.mutate(replayed)
    assert replayed.version == 3 * SNAPSHOT_EVERY + 1
    decoded = []
    original = other.reads.event
    other.reads.event = lambda *a: decoded.append(a) or original(*a)
    loaded = other.load_many([sid])[sid]  # the batch path: the latest snapshot and its tail
    assert len(decoded) == 1  # the Disconnected after the snapshot
    counts = _counting(other)
    single = other.get_executor("local", "app", "A")  # the library's path
    assert max(counts) == 1
    for ex in (loaded, single):
        assert vars(ex) == vars(replayed)
        assert ex.executor_metadata == hostile and ex.status.value == "DISCONNECTED"
    # and it still moves on: a command on the snapshot-loaded executor records the right transition
    assert other.executor_connected("local", "app", info("A"), connection_id="again", owner="relay-2")
    assert [type(e).__name__ for e in other.stream(sid)][-3:] == ["Connected", "Disconnected", "Connected"]
    assert other.get_executor("local", "app", "A").incarnation == replayed.incarnation


# ------------------------------------------------------------ the environment Relay builds, and only it (issue 11)


def test_the_operator_s_environment_cannot_redirect_the_event_store(clock, store_url, tmp_path, monkeypatch) -> None:
    # The library merged os.environ and read RELAY_<KEY> first: RELAY_SQLITE_DBNAME put the events in
    # another file than --database-url's; the other keys changed where and how they were written.
    elsewhere = tmp_path / "other.db"
    for key, value in {
        "RELAY_SQLITE_DBNAME": str(elsewhere), "SQLITE_DBNAME": str(elsewhere),
        "RELAY_POSTGRES_DBNAME": "elsewhere", "RELAY_POSTGRES_HOST": "elsewhere.invalid",
        "RELAY_PERSISTENCE_MODULE": "eventsourcing.popo", "RELAY_CIPHER_TOPIC": "nowhere:Cipher",
        "CIPHER_TOPIC": "nowhere:Cipher", "RELAY_TRANSCODER_TOPIC": "nowhere:Transcoder",
        "COMPRESSOR_TOPIC": "nowhere:Compressor", "RELAY_IS_SNAPSHOTTING_ENABLED": "n",
    }.items():
        monkeypatch.setenv(key, value)
    env = event_store_env(parse_database_url(store_url))
    relay = Relay(env, clock=clock)
    from relay_es.adapters.library import ArrayInsertRecorder, ManyInsertRecorder

    assert type(relay.recorder) is (ManyInsertRecorder if store_url.startswith("sqlite") else ArrayInsertRecorder)
    assert relay.snapshots is not None
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
    relay.close()
    monkeypatch.undo()
    assert not elsewhere.exists()
    again = Relay(env, clock=clock)  # the store of the URL holds them
    assert [type(e).__name__ for e in again.stream(executor_stream_id("local", "app", "A"))] == [
        "Registered", "Connected"]
    again.close()


# ------------------------------------------------------------ tokens: an empty limit is not "no limit" (issue 11)

import pytest  # noqa: E402

from relay_es.domain.errors import InvalidSetting  # noqa: E402
from relay_es.aggregates.token import token_stream_id  # noqa: E402


@pytest.mark.parametrize("app_names", [[], (), "orders"])
def test_a_token_limited_to_no_application_is_refused_not_made_org_wide(clock, app_names) -> None:
    relay = Relay(clock=clock)
    with pytest.raises(InvalidSetting) as e:
        relay.create_token("acme", "ci", app_names=app_names)
    assert e.value.field == "appNames"
    assert relay._maybe(token_stream_id("acme", "ci")) is None  # nothing recorded
    relay.create_token("acme", "ci", app_names=None)
    relay.create_token("acme", "ci-orders", app_names=["orders", "orders"])
    assert relay._maybe(token_stream_id("acme", "ci")).app_names is None
    assert relay._maybe(token_stream_id("acme", "ci-orders")).app_names == ["orders"]
    with pytest.raises(InvalidSetting):  # a reissue likewise
        relay.create_token("acme", "ci-orders", app_names=[])
    assert relay._maybe(token_stream_id("acme", "ci-orders")).app_names == ["orders"]


# ------------------------------------------------------------ app_deleted: what the process manager asks


def test_app_deleted_is_true_only_for_a_registered_application_deleted_since(clock, store_url) -> None:
    relay, other = two_writers(clock, store_url)
    reads = []
    original = relay.repository.get
    relay.repository.get = lambda *a, **kw: reads.append(a) or original(*a, **kw)
    assert relay.app_deleted("acme", "orders") is False  # unknown: never registered, not deleted
    assert reads and len(reads) == 1  # one read of the application's stream
    other.register_app("acme", "orders")
    assert relay.app_deleted("acme", "orders") is False
    other.delete_app("acme", "orders")
    assert relay.app_deleted("acme", "orders") is True  # another writer's deletion is seen (nothing cached)
    assert relay.app_deleted("other", "orders") is False  # per org
    other.register_app("acme", "orders")
    assert relay.app_deleted("acme", "orders") is False  # registered again


def test_a_retention_round_is_cut_from_the_settings_it_is_recorded_with(clock, store_url) -> None:
    """The plan is cut when its timer fires; a settings change made before the round is recorded holds
    (a global timeout cleared meanwhile was sent anyway, with its cutoff)."""
    from datetime import timedelta

    from relay_es.aggregates import SettingsPatch
    from relay_es.aggregates.application import app_stream_id
    from relay_es.protocol import retention

    relay, other = two_writers(clock, store_url)
    relay.register_app("local", "app")
    relay.update_app("local", "app", SettingsPatch(global_timeout=timedelta(minutes=1), gc_rows_threshold=1000))
    plan = retention.plan(relay.get_app("local", "app").settings, clock.now())
    assert plan is not None and plan.timeout_cutoff == clock.now() - timedelta(minutes=1)
    other.update_app("local", "app", SettingsPatch(global_timeout=None))  # meanwhile, elsewhere
    clock.advance(5)
    sent = relay.record_retention_plan("local", "app", request_id="r1", target_executor_id="A", plan=plan)
    assert sent is not None and sent.timeout_cutoff is None and sent.gc_rows_threshold == 1000
    (e,) = [e for e in relay.stream(app_stream_id("local", "app")) if type(e).__name__ == "RetentionDispatched"]
    assert e.timeout_cutoff is None and e.gc_rows_threshold == 1000
    other.update_app("local", "app", SettingsPatch(gc_rows_threshold=None))  # no retention at all now
    assert relay.record_retention_plan("local", "app", request_id="r2", target_executor_id="A", plan=plan) is None
    assert len([e for e in relay.stream(app_stream_id("local", "app")) if type(e).__name__ == "RetentionDispatched"]) == 1
