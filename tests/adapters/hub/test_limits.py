"""What each address, key and application holds on the hub (``relay_es.adapters.hub.limits``)."""

from __future__ import annotations

import asyncio

import pytest

from relay_es.adapters.hub import Connection, Outbox, Refused, Registry
from relay_es.adapters.hub.limits import Quotas, key_id
from relay_es.protocol.limits import ResourceLimits
from tests.adapters.hub.support import NoRoster


class Listed:
    """The process manager's roster, as the hub asks it: the executor streams in ``streams`` exist
    (every one counted against the one application these tests use)."""

    def __init__(self) -> None:
        self.streams: set[str] = set()

    def is_listed(self, stream_id: str) -> bool:
        return stream_id in self.streams

    def listed(self, org: str, app: str) -> int:
        return len(self.streams)


def test_executor_ids_remembered_per_key_are_forgotten_once_deleted() -> None:
    """Keys are the client's choice in development mode: the hub's table of
    executor ids per key (for RELAY_MAX_EXECUTORS_PER_KEY) drops ids once the
    process manager no longer lists them, and keys with none left."""
    from relay_es.adapters.hub.limits import Quotas

    roster = Listed()
    listed = roster.streams

    async def main() -> None:
        quotas = Quotas(ResourceLimits(), roster=roster, registry=Registry(), outbox=Outbox(None, None))  # type: ignore[arg-type]
        from relay_es.adapters.hub import Connection
        from relay_es.aggregates.executor import executor_stream_id

        for i in range(100):
            conn = Connection(id=f"c{i}", org="local", app="app", peer="p", token=None,
                              send_message=None, key_id=("key", "local", f"random-{i}"))  # type: ignore[arg-type]
            assert quotas.over_limit(conn, f"E{i}") is None
            if i < 10:
                listed.add(str(executor_stream_id("local", "app", f"E{i}")))
        assert quotas.sweep_keys() == 10  # 90 ids never recorded (or deleted): gone with their keys
        listed.clear()
        assert quotas.sweep_keys() == 0

    asyncio.run(main())


def conn_of(key: tuple[str, ...], app: str = "app") -> Connection:
    return Connection(id="c", org="local", app=app, peer="p", token=None, send_message=None,  # type: ignore[arg-type]
                      key_id=key)


def test_sockets_are_counted_per_key_and_per_application_and_released() -> None:
    quotas = Quotas(ResourceLimits(connections_per_key=2, connections_per_app=3), roster=NoRoster(),
                    registry=Registry(), outbox=Outbox(None, None))  # type: ignore[arg-type]
    k1, k2 = key_id("local", None, "one"), key_id("local", None, "two")
    held = [quotas.take_socket(k1, "local", "app"), quotas.take_socket(k1, "local", "app")]
    with pytest.raises(Refused) as per_key:
        quotas.take_socket(k1, "local", "app")
    assert per_key.value.status == 429 and "RELAY_MAX_CONNECTIONS_PER_KEY" in per_key.value.detail
    held.append(quotas.take_socket(k2, "local", "app"))
    with pytest.raises(Refused) as per_app:
        quotas.take_socket(k2, "local", "app")
    assert "RELAY_MAX_CONNECTIONS_PER_APP" in per_app.value.detail and per_app.value.org == "local"
    for counted in held:
        quotas.release_socket(counted)
    assert not quotas._by_key and not quotas._by_app  # keys at zero are dropped
    quotas.take_socket(k1, "local", "app")


def test_handshakes_in_flight_are_capped_per_address() -> None:
    quotas = Quotas(ResourceLimits(handshakes_per_address=2), roster=NoRoster(), registry=Registry(),
                    outbox=Outbox(None, None))  # type: ignore[arg-type]
    for _ in range(3):
        quotas.handshake_begins("10.0.0.1")
    with pytest.raises(Refused) as r:
        quotas.check_handshakes("10.0.0.1")
    assert r.value.status == 429 and not r.value.audit
    quotas.check_handshakes("10.0.0.2")
    quotas.handshake_ends("10.0.0.1")
    quotas.check_handshakes("10.0.0.1")


def test_new_executor_ids_are_refused_over_the_key_and_application_limits_but_a_known_one_returns() -> None:
    from relay_es.aggregates.executor import executor_stream_id

    roster = Listed()
    listed = roster.streams

    registry = Registry()
    quotas = Quotas(ResourceLimits(executors_per_key=2, executors_per_app=3), roster=roster, registry=registry,
                    outbox=Outbox(None, None))  # type: ignore[arg-type]
    one = ("key", "local", "one")
    for eid in ("A", "B"):
        assert quotas.over_limit(conn_of(one), eid) is None
        listed.add(str(executor_stream_id("local", "app", eid)))
    assert "RELAY_MAX_EXECUTORS_PER_KEY" in (quotas.over_limit(conn_of(one), "C") or "")
    assert quotas.over_limit(conn_of(one), "A") is None  # an id it already has
    assert quotas.over_limit(conn_of(("key", "local", "two")), "C") is None
    listed.add(str(executor_stream_id("local", "app", "C")))
    assert "RELAY_MAX_EXECUTORS_PER_APP" in (quotas.over_limit(conn_of(("key", "local", "three")), "D") or "")
    assert quotas.over_limit(conn_of(("key", "local", "three")), "A") is None  # listed: a reconnect


