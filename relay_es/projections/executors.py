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

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.utils import get_topic

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
    Executor.RecoveryReordered,
    Executor.RecoveryDispatched,
    Executor.RecoveryFailed,
    Executor.RecoveryConfirmed,
    Executor.RecoveryWithdrawn,
    Executor.Deleted,
)


_new = object.__new__
_SID = operator.itemgetter(1)  # a batch item's stream id: (notification id, stream id, event)
_set = object.__setattr__


def _row(d: dict[str, Any]) -> ExecutorRow:
    """A row whose ``__dict__`` is ``d`` (every field present), without running ``__init__``: Relay's
    own frozen dataclass, built the way the fast reader builds events. The fold's inner loop, where
    ``dataclasses.replace`` was a quarter of a rebuild (bench/s5_replay.py)."""
    new = _new(ExecutorRow)
    _set(new, "__dict__", d)
    return new


def reduce(row: ExecutorRow | None, e: Any) -> ExecutorRow:
    """Applies one executor event to a row. Pure: the row is copied, never changed."""
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
    d = row.__dict__.copy()
    _step(d, e)
    return _row(d)


def _step(d: dict[str, Any], e: Any) -> None:
    """Applies one executor event but Registered to a row's fields ``d``, in place. Each field
    is read before it is written, so the result does not depend on whether ``d`` is a copy of the
    row (:func:`reduce`) or the row's own ``__dict__`` (:meth:`ExecutorsProjection.apply`)."""
    at: datetime = e.timestamp
    kind = type(e)
    d["version"] = e.originator_version
    d["updated_at"] = at
    if kind is Executor.Connected:
        if e.incarnation != d["incarnation"] or d["created_at"] is None:
            d["created_at"] = at
        d["status"] = _HEALTHY
        d["incarnation"] = e.incarnation
        d["app_version"] = e.app_version
        d["hostname"] = e.hostname
        d["language"] = e.language
        d["dbos_version"] = e.dbos_version
        d["executor_metadata"] = opaque_value(e.executor_metadata)
        d["connection_id"] = e.connection_id
        d["owner"] = e.owner
        d["deadline"] = None
        d["disconnect_reason"] = None
    elif kind is Executor.Disconnected:
        d["status"] = _DISCONNECTED
        d["deadline"] = e.deadline
        d["disconnect_reason"] = e.reason
        d["connection_id"] = None
        d["owner"] = None
    elif kind is Executor.DeclaredDead:
        phase = d["recovery_phase"]
        fresh = phase in (None, RecoveryPhase.CONFIRMED)
        d["status"] = _DEAD
        d["deadline"] = None
        d["declared_dead_at"] = at
        if fresh:
            d.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_version=e.app_version, recovery_attempt=0,
                     recovery_request_id=None, recovery_target=None, recovery_dispatched_at=None)
        if phase == RecoveryPhase.DISPATCHED:
            d["recovery_redo_version"] = e.app_version
        elif not fresh and e.app_version != d["recovery_version"] and d["recovery_redo_version"] is None:
            d["recovery_redo_version"] = e.app_version  # another version's death behind one not sent yet
    elif kind is Executor.RecoveryDeferred:
        d["recovery_phase"] = RecoveryPhase.DEFERRED.value
    elif kind is Executor.RecoveryDispatched:
        d.update(
            recovery_phase=RecoveryPhase.DISPATCHED.value,
            recovery_request_id=e.request_id,
            recovery_target=e.target_executor_id,
            recovery_attempt=e.attempt,
            recovery_dispatched_at=at,
        )
    elif kind is Executor.RecoveryFailed:
        d.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_request_id=None)
    elif kind is Executor.RecoveryConfirmed:
        redo = d["recovery_redo_version"]
        if redo is not None and (d["status"] == ExecutorStatus.DEAD or redo != d["app_version"]):
            d.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_version=d["recovery_redo_version"],
                     recovery_attempt=0, recovery_request_id=None, recovery_target=None, recovery_redo_version=None)
        else:
            d.update(recovery_phase=RecoveryPhase.CONFIRMED.value, recovery_redo_version=None)
    elif kind is Executor.RecoveryReordered:
        d.update(recovery_phase=RecoveryPhase.PENDING.value, recovery_version=e.app_version,
                 recovery_redo_version=e.postponed_version, recovery_attempt=0, recovery_request_id=None,
                 recovery_target=None)
    elif kind is Executor.RecoveryWithdrawn:
        d.update(recovery_phase=None, recovery_request_id=None, recovery_target=None, recovery_redo_version=None)
    elif kind is Executor.Deleted:
        d.update(status=ExecutorStatus.DELETED.value, recovery_phase=None, recovery_request_id=None,
                 recovery_target=None)


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
    kept_from = get_topic(Executor.Registered)  # an executor's row is never deleted (ADR 8)
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
        return [sid for sid in dict.fromkeys(map(_SID, items)) if sid not in rows]

    def loaded(self, asked: Sequence[str], found: dict[str, ExecutorRow]) -> None:
        rows = self.rows
        for sid in asked:
            rows[sid] = found.get(sid)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        current = self.rows[sid]
        if current is not None and current.version >= event.originator_version:
            return  # already applied (a rebuilt or replayed view never moves backwards)
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        dirty = self.dirty
        if sid in dirty and type(event) is not Executor.Registered:
            # A row this projection made since the last changes(): nobody else holds it yet, so the
            # event is applied to it in place rather than to a copy (a rebuild folds each stream's
            # events in runs). A failed batch forgets every row it touched.
            _step(current.__dict__, event)  # type: ignore[union-attr]
            return
        self.rows[sid] = reduce(current, event)
        dirty.add(sid)

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
