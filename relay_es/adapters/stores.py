"""Stores: where events and read models live.

One database URL selects everything:

* ``sqlite:///path/to/relay.db`` (the default of ``relay serve`` is
  ``./relay-data/relay.db``) -- the ``eventsourcing`` SQLite recorder for
  events, and the read models in the same file.
* ``postgresql://user:pass@host:port/dbname`` -- the ``eventsourcing``
  Postgres recorder (psycopg 3) for events, the read models in the same
  database. Every connection to it -- the event store's, the read models',
  the lease's -- is made with one connection string, the URL as libpq reads
  it (:attr:`StoreConfig.conninfo`): what the URL leaves out, libpq fills in
  alike for all of them.

:class:`Database` is the small SQL interface the read models use. It has two
implementations with one behaviour; SQL is written once, in psycopg's
``%(name)s`` style, and translated for sqlite3. Both are also the read models'
store (:class:`~relay_es.adapters.readmodels.ReadModelStore`: their tables,
tracking positions and queries).
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlparse

from relay_es.adapters.readmodels import ReadModelStore

DEFAULT_SQLITE_PATH = Path("relay-data") / "relay.db"
# Seconds a caller waits for a pooled Postgres connection before it fails with a store error (a REST call's 503
# with Retry-After; a worker retries): the event store's pool, and the read models' in ``relay serve``. While
# Postgres is away the pools have none to give: a read of the read models waited 30 s for its 503 (5 s now).
# The event store library tries each read and write 10 times: through an outage the first waits this long,
# the others far less (pgfactory.FailFast). While Postgres answers, a connection comes back as soon as a short
# transaction ends. Not a statement timeout: a long read, once it has its connection, runs to its end.
POOL_WAIT_SECS = 5


@dataclass(frozen=True)
class StoreConfig:
    kind: str  # "sqlite" | "postgres"
    url: str
    sqlite_path: str | None = None
    # Postgres: the libpq connection string of every connection Relay makes to the store (postgres_conninfo)
    conninfo: str = ""

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgres"


def parse_database_url(url: str | None) -> StoreConfig:
    """Turns ``--database-url`` into a :class:`StoreConfig`, refusing what it can't use."""
    if not url:
        return StoreConfig("sqlite", f"sqlite:///{DEFAULT_SQLITE_PATH}", str(DEFAULT_SQLITE_PATH))
    if url.startswith(("postgresql://", "postgres://")):
        # a parameter the stores cannot honour is refused here, before anything connects
        conninfo = postgres_conninfo(url)
        _refuse_search_path(url)
        return StoreConfig("postgres", url, conninfo=conninfo)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if not path:
            raise ValueError("database URL sqlite:/// needs a file path, e.g. sqlite:///relay-data/relay.db")
        return StoreConfig("sqlite", url, path)
    raise ValueError(
        f"unsupported database URL {redact_url(url)!r}: use postgresql://user:pass@host:port/db "
        "or sqlite:///path/to/relay.db"
    )


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, for messages and logs. Everything
    between ``user:`` and the **last** ``@`` is hidden, so a password holding an ``@``, a
    ``/`` or a ``?`` (written without percent-encoding) is hidden whole; hiding a little
    more of an odd URL is the safe side."""
    url = _QUERY_PASSWORD.sub(r"\1***", url)  # ?password=... (libpq takes it there too)
    scheme, sep, rest = url.partition("//")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}//{userinfo.partition(':')[0]}:***@{host}"


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def postgres_params(url: str) -> dict[str, str]:
    """Every connection parameter of a Postgres URL as libpq reads it: dbname, host,
    port, user and password from its parts, and each ``?name=value`` of its query
    (``sslmode``, ``sslrootcert``, ``application_name``...; a query's ``host`` or
    ``user`` wins over the part's). What the URL leaves out is not filled in here:
    libpq fills it in at every connection, the same way for each (see
    :func:`postgres_conninfo`). ``password`` is always there, for messages to hide it:
    the URL's, else ``PGPASSWORD``'s, else empty. Raises ``ValueError`` for a parameter
    libpq does not know, one given twice or one without a value: a parameter a
    connection would drop or guess at is refused, not ignored."""
    params = _url_params(url)
    return {**params, "password": params.get("password") or os.environ.get("PGPASSWORD", "")}


def postgres_conninfo(url: str) -> str:
    """The libpq connection string of a Postgres URL: the one the event store, the read
    models and the lease all connect with, so that they reach the same database. It holds
    what the URL says and nothing else; libpq fills in the rest as it does for ``psql``
    (the database defaults to the user name, the user to ``PGUSER`` or the login name,
    host and port to ``PGHOST`` and ``PGPORT``, else the local socket and 5432; a
    ``PGDATABASE``, ``PGPASSWORD``, password file or service file applies). Filling in
    defaults of Relay's own for one kind of connection and not the others once put the
    events in database ``postgres`` and the lease and read models in ``alice``, for
    ``postgresql://alice@host``: a second instance under another user led the same events."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**_url_params(url))


def _url_params(url: str) -> dict[str, str]:
    """The parameters libpq reads from the URL, checked (see :func:`postgres_params`)."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    names: set[str] = set()
    for item in filter(None, urlparse(url).query.split("&")):
        name, eq, _ = item.partition("=")
        name = unquote(name)
        if not eq or not name:
            raise ValueError(f"database URL {redact_url(url)!r}: query item {name!r} has no value")
        if name in names:
            raise ValueError(f"database URL {redact_url(url)!r}: parameter {name!r} is given twice")
        names.add(name)
    try:
        make_conninfo(**dict.fromkeys(names, "x"))  # libpq's own check of the names
        return {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except ProgrammingError as e:
        raise ValueError(f"database URL {redact_url(url)!r}: {_hide_password(url, str(e))}") from None


def _refuse_search_path(url: str) -> None:
    """Raises ``ValueError`` when the store's connections would have a ``search_path`` of their own: from the
    URL's ``options``, else (libpq reads it only then) from ``PGOPTIONS``. The event store's tables are always
    in the library's schema (``public``: Relay sets no ``POSTGRES_SCHEMA``), the read models', tracking's and
    the metric series' wherever ``search_path`` puts them: the store was split across two schemas, and two
    stores told apart by their ``search_path`` shared one event log (a token made for one opened the other)."""
    options = _url_params(url).get("options")
    where = f"database URL {redact_url(url)!r}: its options set"
    if options is None:
        options, where = os.environ.get("PGOPTIONS", ""), "PGOPTIONS (libpq passes it to a URL without options) sets"
    # Postgres reads a setting's name in any case, "-" for "_", a backslash escaping the next character; the name
    # anywhere in the options is refused (no other setting's name holds it).
    if re.search(r"search[_-]path", options.replace("\\", ""), re.IGNORECASE):
        raise ValueError(
            f"{where} search_path, which Relay refuses: its event log is always in schema public and its read "
            "models follow search_path, so the store would be split across two schemas (and stores told apart by "
            "search_path would share one event log); give each Relay store a database of its own"
        )


def _hide_password(url: str, said: str) -> str:
    """The first line of libpq's complaint about the URL, with the URL's password hidden (libpq
    quotes the token it could not read, which may be the password)."""
    said = (said.strip().splitlines() or [""])[0]
    password = urlparse(url).password
    for secret in filter(None, (password, password and unquote(password))):
        said = said.replace(secret, "***")
    return said


def event_store_env(config: StoreConfig) -> dict[str, str]:
    """The ``eventsourcing`` environment for the Relay application (the whole of it:
    :meth:`relay_es.engine.service.Relay.construct_env` reads nothing else)."""
    if config.is_postgres:
        from relay_es.adapters.pgfactory import CONNINFO

        return {
            "PERSISTENCE_MODULE": "relay_es.adapters.pgfactory:RelayPostgresFactory",
            # The library asks for these five; the factory connects with CONNINFO alone, as the lease
            # and the read models do (see pgfactory).
            "POSTGRES_DBNAME": "",
            "POSTGRES_HOST": "",
            "POSTGRES_PORT": "",
            "POSTGRES_USER": "",
            "POSTGRES_PASSWORD": "",
            CONNINFO: config.conninfo,
            "POSTGRES_POOL_SIZE": "2",
            "POSTGRES_MAX_OVERFLOW": "6",
            "POSTGRES_CONNECT_TIMEOUT": str(POOL_WAIT_SECS),  # the library's name for its pool's wait
        }
    assert config.sqlite_path is not None
    make_private_file(config.sqlite_path)
    return {
        "PERSISTENCE_MODULE": "relay_es.adapters.library:RelaySQLiteFactory",
        "SQLITE_DBNAME": config.sqlite_path,
        "SQLITE_LOCK_TIMEOUT": "10",
    }


# The event log's table, as the library names it: after the application (``Relay``) on Postgres, in its schema
# (``public``: Relay sets no ``POSTGRES_SCHEMA``); ``stored_events`` whatever the application on SQLite.
POSTGRES_EVENTS_TABLE = ("public", "relay_events")
SQLITE_EVENTS_TABLE = "stored_events"


def holds_event_log(config: StoreConfig) -> bool:
    """Whether the store holds Relay's event log (its table): not a database of another application, an
    empty one, nor a SQLite file not there yet. Makes nothing: one plain connection, read-only for SQLite,
    none for a missing file. Its failure (``psycopg.Error``, ``sqlite3.Error``) is the driver's own reason,
    libpq's "database does not exist" or "Connection refused", where the event store's pool says only that
    it got no connection within :data:`POOL_WAIT_SECS`."""
    if config.is_postgres:
        import psycopg

        with psycopg.connect(config.conninfo, connect_timeout=POOL_WAIT_SECS) as conn:
            table = ".".join(POSTGRES_EVENTS_TABLE)
            return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])
    path = config.sqlite_path
    if path is None or path == ":memory:" or not os.path.exists(path):
        return False
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (SQLITE_EVENTS_TABLE,))
        return found.fetchone() is not None
    finally:
        conn.close()


def make_private_dir(path: Path) -> None:
    """Creates the store's directory if it is missing, readable by its owner only: the
    store holds every executor's metadata and the audit log. An existing directory is
    left as the operator made it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)