def test_a_burst_of_new_executor_ids_cannot_outrun_the_application_s_limit() -> None:
    """The roster lists an executor once its Connected is followed: ids admitted here meanwhile count
    against the application's limit too (10 concurrent connects got past a limit of 3 before)."""
    from relay_es.aggregates.executor import executor_stream_id

    roster = Listed()
    listed = roster.streams

    registry = Registry()
    quotas = Quotas(ResourceLimits(executors_per_app=3), roster=roster, registry=registry,
                    outbox=Outbox(None, None))  # type: ignore[arg-type]
    for i, eid in enumerate("ABC"):
        conn = conn_of(("key", "local", f"k{i}"))
        assert quotas.over_limit(conn, eid) is None
        registry.claim(("local", "app", eid), conn)  # registered here, its Connected not followed yet
    assert "RELAY_MAX_EXECUTORS_PER_APP" in (quotas.over_limit(conn_of(("key", "local", "k9")), "D") or "")
    assert quotas.over_limit(conn_of(("key", "local", "k0")), "A") is None  # one of them again: no new id
    listed.update(str(executor_stream_id("local", "app", e)) for e in "ABC")  # followed: counted once
    assert "RELAY_MAX_EXECUTORS_PER_APP" in (quotas.over_limit(conn_of(("key", "local", "k9")), "D") or "")
    listed.discard(str(executor_stream_id("local", "app", "C")))  # C deleted, and gone from here
    registry.remove(registry.executor(("local", "app", "C")))  # type: ignore[arg-type]
    assert quotas.over_limit(conn_of(("key", "local", "k9")), "D") is None


def test_a_key_at_its_limit_is_pruned_at_most_once_per_interval() -> None:
    """Pruning walks every id of the key on the event loop: a refusal does not buy one each time."""
    from relay_es.adapters.hub.limits import PRUNE_EVERY

    now = [0.0]
    walks = []
    quotas = Quotas(ResourceLimits(executors_per_key=2), roster=NoRoster(), registry=Registry(),
                    outbox=Outbox(None, None), clock=lambda: now[0])  # type: ignore[arg-type]
    prune = quotas._prune_key_ids
    quotas._prune_key_ids = lambda ids: (walks.append(len(ids)), prune(ids))  # type: ignore[method-assign]
    key = ("key", "local", "one")
    registry_held = Registry()
    quotas.registry = registry_held
    for eid in "AB":
        conn = conn_of(key)
        assert quotas.over_limit(conn, eid) is None
        registry_held.claim(("local", "app", eid), conn)  # connected: pruning keeps them
    for _ in range(50):
        assert "RELAY_MAX_EXECUTORS_PER_KEY" in (quotas.over_limit(conn_of(key), "X") or "")
    assert walks == [2]
    now[0] = PRUNE_EVERY
    assert "RELAY_MAX_EXECUTORS_PER_KEY" in (quotas.over_limit(conn_of(key), "X") or "")
    assert walks == [2, 2]


def test_a_key_is_counted_as_its_token_or_a_digest_of_it() -> None:
    assert key_id("acme", "exec", "relay_secret") == ("token", "acme", "exec")
    dev = key_id("local", None, "relay_secret")
    assert dev[:2] == ("key", "local") and "relay_secret" not in dev[2] and len(dev[2]) == 32


def test_the_ids_of_a_deleted_applications_executors_are_forgotten_by_the_sweep(clock) -> None:
    """The process manager lists no executor of a deleted application, though their rows stay: the
    hub's hourly sweep forgets the ids its keys registered there, and the keys with none left."""
    from tests.support import World

    world = World(clock, None)
    try:
        async def main() -> None:
            quotas = Quotas(ResourceLimits(), roster=world.pm, registry=Registry(),
                            outbox=Outbox(None, None))  # type: ignore[arg-type]
            for name in ("A", "B"):
                world.connect(name)
                assert quotas.over_limit(conn_of(("key", "local", name)), name) is None
            assert quotas.sweep_keys() == 2
            world.relay.delete_app("local", "app")
            world.sync()
            assert quotas.sweep_keys() == 0

        asyncio.run(main())
    finally:
        world.close()
