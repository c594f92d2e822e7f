"""The leader lease on Postgres: a session lost (Postgres restarted, the
connection cut) is taken again; a lease another instance took meanwhile is lost,
and the holder is told so. On SQLite: a lease whose database or lock file was
deleted or replaced under it is lost."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any
from unittest import mock

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


def sqlite_lease(tmp_path, *, made: bool = True) -> tuple[Lease, Path]:
    """A lease on a SQLite store holding a table (``made``), or on a path with no file yet."""
    db = tmp_path / "relay-data" / "relay.db"
    if made:
        db.parent.mkdir()
        with sqlite3.connect(db) as c:
            c.execute("CREATE TABLE events (x)")
        c.close()
    lease = Lease(parse_database_url(f"sqlite:///{db}"))
    lease.acquire()
    return lease, db


def test_a_sqlite_lease_whose_files_are_untouched_stays_held(tmp_path) -> None:
    lease, db = sqlite_lease(tmp_path, made=False)
    try:
        assert db.exists()  # made at acquire, so that the file led is the one noted
        assert lease.check() == "held"
        c = sqlite3.connect(db)  # SQLite's -wal and -shm come and go: they are not the store
        c.execute("PRAGMA journal_mode=wal")
        with c:
            c.execute("CREATE TABLE t (x)")
        assert lease.check() == "held"
        c.close()
        assert lease.check() == "held"
        for extra in ("-wal", "-shm"):
            Path(f"{db}{extra}").unlink(missing_ok=True)
        assert lease.check() == "held"
    finally:
        lease.release()


def test_a_sqlite_lease_on_a_symlink_to_a_file_not_made_yet_stays_held(tmp_path) -> None:
    """A store path that is a symlink to a database not made yet (a second reading's find): the file was
    not made at acquire (made exclusively at the link, which exists), None was noted, and the first check
    after SQLite made it stopped a healthy server (exit 3, about 2 s after start)."""
    real = tmp_path / "data" / "real.db"
    link = tmp_path / "srv" / "relay.db"
    link.parent.mkdir()
    link.symlink_to(real)
    lease = Lease(parse_database_url(f"sqlite:///{link}"))
    lease.acquire()
    try:
        assert real.exists()
        with sqlite3.connect(link) as c:  # as the store opens it
            c.execute("CREATE TABLE events (x)")
        c.close()
        assert lease.check() == "held"
    finally:
        lease.release()


def test_a_sqlite_lease_whose_directory_was_deleted_is_lost(tmp_path) -> None:
    """``rm -rf relay-data/`` under a running server: it wrote on into the deleted file, and
    another server started on the path (the lock file went with the directory) beside it."""
    lease, db = sqlite_lease(tmp_path)
    try:
        shutil.rmtree(db.parent)
        with pytest.raises(LeaseLost, match=re.escape(f"the store file {db} was deleted or replaced under this")):
            lease.check()
        other = Lease(parse_database_url(f"sqlite:///{db}"))
        other.acquire()  # the path is free for another server: this lease must not lead beside it
        other.release()
    finally:
        lease.release()


def test_a_sqlite_lease_whose_database_file_was_replaced_is_lost(tmp_path) -> None:
    """An older copy moved into place (``mv backup.db relay.db``) under a running server."""
    lease, db = sqlite_lease(tmp_path)
    try:
        older = db.parent / "backup.db"
        shutil.copy(db, older)
        os.replace(older, db)
        with pytest.raises(LeaseLost, match=re.escape(f"the store file {db} was deleted or replaced under this")):
            lease.check()
    finally:
        lease.release()


@pytest.mark.parametrize("replaced", [False, True])
def test_a_sqlite_lease_whose_lock_file_was_deleted_or_replaced_is_lost(tmp_path, replaced: bool) -> None:
    lease, db = sqlite_lease(tmp_path)
    lock = Path(f"{db}.lock")
    try:
        lock.unlink()
        if replaced:
            lock.touch()
        with pytest.raises(LeaseLost, match=re.escape(f"the lock file {lock} of the store {db} was deleted or")):
            lease.check()
    finally:
        lease.release()


# ---------------------------------------------------------------- a holder whose host vanished

def test_postgres_ends_the_session_of_a_holder_gone_silent_within_seconds(postgres_url: str) -> None:
    """Postgres' own keepalives start after 2 h idle by default: a leader whose host vanished (no FIN, no
    RST) held the lock, and refused every restart, for 2 h 11 min. The lease session sets its end too."""
    ours = {"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3",
            "tcp_user_timeout": "10000"}  # ms: Postgres lets the lock go some 11 s after the holder went silent
    settings = "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)"
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        assert dict(lease._conn.execute(settings, (list(ours),)).fetchall()) == ours
        cut(lease, postgres_url)
        assert lease.check() == "retaken"
        assert dict(lease._conn.execute(settings, (list(ours),)).fetchall()) == ours  # the new session's too
    finally:
        lease.release()


def test_a_holder_cut_off_stops_deciding_before_postgres_lets_its_lock_go() -> None:
    from relay_es.adapters import lease as leases
    from relay_es.composition.runtime import LEASE_FRESH_SECS

    assert (leases.KEEPALIVES_IDLE_SECS, leases.KEEPALIVES_INTERVAL_SECS, leases.KEEPALIVES_COUNT,
            leases.USER_TIMEOUT_MS) == (5, 2, 3, 10_000)  # as the test above reads them on the session
    assert LEASE_FRESH_SECS < leases.SILENT_HOLDER_SECS


# ---------------------------------------------------------------- behind a pooler in transaction mode

class Pooler:
    """A pooler in transaction mode, in miniature: the n-th statement of the session runs on the n-th
    backend of ``route`` (real sessions), the last one once the route is run through."""

    def __init__(self, *route: psycopg.Connection) -> None:
        self.route = list(route)

    def execute(self, *args: object) -> object:
        backend = self.route.pop(0) if len(self.route) > 1 else self.route[0]
        return backend.execute(*args)

    def close(self) -> None:  # the client's connection to the pooler: the backends stay, as a pooler's do
        pass


@pytest.fixture
def backends(postgres_url: str):
    conns = [psycopg.connect(postgres_url, autocommit=True) for _ in range(2)]
    yield conns
    for c in conns:
        c.close()


def through(pooler: Pooler) -> Any:
    """The lease's connections made while this lasts are to the pooler."""
    return mock.patch.object(psycopg, "connect", lambda *args, **kwargs: pooler)


def test_an_acquire_whose_statements_run_on_two_backends_is_refused_before_the_lock(postgres_url, backends):
    a, b = backends
    with through(Pooler(a, b)), pytest.raises(LeaseHeld, match="pooler in transaction or statement mode.*session"
                                              ) as e:
        Lease(parse_database_url(postgres_url)).acquire()
    assert f"({a.info.backend_pid}, then {b.info.backend_pid})" in str(e.value)
    direct = Lease(parse_database_url(postgres_url))  # no lock was left on either backend
    direct.acquire()
    direct.release()


def test_two_instances_behind_one_pooled_backend_do_not_both_lead(postgres_url, backends):
    """A session may take its own advisory lock again: two instances whose statements ran on one pooled
    backend both got it, and both led (each declared the other's executors dead)."""
    shared = backends[0]
    first = Lease(parse_database_url(postgres_url))
    with through(Pooler(shared)):
        first.acquire()
    try:
        with through(Pooler(shared)), pytest.raises(LeaseHeld, match=f"another Relay instance leads.*backend "
                                                                     f"{shared.info.backend_pid}"):
            Lease(parse_database_url(postgres_url)).acquire()
        assert first.check() == "held"
    finally:
        first.release()


def test_a_lease_whose_check_runs_on_another_backend_is_lost(postgres_url, backends):
    a, b = backends
    lease = Lease(parse_database_url(postgres_url))
    with through(Pooler(a, a, b)):  # the acquire's two statements on a, the check on b
        lease.acquire()
        with pytest.raises(LeaseLost, match=f"\\({a.info.backend_pid}, then {b.info.backend_pid}\\).*pooler"):
            lease.check()
    lease.release()


def test_a_lease_whose_lock_was_let_go_under_its_session_is_lost(postgres_url: str) -> None:
    lease = Lease(parse_database_url(postgres_url))
    lease.acquire()
    try:
        lease._conn.execute("SELECT pg_advisory_unlock_all()")  # as a pooler's reset (DISCARD ALL) does
        with pytest.raises(LeaseLost, match="holds it no more"):
            lease.check()
    finally:
        lease.release()
