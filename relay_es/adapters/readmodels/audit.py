"""The audit log's tables: ``relay_audit`` (one row per entry, keyed by notification id)
and ``relay_audit_streams`` (where each stream belongs, so the log resumes mid-stream).

Entries are made by :mod:`relay_es.projections.audit`; this module stores and
reads them. ``at`` is epoch microseconds, exactly as in the events (version 2;
version 1 stored milliseconds); ``detail`` is JSON with sorted keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec

from relay_es.adapters.readmodels.bulk import chunks, copy_rows, insert_rows, is_sqlite, marks
from relay_es.domain.units import from_epoch_us, to_epoch_us
from relay_es.projections.audit import RECOVERY_CONFIRMED, TOKEN_ACTIONS, AuditEntry, AuditProjection, Where

NAME = AuditProjection.NAME

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_audit (
        seq {seq_type} PRIMARY KEY,
        at BIGINT NOT NULL,
        org TEXT NOT NULL,
        app TEXT,
        executor_id TEXT,
        action TEXT NOT NULL,
        detail TEXT NOT NULL
    )
    """,
    # Both in seq's order within their key. On SQLite seq is the rowid, which ends every index entry
    # already ({seq} is empty there): naming it again only made the entries longer and a rebuild's
    # index build slower (1,000,000 entries: relay_audit_app 1.25-1.33 against 1.37-1.59 s).
    "CREATE INDEX IF NOT EXISTS relay_audit_org ON relay_audit (org{seq})",
    "CREATE INDEX IF NOT EXISTS relay_audit_app ON relay_audit (org, app, executor_id{seq})",
    # listMetrics' recovery_count (recoveries()): an application's recoveries confirmed, by time.
    # Partial: it holds those entries alone (1% of bench section 5's), so a rebuild builds it in a tenth
    # of the time an index of every entry's action took (1,000,000 entries: SQLite 0.11 against 0.90 s,
    # Postgres 0.10 against 1.95 s), and an entry of any other action costs it nothing.
    "DROP INDEX IF EXISTS relay_audit_action",  # that index of every row's action, made until 2026-12-04
    f"CREATE INDEX IF NOT EXISTS relay_audit_recoveries ON relay_audit (org, app, at) WHERE action = '{RECOVERY_CONFIRMED}'",
    # stream id -> (org, app, name): lets the audit projection resume mid-stream
    """
    CREATE TABLE IF NOT EXISTS relay_audit_streams (
        stream_id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        app TEXT,
        name TEXT
    )
    """,
]

COLUMNS = ("seq", "at", "org", "app", "executor_id", "action", "detail")
STREAM_COLUMNS = ("stream_id", "org", "app", "name")
_encoder = msgspec.json.Encoder(order="sorted")


def encode_detail(detail: dict[str, Any]) -> str:
    """The detail column: JSON with sorted keys (the same bytes live and after a rebuild)."""
    return _encoder.encode(detail).decode()


class AuditTable:
    """Stores :class:`~relay_es.projections.audit.AuditProjection`'s entries and stream places."""

    name = NAME
    tables = ("relay_audit", "relay_audit_streams")
    version = 3  # 3: operator actions left for their own table (relay_actions)

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        # SQLite: INTEGER PRIMARY KEY makes seq the rowid (one b-tree, not a table and an index)
        seq_type, seq = ("INTEGER", "") if is_sqlite(cur) else ("BIGINT", ", seq")
        for stmt in DDL if indexes else [s for s in DDL if "CREATE INDEX" not in s]:
            cur.execute(stmt.replace("{seq_type}", seq_type).replace("{seq}", seq))

    def drop(self, cur: Any) -> None:
        for t in self.tables:
            cur.execute(f"DROP TABLE IF EXISTS {t}")

    def read(self, cur: Any, sids: Sequence[str]) -> dict[str, Where]:
        """Where the streams ``sids`` belong (those known), 500 to a query."""
        out = {}
        for chunk in chunks(sids):
            cur.execute(f"SELECT stream_id, org, app, name FROM relay_audit_streams WHERE stream_id IN "
                        f"({marks(len(chunk))})", list(chunk))
            for sid, org, app, name in cur.fetchall():
                out[sid] = (org, app, name)
        return out

    def write(self, cur: Any, changes: tuple[dict[str, Where], list[AuditEntry]], *, bulk: bool = False) -> None:
        """``bulk``: the tables were created empty by this rebuild, so rows are
        copied in (Postgres ``COPY``) rather than inserted one statement each."""
        new_streams, entries = changes
        if new_streams:
            rows = [(sid, *v) for sid, v in new_streams.items()]
            if bulk:
                copy_rows(cur, "relay_audit_streams", STREAM_COLUMNS, rows)
            else:
                insert_rows(cur, "relay_audit_streams", STREAM_COLUMNS, rows, "ON CONFLICT (stream_id) DO NOTHING")
        if entries:
            encode = encode_detail
            rows = [(a.seq, to_epoch_us(a.at), a.org, a.app, a.executor_id, a.action, encode(a.detail))
                    for a in entries]
            if bulk:
                copy_rows(cur, "relay_audit", COLUMNS, rows)
            else:
                insert_rows(cur, "relay_audit", COLUMNS, rows, "ON CONFLICT (seq) DO NOTHING")


