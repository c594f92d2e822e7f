"""The executors read model: one row per executor stream.

:func:`reduce` is a pure fold of an executor's events into an
:class:`ExecutorRow`. The same function builds the live table (through the
projection runner), the table as it stood at any past instant (``as_of``), and
the process manager's in-memory view at start-up. The row carries the armed
deadline and the outstanding dispatch, so this table is also Relay's durable
timer table.

:class:`ExecutorsProjection` is what the projection runner keeps in memory
between batches; the table itself is stored by
:mod:`relay_es.adapters.readmodels.executors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from relay_es.aggregates.executor import Executor, ExecutorStatus, RecoveryPhase, opaque_value
from relay_es.projections.storable import check_event


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
    row's fields with ``changes`` applied. A write to the ``__dict__`` of a new
    instance of Relay's own frozen dataclass (no library object): the fold's inner
    loop, where ``replace`` was a quarter of a rebuild (bench/s5_replay.py)."""
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


class ExecutorsProjection:
    """The executors read model between batches: rows read or folded, and which changed.

    Rows stay cached between batches (the runner forgets them when a batch fails
    or the tracked position moved elsewhere), so a stream is read back from the
    table once, not once per batch. Rows never move backwards (``version`` guard).
    """

    NAME = "executors"
    name = NAME
    event_types = EXECUTOR_EVENTS
    cache_limit = 50_000

    def __init__(self) -> None:
        self.rows: dict[str, ExecutorRow | None] = {}
        self.dirty: set[str] = set()

    def forget(self) -> None:
        self.rows = {}
        self.dirty = set()

    def missing(self, items: list[tuple[int, str, Any]]) -> list[str]:
        """The batch's streams whose rows are not held yet (to be read from the table)."""
        rows = self.rows
        return [sid for sid in dict.fromkeys(sid for _, sid, _ in items) if sid not in rows]

    def loaded(self, asked: Sequence[str], found: dict[str, ExecutorRow]) -> None:
        rows = self.rows
        for sid in asked:
            rows[sid] = found.get(sid)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        current = self.rows[sid]
        if current is not None and current.version >= event.originator_version:
            return  # already applied (a rebuilt or replayed view never moves backwards)
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        self.rows[sid] = reduce(current, event)
        self.dirty.add(sid)

    def changes(self) -> list[ExecutorRow]:
        """The rows changed since the last call."""
        out = [r for sid in self.dirty if (r := self.rows[sid]) is not None]
        self.dirty = set()
        return out

    def committed(self) -> None:
        if len(self.rows) > self.cache_limit:
            self.rows = {}


# ------------------------------------------------------------------ queries


class ExecutorRows(Protocol):
    """Where the table is read (the read models' database)."""

    def executor_rows(self, *, org: str | None = None, app: str | None = None) -> list[ExecutorRow]: ...

    def executor_row(self, stream_id: UUID | str) -> ExecutorRow | None: ...


def all_rows(db: ExecutorRows, *, org: str | None = None, app: str | None = None) -> list[ExecutorRow]:
    """Every row (of an org, of an application), in (org, app, executor id) order."""
    return db.executor_rows(org=org, app=app)


def get_row(db: ExecutorRows, stream_id: UUID | str) -> ExecutorRow | None:
    return db.executor_row(stream_id)
