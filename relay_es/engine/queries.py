"""Relay's own queries over the event store: history and time travel.

Both are bounded per call: a page of at most ``limit`` events (history) or
``limit`` executors (as-of), the next page named by a cursor. Streams are read
in chunks of :data:`CHUNK` events, and a fold stops at the first event past
the instant asked for, so an old instant costs little on a long stream.
Between streams the caller's ``pause`` lets more urgent work (the process
manager's deadlines) go first; ``rest.py`` also runs these off the event loop,
a few at a time.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from relay_es.aggregates.executor import OpaqueJSON, executor_stream_id
from relay_es.domain.errors import UnknownExecutor
from relay_es.projections.executors import ExecutorRow, ExecutorRows, fold
from relay_es.engine.service import Relay
from relay_es.domain.units import duration_to_millis, rfc3339

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


# An attribute named otherwise than the camelCase of its name: the lifecycle feed's name for it.
_FEED_NAMES = {"superseded_connection": "supersededConnectionId"}


def camel(name: str) -> str:
    """An event attribute's name as the API spells field names (``executor_id`` -> ``executorId``)."""
    if name in _FEED_NAMES:
        return _FEED_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def event_record(e: Any) -> dict[str, Any]:
    """``{version, type, at, data}`` for one stored event: ``data`` is its attributes, their names
    in camelCase (:func:`camel`); the values as recorded (an executor's metadata exactly as it sent it)."""
    data = {camel(k): _plain(v) for k, v in vars(e).items() if k not in _ENVELOPE}
    return {"version": e.originator_version, "type": type(e).__name__, "at": rfc3339(e.timestamp), "data": data}


CHUNK = 500  # events read from the store at a time
HISTORY_LIMIT = 1000  # default and largest page of an executor's history
AS_OF_LIMIT = 100  # default and largest page of the executors table as of an instant (streams folded per call)


def _events(relay: Relay, sid: UUID, *, after: int = 0, limit: int | None = None) -> Iterator[Any]:
    """A stream's events after version ``after``, read ``CHUNK`` at a time (at most ``limit``)."""
    left = limit
    while left is None or left > 0:
        n = CHUNK if left is None else min(CHUNK, left)
        chunk = list(relay.repository.event_store.get(sid, gt=after or None, limit=n))
        yield from chunk
        if len(chunk) < n:
            return
        after = chunk[-1].originator_version
        if left is not None:
            left -= len(chunk)


def executor_history(relay: Relay, org: str, app: str, executor_id: str, *, after: int = 0,
                     limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The events of :func:`executor_history_page`, without its cursor."""
    return executor_history_page(relay, org, app, executor_id, after=after, limit=limit)[0]


def executor_history_page(relay: Relay, org: str, app: str, executor_id: str, *, after: int = 0,
                          limit: int = HISTORY_LIMIT) -> tuple[list[dict[str, Any]], int | None]:
    """The executor's events with a version above ``after``, in order, at most
    ``limit`` of them -- also after deletion: ``(events, next cursor or None)``.
    The cursor is the last version returned, when the stream has an event past it
    (one more is read to know); None at the end."""
    sid = executor_stream_id(org, app, executor_id)
    read = list(_events(relay, sid, after=after, limit=limit + 1))
    if not read and (after == 0 or not any(True for _ in _events(relay, sid, limit=1))):
        raise UnknownExecutor(org, app, executor_id)
    out = [event_record(e) for e in read[:limit]]
    return out, (out[-1]["version"] if len(read) > limit else None)


def executors_as_of(relay: Relay, db: ExecutorRows, org: str, app: str, at: datetime) -> list[ExecutorRow]:
    """Every page of :func:`executors_as_of_page`: for tests and tools, not for the API."""
    out: list[ExecutorRow] = []
    cursor: str | None = None
    while True:
        rows, cursor = executors_as_of_page(relay, db, org, app, at, after=cursor)
        out += rows
        if cursor is None:
            return out


def executors_as_of_page(relay: Relay, db: ExecutorRows, org: str, app: str, at: datetime, *, after: str | None = None,
                         limit: int = AS_OF_LIMIT, pause: Callable[[], None] | None = None,
                         ) -> tuple[list[ExecutorRow], str | None]:
    """The executors table as it stood at ``at``, folded from the event streams:
    ``(rows, next cursor or None)``.

    The read model (``db``: the read models' database) only says *which* streams
    belong to the application (in executor id order); every row is rebuilt from that stream's events up to
    ``at``. One call folds at most ``limit`` streams, those with an executor id
    above ``after``; an executor that was not visible then is left out of the
    page, so a page may be short and still have a next one.
    """
    candidates = [r for r in db.executor_rows(org=org, app=app) if after is None or r.executor_id > after]
    page, rest = candidates[:limit], candidates[limit:]
    out = []
    for row in page:
        if pause is not None:
            pause()
        past = fold(_events(relay, UUID(row.stream_id)), until=at)
        if past is not None and past.visible:
            out.append(past)
    return out, (page[-1].executor_id if rest else None)