def make_private_file(path: str) -> None:
    """Creates the SQLite database file, empty (an empty file is an empty database),
    readable and writable by its owner only, in a private directory (see
    :func:`make_private_dir`), before SQLite opens it: SQLite creates the file with
    0644 (less the umask), and its ``-wal`` and ``-shm`` files with the database
    file's own mode, so they are private too. An existing file is left as it is."""
    if path == ":memory:":
        return
    make_private_dir(Path(path).parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


class Cursor(Protocol):
    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> Any: ...

    def executemany(self, sql: str, seq: Sequence[Any]) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    @property
    def rowcount(self) -> int: ...


# Postgres' advisory lock under which a process makes tables, so that processes opening an empty
# database together do not race in its catalog (a unique violation on pg_type): the event store's
# (adapters/pgfactory.py), the read models' and the metric series' (Database.schema).
CREATE_LOCK = 0x52454C415A


class Database(Protocol):
    dialect: str

    def transaction(self) -> Any: ...  # context manager yielding a Cursor, committed on exit

    def schema(self) -> Any: ...  # transaction() for making tables: one process at a time

    def read(self) -> Any: ...  # context manager yielding a Cursor for a consistent read

    def close(self) -> None: ...


_NAMED = re.compile(r"%\((\w+)\)s")


# Cached: a multi-row insert's text is thousands of characters. The texts are bounded (IN lists of up to
# 500 marks a query, the remainder of a multi-row insert a table): some 2,000 in all.
@functools.lru_cache(maxsize=4096)
def to_sqlite(sql: str) -> str:
    return _NAMED.sub(r":\1", sql).replace("%s", "?")


class _SQLiteCursor:
    dialect = "sqlite"

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Any = None) -> "_SQLiteCursor":
        self._cur.execute(to_sqlite(sql), params if params is not None else ())
        return self

    def executemany(self, sql: str, seq: Sequence[Any]) -> "_SQLiteCursor":
        self._cur.executemany(to_sqlite(sql), seq)
        return self

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall()

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount


