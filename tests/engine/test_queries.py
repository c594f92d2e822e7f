"""History and as-of are bounded per call and paginated, on both stores:
in-process on a fake clock, then through the REST API."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from relay_es.engine import queries
from relay_es.engine.queries import executor_history, executor_history_page, executors_as_of
from relay_es.projections import audit
from relay_es.projections.executors import EXECUTOR_EVENTS, all_rows
from relay_es.domain.errors import UnknownExecutor
from relay_es.domain.units import parse_as_of
from tests.fake_executor import FakeExecutor
from tests.server import RelayServer, TLS
from tests.support import World, info, until


@pytest.fixture
def world(clock, store_url) -> Iterator[World]:
    w = World(clock, store_url, grace=3600)
    yield w
    w.close()


def churn(w: World, executor_id: str, times: int) -> None:
    """A stream of 1 + 2 * times events: connected, then (disconnected, reconnected) * times."""
    w.connect(executor_id)
    for i in range(times):
        w.drop(executor_id)
        w.clock.advance(1)
        w.connect(executor_id, conn=f"{executor_id}-{i}")


def versions(page: list[dict[str, Any]]) -> list[int]:
    return [e["version"] for e in page]


@pytest.mark.parametrize("chunk", [3, 500])
def test_history_pages_by_version(world: World, monkeypatch, chunk: int) -> None:
    monkeypatch.setattr(queries, "CHUNK", chunk)
    churn(world, "A", 12)
    total = len(world.history("A"))
    assert total >= 25
    everything = queries.executor_history(world.relay, "local", "app", "A")
    assert versions(everything) == list(range(1, total + 1))
    pages, after = [], 0
    while True:
        page = queries.executor_history(world.relay, "local", "app", "A", after=after, limit=10)
        assert len(page) <= 10
        pages.append(page)
        if len(page) < 10:
            break
        after = page[-1]["version"]
    assert [e for p in pages for e in p] == everything
    assert queries.executor_history(world.relay, "local", "app", "A", after=total) == []
    with pytest.raises(UnknownExecutor):
        queries.executor_history(world.relay, "local", "app", "nobody")
    with pytest.raises(UnknownExecutor):
        queries.executor_history(world.relay, "local", "app", "nobody", after=5)



@pytest.mark.parametrize("chunk", [3, 500])
def test_a_history_page_names_the_next_while_events_follow(world: World, monkeypatch, chunk: int) -> None:
    """The cursor is the last version returned while the stream goes on, and None on the last page,
    also one that is exactly full (no empty page to ask for)."""
    monkeypatch.setattr(queries, "CHUNK", chunk)
    churn(world, "A", 12)  # 26 events: Registered, Connected, then 12 (Disconnected, Connected)
    for limit, pages in ((5, 6), (13, 2), (26, 1), (queries.HISTORY_LIMIT, 1)):
        got, after, cursors = [], 0, []
        while True:
            page, cursor = executor_history_page(world.relay, "local", "app", "A", after=after, limit=limit)
            got += page
            cursors.append(cursor)
            if cursor is None:
                break
            assert cursor == page[-1]["version"] and len(page) == limit
            after = cursor
        assert got == executor_history(world.relay, "local", "app", "A") and len(got) == 26
        assert len(cursors) == pages, (limit, cursors)
    assert executor_history_page(world.relay, "local", "app", "A", after=26) == ([], None)


def test_a_history_of_more_than_a_thousand_events_is_read_to_its_end(world: World) -> None:
    """1,044 events: the default page is the first 1,000 and names the next, which holds the rest."""
    churn(world, "A", 521)
    first, cursor = executor_history_page(world.relay, "local", "app", "A")
    assert len(first) == queries.HISTORY_LIMIT == 1000 and cursor == 1000
    rest, end = executor_history_page(world.relay, "local", "app", "A", after=cursor)
    assert [e["version"] for e in first + rest] == list(range(1, 1045)) and end is None


CAMEL = re.compile(r"[a-z][A-Za-z0-9]*")


def test_every_executor_event_attribute_has_a_camel_case_name() -> None:
    """History's ``data`` names fields as the rest of the API does: none left in snake_case, no two alike."""
    for kind in EXECUTOR_EVENTS:
        names = [f.name for f in dataclasses.fields(kind) if f.name not in queries._ENVELOPE]
        out = [queries.camel(n) for n in names]
        assert all(CAMEL.fullmatch(x) for x in out) and len(set(out)) == len(out), (kind.__name__, out)
    assert queries.camel("superseded_connection") == "supersededConnectionId"  # the lifecycle feed's name
    assert queries.camel("target_executor_id") == "targetExecutorId" and queries.camel("owner") == "owner"