def query(db: Any, *, org: str, app: str | None = None, executor_id: str | None = None, after: int | None = None,
          limit: int = 100, folded: bool = False, tokens: bool = True) -> list[AuditEntry]:
    sql, params = query_sql(org=org, app=app, executor_id=executor_id, after=after, limit=limit, folded=folded,
                            tokens=tokens)
    with db.read() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return [AuditEntry(r[0], from_epoch_us(r[1]), r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]


def query_sql(*, org: str, app: str | None, executor_id: str | None, after: int | None,
              limit: int, folded: bool = False, tokens: bool = True) -> tuple[str, dict[str, Any]]:
    """:func:`query`'s statement and parameters. ``folded``: only the entries up to the audit read
    model's tracked position, read in the same statement. A live fold writes its rows and moves the
    position in one transaction, so this leaves nothing out then; a fill in processes (a rebuild, a
    start on empty read models) commits rows of every share out of order and moves the position
    once at its end, and a reader paging with ``after`` would have stepped over rows committed
    behind its page for good. ``tokens=False``: without the tokens' entries (``token.*``), left out
    by the statement itself, so a page holds ``limit`` of the others whenever there are that many
    (one filtered after the read could come back empty with later entries to come, and a follower
    stop there)."""
    sql = "SELECT seq, at, org, app, executor_id, action, detail FROM relay_audit WHERE org = %(org)s"
    params: dict[str, Any] = {"org": org, "limit": limit}
    if app is not None:
        sql += " AND app = %(app)s"
        params["app"] = app
    if executor_id is not None:
        sql += " AND executor_id = %(executor_id)s"
        params["executor_id"] = executor_id
    if after is not None:
        sql += " AND seq > %(after)s"
        params["after"] = after
    if not tokens:  # a prefix compared as such: LIKE ignores case on SQLite and not on Postgres
        sql += f" AND SUBSTR(action, 1, {len(TOKEN_ACTIONS)}) <> '{TOKEN_ACTIONS}'"
    if folded:
        sql += f" AND seq <= (SELECT position FROM relay_tracking WHERE name = '{NAME}')"
    sql += " ORDER BY seq LIMIT %(limit)s"
    return sql, params


RECOVERIES_SQL = (
    "SELECT (at / CAST(%(w)s AS BIGINT)) * CAST(%(w)s AS BIGINT) AS b, COUNT(*) FROM relay_audit "
    f"WHERE org = %(org)s AND app = %(app)s AND action = '{RECOVERY_CONFIRMED}' AND at >= %(s)s AND at < %(e)s "
    "GROUP BY b ORDER BY b")  # the action a literal, as in the partial index: a generic plan of Postgres uses it too


def recoveries(db: Any, *, org: str, app: str, start_us: int, end_us: int, width_us: int) -> list[tuple[int, int]]:
    """How many recoveries of ``org``/``app`` were confirmed (entries ``recovery.confirmed``) in each
    ``width_us``-long bucket (aligned on the epoch) of ``[start_us, end_us)``: ``[(bucket start in
    microseconds, n)]``, oldest first."""
    with db.read() as cur:
        cur.execute(RECOVERIES_SQL, {"w": width_us, "org": org, "app": app, "s": start_us, "e": end_us})
        return [(int(r[0]), int(r[1])) for r in cur.fetchall()]
