"""The executors table, ``relay_executors``: one row per executor stream.

Rows are folded by :mod:`relay_es.projections.executors`; this module stores
and reads them. Timestamps are epoch microseconds, exactly as in the events.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import fields
from typing import Any
from uuid import UUID

from relay_es.adapters.readmodels.bulk import chunks, insert_rows, marks, on_conflict_newer
from relay_es.adapters.readmodels.tracking import position_of
from relay_es.domain.units import from_epoch_us, to_epoch_us
from relay_es.projections.executors import ExecutorRow, ExecutorsProjection

NAME = ExecutorsProjection.NAME
TABLE = "relay_executors"
_TS_FIELDS = {"created_at", "updated_at", "deadline", "recovery_dispatched_at", "declared_dead_at"}
COLUMNS = [f.name for f in fields(ExecutorRow)]

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_executors (  -- timestamps: epoch microseconds, exactly as in the events
        stream_id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        app TEXT NOT NULL,
        executor_id TEXT NOT NULL,
        version BIGINT NOT NULL,
        status TEXT,
        incarnation INTEGER NOT NULL,
        app_version TEXT,
        hostname TEXT,
        language TEXT,
        dbos_version TEXT,
        executor_metadata TEXT,
        connection_id TEXT,
        owner TEXT,
        created_at BIGINT,
        updated_at BIGINT,
        deadline BIGINT,
        disconnect_reason TEXT,
        recovery_phase TEXT,
        recovery_version TEXT,
        recovery_request_id TEXT,
        recovery_target TEXT,
        recovery_attempt INTEGER NOT NULL,
        recovery_dispatched_at BIGINT,
        declared_dead_at BIGINT,
        recovery_redo_version TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_executors_app ON relay_executors (org, app, executor_id)",
]

_VALUES = operator.attrgetter(*COLUMNS)  # not asdict(): that deep-copies every value
_TS_AT = [i for i, c in enumerate(COLUMNS) if c in _TS_FIELDS]
_METADATA_AT = COLUMNS.index("executor_metadata")
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM relay_executors"
_ON_CONFLICT = on_conflict_newer(TABLE, COLUMNS)


def row_to_db(row: ExecutorRow) -> list[Any]:
    """The row's values in ``COLUMNS`` order, as stored."""
    v = list(_VALUES(row))
    for i in _TS_AT:
        if v[i] is not None:
            v[i] = to_epoch_us(v[i])
    if v[_METADATA_AT] is not None:
        v[_METADATA_AT] = json.dumps(v[_METADATA_AT])
    return v


def row_from_db(values: Any) -> ExecutorRow:
    d = dict(zip(COLUMNS, values))
    for k in _TS_FIELDS:
        if d[k] is not None:
            d[k] = from_epoch_us(d[k])
    if d["executor_metadata"] is not None:
        d["executor_metadata"] = json.loads(d["executor_metadata"])
    return ExecutorRow(**d)


class ExecutorsTable:
    """Stores :class:`~relay_es.projections.executors.ExecutorsProjection`'s rows."""

    name = NAME
    tables = (TABLE,)
    version = 1

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        for stmt in DDL if indexes else DDL[:1]:
            cur.execute(stmt)

    def drop(self, cur: Any) -> None:
        cur.execute("DROP TABLE IF EXISTS relay_executors")

    def read(self, cur: Any, sids: Sequence[str]) -> dict[str, ExecutorRow]:
        """The stored rows of ``sids`` (those that have one), 500 to a query."""
        out = {}
        for chunk in chunks(sids):
            cur.execute(_SELECT + f" WHERE stream_id IN ({marks(len(chunk))})", list(chunk))
            for values in cur.fetchall():
                row = row_from_db(values)
                out[row.stream_id] = row
        return out

    def write(self, cur: Any, rows: list[ExecutorRow], *, bulk: bool = False) -> None:
        insert_rows(cur, TABLE, COLUMNS, [row_to_db(r) for r in rows], _ON_CONFLICT)


# ------------------------------------------------------------------ queries


def all_rows(db: Any, *, org: str | None = None, app: str | None = None) -> list[ExecutorRow]:
    """Every row (of an org, of an application), in (org, app, executor id) order: of their code points,
    as Python compares them, on both stores. Sorted here, not by the database: a Postgres cluster's
    collation (``en_US.utf8``, the official image's default) orders ``a, B, c, D`` where Python and
    SQLite order ``B, D, a, c``, and the "as of" pages, which resume after an executor id as Python
    compares them, lost ``B`` and ``D``."""
    sql, params = _SELECT, {}
    if org is not None:
        sql += " WHERE org = %(org)s"
        params["org"] = org
        if app is not None:
            sql += " AND app = %(app)s"
            params["app"] = app
    with db.read() as cur:
        cur.execute(sql, params)
        return sorted((row_from_db(r) for r in cur.fetchall()), key=lambda r: (r.org, r.app, r.executor_id))


def get_row(db: Any, stream_id: UUID | str) -> ExecutorRow | None:
    with db.read() as cur:
        cur.execute(_SELECT + " WHERE stream_id = %(sid)s", {"sid": str(stream_id)})
        r = cur.fetchone()
    return row_from_db(r) if r else None


def load_all(db: Any) -> tuple[list[ExecutorRow], int]:
    """Every row and the position the table is at, read in one transaction: where the
    process manager starts (``composition.runtime.view_bootstrap``), then follows the
    log from that position."""
    with db.read() as cur:
        position = position_of(cur, NAME)
        cur.execute(_SELECT)
        rows = [row_from_db(r) for r in cur.fetchall()]
    return rows, position
