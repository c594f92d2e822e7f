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
