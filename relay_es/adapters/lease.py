"""Leadership: who may fire timers, run projections and dispatch.

Relay's ownership model (see docs/adr/0007-ownership.md):

* a **socket** belongs to the instance that accepted it; its ``owner`` id is
  recorded in the executor's Connected event;
* **timers, projections and recovery decisions** belong to the instance that
  holds the store's leader lease;
* a **dispatch** is sent by the instance that owns the target's socket.

Today one instance serves a store. The lease makes that explicit and refuses a
second instance with a clear message instead of letting two leaders race.
SQLite: an exclusive ``flock`` on ``<db>.lock``. Postgres: a session-level
advisory lock held on a dedicated connection for the life of the process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from relay_es.adapters.stores import StoreConfig, redact_url

LOCK_KEY = 0x52454C4159  # "RELAY"


class LeaseHeld(RuntimeError):
    pass


class Lease:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._fd: int | None = None
        self._conn: Any = None

    def acquire(self) -> None:
        if self.config.is_postgres:
            import psycopg

            self._conn = psycopg.connect(self.config.url, autocommit=True)
            got = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]
            if not got:
                self._conn.close()
                self._conn = None
                raise LeaseHeld(
                    f"another Relay instance leads the store at {redact_url(self.config.url)}; "
                    "running several instances on one store is not supported yet"
                )
            return
        path = self.config.sqlite_path
        if path is None or path == ":memory:":
            return
        lock_path = Path(path + ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeld(f"another Relay instance is serving {path}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
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
