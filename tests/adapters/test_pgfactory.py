"""The event store's Postgres factory: every parameter of the URL reaches the event store's connections."""

from __future__ import annotations

from relay_es.adapters.library import FastReads
from relay_es.adapters.pgfactory import CONNINFO, RelayPostgresFactory
from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.domain.clock import FakeClock
from relay_es.engine.service import Relay


def test_the_url_s_query_parameters_reach_the_event_store_s_connections(postgres_url: str) -> None:
    store = parse_database_url(f"{postgres_url}?application_name=relay-pgfactory-test")
    env = event_store_env(store)
    assert env["PERSISTENCE_MODULE"] == "relay_es.adapters.pgfactory:RelayPostgresFactory"
    assert env[CONNINFO] == store.conninfo and "application_name=relay-pgfactory-test" in store.conninfo
    relay = Relay(env, clock=FakeClock())
    try:
        assert isinstance(relay.factory, RelayPostgresFactory) and relay.factory.kind == "postgres"
        assert isinstance(relay.reads, FastReads)
        with relay.recorder.datastore.transaction(commit=False) as curs:
            curs.execute("SHOW application_name")
            assert curs.fetchone()["application_name"] == "relay-pgfactory-test"
    finally:
        relay.close()


def test_relays_opening_an_empty_database_together_make_its_tables_one_at_a_time() -> None:
    """Without the factory's lock, four Relays made at once on an empty database failed in ten of ten
    tries in the library's table creation (a unique violation in Postgres' catalog)."""
    import uuid

    from tests.conftest import create_database, drop_database, postgres_admin_url
    from tests.support import at_once

    admin = postgres_admin_url()
    for _ in range(3):
        name = f"relay_test_{uuid.uuid4().hex[:12]}"
        env = event_store_env(parse_database_url(create_database(admin, name)))
        made: list[Relay] = []
        errors = at_once(4, lambda: None, lambda _: made.append(Relay(env, clock=FakeClock())))
        try:
            assert errors == [] and len(made) == 4
            key = made[0].keys.create("alerting-rule:r")
            assert made[3].keys.get("alerting-rule:r") == key
        finally:
            for r in made:
                r.close()
            drop_database(admin, name)


def test_while_the_store_is_away_its_pool_fails_fast() -> None:
    """A wait that got no connection marks the store away for one pool timeout: callers then wait at
    most AWAY_WAIT_SECS; a wait that gets one, or the time passing, ends it."""
    from psycopg_pool import PoolTimeout

    from relay_es.adapters.pgfactory import AWAY_WAIT_SECS, FailFast

    clock = FakeClock()
    waits: list[float] = []
    away = [True]

    def getconn(timeout: float) -> str:
        waits.append(timeout)
        clock.advance(timeout if away[0] else 0.0)
        if away[0]:
            raise PoolTimeout("no connection")
        return "conn"

    get = FailFast(getconn, 5.0, clock.monotonic)
    for _ in range(3):
        try:
            get()
        except PoolTimeout:
            pass
    assert waits == [5.0, AWAY_WAIT_SECS, AWAY_WAIT_SECS]  # the later ones: the store is known away
    away[0] = False
    assert get(timeout=2.0) == "conn" and waits[-1] == AWAY_WAIT_SECS  # back: the pool's workers connected
    assert get(timeout=2.0) == "conn" and waits[-1] == 2.0  # which ends it


def test_a_pool_only_busy_is_not_taken_for_a_store_away() -> None:
    """A wait that got no connection while other callers got them (all taken, none free in time: a
    checkpoint's stall, a queue on the events table's lock) leaves the next callers their whole wait."""
    from psycopg_pool import PoolTimeout

    from relay_es.adapters.pgfactory import FailFast

    clock = FakeClock()
    waits: list[float] = []
    get: FailFast

    def getconn(timeout: float) -> str:
        waits.append(timeout)
        if len(waits) == 1:  # the first caller waits its whole timeout; meanwhile another gets a connection
            clock.advance(1.0)
            assert get(timeout=5.0) == "conn"
            clock.advance(timeout - 1.0)
            raise PoolTimeout("none free in time")
        return "conn"

    get = FailFast(getconn, 5.0, clock.monotonic)
    try:
        get()
    except PoolTimeout:
        pass
    assert get() == "conn" and waits == [5.0, 5.0, 5.0]


def test_the_librarys_tries_through_an_outage_wait_one_pool_timeout_not_ten() -> None:
    """The library tries each read and write 10 times (``retry``, as its recorders' methods are
    decorated): each waited the pool's whole timeout for a connection."""
    import pytest
    from eventsourcing.persistence import InterfaceError, OperationalError
    from eventsourcing.utils import retry

    from relay_es.adapters.pgfactory import AWAY_WAIT_SECS
    from tests.server import free_port

    config = parse_database_url(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing-listens")
    factory = RelayPostgresFactory({**event_store_env(config), "POSTGRES_CONNECT_TIMEOUT": "1"})
    waits: list[float | None] = []
    getconn = factory.datastore.pool.getconn.getconn

    def counted(timeout: float | None = None) -> object:
        waits.append(timeout)
        return getconn(timeout=timeout)

    factory.datastore.pool.getconn.getconn = counted

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def read() -> None:
        with factory.datastore.transaction(commit=False) as cur:
            cur.execute("SELECT 1")

    try:
        with pytest.raises(OperationalError):
            read()
    finally:
        factory.datastore.close()
    assert len(waits) == 10 and waits[0] == 1.0 and set(waits[1:]) == {AWAY_WAIT_SECS}, waits


def test_a_pool_tries_a_connection_it_could_not_make_again_every_second() -> None:
    """psycopg_pool's own backoff doubles (1, 2, 4, 8, 16 s): after an outage of 25 s its next try came
    up to 16 s after Postgres was back, and Relay's writes waited for it. Relay's pools (both stores'
    factories call reconnect_steadily first) try every second, within the pool's jitter."""
    from psycopg_pool.base import AttemptWithBackoff

    from relay_es.adapters.stores import reconnect_steadily

    reconnect_steadily()
    attempt = AttemptWithBackoff(timeout=300.0)
    delays = []
    for i in range(8):
        attempt.update_delay(now=float(i))
        delays.append(attempt.delay)
    assert all(0.85 <= d <= 1.15 for d in delays), delays
