"""The executors read model: one row per executor stream.

:func:`reduce` is a pure fold of an executor's events into an
:class:`ExecutorRow`. The same function builds the live table (through the
projection runner), the table as it stood at any past instant (``as_of``), and
the process manager's in-memory view at start-up. The row carries the armed
deadline and the outstanding dispatch, so this table is also Relay's durable
timer table.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from relay_es.aggregates.executor import Executor, ExecutorStatus, RecoveryPhase, opaque_value
from relay_es.adapters.stores import Database, insert_rows
from relay_es.projections.storable import check_event
from relay_es.domain.units import from_epoch_us, to_epoch_us


@dataclass(frozen=True)
class ExecutorRow:
    stream_id: str
    org: str
    app: str
    executor_id: str
    version: int
    status: str | None = None
    incarnation: int = 0
    app_version: str | None = None
    hostname: str | None = None
    language: str | None = None
    dbos_version: str | None = None
    executor_metadata: Any = None
    connection_id: str | None = None
    owner: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    deadline: datetime | None = None
    disconnect_reason: str | None = None
    recovery_phase: str | None = None
    recovery_version: str | None = None
    recovery_request_id: str | None = None
    recovery_target: str | None = None
    recovery_attempt: int = 0
    recovery_dispatched_at: datetime | None = None
    declared_dead_at: datetime | None = None
    recovery_redo_version: str | None = None

    @property
    def visible(self) -> bool:
        """Listed by the API: HEALTHY, DISCONNECTED and DEAD; deleted ones are gone."""
        return self.status in (ExecutorStatus.HEALTHY, ExecutorStatus.DISCONNECTED, ExecutorStatus.DEAD)


EXECUTOR_EVENTS = (
    Executor.Registered,
    Executor.Connected,
    Executor.Disconnected,
    Executor.DeclaredDead,
    Executor.RecoveryDeferred,
    Executor.RecoveryDispatched,
    Executor.RecoveryFailed,
    Executor.RecoveryConfirmed,
    Executor.RecoveryWithdrawn,
    Executor.Deleted,
)


def _evolve(row: ExecutorRow, changes: dict[str, Any]) -> ExecutorRow:
    """``dataclasses.replace`` without re-running ``__init__``: a copy of the
    row's fields with ``changes`` applied (the fold's inner loop; ``replace`` was
    a quarter of a rebuild)."""
    new = _new(ExecutorRow)
    d = new.__dict__
    d.update(row.__dict__)
    d.update(changes)
    return new


_new = object.__new__


def reduce(row: ExecutorRow | None, e: Any) -> ExecutorRow:
    """Applies one executor event to a row. Pure."""
    at: datetime = e.timestamp
    kind = type(e)
    if kind is Executor.Registered:
        return ExecutorRow(
            stream_id=str(e.originator_id),
            org=e.org,
            app=e.app,
            executor_id=e.executor_id,
            version=e.originator_version,
            updated_at=at,
        )
    if row is None:
        raise ValueError(f"{kind.__qualname__} before Registered in stream {e.originator_id}")
    changes: dict[str, Any] = {"version": e.originator_version, "updated_at": at}
    if kind is Executor.Connected:
        new_incarnation = e.incarnation != row.incarnation
        changes.update(
            status=_HEALTHY,
            incarnation=e.incarnation,
            app_version=e.app_version,
            hostname=e.hostname,
            language=e.language,
            dbos_version=e.dbos_version,
            executor_metadata=opaque_value(e.executor_metadata),
            connection_id=e.connection_id,
            owner=e.owner,
            created_at=at if new_incarnation or row.created_at is None else row.created_at,
            deadline=None,
            disconnect_reason=None,
        )
    elif kind is Executor.Disconnected:
        changes.update(
            status=_DISCONNECTED,
            deadline=e.deadline,
            disconnect_reason=e.reason,
            connection_id=None,
            owner=None,
        )
    elif kind is Executor.DeclaredDead:
        fresh = row.recovery_phase in (None, RecoveryPhase.CONFIRMED)
        changes.update(
            status=_DEAD,
            deadline=None,
            recovery_phase=RecoveryPhase.PENDING.value if fresh else row.recovery_phase,
            recovery_version=e.app_version if fresh else row.recovery_version,
            recovery_attempt=0 if fresh else row.recovery_attempt,
            recovery_request_id=None if fresh else row.recovery_request_id,
            recovery_target=None if fresh else row.recovery_target,
            recovery_dispatched_at=None if fresh else row.recovery_dispatched_at,
            declared_dead_at=at,
            recovery_redo_version=e.app_version if row.recovery_phase == RecoveryPhase.DISPATCHED
            else row.recovery_redo_version,
        )
    elif kind is Executor.RecoveryDeferred:
        changes["recovery_phase"] = RecoveryPhase.DEFERRED.value
    elif kind is Executor.RecoveryDispatched:
        changes.update(
            recovery_phase=RecoveryPhase.DISPATCHED.value,
            recovery_request_id=e.request_id,
            recovery_target=e.target_executor_id,
            recovery_attempt=e.attempt,
            recovery_dispatched_at=at,
        )
    elif kind is Executor.RecoveryFailed:
        changes.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_request_id=None)
    elif kind is Executor.RecoveryConfirmed:
        if row.recovery_redo_version is not None and row.status == ExecutorStatus.DEAD:
            changes.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_version=row.recovery_redo_version,
                           recovery_attempt=0, recovery_request_id=None, recovery_target=None,
                           recovery_redo_version=None)
        else:
            changes.update(recovery_phase=RecoveryPhase.CONFIRMED.value, recovery_redo_version=None)
    elif kind is Executor.RecoveryWithdrawn:
        changes.update(recovery_phase=None, recovery_request_id=None, recovery_target=None,
                       recovery_redo_version=None)
    elif kind is Executor.Deleted:
        changes.update(
            status=ExecutorStatus.DELETED.value,
            recovery_phase=None,
            recovery_request_id=None,
            recovery_target=None,
        )
    return _evolve(row, changes)


_HEALTHY = ExecutorStatus.HEALTHY.value
_DISCONNECTED = ExecutorStatus.DISCONNECTED.value
_DEAD = ExecutorStatus.DEAD.value


def fold(events: Any, *, until: datetime | None = None) -> ExecutorRow | None:
    """Folds a stream's events (optionally only those at or before ``until``)."""
    row: ExecutorRow | None = None
    for e in events:
        if until is not None and e.timestamp > until:
            break
        row = reduce(row, e)
    return row