def test_as_of_pages_by_executor_and_folds_at_most_limit_streams(world: World) -> None:
    for x in ("A", "B"):
        world.connect(x)
    world.clock.advance(10)
    at = world.clock.now()
    world.clock.advance(10)
    for x in ("C", "D", "E"):
        world.connect(x)
    world.sync()
    got, cursor, pages = [], None, 0
    while True:
        rows, cursor = queries.executors_as_of_page(world.relay, world.db, "local", "app", at, after=cursor, limit=2)
        got += [r.executor_id for r in rows]
        pages += 1
        if cursor is None:
            break
    assert got == ["A", "B"] and pages == 3  # C, D and E were not there yet: short pages, still paged through
    rows, cursor = queries.executors_as_of_page(world.relay, world.db, "local", "app", world.clock.now(), limit=100)
    assert [r.executor_id for r in rows] == ["A", "B", "C", "D", "E"] and cursor is None


def test_as_of_an_old_instant_reads_little_of_a_long_stream(world: World, monkeypatch) -> None:
    monkeypatch.setattr(queries, "CHUNK", 4)
    world.connect("A")
    at = world.clock.now()
    world.clock.advance(5)
    churn(world, "B", 15)
    churn(world, "A", 15)
    read: list[int] = []
    store = world.relay.repository.event_store
    real_get = store.get

    def counting(*a: Any, **kw: Any) -> Any:
        events = list(real_get(*a, **kw))
        read.append(len(events))
        return iter(events)

    monkeypatch.setattr(store, "get", counting)
    rows, _ = queries.executors_as_of_page(world.relay, world.db, "local", "app", at)
    assert [r.executor_id for r in rows] == ["A"]
    assert sum(read) <= 2 * 4  # a chunk of each stream, not 31 events of each


def test_as_of_gives_way_between_streams(world: World) -> None:
    for x in ("A", "B", "C"):
        world.connect(x)
    paused: list[int] = []
    queries.executors_as_of_page(world.relay, world.db, "local", "app", world.clock.now(), pause=lambda: paused.append(1))
    assert len(paused) == 3


def test_an_entry_s_own_at_as_of_is_the_table_with_that_entry(world: World) -> None:
    """History and feed print ``at`` to the millisecond (the events are stamped to the
    microsecond); that ``at`` given back as the REST API's asOf includes the entry."""
    world.connect("A")
    world.clock.advance(0.0015)
    world.drop("A")
    world.clock.advance(0.0015)
    world.connect("A", conn="A-1")
    history = executor_history(world.relay, "local", "app", "A")
    assert len({e["at"] for e in history}) >= 3
    for entry in history:
        (row,) = executors_as_of(world.relay, world.db, "local", "app", parse_as_of("asOf", entry["at"]))
        assert row.version == max(e["version"] for e in history if e["at"] == entry["at"]), entry


# ------------------------------------------------------------------ REST


