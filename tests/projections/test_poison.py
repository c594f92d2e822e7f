"""One poison event never stops a read model (issue 11, ADR 16).

Poison is written straight to the event store, past every check of the
protocol layer and the service: a NUL byte in a hostname and a multi-KB
executor id (Postgres refuses both in the read models), an integer wider
than 64 bits in a setting (both stores refuse it) and an event that cannot be
folded (both stores). Executors and settings recorded afterwards must still
reach the read models, the skip must be reported (log, counter, audit entry),
a rebuild must give the same rows, and an outage must be retried, not skipped.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from relay_es.aggregates import Executor, SettingsPatch
from relay_es.aggregates.application import app_stream_id
from relay_es.adapters.failures import is_data_error
from relay_es.projections import audit
from relay_es.projections.apps import list_apps
from relay_es.projections.executors import all_rows
from relay_es.projections.runner import Poison
from tests.projections.history import tables
from tests.support import World, info

LONG_ID = secrets.token_urlsafe(6000)  # incompressible: Postgres cannot shrink it under a b-tree page


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def connect_bypassing(world: World, executor_id: str, *, hostname: str = "host") -> None:
    """An executor connection recorded on the aggregate directly: no protocol, no service checks."""
    relay = world.relay
    ex = Executor(org="local", app="app", executor_id=executor_id, timestamp=relay.now())
    ex.connect(connection_id=f"c-{secrets.token_hex(4)}", owner=world.owner, app_version="v1", hostname=hostname,
               language="python", dbos_version="3.2.0", executor_metadata=None, at=relay.now())
    relay.save(ex)


def huge_setting(world: World) -> None:
    """A rows threshold wider than 64 bits (the REST boundary refuses it; the aggregate does not look)."""
    app = world.relay.repository.get(app_stream_id("local", "app"))
    app.change_settings(SettingsPatch(gc_rows_threshold=2**70), at=world.relay.now())
    world.relay.save(app)


def orphan_event(world: World) -> None:
    """A Connected event with no Registered before it in its stream: nothing can fold it."""
    relay = world.relay
    ex = Executor(org="local", app="app", executor_id="orphan", timestamp=relay.now())
    ex.connect(connection_id="c-orphan", owner=world.owner, app_version="v1", hostname="h", language="python",
               dbos_version="3.2.0", executor_metadata=None, at=relay.now())
    relay.save(ex.collect_events()[1])


def connect(world: World, executor_id: str) -> None:
    """Through the service, without letting the process manager follow (it folds executor
    events itself and cannot fold the orphan: see the report of issue 11)."""
    world.relay.executor_connected("local", "app", info(executor_id), connection_id=f"{executor_id}@1",
                                   owner=world.owner)


def skipped(world: World) -> list[audit.AuditEntry]:
    """Skips recorded: under the stream's org, or "-" when nothing tells it (the orphan)."""
    return [e for org in ("local", "-") for e in audit.query(world.db, org=org, limit=10_000)
            if e.action == "projection.skipped"]


def listed(world: World) -> set[str]:
    return {r.executor_id for r in all_rows(world.db, org="local", app="app") if r.visible}


