"""The event store's Postgres factory: the library's, with every connection
parameter of ``--database-url``.

``eventsourcing.postgres`` connects with five parameters only (dbname, host,
port, user, password, from ``POSTGRES_*``): the URL's query (``sslmode``,
``sslrootcert``, ``application_name``, ``target_session_attrs``...) was dropped,
so ``?sslmode=require`` was ignored by the event store (a token went over
plaintext to a server without SSL) while the read models' pool, given the
URL itself, honoured it. :func:`relay_es.adapters.stores.event_store_env`
passes the rest of the URL's parameters as a libpq connection string under
:data:`EXTRA_CONNINFO`; this factory adds them to the pool's connection
arguments before the pool opens (it opens on first use).
"""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresFactory
from psycopg.conninfo import conninfo_to_dict

from relay_es.adapters.library import ArrayInsertRecorder, FastReadsFactory, add_conninfo

EXTRA_CONNINFO = "POSTGRES_EXTRA_CONNINFO"


class RelayPostgresFactory(FastReadsFactory, PostgresFactory):
    """The library's Postgres factory with the URL's every parameter, offering
    :class:`~relay_es.adapters.library.FastReads` to the application."""

    kind = "postgres"
    application_recorder_class = ArrayInsertRecorder  # a batch's events as arrays of base types

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        extra = self.env.get(EXTRA_CONNINFO)
        if extra:
            add_conninfo(self.datastore, conninfo_to_dict(extra))
