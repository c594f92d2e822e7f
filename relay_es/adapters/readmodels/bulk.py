"""Writing many read-model rows at once, the same on both stores.

A cursor here is one of :class:`relay_es.adapters.stores.Database`'s: SQL is
written in psycopg's ``%s`` style (the SQLite cursor translates it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

COPY_MIN_ROWS = 32  # below this, statements in a pipeline beat the extra round trips of COPY


def is_sqlite(cur: Any) -> bool:
    """Whether a cursor of :class:`~relay_es.adapters.stores.Database` is SQLite's (for the few DDL differences)."""
    return getattr(cur, "dialect", None) == "sqlite"


def copy_rows(cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Appends rows to a table in bulk: ``COPY`` on Postgres, one prepared
    ``INSERT`` over all rows on SQLite (already its fastest path)."""
    if not rows:
        return
    cols = ", ".join(columns)
    if is_sqlite(cur):
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['?'] * len(columns))})", rows)
        return
    with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def insert_rows(cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], on_conflict: str) -> None:
    """``INSERT INTO table (columns) ... ON CONFLICT <on_conflict>`` for many rows.

    Postgres, for more than a few rows: ``COPY`` into a temporary table of the
    same shape (emptied at commit) and one ``INSERT ... SELECT``: one statement
    bound per row costs Python work per row, the COPY stream little (a storm's
    batch of a thousand rows: about a third of the projection runner's time).
    Otherwise, and on SQLite, one prepared statement over all rows.
    """
    if not rows:
        return
    cols = ", ".join(columns)
    if is_sqlite(cur) or len(rows) < COPY_MIN_ROWS:
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(columns))}) {on_conflict}",
                        rows)
        return
    staging = f"relay_in_{table}"
    cur.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} (LIKE {table}) ON COMMIT DELETE ROWS")
    copy_rows(cur, staging, columns, rows)
    cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {staging} {on_conflict}")


def upsert_sql(table: str, columns: Sequence[str]) -> str:
    """``INSERT ... ON CONFLICT (stream_id) DO UPDATE`` guarded by ``version``: a row never moves backwards."""
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
            + on_conflict_newer(table, columns))


def on_conflict_newer(table: str, columns: Sequence[str]) -> str:
    return ("ON CONFLICT (stream_id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in columns if c != "stream_id")
            + f" WHERE {table}.version < excluded.version")


def chunks(items: Sequence[Any], size: int = 500) -> list[Sequence[Any]]:
    """``items`` in slices of at most ``size`` (the parameters of one ``IN (...)``)."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def marks(n: int) -> str:
    return ", ".join(["%s"] * n)