def test_poison_events_are_skipped_and_later_ones_projected(world: World, caplog) -> None:
    seen: list[Poison] = []
    world.runner.on_poison.append(seen.append)
    connect_bypassing(world, "nul", hostname="evil\x00host")
    connect_bypassing(world, LONG_ID)
    orphan_event(world)
    huge_setting(world)
    with caplog.at_level(logging.ERROR, logger="relay_es.projections.runner"):
        world.runner.catch_up()  # returns: no batch is retried forever
    connect(world, "A")
    connect(world, "B")
    # (a SettingsChanged event carries every setting: this one clears the huge one)
    world.relay.update_app("local", "app", SettingsPatch(executor_timeout=timedelta(seconds=30),
                                                         gc_rows_threshold=None))
    world.relay.create_token("local", "ci")
    with caplog.at_level(logging.ERROR, logger="relay_es.projections.runner"):
        world.runner.catch_up()

    assert {"A", "B"} <= listed(world)
    app = [a for a in list_apps(world.db, "local") if a.name == "app"][0]
    assert app.executor_timeout == timedelta(seconds=30)
    assert app.gc_rows_threshold is None  # the poison setting was skipped, the later change applied
    with world.db.read() as cur:
        cur.execute("SELECT name FROM relay_tokens")
        assert [r[0] for r in cur.fetchall()] == ["ci"]

    # the same on both stores: each read model decides what it can hold before the store sees it
    kinds = [(p.projection, p.event_type) for p in seen]
    assert sorted(kinds) == sorted([
        ("executors", "Executor.Connected"),  # the NUL hostname
        ("executors", "Executor.Registered"), ("executors", "Executor.Connected"),  # the long id's row...
        ("audit", "Executor.Connected"),  # ... and its audit entry (the executor id column is indexed)
        ("executors", "Executor.Connected"),  # the orphan
        ("apps", "Application.SettingsChanged"),  # the 70-bit integer
    ])
    assert world.runner.poisoned == len(seen)
    entries = skipped(world)
    assert sorted((e.detail["projection"], e.detail["eventType"]) for e in entries) == sorted(kinds)
    assert {e.detail["notificationId"] for e in entries} == {p.notification_id for p in seen}
    assert all(e.detail["reason"] and e.detail["notificationId"] for e in entries)
    assert len([r for r in caplog.records if "skipped event" in r.getMessage()]) == len(seen)

    # the process manager starts from the read model and its position, past the poison
    world.restart()
    assert {"A", "B"} <= {r.executor_id for r in world.pm.rows.values()}

    # a rebuild skips the same events, records nothing new, and gives the same rows
    before = tables(world)
    world.runner.rebuild()
    assert tables(world) == before
    assert len(skipped(world)) == len(entries)


def test_a_poison_in_the_middle_of_a_large_batch_costs_only_itself(world: World) -> None:
    for i in range(40):
        world.connect(f"before-{i}")
    orphan_event(world)
    for i in range(40):
        connect(world, f"after-{i}")
    world.runner.reset()
    world.runner.fill({p.name for p in world.runner.projections})
    assert {f"before-{i}" for i in range(40)} | {f"after-{i}" for i in range(40)} <= listed(world)
    assert [e.detail["eventType"] for e in skipped(world)] == ["Executor.Connected"]


class _Unreachable:
    """The read models' store, its writes gone away: every transaction really tries to
    reach a store that is not there (a closed port, a directory that does not exist)."""

    def __init__(self, db: Any, store_url: str, tmp_path: Any) -> None:
        self._db = db
        self.dialect = db.dialect
        self._url = store_url
        self._tmp = tmp_path

    def __getattr__(self, name: str) -> Any:  # tables, positions, error kinds: the real store's
        return getattr(self._db, name)

    def read(self) -> Any:
        return self._db.read()

    def transaction(self) -> Any:
        if self.dialect == "postgres":
            psycopg.connect("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)
        else:
            sqlite3.connect(f"{self._tmp}/missing/dir/relay.db").execute("BEGIN IMMEDIATE")
        raise AssertionError("unreachable store reached")

    def close(self) -> None:
        pass


def test_an_outage_is_retried_not_skipped(world: World, store_url: str, tmp_path) -> None:
    orphan_event(world)
    connect(world, "A")
    before = world.runner.positions()
    real = world.runner.db
    world.runner.db = _Unreachable(real, store_url, tmp_path)
    for _ in range(2):
        with pytest.raises((psycopg.OperationalError, sqlite3.OperationalError)) as raised:
            world.runner.run_batch()
        assert not is_data_error(raised.value)
    assert world.runner.positions() == before
    assert world.runner.poisoned == 0
    world.runner.db = real  # the store is back: the batch is applied, the poison alone skipped
    world.runner.catch_up()
    assert "A" in listed(world)
    assert [e.detail["eventType"] for e in skipped(world)] == ["Executor.Connected"]


@pytest.mark.parametrize("error, data", [
    (psycopg.errors.ProgramLimitExceeded("index row size 5000 exceeds btree version 4 maximum 2704"), True),
    (psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), True),
    (psycopg.errors.NumericValueOutOfRange("bigint out of range"), True),
    (psycopg.IntegrityError("duplicate key"), True),
    (sqlite3.IntegrityError("UNIQUE constraint failed"), True),
    (OverflowError("Python int too large to convert to SQLite INTEGER"), True),
    (ValueError("Executor.Connected before Registered"), True),
    (psycopg.OperationalError("connection refused"), False),
    (psycopg.errors.QueryCanceled("statement timeout"), False),
    (psycopg.errors.AdminShutdown("terminating connection"), False),
    (sqlite3.OperationalError("database is locked"), False),
    (sqlite3.OperationalError("database or disk is full"), False),  # no event's fault: wait, never skip
    (sqlite3.DataError("string or blob too big"), True),
    (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), True),
    (psycopg.errors.DiskFull("could not extend file"), False),
    (sqlite3.ProgrammingError("Cannot operate on a closed database."), False),
    (TimeoutError(), False),
    (ConnectionResetError(), False),
])
def test_data_errors_are_told_from_outages(error: BaseException, data: bool) -> None:
    assert is_data_error(error) is data