class SQLiteDatabase(ReadModelStore):
    """One writer connection behind a lock; one reader connection per thread (WAL)."""

    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._writer = self._connect()
        # Debian builds SQLite with SECURE_DELETE: every page a delete frees is overwritten with zeros,
        # which made dropping a rebuild's old tables (some 340 MB for a million events) take 2.0-2.9 s
        # against 0.13 s. Everything this connection deletes is derived from the event log kept in the
        # same file (read models) or a count (metric samples): the zeros hid nothing the file lacks.
        self._writer.execute("PRAGMA secure_delete = 0")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA synchronous=NORMAL")
        with self._all_lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[_SQLiteCursor]:
        with self._write_lock:
            cur = self._writer.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteCursor(cur)
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    def schema(self) -> Any:
        return self.transaction()  # BEGIN IMMEDIATE: SQLite's one writer makes tables one process at a time

    @contextmanager
    def read(self) -> Iterator[_SQLiteCursor]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
        cur = conn.cursor()
        cur.execute("BEGIN")
        try:
            yield _SQLiteCursor(cur)
        finally:
            cur.execute("COMMIT")
            cur.close()

    def close(self) -> None:
        with self._all_lock:
            for c in self._all:
                try:
                    c.close()
                except sqlite3.Error:
                    pass
            self._all.clear()


