"""The process manager's indexes over its executor rows, kept in step one row at a time.

Each index is a function of the rows alone (and of which Relay instances are live):

* ``healthy``: (org, app, app_version) -> stream ids HEALTHY on a live Relay (the recovery
  candidates of that version);
* ``apps_healthy``: (org, app) -> stream ids HEALTHY on a live Relay (whom retention is for);
* ``outstanding``: (org, app, target executor id) -> stream ids with a recovery DISPATCHED to
  that target (its load, and whom to fail when it goes);
* ``listed``: (org, app) -> how many executors are not deleted (HEALTHY, DISCONNECTED or DEAD).

:meth:`Indexes.put` updates them for one row replacing another (incremental, what the process
manager does for each event); :func:`derive_indexes` computes them from scratch. The two
must agree: ``Indexes.from_rows(rows, owners).snapshot() == derive_indexes(rows, owners)``
after any sequence of puts. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any

from relay_es.aggregates.executor import ExecutorStatus as S
from relay_es.aggregates.executor import RecoveryPhase as P
from relay_es.projections.executors import ExecutorRow

VersionKey = tuple[str, str, "str | None"]
AppKey = tuple[str, str]
TargetKey = tuple[str, str, str]


def _is_healthy_here(row: ExecutorRow, live_owners: AbstractSet[str]) -> bool:
    return row.status == S.HEALTHY and row.owner in live_owners


def _is_outstanding(row: ExecutorRow) -> bool:
    return row.recovery_phase == P.DISPATCHED and bool(row.recovery_target)


class Indexes:
    """The four indexes, updated by :meth:`put` as rows change."""

    def __init__(self, live_owners: AbstractSet[str]) -> None:
        self.live_owners = live_owners  # read on each put: the process manager's own set
        self.healthy: dict[VersionKey, set[str]] = defaultdict(set)
        self.apps_healthy: dict[AppKey, set[str]] = defaultdict(set)
        self.outstanding: dict[TargetKey, set[str]] = defaultdict(set)
        self.listed: dict[AppKey, int] = defaultdict(int)

    @classmethod
    def from_rows(cls, rows: Iterable[ExecutorRow], live_owners: AbstractSet[str]) -> Indexes:
        indexes = cls(live_owners)
        for row in rows:
            indexes.put(None, row)
        return indexes

    def put(self, old: ExecutorRow | None, row: ExecutorRow) -> None:
        """``row`` replaces ``old`` (None: a new stream). ``old`` must be what was last put for it."""
        sid = row.stream_id
        if old is not None:
            _discard(self.healthy, (old.org, old.app, old.app_version), sid)
            _discard(self.apps_healthy, (old.org, old.app), sid)
            if old.recovery_target:
                _discard(self.outstanding, (old.org, old.app, old.recovery_target), sid)
        was = (old.org, old.app) if old is not None and old.visible else None
        now = (row.org, row.app) if row.visible else None
        if was != now:  # counted where it is before it is uncounted where it was (read from other threads)
            if now is not None:
                self.listed[now] += 1
            if was is not None:
                self.listed[was] -= 1
                if not self.listed[was]:
                    del self.listed[was]
        if _is_healthy_here(row, self.live_owners):
            self.healthy[(row.org, row.app, row.app_version)].add(sid)
            self.apps_healthy[(row.org, row.app)].add(sid)
        if _is_outstanding(row):
            self.outstanding[(row.org, row.app, row.recovery_target)].add(sid)  # type: ignore[arg-type]

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """Plain copies (frozensets, ints), without empty entries: comparable with :func:`derive_indexes`."""
        return {
            "healthy": _frozen(self.healthy),
            "apps_healthy": _frozen(self.apps_healthy),
            "outstanding": _frozen(self.outstanding),
            "listed": {k: n for k, n in self.listed.items() if n},
        }


def derive_indexes(rows: Iterable[ExecutorRow], live_owners: AbstractSet[str]) -> dict[str, dict[Any, Any]]:
    """The indexes computed from scratch, in the shape of :meth:`Indexes.snapshot`."""
    healthy: dict[Any, set[str]] = defaultdict(set)
    apps_healthy: dict[Any, set[str]] = defaultdict(set)
    outstanding: dict[Any, set[str]] = defaultdict(set)
    listed: dict[Any, int] = defaultdict(int)
    for row in rows:
        if _is_healthy_here(row, live_owners):
            healthy[(row.org, row.app, row.app_version)].add(row.stream_id)
            apps_healthy[(row.org, row.app)].add(row.stream_id)
        if _is_outstanding(row):
            outstanding[(row.org, row.app, row.recovery_target)].add(row.stream_id)
        if row.visible:
            listed[(row.org, row.app)] += 1
    return {"healthy": _frozen(healthy), "apps_healthy": _frozen(apps_healthy),
            "outstanding": _frozen(outstanding), "listed": dict(listed)}


def _discard(index: dict[Any, set[str]], key: Any, sid: str) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(sid)
        if not members:
            del index[key]


def _frozen(index: dict[Any, set[str]]) -> dict[Any, frozenset[str]]:
    return {k: frozenset(v) for k, v in index.items() if v}
