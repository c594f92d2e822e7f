"""The event store's Postgres factory: every parameter of the URL reaches the event store's connections."""

from __future__ import annotations

from relay_es.adapters.library import FastReads
from relay_es.adapters.pgfactory import EXTRA_CONNINFO, RelayPostgresFactory
from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.domain.clock import FakeClock
from relay_es.engine.service import Relay


def test_the_url_s_query_parameters_reach_the_event_store_s_connections(postgres_url: str) -> None:
    env = event_store_env(parse_database_url(f"{postgres_url}?application_name=relay-pgfactory-test"))
    assert env["PERSISTENCE_MODULE"] == "relay_es.adapters.pgfactory:RelayPostgresFactory"
    assert env[EXTRA_CONNINFO] == "application_name=relay-pgfactory-test"
    relay = Relay(env, clock=FakeClock())
    try:
        assert isinstance(relay.factory, RelayPostgresFactory) and relay.factory.kind == "postgres"
        assert isinstance(relay.reads, FastReads)
        with relay.recorder.datastore.transaction(commit=False) as curs:
            curs.execute("SHOW application_name")
            assert curs.fetchone()["application_name"] == "relay-pgfactory-test"
    finally:
        relay.close()