def reconnect_steadily() -> None:
    """Every ``psycopg_pool`` pool of this process tries a connection it could not make again every
    second (with the pool's jitter), not after 1 s doubling each time: Relay stops serving after 30 s
    without its lease (ADR 7), so an outage worth riding out is shorter than that, and with the
    doubling the next try after an outage of 25 s came up to 16 s after Postgres was back (the
    transitions, the deaths and the REST writes waited that long; measured 7.7 s). A try a second
    while the store is away is a handful of refused connections a second. Called before a pool is
    made (:class:`PostgresDatabase`, the event store's factory); the pool module is the driver's, not
    loaded on SQLite."""
    from psycopg_pool.base import AttemptWithBackoff

    AttemptWithBackoff.DELAY_BACKOFF = 1.0


class PostgresDatabase(ReadModelStore):
    dialect = "postgres"

    def __init__(self, conninfo: str, *, min_size: int = 1, max_size: int = 4, pool_wait: float = 30) -> None:
        """``conninfo``: the store's (:attr:`StoreConfig.conninfo`). ``pool_wait``: how long a caller waits
        for a connection (``relay serve``'s: :data:`POOL_WAIT_SECS`)."""
        from psycopg_pool import ConnectionPool

        reconnect_steadily()
        self.conninfo = conninfo
        # Checked as it is handed out: after a Postgres restart the idle connections are ones Postgres cut,
        # and the first reads got them (500s) until each had failed once. One round trip, no statement.
        self.pool = ConnectionPool(conninfo, min_size=min_size, max_size=max_size, open=True, timeout=pool_wait,
                                   check=ConnectionPool.check_connection)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            with conn.transaction():
                with conn.cursor() as cur:
                    yield cur

    @contextmanager
    def schema(self) -> Iterator[Any]:
        with self.transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))  # held until this one commits
            yield cur

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            with conn.transaction():
                with conn.cursor() as cur:
                    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    yield cur

    def close(self) -> None:
        self.pool.close()


def open_database(config: StoreConfig, *, pool_wait: float = 30) -> Database:
    """``pool_wait``: Postgres, how long a caller waits for a pooled connection (see :data:`POOL_WAIT_SECS`)."""
    if config.is_postgres:
        return PostgresDatabase(config.conninfo, pool_wait=pool_wait)
    assert config.sqlite_path is not None
    make_private_file(config.sqlite_path)
    return SQLiteDatabase(config.sqlite_path)
