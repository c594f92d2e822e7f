"""Relay's own queries over the event store: history and time travel."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum
from typing import Any
from uuid import UUID

from relay_es.adapters.stores import Database
from relay_es.aggregates.executor import OpaqueJSON, executor_stream_id
from relay_es.errors import UnknownExecutor
from relay_es.projections.executors import ExecutorRow, all_rows, fold
from relay_es.service import Relay
from relay_es.units import duration_to_millis, rfc3339

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def _plain(v: Any) -> Any:
    if isinstance(v, OpaqueJSON):
        return v.value
    if isinstance(v, datetime):
        return rfc3339(v)
    if isinstance(v, timedelta):
        return duration_to_millis(v)
    if isinstance(v, UUID):
        return str(v)
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def event_record(e: Any) -> dict[str, Any]:
    """``{version, type, at, data}`` for one stored event."""
    data = {k: _plain(v) for k, v in vars(e).items() if k not in _ENVELOPE}
    return {"version": e.originator_version, "type": type(e).__name__, "at": rfc3339(e.timestamp), "data": data}


def executor_history(relay: Relay, org: str, app: str, executor_id: str) -> list[dict[str, Any]]:
    """Every event of the executor's stream, in order -- also after deletion."""
    sid = executor_stream_id(org, app, executor_id)
    events = list(relay.stream(sid))
    if not events:
        raise UnknownExecutor(org, app, executor_id)
    return [event_record(e) for e in events]


def executors_as_of(relay: Relay, db: Database, org: str, app: str, at: datetime) -> list[ExecutorRow]:
    """The executors table as it stood at ``at``, folded from the event streams.

    The read model only says *which* streams belong to the application; every
    row is rebuilt from that stream's events up to ``at``.
    """
    out = []
    for row in all_rows(db, org=org, app=app):
        past = fold(relay.stream(UUID(row.stream_id)), until=at)
        if past is not None and past.visible:
            out.append(past)
    return out
