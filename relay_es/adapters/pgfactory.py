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

EXTRA_CONNINFO = "POSTGRES_EXTRA_CONNINFO"


class RelayPostgresFactory(PostgresFactory):
    def __init__(self, env: Any) -> None:
        super().__init__(env)
        extra = self.env.get(EXTRA_CONNINFO)
        if extra:
            self.datastore.pool.kwargs.update(conninfo_to_dict(extra))  # type: ignore[union-attr]
