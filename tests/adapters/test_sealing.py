"""The sealing keys' table, on both stores: the contract of :class:`~relay_es.domain.sealing.KeyStore`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay_es.adapters.clock import SystemClock
from relay_es.adapters.sealing import StoreKeys
from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.domain.sealing import KEY_BYTES, MemoryKeys
from relay_es.engine.service import Relay


@pytest.fixture
def relays(store_url: str) -> Iterator[tuple[Relay, Relay]]:
    """Two Relays on one store, as two instances are."""
    env = event_store_env(parse_database_url(store_url))
    one, two = Relay(env, clock=SystemClock()), Relay(env, clock=SystemClock())
    yield one, two
    one.close()
    two.close()


def test_a_durable_store_keeps_its_keys_in_its_own_database(relays: tuple[Relay, Relay]) -> None:
    one, two = relays
    assert isinstance(one.keys, StoreKeys)
    key = one.keys.create("alerting-rule:r1")
    assert len(key) == KEY_BYTES
    assert two.keys.get("alerting-rule:r1") == key  # another instance on the store opens what this one sealed
    assert one.keys.get("alerting-rule:r2") is None
    replaced = two.keys.create("alerting-rule:r1")
    assert replaced != key and one.keys.get("alerting-rule:r1") == replaced
    one.keys.delete("alerting-rule:r1")
    assert two.keys.get("alerting-rule:r1") is None
    two.keys.delete("alerting-rule:r1")  # deleting again is no error


def test_the_keys_outlive_a_restart_and_a_rebuild_of_the_read_models(store_url: str) -> None:
    from relay_es.adapters.readmodels.rebuild import rebuild_in_processes

    store = parse_database_url(store_url)
    relay = Relay(event_store_env(store), clock=SystemClock())
    key = relay.keys.create("alerting-rule:r1")
    relay.close()
    rebuild_in_processes(store, count=1)
    again = Relay(event_store_env(store), clock=SystemClock())
    try:
        assert again.keys.get("alerting-rule:r1") == key
    finally:
        again.close()


def test_a_process_that_makes_no_tables_does_not_make_the_keys_table(tmp_path) -> None:
    store = parse_database_url(f"sqlite:///{tmp_path}/relay.db")
    first = Relay(event_store_env(store), clock=SystemClock())  # makes the tables
    first.close()
    import sqlite3

    conn = sqlite3.connect(f"{tmp_path}/relay.db")
    conn.execute("DROP TABLE relay_sealing_keys")
    conn.commit()
    conn.close()
    share = Relay({**event_store_env(store), "CREATE_TABLE": "false"}, clock=SystemClock())
    try:
        conn = sqlite3.connect(f"{tmp_path}/relay.db")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        conn.close()
        assert "relay_sealing_keys" not in tables
    finally:
        share.close()


def test_the_in_memory_store_keeps_its_keys_in_memory() -> None:
    relay = Relay(clock=SystemClock())
    try:
        assert isinstance(relay.keys, MemoryKeys)
    finally:
        relay.close()
