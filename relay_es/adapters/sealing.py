"""The keys of sealed values (:mod:`relay_es.domain.sealing`), in the event store's own database.

One table, ``relay_sealing_keys`` (scope, key as hex), beside the events: in the
same SQLite file or Postgres schema, so that every instance on one store opens what another
sealed, and outside the event log, so that deleting a row erases what it sealed. Projections
never touch it (a rebuild drops only the read models' tables). It is made with the event store's
tables (unless ``CREATE_TABLE`` says not to, as in a rebuild's share processes, which never seal).

Each call is its own short transaction on the library's datastore: a key is kept (committed)
before anything sealed with it is recorded, and deleted before the event that ends its scope is
recorded (the engine's order: ``relay_es.engine.alert_commands``).
"""

from __future__ import annotations

from typing import Any

from relay_es.domain.sealing import new_key

TABLE = "relay_sealing_keys"


class StoreKeys:
    """:class:`~relay_es.domain.sealing.KeyStore` on the library's SQLite or Postgres datastore."""

    def __init__(self, datastore: Any, kind: str, *, create_table: bool) -> None:
        self.datastore = datastore
        if kind == "postgres":
            from psycopg.sql import SQL, Identifier

            table = SQL("{}.{}").format(Identifier(datastore.schema), Identifier(TABLE))
            self._create = SQL("CREATE TABLE IF NOT EXISTS {} (scope TEXT PRIMARY KEY, key TEXT NOT NULL)").format(table)
            self._put = SQL("INSERT INTO {} (scope, key) VALUES (%s, %s) "
                            "ON CONFLICT (scope) DO UPDATE SET key = EXCLUDED.key").format(table)
            self._get = SQL("SELECT key FROM {} WHERE scope = %s").format(table)
            self._delete = SQL("DELETE FROM {} WHERE scope = %s").format(table)
        else:
            self._create = f"CREATE TABLE IF NOT EXISTS {TABLE} (scope TEXT PRIMARY KEY, key TEXT NOT NULL)"
            self._put = f"INSERT OR REPLACE INTO {TABLE} (scope, key) VALUES (?, ?)"
            self._get = f"SELECT key FROM {TABLE} WHERE scope = ?"
            self._delete = f"DELETE FROM {TABLE} WHERE scope = ?"
        if create_table:
            with datastore.transaction(commit=True) as curs:
                curs.execute(self._create)

    def create(self, scope: str) -> bytes:
        key = new_key()
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._put, (scope, key.hex()))
        return key

    def get(self, scope: str) -> bytes | None:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._get, (scope,))
            row = curs.fetchone()
        if row is None:
            return None
        return bytes.fromhex(row["key"])  # the library's rows: sqlite3.Row, psycopg's dict rows

    def delete(self, scope: str) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._delete, (scope,))
