"""Writing many read-model rows at once, the same on both stores.

A cursor here is one of :class:`relay_es.adapters.stores.Database`'s: SQL is
written in psycopg's ``%s`` style (the SQLite cursor translates it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from itertools import chain
from typing import Any

COPY_MIN_ROWS = 32  # below this, statements in a pipeline beat the extra round trips of COPY
SQLITE_MAX_PARAMS = 999  # parameters in one SQLite statement: the oldest builds' limit


def is_sqlite(cur: Any) -> bool:
    """Whether a cursor of :class:`~relay_es.adapters.stores.Database` is SQLite's (for the few DDL differences)."""
    return getattr(cur, "dialect", None) == "sqlite"


@functools.lru_cache(maxsize=1024)
def _values_sql(head: str, width: int, rows: int, tail: str) -> str:
    return head + ", ".join(["(" + ", ".join(["?"] * width) + ")"] * rows) + (" " + tail if tail else "")


def sqlite_insert_flat(cur: Any, head: str, width: int, params: Sequence[Any], *, per: int, tail: str = "") -> None:
    """``head`` (``INSERT INTO t [(columns)] VALUES``) over ``params``, the rows' values one after
    another, ``width`` a row: statements of ``per`` rows, then one of the rest (the texts made once).
    Not ``executemany``: Python's ``sqlite3`` steps it once a row and lets go of the GIL around every
    step, which costs more (a rebuild's 1,000,000 audit entries: 1.5 against 1.25 us a row, measured
    alone) and, beside a busy thread, waits for the GIL after every row (ADR 10). Rows are applied in
    order, as ``executemany`` applies them, ``tail`` (an ``ON CONFLICT`` clause) to each. The event
    store's SQLite recorder (``library.ManyInsertRecorder``) and the read models both insert with it."""
    n = len(params) // width
    whole, step = n - n % per, per * width
    if whole:
        full = _values_sql(head, width, per, tail)
        for at in range(0, whole * width, step):
            cur.execute(full, params[at:at + step])
    if whole < n:
        cur.execute(_values_sql(head, width, n - whole, tail), params[whole * width:])


def sqlite_insert(cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], tail: str = "") -> None:
    """``INSERT INTO table (columns) VALUES (...), (...) <tail>`` on SQLite, as many rows a statement
    as :data:`SQLITE_MAX_PARAMS` parameters hold (:func:`sqlite_insert_flat`)."""
    width = len(columns)
    sqlite_insert_flat(cur, f"INSERT INTO {table} ({', '.join(columns)}) VALUES ", width,
                       list(chain.from_iterable(rows)), per=max(1, SQLITE_MAX_PARAMS // width), tail=tail)


def copy_rows(cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Appends rows to a table in bulk: ``COPY`` on Postgres, multi-row ``INSERT`` statements
    on SQLite (:func:`sqlite_insert`)."""
    if not rows:
        return
    cols = ", ".join(columns)
    if is_sqlite(cur):
        sqlite_insert(cur, table, columns, rows)
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
    On SQLite, multi-row statements (:func:`sqlite_insert`); on Postgres, for fewer rows, one
    prepared statement over all rows.
    """
    if not rows:
        return
    cols = ", ".join(columns)
    if is_sqlite(cur):
        sqlite_insert(cur, table, columns, rows, on_conflict)
        return
    if len(rows) < COPY_MIN_ROWS:
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
