"""The leader lease on Postgres: a session lost (Postgres restarted, the
connection cut) is taken again; a lease another instance took meanwhile is lost,
and the holder is told so."""

from __future__ import annotations

import time

import psycopg
import pytest

from relay_es.adapters.lease import Lease, LeaseHeld, LeaseLost
from relay_es.adapters.stores import parse_database_url


def cut(lease: Lease, admin_url: str) -> None:
    """Ends the lease's database session from outside, as a Postgres restart would, and returns once
    the backend is gone with its locks: ``pg_terminate_backend`` only signals it, and an acquire right
    after could still find the lock held (it did, once in a full run on 2026-12-04)."""
    pid = lease._conn.info.backend_pid
    with psycopg.connect(admin_url, autocommit=True) as c:
        assert c.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        deadline = time.monotonic() + 10
        while c.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s) "
                        "OR EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", (pid, pid)).fetchone()[0]:
            assert time.monotonic() < deadline, f"backend {pid} still there 10 s after it was terminated"
            time.sleep(0.01)


def test_a_held_lease_stays_held(postgres_url: str) -> None:
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        assert lease.check() == "held"
        with pytest.raises(LeaseHeld):
            Lease(parse_database_url(postgres_url)).acquire()
    finally:
        lease.release()


def test_a_lost_session_is_taken_again(postgres_url: str) -> None:
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        cut(lease, postgres_url)
        assert lease.check() == "retaken"
        assert lease.check() == "held"
        with pytest.raises(LeaseHeld):  # really held again: a second instance is still refused
            Lease(parse_database_url(postgres_url)).acquire()
    finally:
        lease.release()


def test_a_lease_another_instance_took_meanwhile_is_lost(postgres_url: str) -> None:
    first = Lease(parse_database_url(postgres_url))
    first.acquire()
    second = Lease(parse_database_url(postgres_url))
    try:
        cut(first, postgres_url)
        second.acquire()  # the lock went with the session: another instance can lead now
        with pytest.raises(LeaseLost, match="another Relay instance"):
            first.check()
    finally:
        first.release()
        second.release()


def test_while_the_store_is_away_the_lease_is_unreachable_not_lost(postgres_url: str) -> None:
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        cut(lease, postgres_url)
        real = lease.config
        lease.config = parse_database_url("postgresql://relay@127.0.0.1:1/nowhere")  # nothing listens there
        assert lease.check() == "unreachable"
        assert lease.check() == "unreachable"
        lease.config = real
        assert lease.check() == "retaken"
    finally:
        lease.release()


def test_sqlite_leases_are_held_by_the_file_lock(tmp_path) -> None:
    lease = Lease(parse_database_url(f"sqlite:///{tmp_path}/relay.db"))
    lease.acquire()
    try:
        assert lease.check() == "held"
    finally:
        lease.release()


def test_sqlite_lease_is_keyed_by_the_real_file_not_the_path_string(tmp_path, monkeypatch) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "x")
    (tmp_path / "x" / "relay.db").touch()
    (tmp_path / "db-link.db").symlink_to(tmp_path / "x" / "relay.db")
    monkeypatch.chdir(tmp_path)
    first = Lease(parse_database_url(f"sqlite:///{tmp_path}/x/relay.db"))
    first.acquire()
    try:
        for other in ("x/relay.db", "./x/../x/relay.db", "link/relay.db", f"{tmp_path}/link/../x/relay.db",
                      "db-link.db", "x//relay.db"):
            with pytest.raises(LeaseHeld):
                Lease(parse_database_url(f"sqlite:///{other}")).acquire()
    finally:
        first.release()
    second = Lease(parse_database_url("sqlite:///link/relay.db"))  # released: another path may take it now
    second.acquire()
    second.release()
