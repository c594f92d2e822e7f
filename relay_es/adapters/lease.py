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

A SQLite file can change under its lock: its directory deleted (``rm -rf
relay-data/``) or an older copy moved into place (``mv``). The process went on
writing into the file it had open, gone from the path, and answered 204; a second
instance started on the path (the lock file had gone too) and both led; what the
first recorded was lost when it stopped. So the lease notes the device and inode
of the database file and of the lock file it holds when it is taken, and
:meth:`Lease.check` looks at both paths again (two ``stat`` calls): one missing or
another file is a lease lost. SQLite's ``-wal`` and ``-shm`` files are not looked
at: they are SQLite's to make and remove.

A Postgres session can end under the holder (Postgres restarted, the
connection cut), and the lock ends with it. :meth:`Lease.check`, called every
few seconds by ``relay serve``, takes it again on a new session; if another
instance took it meanwhile it raises :class:`LeaseLost`, and the server stops
rather than lead beside it.

Postgres can also come back with other data than the holder led: restored from
an older copy of its data directory (a backup, a failover to a replica that
lagged), or a new cluster on the same address. The lock is free there, and was
taken again: the holder went on writing over what it held in memory (streams
with gaps, poison for every read model) or retried for ever on tables that were
gone. So the lease records the cluster's ``system_identifier`` when it is first
taken, and a lease taken again is lost unless the store on the new session is
that cluster still, holds the events table, and its log reaches the newest
event this process saw (:meth:`Lease.guard`).

The session connects with the store's one connection string
(``StoreConfig.conninfo``), as the event store and the read models do: the lock
lives in one database, and it guards the events only if they are in the same one.

The lock is a session's, so the lease needs a session of its own, on one
Postgres backend for its life. Behind a pooler in transaction or statement mode
(PgBouncer's default is session mode) each statement may run on another backend:
two instances took the lock on one shared backend (a session may take its own
lock again) and both led, and a lock left on a pooled backend refused every
later start. So the lease records its backend's pid when it takes the lock and
each check confirms the statement ran on that backend and ``pg_locks`` shows the
lock held by it (else the lease is lost); a lock this very backend holds counts
as held by another; and an acquire whose statements ran on two backends is
refused, naming the pooler, before the lock is asked for.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay_es.adapters.stores import StoreConfig, make_private_dir, make_private_file, redact_url

LOCK_KEY = 0x52454C4159  # "RELAY"

FileId = tuple[int, int]  # (st_dev, st_ino): the file a path names, whatever it is named

# The lease session's TCP timeouts, the same at both ends of it. tcp_user_timeout bounds what is sent and not
# acknowledged, the keepalives an idle session. Relay's end: a session whose network went silent (no reset,
# no answer) fails its next check within about 10 s, not when TCP gives up (some 15 minutes). Postgres' end,
# set on the session itself: the session of a holder whose host vanished (node lost, network cut: no FIN or
# RST ever comes) ends, and the lock with it, within about 11 s, not after the server's default of 2 h idle
# before the first keepalive (measured: the lock free 11.2 s after the holder vanished, against 2 h 11 min).
KEEPALIVES_IDLE_SECS = 5
KEEPALIVES_INTERVAL_SECS = 2
KEEPALIVES_COUNT = 3
USER_TIMEOUT_MS = 10_000
# Postgres ends a silent holder's session no sooner than this after it last heard from it (Linux ends a
# connection on its keepalives only once the user timeout has passed too). It must exceed the time a holder
# goes on deciding on an unconfirmed lease (runtime.LEASE_FRESH_SECS, 5 s): a holder cut off from Postgres
# has stopped deciding before its lock can be let go and another instance take it.
SILENT_HOLDER_SECS = USER_TIMEOUT_MS / 1000
_SERVER_TIMEOUTS = {"idle": str(KEEPALIVES_IDLE_SECS), "interval": str(KEEPALIVES_INTERVAL_SECS),
                    "count": str(KEEPALIVES_COUNT), "user": str(USER_TIMEOUT_MS)}

# The statements of the lease. The lock's row in pg_locks: a bigint key is its high and low 32 bits
# (classid, objid) with objsubid 1, in the current database (advisory locks are per database).
_LOCK_ROWS = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
              " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
              f" AND classid = {LOCK_KEY >> 32} AND objid = {LOCK_KEY & 0xFFFFFFFF} AND objsubid = 1")
# Postgres' end of the session's timeouts, and the backend it runs on.
_OPEN = ("SELECT pg_backend_pid(), set_config('tcp_keepalives_idle', %(idle)s, false),"
         " set_config('tcp_keepalives_interval', %(interval)s, false),"
         " set_config('tcp_keepalives_count', %(count)s, false), set_config('tcp_user_timeout', %(user)s, false)")
# The lock, asked for only on the backend _OPEN ran on (NULL: not asked) and only if no session holds it,
# this one included (a session may take its own lock again: behind a pooler, another client's); the holder.
_TAKE = (f"SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() <> %(pid)s THEN NULL"
         f" WHEN EXISTS ({_LOCK_ROWS}) THEN false ELSE pg_try_advisory_lock(%(key)s) END,"
         f" ({_LOCK_ROWS} LIMIT 1)")
