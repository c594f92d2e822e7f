"""Leadership: who may fire timers, run projections and dispatch.

Relay's ownership model (see docs/adr/0007-ownership.md):

* a **socket** belongs to the instance that accepted it; its ``owner`` id is
  recorded in the executor's Connected event;
* **timers, projections and recovery decisions** belong to the instance that
  holds the store's leader lease;
* a **dispatch** is sent by the instance that owns the target's socket.

Today one instance serves a store. The lease makes that explicit and refuses a
second instance with a clear message instead of letting two leaders race.
SQLite: an exclusive ``flock`` on ``<db>.lock`` beside the database's real
path (symlinks and ``..`` resolved). Postgres: a session-level
advisory lock held on a dedicated connection for the life of the process.

A Postgres session can end under the holder (Postgres restarted, the
connection cut), and the lock ends with it. :meth:`Lease.check`, called every
few seconds by ``relay serve``, takes it again on a new session; if another
instance took it meanwhile it raises :class:`LeaseLost`, and the server stops
rather than lead beside it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from relay_es.adapters.stores import StoreConfig, make_private_dir, redact_url

LOCK_KEY = 0x52454C4159  # "RELAY"


class LeaseHeld(RuntimeError):
    pass


class LeaseLost(RuntimeError):
    """The lease ended with its session and another instance holds it now."""


class Lease:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._fd: int | None = None
        self._conn: Any = None
        self._held = False  # Postgres: acquired, and not released (the session may have ended since)

    def acquire(self) -> None:
        if self.config.is_postgres:
            conn = self._lock_session()
            if conn is None:
                raise LeaseHeld(
                    f"another Relay instance leads the store at {redact_url(self.config.url)}; "
                    "running several instances on one store is not supported yet"
                )
            self._conn = conn
            self._held = True
            return
        path = self.config.sqlite_path
        if path is None or path == ":memory:":
            return
        make_private_dir(Path(path).parent)
        # Keyed by the file, not by how it was named: a relative path, an absolute one, a
        # symlink or ./x/../x to the same database all lock the same <real path>.lock.
        lock_path = Path(os.path.realpath(path) + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)  # private, as the store (it holds a pid)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeld(f"another Relay instance is serving {path}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def _lock_session(self) -> Any:
        """A new session holding the advisory lock, or None if another session holds it."""
        import psycopg

        # A session whose network went silent (no reset, no answer) fails its next check within about 10 s,
        # not when TCP gives up (some 15 minutes): tcp_user_timeout bounds what is sent and not acknowledged,
        # the keepalives an idle session.
        conn = psycopg.connect(self.config.url, autocommit=True, connect_timeout=5, tcp_user_timeout=10_000,
                               keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3)
        try:
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            return None
        return conn

    def check(self) -> str:
        """Whether the lease is still this instance's: ``"held"``; ``"retaken"`` (its
        session had ended and the lock was taken again on a new one); ``"unreachable"``
        (the session ended and Postgres cannot be reached: try again later -- no other
        instance can take it meanwhile either). Raises :class:`LeaseLost` if another
        instance took it. SQLite's file lock cannot be lost while the process lives."""
        if not self._held:
            return "held"
        import psycopg

        if self._conn is not None:
            try:
                self._conn.execute("SELECT 1")
                return "held"
            except psycopg.Error:
                try:
                    self._conn.close()
                except Exception:
                    pass
                self._conn = None
        try:
            conn = self._lock_session()
        except psycopg.Error:
            return "unreachable"
        if conn is None:
            self._held = False
            raise LeaseLost(
                f"the store session holding the leader lease at {redact_url(self.config.url)} ended, and "
                "another Relay instance took the lease meanwhile"
            )
        self._conn = conn
        return "retaken"

    def release(self) -> None:
        self._held = False
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            finally:
                self._fd = None
