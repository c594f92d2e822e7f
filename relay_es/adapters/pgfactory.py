"""The event store's Postgres factory: the library's, connecting with the
store's one connection string.

``eventsourcing.postgres`` connects with five parameters only (dbname, host,
port, user, password, from ``POSTGRES_*``): the URL's query (``sslmode``,
``sslrootcert``, ``application_name``, ``target_session_attrs``...) was dropped,
so ``?sslmode=require`` was ignored by the event store (a token went over
plaintext to a server without SSL) while the read models' pool, given the
URL itself, honoured it. And the five were filled in with defaults of Relay's
own where the URL left them out (database ``postgres``, port 5432), where the
read models and the lease had libpq's (the user name, ``PGDATABASE``,
``PGPORT``): ``postgresql://alice@host`` put the events in one database and the
lease in another. :func:`relay_es.adapters.stores.event_store_env` passes the
store's connection string (``StoreConfig.conninfo``, the URL as libpq reads it)
under :data:`CONNINFO`; this factory makes the pool connect with it alone, in
place of the library's five, before the pool opens (it opens on first use).

While the store is away its pool fails fast (:class:`FailFast`): the library tries each read and
write 10 times, and each try waited the pool's whole :data:`~relay_es.adapters.stores.POOL_WAIT_SECS`
for a connection, so a REST write through an outage took some 50 s (a PATCH cut off by the server's
own stop after 30 s answered 500).

It also makes the store's tables one process at a time. The library creates its
types, tables and functions with no guard against another process doing the same:
four Relays opening an empty database at once failed in every one of ten tries
(``duplicate key value violates unique constraint "pg_type_typname_nsp_index"``,
``tuple concurrently updated``). Today's lease lets one ``relay serve`` run on a store,
but a ``relay admin`` or ``relay projections`` command may open it beside the server's
first start, and the several instances to come will start together. Each recorder's
tables, and the sealing keys' table, are made while this process holds the advisory
lock ``stores.CREATE_LOCK``, as the read models' are (``Database.schema``;
``tests/adapters/test_pgfactory.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresFactory
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from relay_es.adapters.library import ArrayInsertRecorder, FastReadsFactory, add_conninfo
from relay_es.adapters.sealing import StoreKeys
from relay_es.adapters.stores import CREATE_LOCK, reconnect_steadily

CONNINFO = "POSTGRES_CONNINFO"
_LIBRARY_PARAMS = ("dbname", "host", "port", "user", "password")  # the library's, from POSTGRES_*
AWAY_WAIT_SECS = 0.1  # how long a caller waits for a connection while the store is away


class FailFast:
    """A pool's ``getconn``, waiting at most :data:`AWAY_WAIT_SECS` for a connection (not the pool's
    whole timeout) while the store is away: within one timeout of a wait that got none while nobody
    got one either (a pool only busy, its connections all taken by others, is not away: its callers
    keep their whole wait). The pool's own workers keep trying to connect meanwhile, so a caller after
    the store is back gets the connection they made at once, and that ends it. The library's ten tries
    of a read or a write take some 3 s through an outage, not ten of the pool's timeouts."""

    def __init__(self, getconn: Callable[..., Any], wait: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.getconn, self.wait, self.monotonic = getconn, wait, monotonic
        self.away_until = float("-inf")
        self.got_at = float("-inf")  # when a caller last got a connection

    def __call__(self, timeout: float | None = None) -> Any:
        wait = self.wait if timeout is None else timeout
        started = self.monotonic()
        if started < self.away_until:
            wait = min(wait, AWAY_WAIT_SECS)
        try:
            conn = self.getconn(timeout=wait)
        except PoolTimeout:
            if self.got_at < started:  # nobody got one while this caller waited: the store is away
                self.away_until = self.monotonic() + self.wait
            raise
        self.got_at, self.away_until = self.monotonic(), float("-inf")
        return conn


class RelayPostgresFactory(FastReadsFactory, PostgresFactory):
    """The library's Postgres factory connecting with the store's connection string,
    offering :class:`~relay_es.adapters.library.FastReads` to the application."""

    kind = "postgres"
    application_recorder_class = ArrayInsertRecorder  # a batch's events as arrays of base types

    def __init__(self, env: Any) -> None:
        reconnect_steadily()
        super().__init__(env)
        conninfo = self.env.get(CONNINFO)
        if conninfo is not None:
            kwargs = self.datastore.pool.kwargs
            for name in _LIBRARY_PARAMS:
                kwargs.pop(name, None)  # what the URL leaves out is libpq's to fill in, as for every other connection
            add_conninfo(self.datastore, conninfo_to_dict(conninfo))
        pool = self.datastore.pool
        pool.getconn = FailFast(pool.getconn, pool.timeout)  # type: ignore[method-assign]  # pool.connection() calls it

    @contextmanager
    def creating(self) -> Iterator[None]:
        """Holds ``CREATE_LOCK`` (on a connection of the pool, for the session) while the
        tables are made; nothing when this factory makes none (``CREATE_TABLE`` false)."""
        if not self.env_create_table():
            yield
            return
        with self.datastore.get_connection() as conn:
            try:  # from before the lock is asked for: interrupted as it is granted, it is still let go
                conn.execute("SELECT pg_advisory_lock(%s)", (CREATE_LOCK,))
                conn.commit()
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (CREATE_LOCK,))
                    conn.commit()
                except psycopg.Error:
                    conn.close()  # its session ends, and the lock with it (the pool drops a closed connection)

    def aggregate_recorder(self, purpose: str = "events") -> Any:
        with self.creating():
            return super().aggregate_recorder(purpose)

    def application_recorder(self) -> Any:
        with self.creating():
            return super().application_recorder()

    def relay_keys(self, app: Any) -> StoreKeys:
        with self.creating():
            return super().relay_keys(app)
