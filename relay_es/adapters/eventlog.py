"""Reads the notification log fast, for the projections.

The library's path (``recorder.select_notifications`` then
``mapper.to_domain_event``) builds a ``Notification`` and a ``UUID`` per row
and decodes JSON through a Python ``object_hook``. A rebuild reads every event
once, so that path was a third of it. :class:`EventLog` reads the same rows
with one plain query, decodes the state with ``msgspec`` and then applies the
transcoder's registered transcodings exactly where the library's ``object_hook``
would (every two-key ``{"_type_", "_data_"}`` object, innermost first). The
domain events it returns are equal to the library's, field for field
(``tests/adapters/test_eventlog.py`` checks every event type).

When the mapper enciphers or compresses, or an event class has versions to
upcast, it falls back to the library for those rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import DatetimeAsISO, JSONTranscoder, StoredEvent
from eventsourcing.utils import resolve_topic

from relay_es.projections.unreadable import Unreadable

_new = object.__new__
_setattr = object.__setattr__


class _Unusual(Exception):
    """A state the fast path leaves to the library (versioned, not an object)."""


class EventLog:
    """``read(after, limit)`` -> ``[(notification_id, stream_id, domain_event), ...]`` in
    notification order; ``stream_id`` is ``str(domain_event.originator_id)``."""

    def __init__(self, relay: Any) -> None:
        self.recorder = relay.recorder
        self.mapper = relay.mapper
        transcoder = self.mapper.transcoder
        names = dict(transcoder.names) if isinstance(transcoder, JSONTranscoder) else {}
        # name -> decode function; the library's own datetime transcoding is exactly fromisoformat
        self._decoders = {name: datetime.fromisoformat if type(t) is DatetimeAsISO else t.decode
                          for name, t in names.items()}
        self._fast = (
            isinstance(transcoder, JSONTranscoder)
            and self.mapper.cipher is None
            and self.mapper.compressor is None
        )
        self._decode = msgspec.json.Decoder().decode
        self._classes: dict[str, tuple[type, bool]] = {}
        self._ids: dict[Any, tuple[UUID, str]] = {}
        self._wrapped_keys: dict[type, tuple[str, ...]] = {}
        kind = type(self.recorder).__module__
        self._kind = kind if kind in ("eventsourcing.postgres", "eventsourcing.sqlite") else "other"
        self._sql: dict[tuple[str, ...], Any] = {}

    def _query(self, topics: tuple[str, ...]) -> Any:
        sql = self._sql.get(topics)
        if sql is not None:
            return sql
        if self._kind == "eventsourcing.postgres":
            from psycopg.sql import SQL, Identifier

            sql = SQL(
                "SELECT notification_id, originator_id::text, originator_version, topic, state "
                "FROM {schema}.{table} WHERE notification_id > %s"
                + (" AND topic = ANY(%s)" if topics else "")
                + " ORDER BY notification_id LIMIT %s"
            ).format(schema=Identifier(self.recorder.datastore.schema),
                     table=Identifier(self.recorder.events_table_name))
        else:
            sql = (f"SELECT rowid, originator_id, originator_version, topic, state "
                   f"FROM {self.recorder.events_table_name} WHERE rowid > ?"
                   + (f" AND topic IN ({', '.join('?' * len(topics))})" if topics else "")
                   + " ORDER BY rowid LIMIT ?")
        self._sql[topics] = sql
        return sql

    # ------------------------------------------------------------- reading
    def read(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
             unreadable: bool = False) -> list[tuple[int, str, Any]]:
        """Notifications after ``after`` (only of ``topics``, if given), at most ``limit``.
        ``unreadable``: an event that cannot be decoded comes back as :class:`Unreadable`
        instead of failing the whole read."""
        if self._kind == "other" or not self._fast:
            out = []
            for n in self.recorder.select_notifications(start=after, limit=limit, topics=list(topics),
                                                        inclusive_of_start=False):
                try:
                    e = self.mapper.to_domain_event(n)
                except Exception as error:
                    if not unreadable:
                        raise
                    e = Unreadable(n.originator_id, n.originator_version, n.topic, error)
                out.append((n.id, self._stream(e.originator_id)[1], e))
            return out
        if self._kind == "eventsourcing.postgres":
            from psycopg.rows import tuple_row

            with self.recorder.datastore.transaction(commit=False) as curs:
                curs.row_factory = tuple_row
                curs.execute(self._query(topics), (after, list(topics), limit) if topics else (after, limit),
                             prepare=True)
                rows = curs.fetchall()
        else:
            with self.recorder.datastore.transaction(commit=False) as curs:
                curs.execute(self._query(topics), (after, *topics, limit))
                rows = curs.fetchall()
        try:
            return self._events(rows)
        except Exception:
            if not unreadable:
                raise
        out = []  # one row (at least) cannot be decoded: row by row, that one in its own place
        for row in rows:
            try:
                out.extend(self._events([row]))
            except Exception as error:
                nid, raw_id, version, topic, _ = row
                oid, sid = self._stream(raw_id)
                out.append((nid, sid, Unreadable(oid, version, topic, error)))
        return out

    def _events(self, rows: list[Any]) -> list[tuple[int, str, Any]]:
        """Domain events for stored rows (a rebuild runs this a million times: locals, no per-row calls
        beyond the decoder and :meth:`_top_level`)."""
        decode, classes, ids, top_level, fix = self._decode, self._classes, self._ids, self._top_level, self._fix
        out = []
        append = out.append
        for nid, raw_id, version, topic, state in rows:
            cls, plain = classes.get(topic) or self._class(topic)
            oid, sid = ids.get(raw_id) or self._stream(raw_id)
            if not plain:
                append((nid, sid, self._library(oid, version, topic, state)))
                continue
            try:
                d = decode(state)
                if type(d) is not dict or "class_version" in d:
                    raise _Unusual
                wrapped = state.count(b'{"_type_"')  # JSON escapes quotes in strings: only objects match
                if wrapped and not top_level(cls, d, wrapped):
                    fix(d)
            except Exception:  # the library's path, and its errors
                append((nid, sid, self._library(oid, version, topic, state)))
                continue
            d["originator_id"] = oid
            d["originator_version"] = version
            e = _new(cls)
            _setattr(e, "__dict__", d)
            append((nid, sid, e))
        return out

    # ------------------------------------------------------------ decoding
    def event(self, raw_id: Any, version: int, topic: str, state: bytes) -> Any:
        """One domain event from a stored row, as the library's mapper makes it."""
        return self._events([(0, raw_id, version, topic, state)])[0][2]

    def _class(self, topic: str) -> tuple[type, bool]:
        """(event class, whether it has no versions to upcast), resolved once per topic."""
        cls = resolve_topic(topic)
        found = self._classes[topic] = (cls, getattr(cls, "class_version", 1) == 1)
        return found

    def _stream(self, raw_id: Any) -> tuple[UUID, str]:
        """(UUID, its str) for a stored originator id, made once per stream."""
        found = self._ids.get(raw_id)
        if found is None:
            if len(self._ids) > 200_000:  # bounded: a long-running runner sees every stream eventually
                self._ids.clear()
            oid = raw_id if isinstance(raw_id, UUID) else UUID(raw_id)
            found = self._ids[raw_id] = (oid, str(oid))
        return found

    def _library(self, oid: UUID, version: int, topic: str, state: Any) -> Any:
        return self.mapper.to_domain_event(StoredEvent(oid, version, topic, bytes(state)))

    def _top_level(self, cls: type, d: dict[str, Any], wrapped: int) -> bool:
        """The common case, without walking the whole state: every wrapped value
        sits at the top level with plain data (an event's timestamp, a
        deadline). Which keys hold them is learnt per class. False: walk it all."""
        keys = self._wrapped_keys.get(cls)
        if keys is None or len(keys) != wrapped:
            keys = tuple(k for k, v in d.items() if type(v) is dict and "_type_" in v)
            if len(keys) != wrapped:
                return False
            self._wrapped_keys[cls] = keys
        for k in keys:
            v = d.get(k)
            if type(v) is not dict or len(v) != 2:
                return False
            data = v.get("_data_")
            t = type(data)
            if (t is not str and t is not int) or "_type_" not in v:
                return False
            d[k] = self._decoders[v["_type_"]](data)
        return True

    def _fix(self, d: dict[str, Any]) -> dict[str, Any]:
        for k, v in d.items():
            t = type(v)
            if t is dict:
                d[k] = self._value(v)
            elif t is list:
                self._fix_list(v)
        return d

    def _fix_list(self, items: list[Any]) -> None:
        for i, v in enumerate(items):
            t = type(v)
            if t is dict:
                items[i] = self._value(v)
            elif t is list:
                self._fix_list(v)

    def _value(self, d: dict[str, Any]) -> Any:
        """What the library's ``object_hook`` makes of a decoded object."""
        self._fix(d)
        if len(d) == 2 and "_type_" in d and "_data_" in d:
            return self._decoders[d["_type_"]](d["_data_"])  # KeyError: not registered, as the library
        return d
