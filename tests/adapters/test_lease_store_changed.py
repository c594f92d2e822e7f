"""The leader lease taken again on a store that is not the one it led: Postgres restored from an
older copy of its data directory (a backup, a failover to a replica that lagged), or a new cluster
on the same address. The lock is free there; taken again, the holder went on writing over what it
held in memory (streams with gaps) or retried for ever on tables that were gone. It is lost instead."""

from __future__ import annotations

import psycopg
import pytest

from relay_es.adapters.lease import Lease, LeaseLost
from relay_es.adapters.stores import parse_database_url
from tests.adapters.test_lease import cut


def _log(url: str, events: int) -> None:
    """An events table (as the library's: ``notification_id`` a bigserial) holding ``events`` events."""
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS relay_events (notification_id bigserial PRIMARY KEY, topic text)")
        for _ in range(events):
            c.execute("INSERT INTO relay_events (topic) VALUES ('x')")


def _guarded(url: str, seen: list[int]) -> Lease:
    lease = Lease(parse_database_url(url))
    lease.acquire()
    lease.guard("public", "relay_events", lambda: seen[0])
    return lease


def test_a_lease_taken_again_on_a_log_behind_what_this_process_saw_is_lost(postgres_url: str) -> None:
    """A restored backup: the same cluster, its log ending before events this process saw (and holds in
    its executor cache)."""
    _log(postgres_url, 3)
    seen = [3]
    lease = _guarded(postgres_url, seen)
    try:
        cut(lease, postgres_url)
        assert lease.check() == "retaken"  # the log reaches what it saw: the store it led
        seen[0] = 5  # it saved two more, which the copy Postgres came back from does not hold
        cut(lease, postgres_url)
        with pytest.raises(LeaseLost, match="log ending at event 3, before event 5 this instance saw: restored "
                                            "from an older copy"):
            lease.check()
        other = Lease(parse_database_url(postgres_url))  # the lock taken to look was let go
        other.acquire()
        other.release()
    finally:
        lease.release()


def test_a_lease_taken_again_where_the_events_table_is_gone_is_lost(postgres_url: str) -> None:
    _log(postgres_url, 2)
    lease = _guarded(postgres_url, [2])
    try:
        cut(lease, postgres_url)
        with psycopg.connect(postgres_url, autocommit=True) as c:
            c.execute("DROP TABLE relay_events")
        with pytest.raises(LeaseLost, match=r"without its events table \(public.relay_events\)"):
            lease.check()
    finally:
        lease.release()


def test_a_lease_taken_again_on_another_cluster_is_lost(postgres_url: str) -> None:
    """A new cluster (initdb) has another system identifier; tests/fault/test_store_changed.py swaps real
    clusters under ``relay serve``."""
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        with psycopg.connect(postgres_url, autocommit=True) as c:
            ours = c.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0]
        assert lease._system == ours
        cut(lease, postgres_url)
        assert lease.check() == "retaken"
        lease._system = ours + 1  # as though the lock had first been taken on another cluster
        cut(lease, postgres_url)
        with pytest.raises(LeaseLost, match=f"another Postgres cluster \\(system identifier {ours}, not {ours + 1}\\)"):
            lease.check()
    finally:
        lease.release()


def test_a_role_that_may_not_read_the_cluster_s_identifier_still_leads(postgres_url: str) -> None:
    """A managed Postgres may revoke ``pg_control_system``: the lease is taken, and the log alone tells a
    store that changed."""

    class Revoked:
        def __init__(self, conn: psycopg.Connection) -> None:
            self.conn = conn

        def execute(self, query: str, *args: object) -> object:
            if "pg_control_system" in query:
                raise psycopg.errors.InsufficientPrivilege("permission denied for function pg_control_system")
            return self.conn.execute(query, *args)

    lease = Lease(parse_database_url(postgres_url))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert lease._cluster(Revoked(conn)) is None
        assert isinstance(lease._cluster(conn), int)