# The backend the statement ran on, and whether it holds the lock.
_HELD = f"SELECT pg_backend_pid(), EXISTS ({_LOCK_ROWS} AND pid = pg_backend_pid())"
# The cluster: an initdb makes it, a copy of its data directory (a backup, a replica) keeps it.
_SYSTEM = "SELECT system_identifier FROM pg_control_system()"


class LeaseHeld(RuntimeError):
    pass


class LeaseLost(RuntimeError):
    """The lease is not this instance's any more: its session ended and another instance
    holds it now, or the session is not the one that took it (a pooler in transaction mode),
    or the store it was taken again on is not the one it led, or the SQLite file it leads
    or its lock file was deleted or replaced."""


class Pooled(RuntimeError):
    """Two statements of the lease's session ran on different Postgres backends."""


class Lease:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._fd: int | None = None
        self._conn: Any = None
        self._held = False  # Postgres: acquired, and not released (the session may have ended since)
        self._pid = 0  # Postgres: the backend the lock was taken on
        self._holder: int | None = None  # Postgres: the backend holding the lock, when it was refused
        self._system: int | None = None  # Postgres: the cluster the lock was first taken on (None: not readable)
        self._log: tuple[str, str] | None = None  # Postgres: the events table (schema, name) it guards
        self._seen: Callable[[], int] = lambda: 0  # the newest notification id this process saw in it
        self._files: tuple[tuple[str, FileId], tuple[str, FileId]] | None = None  # SQLite: (db, lock) as taken

    def acquire(self) -> None:
        if self.config.is_postgres:
            try:
                conn = self._lock_session()
            except Pooled as e:
                raise LeaseHeld(f"{e}") from None
            if conn is None:
                raise LeaseHeld(
                    f"another Relay instance leads the store at {redact_url(self.config.url)} (`relay serve`, or a "
                    f"rebuild; its lease session: Postgres backend {self._holder}); running several instances on "
                    "one store is not supported yet"
                )
            try:
                self._system = self._cluster(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._held = True
            return
        path = self.config.sqlite_path
        if path is None or path == ":memory:":
            return
        make_private_dir(Path(path).parent)
        # Keyed by the file, not by how it was named: a relative path, an absolute one, a
        # symlink or ./x/../x to the same database all lock the same <real path>.lock.
        real = os.path.realpath(path)
        make_private_dir(Path(real).parent)  # a symlink's target's directory, made as the link's is
        lock_path = Path(real + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)  # private, as the store (it holds a pid)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeld(f"another Relay instance is serving or rebuilding {path}") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            # Made now, not by the store after: the file noted is the one led. Made at its real path: a symlink
            # to a file not made yet names nothing until SQLite made it, which a check then took for a change.
            make_private_file(real)
            db_id = _file_id(path)
            if db_id is None:
                raise FileNotFoundError(f"the store file {path} was not made")
            held = os.fstat(fd)
            self._files = ((path, db_id), (str(lock_path), (held.st_dev, held.st_ino)))
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def guard(self, schema: str, table: str, seen: Callable[[], int]) -> None:
        """The event log the lease leads: its table and ``seen()``, the newest notification id this
        process has saved or read there. A lease taken again (:meth:`check`) on a store whose table
        is gone, or whose log ends before ``seen()``, is lost: that is not the log this process led.
        Postgres only: a SQLite file changed under its lock is told by :meth:`check` itself."""
        self._log = (schema, table)
        self._seen = seen

    def _cluster(self, conn: Any) -> int | None:
        """The cluster's system identifier, or None where the role may not read it (a managed
        Postgres may revoke ``pg_control_system``): then the log alone tells a store that changed."""
        import psycopg

        try:
            return int(conn.execute(_SYSTEM).fetchone()[0])
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction):
            return None

    def _changed(self, conn: Any) -> str | None:
        """Why the store on this new session is not the one the lease led, or None: it is."""
        from psycopg import sql

        where = redact_url(self.config.url)
        if self._system is not None:
            now = self._cluster(conn)
            if now != self._system:
                return (f"the store at {where} came back as another Postgres cluster (system identifier {now}, "
                        f"not {self._system}): a new or re-created cluster is not the store this instance led")
        if self._log is None:
            return None
        schema, table = self._log
        name = sql.Identifier(schema, table)
        if conn.execute("SELECT to_regclass(%s)", (name.as_string(conn),)).fetchone()[0] is None:
            return (f"the store at {where} came back without its events table ({schema}.{table}): it is not "
                    "the store this instance led")
        head = conn.execute(sql.SQL("SELECT max(notification_id) FROM {}").format(name)).fetchone()[0] or 0
        seen = self._seen()
        if head < seen:
            return (f"the store at {where} came back with its log ending at event {head}, before event {seen} "
                    "this instance saw: restored from an older copy (a backup, a replica that lagged), it is not "
                    "the store this instance led")
        return None

    def _connect(self) -> Any:
        """A new session for the lease, with Relay's end of its timeouts (see USER_TIMEOUT_MS)."""
        import psycopg

        return psycopg.connect(self.config.conninfo, autocommit=True, connect_timeout=5,
                               tcp_user_timeout=USER_TIMEOUT_MS, keepalives=1, keepalives_idle=KEEPALIVES_IDLE_SECS,
                               keepalives_interval=KEEPALIVES_INTERVAL_SECS, keepalives_count=KEEPALIVES_COUNT)

    def _lock_session(self) -> Any:
        """A new session holding the advisory lock, or None if another session holds it (its backend's pid
        in ``_holder``). Raises :class:`Pooled` if its statements ran on two backends: the lock is then not
        asked for."""
        conn = self._connect()
        try:
            pid = conn.execute(_OPEN, _SERVER_TIMEOUTS).fetchone()[0]
            now, got, holder = conn.execute(_TAKE, {"pid": pid, "key": LOCK_KEY}).fetchone()
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            if got is None:
                raise Pooled(self._pooled(pid, now))
            self._holder = holder
            return None
        self._pid = pid
        return conn

    def _pooled(self, was: int, now: int) -> str:
        return (f"the store at {redact_url(self.config.url)} ran two statements of one session on two Postgres "
                f"backends ({was}, then {now}): a connection pooler in transaction or statement mode is in the "
                "way, and the leader lease needs a session of its own; connect Relay to Postgres directly or "
                "through the pooler in session mode")

    def check(self) -> str:
        """Whether the lease is still this instance's: ``"held"``; ``"retaken"`` (its
        session had ended and the lock was taken again on a new one, on the store it led);
        ``"unreachable"`` (the session ended and Postgres cannot be reached: try again later --
        no other instance can take it meanwhile either). Raises :class:`LeaseLost` if another
        instance took it, or if the session's statement ran on another backend than the
        one that took the lock, or that backend holds it no more, or if the store it was
        taken again on is not the one it led (another cluster, its events table gone, its log
        behind what this process saw: :meth:`guard`). SQLite: the lock is the process's while it
        lives, but its files may go from under it: :meth:`_files_check`."""
        if self._files is not None:
            return self._files_check()
        if not self._held:
            return "held"
        import psycopg

        if self._conn is not None:
            try:
                pid, held = self._conn.execute(_HELD).fetchone()
            except psycopg.Error:
                try:
                    self._conn.close()
                except Exception:
                    pass
                self._conn = None
            else:
                self._confirm(pid, held)
                return "held"
        try:
            conn = self._lock_session()
        except psycopg.Error:
            return "unreachable"
        except Pooled as e:
            self._held = False
            raise LeaseLost(f"{e}") from None
        if conn is None:
            self._held = False
            raise LeaseLost(
                f"the store session holding the leader lease at {redact_url(self.config.url)} ended, and "
                "another Relay instance took the lease meanwhile"
            )
        try:
            why = self._changed(conn)
        except psycopg.Error:
            conn.close()  # the lock with it: asked again at the next check
            return "unreachable"
        if why is not None:
            conn.close()
            self._held = False
            raise LeaseLost(why)
        self._conn = conn
        return "retaken"

    def _files_check(self) -> str:
        """SQLite: ``"held"`` while the database file and the lock file at their paths are the files
        noted when the lease was taken; ``"unreachable"`` if a path cannot be looked at (permission
        denied, I/O error). Raises :class:`LeaseLost` if one is missing or another file: deleted
        (``rm -rf`` of the directory) or replaced (``mv`` of a copy), this process writes into a file
        no later process opens, and another instance may start on the path beside it. Deleted and
        replaced are one case: a deleted file may be made again at its path before the check looks
        (the read models' process opens the path anew)."""
        assert self._files is not None
        (db, db_id), (lock, lock_id) = self._files
        try:
            db_now, lock_now = _file_id(db), _file_id(lock)
        except OSError:
            return "unreachable"
        if db_now != db_id:
            raise LeaseLost(f"the store file {db} was deleted or replaced under this process: what this instance "
                            f"recorded since then is not in the store at {db}, and another Relay instance may start "
                            "on it")
        if lock_now != lock_id:
            raise LeaseLost(f"the lock file {lock} of the store {db} was deleted or replaced under this process: "
                            "another Relay instance may start on the store beside this one")
        return "held"

    def _confirm(self, pid: int, held: bool) -> None:
        """Raises :class:`LeaseLost` unless the check ran on the backend that took the lock and it holds it."""
        if pid != self._pid:
            self._held = False
            raise LeaseLost(self._pooled(self._pid, pid))
        if not held:
            self._held = False
            raise LeaseLost(f"the store session holding the leader lease at {redact_url(self.config.url)} "
                            f"(Postgres backend {pid}) holds it no more: something let the lock go (a pooler's "
                            "reset, pg_advisory_unlock_all), and another Relay instance may lead now")

    def release(self) -> None:
        self._held = False
        self._files = None
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


def _file_id(path: str) -> FileId | None:
    """The file at ``path`` (symlinks followed, as SQLite does), or None if there is none. Raises
    ``OSError`` if it cannot be looked at."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino
