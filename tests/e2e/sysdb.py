"""Reads a DBOS executor's own system database (Postgres, schema ``dbos``) directly.

The tables are the SDKs' (dbos 3.2.0 ``dbos/_schemas/system_database.py``; the TypeScript SDK
5.2.11 migrates the same schema): ``workflow_status``, ``operation_outputs`` (steps),
``workflow_events``, ``notifications``, ``streams``, ``workflow_schedules``. A test asserts with
it that an action sent through Relay really happened in the executor (a cancelled workflow is
CANCELLED, a resumed one finishes, a fork has ``forked_from``, an import lands in another app's
database). Every row comes back as a dict keyed by column name; values as psycopg reads them:
``value``/``output``/``error``/``message`` columns hold the SDK's serialised text (Python: base64
pickle; TypeScript: superjson ``{"json": ...}``), which :func:`decode` and :func:`text` read.

Stdlib + psycopg only.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

STREAM_CLOSED = "__DBOS_STREAM_CLOSED__"


def decode(value: str | None) -> Any:
    """A serialised value of either SDK as a Python object (a Python exception stays one; a
    TypeScript error is a dict with ``name`` and ``message``; a stream's close is STREAM_CLOSED).
    Unpickles: only for the test apps' own data."""
    if value is None:
        return None
    if value.startswith(("{", '"')):
        data = json.loads(value)
        return data["json"] if isinstance(data, dict) and "__dbos_serializer" in data else data
    return pickle.loads(base64.b64decode(value))  # the test apps' own values


def text(value: str | None) -> str | None:
    """A serialised value or error of either SDK as readable text (an error's message)."""
    obj = decode(value)
    if obj is None:
        return None
    if isinstance(obj, BaseException):
        return str(obj)
    if isinstance(obj, dict) and "message" in obj:
        return str(obj["message"])
    return obj if isinstance(obj, str) else json.dumps(obj)


class SystemDb:
    """One executor system database, by URL (a connection per call: tests poll it)."""

    def __init__(self, url: str, schema: str = "dbos") -> None:
        self.url = url
        self.schema = schema

    def _rows(self, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        stmt = sql.SQL(query).format(s=sql.Identifier(self.schema))
        with psycopg.connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(stmt, params).fetchall()

    # ---- workflows -------------------------------------------------------------------------

    def workflow(self, workflow_id: str) -> dict[str, Any] | None:
        """The ``workflow_status`` row (every column), or None."""
        rows = self._rows("SELECT * FROM {s}.workflow_status WHERE workflow_uuid = %s", (workflow_id,))
        return rows[0] if rows else None

    def workflows(self, *, name: str | None = None, queue: str | None = None,
                  status: str | None = None) -> list[dict[str, Any]]:
        """``workflow_status`` rows matching every given filter, oldest first."""
        where, params = [], []
        for column, value in (("name", name), ("queue_name", queue), ("status", status)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        return self._rows("SELECT * FROM {s}.workflow_status" + clause + " ORDER BY created_at, workflow_uuid",
                          tuple(params))

    def status(self, workflow_id: str) -> str | None:
        row = self.workflow(workflow_id)
        return None if row is None else row["status"]

    def statuses(self, ids: Iterable[str]) -> dict[str, str | None]:
        """``{workflow_id: status}`` (PENDING, ENQUEUED, SUCCESS, ERROR, CANCELLED, ...); None if absent."""
        ids = list(ids)
        rows = self._rows("SELECT workflow_uuid, status FROM {s}.workflow_status WHERE workflow_uuid = ANY(%s)",
                          (ids,))
        found = {r["workflow_uuid"]: r["status"] for r in rows}
        return {wf: found.get(wf) for wf in ids}

    def outcome(self, workflow_id: str) -> dict[str, Any] | None:
        """``{"output": ..., "error": ...}`` (serialised) of a finished workflow: both SDKs write it
        to ``workflow_output``, leaving ``workflow_status.output``/``error`` null; None if absent."""
        rows = self._rows("SELECT output, error FROM {s}.workflow_output WHERE workflow_uuid = %s",
                          (workflow_id,))
        return rows[0] if rows else None

    def children(self, parent_id: str) -> list[str]:
        """Ids of the workflows whose ``parent_workflow_id`` is ``parent_id``, sorted."""
        rows = self._rows("SELECT workflow_uuid FROM {s}.workflow_status WHERE parent_workflow_id = %s "
                          "ORDER BY workflow_uuid", (parent_id,))
        return [r["workflow_uuid"] for r in rows]

    def forks_of(self, workflow_id: str) -> list[dict[str, Any]]:
        """``workflow_status`` rows of the workflows forked from ``workflow_id``, oldest first."""
        return self._rows("SELECT * FROM {s}.workflow_status WHERE forked_from = %s ORDER BY created_at",
                          (workflow_id,))

    # ---- what a workflow did ---------------------------------------------------------------

    def steps(self, workflow_id: str) -> list[dict[str, Any]]:
        """``operation_outputs`` rows (function_id, function_name, output, error, child_workflow_id, ...)
        in step order. Includes the SDK's own steps (DBOS.setEvent, DBOS.send, DBOS.recv, ...)."""
        return self._rows("SELECT * FROM {s}.operation_outputs WHERE workflow_uuid = %s ORDER BY function_id",
                          (workflow_id,))

    def events(self, workflow_id: str) -> dict[str, Any]:
        """``{key: serialised value}`` from ``workflow_events`` (the latest value per key)."""
        rows = self._rows("SELECT key, value FROM {s}.workflow_events WHERE workflow_uuid = %s", (workflow_id,))
        return {r["key"]: r["value"] for r in rows}

    def notifications(self, destination_id: str) -> list[dict[str, Any]]:
        """``notifications`` rows sent to ``destination_id`` (topic, message, consumed...), oldest first."""
        return self._rows("SELECT * FROM {s}.notifications WHERE destination_uuid = %s "
                          "ORDER BY created_at_epoch_ms", (destination_id,))

    def streams(self, workflow_id: str) -> list[dict[str, Any]]:
        """``streams`` rows (key, offset, value) of ``workflow_id`` by key then offset; the SDK
        writes a closing sentinel value as the last offset of a closed stream."""
        return self._rows('SELECT * FROM {s}.streams WHERE workflow_uuid = %s ORDER BY key, "offset"',
                          (workflow_id,))

    # ---- schedules -------------------------------------------------------------------------

    def schedules(self) -> list[dict[str, Any]]:
        """Every ``workflow_schedules`` row (schedule_name, workflow_name, schedule, status, ...)."""
        return self._rows("SELECT * FROM {s}.workflow_schedules ORDER BY schedule_name")

    def schedule(self, name: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM {s}.workflow_schedules WHERE schedule_name = %s", (name,))
        return rows[0] if rows else None