def test_an_event_no_read_model_can_read_is_skipped_and_reported(world: World) -> None:
    from uuid import uuid4

    from eventsourcing.persistence import StoredEvent

    seen: list[Poison] = []
    world.runner.on_poison.append(seen.append)
    world.relay.recorder.insert_events([
        StoredEvent(uuid4(), 1, "relay_es.aggregates.executor:Executor.Registered", b"{not json"),
        StoredEvent(uuid4(), 1, "relay_es.gone:Thing.Happened", b"{}"),  # a class no longer in the code
    ])
    connect(world, "A")
    world.runner.catch_up()
    assert "A" in listed(world)
    assert sorted(p.event_type for p in seen) == ["relay_es.aggregates.executor:Executor.Registered",
                                                  "relay_es.gone:Thing.Happened"]
    assert {p.projection for p in seen} == {"all"} and all(p.recorded for p in seen)
    assert sorted(e.detail["eventType"] for e in skipped(world)) == [p.event_type for p in
                                                                     sorted(seen, key=lambda p: p.event_type)]
    before = tables(world)
    world.runner.rebuild()
    assert tables(world) == before
    with pytest.raises(Exception):  # readers that did not ask for them get the error, as before
        world.relay.notifications(0, 100)


def test_a_rebuild_in_processes_skips_the_same_events(world: World, store_url: str) -> None:
    from relay_es.adapters.stores import parse_database_url
    from relay_es.adapters.readmodels.rebuild import rebuild_in_processes

    connect_bypassing(world, "nul", hostname="evil\x00host")
    connect_bypassing(world, LONG_ID)
    world.runner.catch_up()
    connect(world, "A")
    world.runner.catch_up()
    before, entries = tables(world), len(skipped(world))
    assert entries == 4
    world.close()  # `relay projections rebuild` runs on a store nobody serves
    try:
        rebuild_in_processes(parse_database_url(store_url))
    finally:
        world._open()
    assert tables(world) == before
    assert len(skipped(world)) == entries


def keys_too_long_together(world: World) -> None:
    """An executor whose org, app and id are each within the cap (1,000 bytes) but not together (3,000:
    Postgres refuses an index entry over 2,704 bytes), and an action whose one target is 4,000 bytes."""
    from relay_es.aggregates.action import Action

    relay = world.relay
    org, app, executor_id = (secrets.token_urlsafe(750) for _ in range(3))
    ex = Executor(org=org, app=app, executor_id=executor_id, timestamp=relay.now())
    ex.connect(connection_id="c-long", owner=world.owner, app_version="v1", hostname="h", language="python",
               dbos_version="3.2.0", executor_metadata=None, at=relay.now())
    relay.save(ex)
    relay.save(Action(org="local", app="app", request_id="r-long", operation="cancelWorkflow", actor_kind="token",
                      actor="ci", source=None, target_type="workflow", target_ids=[secrets.token_urlsafe(3000)],
                      target_count=1, parameters={}, timestamp=relay.now()))


def test_keys_too_long_together_are_skipped_live_in_a_rebuild_and_at_the_next_start(world: World,
                                                                                    store_url: str) -> None:
    """Before, on Postgres: the live runner skipped them on the store's error, the rebuild (its indexes
    built at the end) failed, and every start after it failed creating the indexes."""
    from relay_es.adapters.stores import parse_database_url
    from relay_es.adapters.readmodels.rebuild import rebuild_in_processes

    keys_too_long_together(world)
    connect(world, "A")
    world.runner.catch_up()
    assert "A" in listed(world)
    assert {(e.detail or {}).get("projection") for e in skipped(world)} >= {"executors", "audit", "actions"}
    before, entries = tables(world), len(skipped(world))
    world.close()
    try:
        rebuild_in_processes(parse_database_url(store_url))
    finally:
        world._open()  # a start: the read models' schema (and its indexes) made again
    assert tables(world) == before
    assert len(skipped(world)) == entries