# ------------------------------------------------------------------ storage

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


_SELECT = f"SELECT {', '.join(COLUMNS)} FROM relay_executors"
_ON_CONFLICT = (
    "ON CONFLICT (stream_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "stream_id")
    + " WHERE relay_executors.version < excluded.version"
)


class ExecutorsProjection:
    """Keeps ``relay_executors``. Rows never move backwards (``version`` guard).

    Rows read or written stay cached between batches (the runner forgets them
    when a batch fails or the tracked position moved elsewhere), so a stream
    is read back from the table once, not once per batch.
    """

    name = "executors"
    tables = ("relay_executors",)
    event_types = EXECUTOR_EVENTS
    cache_limit = 50_000

    def __init__(self) -> None:
        self.rows: dict[str, ExecutorRow | None] = {}
        self.dirty: set[str] = set()

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        for stmt in DDL if indexes else DDL[:1]:
            cur.execute(stmt)

    def drop(self, cur: Any) -> None:
        cur.execute("DROP TABLE IF EXISTS relay_executors")

    def forget(self) -> None:
        self.rows = {}
        self.dirty = set()

    def load(self, cur: Any, items: list[tuple[int, str, Any]]) -> None:
        """Reads the rows of the batch's streams not cached yet, 500 to a query."""
        rows = self.rows
        sids = [sid for sid in dict.fromkeys(sid for _, sid, _ in items) if sid not in rows]
        for start in range(0, len(sids), 500):
            chunk = sids[start:start + 500]
            cur.execute(_SELECT + f" WHERE stream_id IN ({', '.join(['%s'] * len(chunk))})", chunk)
            for values in cur.fetchall():
                row = row_from_db(values)
                rows[row.stream_id] = row
            for sid in chunk:
                rows.setdefault(sid, None)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        current = self.rows[sid]
        if current is not None and current.version >= event.originator_version:
            return  # already applied (a rebuilt or replayed view never moves backwards)
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        self.rows[sid] = reduce(current, event)
        self.dirty.add(sid)

    def write(self, cur: Any, *, bulk: bool = False) -> None:
        rows = [row_to_db(r) for sid in self.dirty if (r := self.rows[sid]) is not None]
        self.dirty = set()
        insert_rows(cur, "relay_executors", COLUMNS, rows, _ON_CONFLICT)

    def committed(self) -> None:
        if len(self.rows) > self.cache_limit:
            self.rows = {}


# ------------------------------------------------------------------ queries


def all_rows(db: Database, *, org: str | None = None, app: str | None = None) -> list[ExecutorRow]:
    sql, params = _SELECT, {}
    if org is not None:
        sql += " WHERE org = %(org)s"
        params["org"] = org
        if app is not None:
            sql += " AND app = %(app)s"
            params["app"] = app
    sql += " ORDER BY org, app, executor_id"
    with db.read() as cur:
        cur.execute(sql, params)
        return [row_from_db(r) for r in cur.fetchall()]


def get_row(db: Database, stream_id: UUID | str) -> ExecutorRow | None:
    with db.read() as cur:
        cur.execute(_SELECT + " WHERE stream_id = %(sid)s", {"sid": str(stream_id)})
        r = cur.fetchone()
    return row_from_db(r) if r else None