@pytest.fixture
def server(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    yield s
    s.stop()


def test_rest_limits_and_pages(server: RelayServer) -> None:
    base = server.http + "/v2/orgs/local/apps/orders/executors"

    async def connect() -> None:
        for x in ("A", "B", "C"):
            ex = await FakeExecutor(server.ws, app="orders", executor_id=x).connect()
            await ex.close()
        # as-of finds the streams through the read model: wait until it lists all three
        await until(lambda: len(httpx.get(base, verify=TLS, timeout=10).json()) == 3, what="three executors projected")

    asyncio.run(connect())
    at = "2100-01-01T00:00:00Z"
    seen: list[str] = []
    url: str | None = base + f"?asOf={at}&limit=2"
    while url:
        r = httpx.get(url, verify=TLS, timeout=10)
        assert r.status_code == 200, r.text
        seen += [e["executorId"] for e in r.json()]
        nxt = r.links.get("next", {}).get("url")
        url = server.http + nxt if nxt else None
    assert sorted(seen) == ["A", "B", "C"] and len(seen) == 3
    for query in ("asOf=2100-01-01T00:00:00Z&limit=0", "asOf=2100-01-01T00:00:00Z&limit=101"):
        assert httpx.get(f"{base}?{query}", verify=TLS, timeout=10).status_code == 422
    history = f"{base}/A/history"
    first = httpx.get(history, params={"limit": 1}, verify=TLS, timeout=10).json()
    assert [e["version"] for e in first] == [1]
    rest = httpx.get(history, params={"after": 1}, verify=TLS, timeout=10).json()
    assert all(e["version"] > 1 for e in rest) and rest
    for params in ({"limit": 0}, {"limit": 1001}, {"after": -1}):
        assert httpx.get(history, params=params, verify=TLS, timeout=10).status_code == 422, params


# ------------------------------------------------------------ as-of and history, on a short grace


@pytest.fixture
def short_world(clock, store_url) -> Iterator[World]:
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def test_executors_table_as_of_any_past_instant(short_world: World) -> None:
    world = short_world
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


def test_history_is_readable_in_order_after_deletion(short_world: World) -> None:
    world = short_world
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
    assert h[4]["data"]["targetExecutorId"] == "B"
    assert all(x["at"].endswith("Z") and len(x["at"]) == 24 for x in h)


def test_history_data_names_its_fields_in_camel_case_as_the_feed_does(short_world: World) -> None:
    """Every field of ``data`` in camelCase, the lifecycle feed's name and value where the feed has the
    field; the executor's own metadata exactly as it sent it (its keys are its own)."""
    world = short_world
    meta = {"snake_key": 1, "nested": {"inner_key": [2]}}
    world.relay.executor_connected("local", "app", info("A", executor_metadata=meta), connection_id="a1",
                                   owner="relay-1")
    world.sync()
    world.connect("A", conn="a2")  # supersedes a1
    world.connect("B")
    world.drop("A")
    world.advance(10)
    world.answer(world.dispatcher.last(), ok=False, reason="boom")
    world.advance(30)
    world.answer(world.dispatcher.last())
    h = executor_history(world.relay, "local", "app", "A")
    assert {x["type"] for x in h} == {"Registered", "Connected", "Disconnected", "DeclaredDead", "RecoveryDispatched",
                                      "RecoveryFailed", "RecoveryConfirmed", "Deleted"}
    for x in h:
        assert all(CAMEL.fullmatch(k) for k in x["data"]), x
    assert h[0]["data"] == {"org": "local", "app": "app", "executorId": "A"}
    assert h[1]["data"]["executorMetadata"] == meta and h[1]["data"]["dbosVersion"] == "3.2.0"
    assert h[2]["data"]["supersededConnectionId"] == "a1" and h[2]["data"]["previousStatus"] == "HEALTHY"
    world.runner.catch_up()
    feed = audit.query(world.db, org="local", executor_id="A", limit=1000)
    assert len(feed) == len(h) - 1  # every event but Registered has an entry
    for entry, x in zip(feed, h[1:]):
        assert {k: x["data"].get(k, "missing") for k in entry.detail} == entry.detail, (entry.action, x)


@pytest.fixture
def icu_postgres_url() -> Iterator[str]:
    """A Postgres database whose collation orders text as people read it (ICU ``en-US``: ``a, B, c,
    D``), as the official image's ``en_US.utf8`` does, where the suite's cluster is ``C.UTF-8``."""
    from tests.conftest import create_database, drop_database, postgres_admin_url

    admin, name = postgres_admin_url(), f"relay_test_icu_{uuid.uuid4().hex[:12]}"
    yield create_database(admin, name, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    drop_database(admin, name)


@pytest.mark.parametrize("kind", ["sqlite", "postgres, ICU collation"])
def test_as_of_pages_lose_no_executor_whatever_the_database_s_collation(
        kind: str, clock: Any, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path}/relay.db" if kind == "sqlite" else request.getfixturevalue("icu_postgres_url")
    w = World(clock, url, grace=3600)
    try:
        for x in ("a", "B", "c", "D"):
            w.connect(x)
        w.sync()
        assert [r.executor_id for r in all_rows(w.db, org="local", app="app")] == ["B", "D", "a", "c"]
        seen, cursor = [], None
        while True:
            rows, cursor = queries.executors_as_of_page(w.relay, w.db, "local", "app", clock.now(), after=cursor,
                                                        limit=1)
            seen += [r.executor_id for r in rows]
            if cursor is None:
                break
        assert seen == ["B", "D", "a", "c"]
    finally:
        w.close()