def test_a_fill_at_start_counts_the_events_its_share_processes_skipped(world: World) -> None:
    """A server's start filling empty read models in processes (``fill_at_start``): what they skipped is
    counted by the server's runner, as the follower's skips are (``/metrics``), not lost with them."""
    from relay_es.adapters.readmodels.rebuild import fill_at_start
    from relay_es.adapters.stores import parse_database_url

    connect_bypassing(world, "nul", hostname="evil\x00host")
    world.runner.catch_up()
    live = world.runner.poisoned
    assert live >= 1
    world.runner.reset(["audit", "executors"])  # as a read model stored in an older version is emptied
    seen: list[Any] = []
    world.runner.on_poison.append(seen.append)
    assert fill_at_start(world.relay, world.runner, parse_database_url(world.store_url), least=1, count=2) > 0
    assert world.runner.poisoned > live and seen


def incarnation_over_32_bits(world: World) -> None:
    """A Connected event whose incarnation (2^31) fits SQLite's INTEGER but not Postgres's."""
    relay = world.relay
    ex = Executor(org="local", app="app", executor_id="big", timestamp=relay.now())
    ex.connect(connection_id="c1", owner=world.owner, app_version="v1", hostname="h", language="python",
               dbos_version="3.2.0", executor_metadata=None, at=relay.now())
    ex.incarnation = 2**31 - 1
    ex.disconnect(connection_id="c1", reason="x", deadline=relay.now(), at=relay.now())
    ex.declare_dead(now=relay.now())
    ex.connect(connection_id="c2", owner=world.owner, app_version="v1", hostname="h", language="python",
               dbos_version="3.2.0", executor_metadata=None, at=relay.now())
    relay.save(ex)


def test_an_incarnation_beyond_32_bits_is_skipped_alike_on_both_stores(world: World) -> None:
    """Before, SQLite stored it and Postgres skipped it on the store's error (INTEGER out of range)."""
    seen: list[Poison] = []
    world.runner.on_poison.append(seen.append)
    incarnation_over_32_bits(world)
    connect(world, "A")
    world.runner.catch_up()
    assert "A" in listed(world)
    assert [(p.projection, p.event_type) for p in seen] == [("executors", "Executor.Connected")]
    assert "incarnation is outside 0..2147483647" in seen[0].reason
    big = [r for r in all_rows(world.db, org="local", app="app") if r.executor_id == "big"]
    assert [r.incarnation for r in big] == [1]  # as its first connection left it: the second one is skipped
    before = tables(world)
    world.runner.rebuild()
    assert tables(world) == before


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)  # Postgres's uuid column holds no other text
def test_a_row_whose_stream_id_is_not_a_uuid_is_skipped_and_reported(world: World) -> None:
    """Before, reading it raised on the stream id while skipping it: every batch failed, for ever."""
    seen: list[Poison] = []
    world.runner.on_poison.append(seen.append)
    connect(world, "A")
    world.runner.catch_up()
    with sqlite3.connect(world.store_url.removeprefix("sqlite:///")) as conn:  # as a tool or a hand writes it
        conn.execute("INSERT INTO stored_events (originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?)",
                     ("not-a-uuid\x00", 1, "relay_es.aggregates.executor:Executor.Connected", b"{}"))
    conn.close()
    connect(world, "B")
    world.runner.catch_up()
    assert {"A", "B"} <= listed(world)
    assert [(p.projection, p.stream_id) for p in seen] == [("all", "not-a-uuid\\x00")]
    assert "is not a UUID" in seen[0].reason and seen[0].recorded
    assert [(e.detail["projection"], e.detail["streamId"]) for e in skipped(world)] == [("all", "not-a-uuid\\x00")]
    world.restart()  # the process manager follows the log past it too
    assert {"A", "B"} <= {r.executor_id for r in world.pm.rows.values()}
    before = tables(world)
    world.runner.rebuild()
    assert tables(world) == before
