"""Contract tests of :mod:`relay_es.adapters.library`, the one module that reaches beneath the
``eventsourcing`` library's public API, on both stores. Each assumption it makes is pinned here,
so that a library upgrade that changes one fails here, not in production:

* the fast notification reader gives the library's domain events, field for field, with the
  library's notification ids (Postgres ``notification_id``, SQLite ``rowid``), paging included;
* many streams loaded in one query equal the library's ``repository.get``, snapshots included
  (the snapshots table's name and layout);
* an aggregate's attributes are its ``__dict__``, pending events in ``_pending_events``;
* the Postgres datastore's pool takes connection arguments before it opens (``pool.kwargs``);
* the transcoder's registered transcodings are in ``JSONTranscoder.names``;
* aggregates saved beneath ``Application.save`` (its ``_record``, ``_take_snapshots`` and
  ``_notify``) are stored as its own save stores them;
* a batch inserted at once (on Postgres as arrays of base types, on SQLite in multi-row statements)
  is recorded as the library's own insert records it, with the same notification ids;
* the fast encoder writes the library's ``JSONTranscoder`` bytes, byte for byte, or leaves the object
  to the library's path (every event and snapshot of a busy history, and any value a property test
  makes), and Relay's events take the fast way.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import timedelta, timezone
from enum import IntEnum, StrEnum
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventsourcing.persistence import (DatetimeAsISO, DecimalAsStr, JSONTranscoder, StoredEvent, Transcoding,
                                      UUIDAsHex)

from relay_es.adapters.library import (ArrayInsertRecorder, EventLog, FastJSONTranscoder, FastReads,
                                       ManyInsertRecorder, copy_aggregate, select_streams, store_kind)
from relay_es.aggregates.application import app_stream_id
from relay_es.aggregates.executor import OpaqueJSON, executor_stream_id
from relay_es.aggregates import SettingsPatch
from relay_es.engine.service import Relay
from relay_es.engine.store import TimedeltaAsMicroseconds
from relay_es.projections.shares import StreamShare
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


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # Postgres's uuid column holds no other text
def test_a_row_whose_stream_id_is_not_a_uuid_comes_back_unreadable_with_its_id_as_text(world: World) -> None:
    import sqlite3

    from relay_es.projections.unreadable import Unreadable

    world.connect("A")
    with sqlite3.connect(world.store_url.removeprefix("sqlite:///")) as conn:  # as a tool or a hand writes it
        conn.executemany("INSERT INTO stored_events (originator_id, originator_version, topic, state) "
                         "VALUES (?, ?, ?, ?)", [("not-a-uuid", 1, "relay_es.gone:Thing.Happened", b"{}"),
                                                 (b"\x01" * 16, 1, "relay_es.gone:Thing.Happened", b"{}")])
    conn.close()
    world.connect("B")
    whole = world.relay.notifications(0, 1000, unreadable=True)
    bad = [(sid, e) for _, sid, e in whole if type(e) is Unreadable]
    assert [(sid, e.originator_id) for sid, e in bad] == [("not-a-uuid",) * 2, (repr(b"\x01" * 16),) * 2]
    assert all("is not a UUID" in str(e.error) for _, e in bad)
    assert [n for n, _, _ in whole] == sorted(n for n, _, _ in whole) and len(whole) > 4  # each in its place
    assert [e.executor_id for _, _, e in whole if type(e).__qualname__ == "Executor.Registered"] == ["A", "B"]
    with pytest.raises(ValueError):  # readers that did not ask for them get the error, as before
        world.relay.notifications(0, 1000)


# ------------------------------------------------------------------ what the fast paths rely on


def test_the_store_s_factory_offers_the_fast_reads(world: World, store_url: str) -> None:
    assert store_kind(world.relay) == store_url.split(":")[0].replace("postgresql", "postgres")
    assert isinstance(world.relay.reads, FastReads)
    assert type(world.relay.mapper.transcoder) is FastJSONTranscoder
    # the library's recorder, subclassed to insert a batch at once (the next test)
    assert type(world.relay.recorder).__mro__[1].__module__ == f"eventsourcing.{store_kind(world.relay)}"


def test_a_batch_inserted_at_once_is_recorded_as_the_library_records_it(world: World) -> None:
    """:class:`ArrayInsertRecorder` (Postgres) and :class:`ManyInsertRecorder` (SQLite) against
    the library's own recorder, on a table of its own in the same database: the same rows, the
    notification ids in the batch's order, and a version already taken refused with the library's
    error."""
    from uuid import uuid4

    from eventsourcing.persistence import IntegrityError
    from eventsourcing.postgres import PostgresApplicationRecorder
    from eventsourcing.sqlite import SQLiteApplicationRecorder

    ours = world.relay.recorder
    if store_kind(world.relay) == "postgres":
        assert isinstance(ours, ArrayInsertRecorder)
        theirs = PostgresApplicationRecorder(ours.datastore, events_table_name="library_events")
    else:
        assert isinstance(ours, ManyInsertRecorder)
        theirs = SQLiteApplicationRecorder(ours.datastore, events_table_name="library_events")
    theirs.create_table()
    a, b = uuid4(), uuid4()
    batch = [StoredEvent(a, 1, "t.Registered", b'{"name": "caf\xc3\xa9"}'), StoredEvent(b, 1, "t.R", b"\x00\xff"),
             StoredEvent(a, 2, "t.Connected", b"{}"), StoredEvent(b, 2, "t.Connected", b"x" * 70_000)]

    def rows(recorder: Any) -> list[tuple[Any, ...]]:
        got = recorder.select_notifications(start=0, limit=1000, inclusive_of_start=False)
        return [(n.originator_id, n.originator_version, n.topic, n.state) for n in got if n.originator_id in (a, b)]

    before = ours.max_notification_id() or 0
    ids = ours.insert_events(batch)
    assert len(ids) == 4 and ids == sorted(ids) and ids[0] > before
    assert [n.id for n in ours.select_notifications(start=before, limit=10, inclusive_of_start=False)] == ids
    theirs.insert_events(batch)
    assert rows(ours) == rows(theirs) == [(e.originator_id, e.originator_version, e.topic, e.state) for e in batch]
    for recorder in (ours, theirs):
        with pytest.raises(IntegrityError):
            recorder.insert_events([StoredEvent(uuid4(), 1, "t.R", b"{}"), StoredEvent(a, 2, "t.Taken", b"{}")])
    assert rows(ours) == rows(theirs)  # the batch that failed left nothing


@pytest.mark.parametrize("size", [1, 3, 200, 537])
@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_sqlite_batch_in_several_statements_keeps_its_order_and_fails_whole(world: World, size: int,
                                                                             monkeypatch: Any) -> None:
    """:class:`ManyInsertRecorder` inserts 200 rows a statement and the rest in one (537 = 200 +
    200 + 137): the ids follow the batch's order across the statements, and a version already
    taken in the last statement leaves none of the batch."""
    from uuid import uuid4

    from eventsourcing.persistence import IntegrityError
    from eventsourcing.sqlite import SQLiteCursor

    ours = world.relay.recorder
    taken = StoredEvent(uuid4(), 1, "t.R", b"{}")
    ours.insert_events([taken])
    batch = [StoredEvent(uuid4(), 1, f"t.E{i}", str(i).encode()) for i in range(size)]
    statements: list[str] = []
    execute = SQLiteCursor.execute

    def recorded(self: Any, sql: str, *args: Any) -> None:
        statements.append(sql)
        execute(self, sql, *args)

    monkeypatch.setattr(SQLiteCursor, "execute", recorded)
    ids = ours.insert_events(batch)
    monkeypatch.undo()
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert len(inserts) == {1: 1, 3: 1, 200: 1, 537: 3}[size]
    got = ours.select_notifications(start=ids[0], limit=size, inclusive_of_start=True)
    assert [(n.id, n.originator_id, n.topic, n.state) for n in got] == [
        (i, e.originator_id, e.topic, e.state) for i, e in zip(ids, batch)]
    before = ours.max_notification_id()
    with pytest.raises(IntegrityError):
        ours.insert_events([StoredEvent(uuid4(), 1, "t.R", b"{}") for _ in range(size)] + [taken])
    assert ours.max_notification_id() == before


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_the_postgres_recorder_refuses_the_library_s_insert_function(world: World) -> None:
    """The library's ``POSTGRES_ENABLE_DB_FUNCTIONS`` inserts through a function that takes no
    table lock, so notification ids could commit out of order; the process manager and the alert
    manager read the log up to its head on the promise that they do not (ADR 3, 23)."""
    from types import SimpleNamespace

    ds = world.relay.recorder.datastore
    with pytest.raises(ValueError, match="POSTGRES_ENABLE_DB_FUNCTIONS"):
        ArrayInsertRecorder(SimpleNamespace(**{**vars(ds), "enable_db_functions": True}))
    assert ds.enable_db_functions is False  # Relay's own environment leaves it off
    ArrayInsertRecorder(ds)  # and the same datastore with it off is taken


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_batch_whose_rowids_do_not_follow_one_another_fails_rather_than_get_wrong_ids(world: World) -> None:
    """SQLite gives a row the largest rowid plus one, unless the largest is SQLite's largest: then
    it picks unused rowids at random, and the ids :class:`ManyInsertRecorder` infers would be
    wrong. The check of the first row fails the batch, and its transaction leaves nothing."""
    from uuid import uuid4

    ours = world.relay.recorder
    with ours.datastore.transaction(commit=True) as c:
        c.execute("INSERT INTO stored_events (rowid, originator_id, originator_version, topic, state)"
                  " VALUES (?, ?, 1, 't.R', x'7b7d')", (2**63 - 1, uuid4().hex))
    batch = [StoredEvent(uuid4(), 1, "t.R", b"{}") for _ in range(3)]
    with pytest.raises(AssertionError, match="first event"):
        ours.insert_events(batch)
    with ours.datastore.transaction(commit=False) as c:
        c.execute("SELECT count(*) FROM stored_events WHERE originator_id IN (?, ?, ?)",
                  [e.originator_id.hex for e in batch])
        assert c.fetchone()[0] == 0


def test_notification_ids_are_the_library_s_and_the_tables_are_where_they_were(world: World) -> None:
    busy_history(world)
    recorder = world.relay.recorder
    tables = {"postgres": ("relay_events", "relay_snapshots"), "sqlite": ("stored_events", "stored_snapshots")}
    assert (recorder.events_table_name, world.relay.snapshots.recorder.events_table_name) == tables[
        store_kind(world.relay)]
    ours = [n for n, _, _ in world.relay.notifications(0, 100_000)]
    theirs = [n.id for n in recorder.select_notifications(start=0, limit=100_000, inclusive_of_start=False)]
    assert ours == theirs and ours == sorted(ours)
    assert ours[-1] == recorder.max_notification_id()
    if store_kind(world.relay) == "sqlite":  # the library's notification id is the row id
        with recorder.datastore.transaction(commit=False) as curs:
            curs.execute("SELECT rowid FROM stored_events ORDER BY rowid")
            assert [r[0] for r in curs.fetchall()] == ours
    middle = ours[len(ours) // 2]
    assert [n for n, _, _ in world.relay.notifications(middle, 3)] == [n for n in ours if n > middle][:3]
    topic = "relay_es.aggregates.executor:Executor.Connected"
    only = world.relay.notifications(0, 100_000, (topic,))
    assert only and {type(e).__qualname__ for _, _, e in only} == {"Executor.Connected"}


def test_many_streams_load_as_the_library_loads_them_snapshots_included(world: World) -> None:
    world.connect("A")
    sid = executor_stream_id("local", "app", "A")
    for i in range(60):  # 122 events: a snapshot at version 100
        world.drop("A")
        world.connect("A")
    world.connect("B")
    app_id = app_stream_id("local", "app")
    relay = world.relay
    snapshots = relay.snapshots.recorder
    assert [s.originator_version for s in snapshots.select_events(sid)] == [100]
    ids = [sid, executor_stream_id("local", "app", "B"), app_id, UUID(int=1)]
    streams = select_streams(relay.recorder, ids, snapshots, kind=store_kind(relay))
    assert streams[UUID(int=1)] == (None, [])
    snapshot, tail = streams[sid]
    assert snapshot.originator_version == 100 and [s.originator_version for s in tail] == list(range(101, 123))
    assert streams[ids[1]][0] is None and [s.originator_version for s in streams[ids[1]][1]] == [1, 2]
    loaded = relay.load_many(ids[1:])  # not cached: read in one query
    relay._forget([sid])
    loaded.update(relay.load_many([sid]))
    for i in ids[:3]:
        assert vars(loaded[i]) == vars(relay.repository.get(i)), i
    assert UUID(int=1) not in loaded


def test_an_aggregate_is_its_dict_with_its_own_pending_events(world: World) -> None:
    world.connect("A")
    ex = world.relay.get_executor("local", "app", "A")
    assert "_pending_events" in vars(ex) and ex._pending_events == []
    copy = copy_aggregate(ex)
    copy.disconnect(connection_id=ex.connection_id, reason="socket_closed", deadline=ex.modified_on, at=ex.modified_on)
    assert [type(e).__name__ for e in copy.collect_events()] == ["Disconnected"]
    assert ex.collect_events() == [] and ex.version == copy.version - 1
    assert vars(world.relay.get_executor("local", "app", "A")) == vars(ex)


def test_the_transcoder_names_its_transcodings(world: World) -> None:
    names = world.relay.mapper.transcoder.names
    assert {"datetime_iso", "timedelta_us", "json_text", "app_settings", "uuid_hex"} <= set(names)


def library_transcoder(relay: Relay) -> JSONTranscoder:
    """The library's own transcoder, with Relay's transcodings."""
    plain = JSONTranscoder()
    for transcoding in relay.mapper.transcoder.types.values():
        plain.register(transcoding)
    return plain


def test_every_state_relay_encodes_is_the_library_s_encoding_byte_for_byte(world: World) -> None:
    # Every object Relay's mapper encoded (events and snapshots of a busy history), encoded again by the
    # library's own transcoder: the same bytes. And every event went the fast way; only an executor's
    # snapshot (its status a StrEnum, a subclass of str) takes the library's. An application's snapshot
    # holds its settings: a registered type whose encoding holds more (durations, datetimes).
    relay = world.relay
    fast = relay.mapper.transcoder
    assert type(fast) is FastJSONTranscoder
    encoded: list[Any] = []
    real = fast.encode
    fast.encode = lambda obj: encoded.append(obj) or real(obj)  # type: ignore[method-assign]
    try:
        busy_history(world)
        relay.executor_connected("local", "app", info("M", executor_metadata={"k": [1, "é\u2028"]}),
                                 connection_id="c-M", owner="relay-1")
        relay.take_snapshot(app_stream_id("local", "app"))
        relay.take_snapshot(executor_stream_id("local", "app", "B"))
    finally:
        del fast.encode
    plain = library_transcoder(relay)
    assert len(encoded) > 30
    slow = []
    for obj in encoded:
        assert fast.encode(obj) == plain.encode(obj), obj
        try:
            fast._wrap(obj)
        except Exception:
            slow.append(obj)
    assert [o["topic"] for o in slow] == ["relay_es.aggregates.executor:Executor"]  # the executor's snapshot
    assert any(o.get("topic") == "relay_es.aggregates.application:Application" for o in encoded)  # fast: its settings


class Level(StrEnum):
    ONE = "one"
    TWO = "two"


class Number(IntEnum):
    ONE = 1


class Pair:
    """A registered type whose encoding holds more values to wrap (as an application's settings do)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class PairAsDict(Transcoding):
    type = Pair
    name = "pair"

    def encode(self, obj: Pair) -> dict[str, Any]:
        return {"a": obj.a, "b": [obj.b, (obj.a,)]}

    def decode(self, data: dict[str, Any]) -> Pair:
        return Pair(data["a"], data["b"][0])


class LevelAsText(Transcoding):
    """Registered for a subclass of str: the library writes such a value as the str, never asking it."""

    type = Level
    name = "level"

    def encode(self, obj: Level) -> str:
        return "registered " + obj.value

    def decode(self, data: str) -> Level:
        return Level(data.removeprefix("registered "))


ATOMS = (st.text() | st.integers() | st.booleans() | st.none()
         | st.floats(allow_nan=True, allow_infinity=True) | st.datetimes(timezones=st.just(timezone.utc))
         | st.datetimes() | st.uuids() | st.decimals(allow_nan=False) | st.timedeltas()
         | st.sampled_from([Level.ONE, Level.TWO, Number.ONE, b"bytes", {1, 2}, "\ud800", "\u2028\u2029", 2**70]))
KEYS = st.text(max_size=8) | st.integers() | st.booleans() | st.sampled_from([Level.ONE, Number.ONE, None, 1.5])
VALUES = st.recursive(
    ATOMS | st.builds(Pair, ATOMS, ATOMS),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.builds(Pair, inner, inner)
    | st.dictionaries(KEYS, inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=3).map(OrderedDict),
    max_leaves=20)
TRANSCODINGS = {
    "relay's": lambda: [TimedeltaAsMicroseconds(), UUIDAsHex(), DecimalAsStr(), DatetimeAsISO(), PairAsDict()],
    "no datetimes": lambda: [TimedeltaAsMicroseconds(), UUIDAsHex(), PairAsDict(), LevelAsText()],
}


@pytest.mark.parametrize("registered", TRANSCODINGS)
@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_the_fast_encoder_writes_the_library_s_bytes_or_refuses_as_it_does(registered: str, value: Any) -> None:
    fast = FastJSONTranscoder()
    theirs = JSONTranscoder()
    for t in TRANSCODINGS[registered]():
        fast.register(t)
        theirs.register(t)
    try:
        expected: Any = theirs.encode(value)
    except Exception as e:
        expected = type(e)
    try:
        got: Any = fast.encode(value)
    except Exception as e:
        got = type(e)
    assert got == expected


def test_the_fast_encoder_leaves_deep_nesting_to_the_library() -> None:
    fast, theirs = FastJSONTranscoder(), JSONTranscoder()
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(RecursionError):
        theirs.encode(deep)
    with pytest.raises(RecursionError):
        fast.encode(deep)
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        fast.encode(cycle)


def test_aggregates_saved_beneath_the_library_are_recorded_as_its_save_records_them(world: World, clock) -> None:
    # The same two changes to two executors, one saved by the library's Application.save, the other
    # by save_aggregates: the same events stored (but for the connection's id), in the log in order.
    from eventsourcing.application import Application

    from relay_es.adapters.library import save_aggregates

    relay = world.relay
    for name in ("A", "B"):
        world.connect(name)
    a, b = (copy_aggregate(relay.get_executor("local", "app", n)) for n in ("A", "B"))
    for ex in (a, b):
        ex.disconnect(connection_id=ex.connection_id, reason="socket_closed", deadline=clock.now(), at=clock.now())
        ex.declare_dead(now=clock.now())
    head = relay.recorder.max_notification_id()
    by_library = Application.save(relay, a)
    beneath = save_aggregates(relay, [b, None])
    assert [type(r.domain_event).__name__ for r in by_library] == [type(r.domain_event).__name__ for r in beneath] == [
        "Disconnected", "DeclaredDead"]
    assert [r.notification.id for r in by_library + beneath] == list(range(head + 1, head + 5))
    for r_a, r_b in zip(by_library, beneath):
        one, two = (json.loads(stored_of(relay, r).state) for r in (r_a, r_b))
        assert one.pop("connection_id", "A@").startswith("A@") and two.pop("connection_id", "B@").startswith("B@")
        assert one == two, (one, two)
    assert a.collect_events() == [] and b.collect_events() == []  # pending events taken, as the library takes them
    assert [type(e).__name__ for e in relay.stream(b.id)][-2:] == ["Disconnected", "DeclaredDead"]


def stored_of(relay: Any, recording: Any) -> Any:
    e = recording.domain_event
    (n,) = [n for n in relay.recorder.select_events(e.originator_id, gt=e.originator_version - 1,
                                                     lte=e.originator_version)]
    return n


def test_an_event_the_reader_has_comes_back_as_none_in_its_place(world: World) -> None:
    world.connect("A")
    world.connect("B")
    world.drop("A")
    sid = str(world.relay.get_executor("local", "app", "A").id)
    whole = world.relay.notifications(0, 1000)
    got = world.relay.notifications(0, 1000, skip=lambda s, v: s == sid and v <= 2)
    assert [(n, s) for n, s, _ in got] == [(n, s) for n, s, _ in whole]  # every row, in its place
    for (_, s, e), (_, _, full) in zip(got, whole):
        if s == sid and full.originator_version <= 2:
            assert e is None
        else:
            assert same(e, full)
    assert sum(e is None for _, _, e in got) == 2


def shares_of(read: Any, count: int, **kw: Any) -> list[list[tuple[int, str, Any]]]:
    return [read(0, 100_000, share=StreamShare.of(i, count), **kw) for i in range(count)]


def assert_the_shares_make_the_log(read: Any) -> None:
    whole = read(0, 100_000)
    assert len({sid for _, sid, _ in whole}) > 5
    for count in (2, 3):
        parts = shares_of(read, count)
        for i, part in enumerate(parts):
            assert part and all(UUID(sid) in StreamShare.of(i, count) for _, sid, _ in part)
            assert [n for n, _, _ in part] == sorted(n for n, _, _ in part)
        joined = sorted((x for part in parts for x in part), key=lambda x: x[0])
        assert [(n, s) for n, s, _ in joined] == [(n, s) for n, s, _ in whole]
        assert all(same(a, b) for (_, _, a), (_, _, b) in zip(joined, whole))
    part = shares_of(read, 2)[1]
    share = StreamShare.of(1, 2)
    assert [(n, s) for n, s, _ in read(0, 3, share=share)] == [(n, s) for n, s, _ in part[:3]]  # the limit counts them
    after = [(n, s) for n, s, _ in read(part[1][0], 100_000, share=share)]
    assert after == [(n, s) for n, s, _ in part[2:]]
    until = whole[len(whole) // 2][0]
    assert [(n, s) for n, s, _ in read(0, 100_000, share=share, until=until)] == \
        [(n, s) for n, s, _ in part if n <= until]
    assert [(n, s) for n, s, _ in read(0, 100_000, until=until)] == [(n, s) for n, s, _ in whole if n <= until]


def test_a_share_of_the_streams_reads_its_events_only_and_the_shares_make_the_log(world: World) -> None:
    busy_history(world)
    assert_the_shares_make_the_log(world.relay.notifications)


def test_the_library_s_path_reads_a_share_as_the_fast_path_does(world: World) -> None:
    busy_history(world)
    log = EventLog(world.relay)
    log._fast = False  # an enciphered or compressed mapper's path: the library decodes, shares are filtered here
    assert_the_shares_make_the_log(log.read)


def test_the_in_memory_store_reads_a_share_as_the_others_do(clock) -> None:
    relay = Relay(clock=clock)
    try:
        for i in range(12):
            relay.register_app("local", f"app{i}")
        assert_the_shares_make_the_log(relay.notifications)
    finally:
        relay.close()


def lose_the_answer(world: World, monkeypatch: pytest.MonkeyPatch, *, committed: bool) -> dict[str, bool]:
    """The next insert's connection is lost: after its transaction committed (only the answer is lost),
    or before it could (``committed=False``: the insert fails as a dropped connection does)."""
    import contextlib

    from eventsourcing.persistence import OperationalError

    rec = world.relay.recorder
    ds, state = rec.datastore, {"armed": False, "hit": False}
    real_get, real_insert = ds.get_connection, rec._insert_stored_events

    @contextlib.contextmanager
    def get_connection(*a: Any, **k: Any) -> Any:
        with real_get(*a, **k) as conn:
            yield conn
        if state.pop("lost", False):  # the transaction has committed: its answer is lost
            raise OperationalError("server closed the connection unexpectedly (simulated, after COMMIT)")

    def insert(*a: Any, **k: Any) -> None:
        if state["armed"]:
            state["armed"], state["hit"] = False, True
            if not committed:
                raise OperationalError("server closed the connection unexpectedly (simulated, before COMMIT)")
            state["lost"] = True
        real_insert(*a, **k)

    monkeypatch.setattr(ds, "get_connection", get_connection)
    monkeypatch.setattr(rec, "_insert_stored_events", insert)
    monkeypatch.setattr("relay_es.adapters.library.INSERT_WAIT", 0.001, raising=False)
    return state


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("committed", [True, False])
def test_a_lost_connection_during_an_insert_records_its_events_once(world: World, monkeypatch: pytest.MonkeyPatch,
                                                                    committed: bool) -> None:
    """The library tried a lost insert again blindly: when it had committed, the second met its rows,
    and that IntegrityError read as another writer's, so the command ran again (a refusal recorded
    twice). Now it is tried again only once it is known not to have committed."""
    from relay_es.aggregates.gate import gate_stream_id

    relay = world.relay
    relay.record_refusal("acme", app="a", peer="1.2.3.4", status=401, reason="bad token")
    state = lose_the_answer(world, monkeypatch, committed=committed)
    state["armed"] = True
    relay.record_refusal("acme", app="a", peer="5.6.7.8", status=403, reason="second")
    assert state["hit"]
    peers = [getattr(e, "peer", None) for e in relay.stream(gate_stream_id("acme"))]
    assert peers.count("5.6.7.8") == 1 and peers.count("1.2.3.4") == 1
    # what was recorded is told with its notification ids, as the log has them
    assert relay.head() == max(n.id for n in relay.recorder.select_notifications(start=0, limit=1000))


def test_a_save_that_fails_after_its_insert_leaves_no_stale_copy_in_the_cache(world: World,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The library commits, then raises what went wrong after the insert: the executor's cached copy
    was left behind the store, and a command refused on it (a recovery's failure) was lost."""
    from relay_es.engine.executor_commands import ExecutorInfo

    relay, clock = world.relay, world.clock
    relay.executor_connected("local", "app", ExecutorInfo("A", "v1", "h", "python", "3"), connection_id="c1",
                             owner="o")
    sid = executor_stream_id("local", "app", "A")
    relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    clock.advance(10_000)
    assert relay.declare_dead_if_due(sid)
    reads = relay.reads
    real = reads.record

    def record(*a: Any, **k: Any) -> Any:
        real(*a, **k)  # committed
        monkeypatch.setattr(reads, "record", real)
        raise RuntimeError("injected after the insert")

    monkeypatch.setattr(reads, "record", record)
    with pytest.raises(RuntimeError):
        relay.dispatch_recovery(sid, request_id="r1", target_executor_id="B")
    assert relay.fail_recovery(sid, request_id="r1", reason="no answer")  # refused on the stale copy before
    assert relay.get_executor("local", "app", "A").recovery_phase == "pending"


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_lost_connection_whose_commit_is_still_under_way_records_its_events_once(
        world: World, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection is lost while the server is still committing (a deferred trigger makes the commit
    take 1.5 s): asked at once, the question "did it commit?" saw no rows, the insert tried again met
    them, and the command ran again. It waits for the lost transaction to end before it reads."""
    import socket
    import threading
    import time

    import psycopg

    from relay_es.aggregates.gate import gate_stream_id

    relay = world.relay
    rec = relay.recorder
    relay.record_refusal("acme", app="a", peer="1.2.3.4", status=401, reason="first")
    with psycopg.connect(store_url, autocommit=True) as c:
        c.execute("CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                  "IF current_setting('relay_test.slow', true) = 'on' THEN PERFORM pg_sleep(1.5); END IF; "
                  "RETURN NULL; END $$")
        c.execute(f"CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON {rec.datastore.schema}.{rec.events_table_name} "
                  "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()")
    real_insert, armed = rec._insert_stored_events, [True]

    def insert(curs: Any, events: Any, **k: Any) -> None:
        if armed and armed.pop():
            curs.execute("SET LOCAL relay_test.slow = 'on'")
            fd = curs.connection.fileno()

            def cut() -> None:  # the answer to COMMIT is lost while the server still commits
                time.sleep(0.4)
                s = socket.socket(fileno=socket.dup(fd))
                s.shutdown(socket.SHUT_RDWR)
                s.close()

            threading.Thread(target=cut, daemon=True).start()
        real_insert(curs, events, **k)

    monkeypatch.setattr(rec, "_insert_stored_events", insert)
    relay.record_refusal("acme", app="a", peer="5.6.7.8", status=403, reason="second")
    assert not armed
    peers = [getattr(e, "peer", None) for e in relay.stream(gate_stream_id("acme"))]
    assert peers.count("5.6.7.8") == 1
