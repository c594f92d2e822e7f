"""The audit log's table, ``relay_actions``: one row per operator action.

Rows are folded by :mod:`relay_es.projections.actions`; this module stores and reads them.
The columns the log is filtered and ordered by are columns (org, seq, when, operation, the
actor, Conductor's target); the rest of a row is one JSON document, its text as it is (``é`` two
bytes, an emoji four, not a ``\\u`` escape of 6 or 12: rows written escaped before read the same).
Timestamps are epoch microseconds, exactly as in the events. The recorded target ids are read
within the aggregate's budget (:func:`~relay_es.aggregates.action.recorded_target_ids`): a row
stored before it answers no more than a new one (``relay projections rebuild --only actions``
shrinks such rows in the table too).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from relay_es.adapters.readmodels.bulk import chunks, marks, upsert_sql
from relay_es.aggregates.action import recorded_target_ids
from relay_es.domain.units import from_epoch_us, to_epoch_us
from relay_es.projections.actions import ActionRow, ActionsProjection, conductor_target

NAME = ActionsProjection.NAME

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_actions (
        stream_id TEXT PRIMARY KEY,   -- the action's stream id: the entry's id
        seq BIGINT NOT NULL,          -- its Requested event's notification id: the log's order
        version BIGINT NOT NULL,
        org TEXT NOT NULL,
        at BIGINT NOT NULL,           -- when it was asked, epoch microseconds
        operation TEXT NOT NULL,
        actor TEXT NOT NULL,          -- Conductor's subject id: a token's name, a user's id
        target_type TEXT NOT NULL,    -- Conductor's target (projections.actions.conductor_target)
        target_id TEXT NOT NULL,
        outcome TEXT,                 -- NULL: never completed
        doc TEXT NOT NULL             -- the rest of the row, JSON
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_actions_org ON relay_actions (org, seq)",
    "CREATE INDEX IF NOT EXISTS relay_actions_target ON relay_actions (org, target_id, seq)",
]

COLUMNS = ("stream_id", "seq", "version", "org", "at", "operation", "actor", "target_type", "target_id", "outcome",
           "doc")
_COLS = ", ".join(COLUMNS)
_UPSERT = upsert_sql("relay_actions", COLUMNS)


def _us(t: datetime | None) -> int | None:
    return None if t is None else to_epoch_us(t)


_encode = msgspec.json.Encoder().encode


def encode_doc(doc: dict[str, Any]) -> str:
    """A row's document as JSON text, non-ASCII as it is. A string UTF-8 cannot hold (a lone
    surrogate, which no stored event holds: its save would have failed) is written as JSON's
    ``\\u`` escape instead, so no row is ever unwritable."""
    try:
        return _encode(doc).decode()
    except (ValueError, TypeError):  # UnicodeEncodeError is a ValueError
        return json.dumps(doc, separators=(",", ":"))


def to_db(r: ActionRow) -> tuple[Any, ...]:
    target_type, target_id = conductor_target(r)
    doc = {"app": r.app, "actorKind": r.actor_kind, "source": r.source, "targetType": r.target_type,
           "targetIds": r.target_ids, "targetCount": r.target_count, "parameters": r.parameters,
           "message": r.message, "executorId": r.executor_id, "result": r.result,
           "completedAt": _us(r.completed_at)}
    return (r.action_id, r.seq, r.version, r.org, to_epoch_us(r.at), r.operation, r.actor, target_type, target_id,
            r.outcome, encode_doc(doc))


def from_db(v: Any) -> ActionRow:
    d = json.loads(v[10])
    done = d["completedAt"]
    return ActionRow(action_id=v[0], seq=v[1], version=v[2], org=v[3], app=d["app"], at=from_epoch_us(v[4]),
                     operation=v[5], actor_kind=d["actorKind"], actor=v[6], source=d["source"],
                     target_type=d["targetType"], target_ids=recorded_target_ids(d["targetIds"]),
                     target_count=d["targetCount"],
                     parameters=d["parameters"], outcome=v[9], message=d["message"], executor_id=d["executorId"],
                     result=d["result"], completed_at=None if done is None else from_epoch_us(done))


class ActionsTable:
    """Stores :class:`~relay_es.projections.actions.ActionsProjection`'s rows."""

    name = NAME
    tables = ("relay_actions",)
    version = 1

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        for stmt in DDL if indexes else [s for s in DDL if "CREATE INDEX" not in s]:
            cur.execute(stmt)

    def drop(self, cur: Any) -> None:
        cur.execute("DROP TABLE IF EXISTS relay_actions")

    def read(self, cur: Any, sids: Sequence[str]) -> dict[str, ActionRow]:
        out: dict[str, ActionRow] = {}
        for chunk in chunks(sids):
            cur.execute(f"SELECT {_COLS} FROM relay_actions WHERE stream_id IN ({marks(len(chunk))})", list(chunk))
            out.update((v[0], from_db(v)) for v in cur.fetchall())
        return out

    def write(self, cur: Any, changes: list[ActionRow], *, bulk: bool = False) -> None:
        if changes:
            cur.executemany(_UPSERT, [to_db(r) for r in changes])


# ------------------------------------------------------------------ queries


def query(db: Any, *, org: str, start: datetime | None = None, end: datetime | None = None,
          operation: str | None = None, subject: str | None = None, target: str | None = None,
          limit: int = 100, offset: int = 0) -> list[ActionRow]:
    """See :func:`relay_es.projections.actions.query`."""
    sql = f"SELECT {_COLS} FROM relay_actions WHERE org = %(org)s"
    params: dict[str, Any] = {"org": org, "limit": limit, "offset": offset}
    for column, value, op in (("at", _us(start), ">="), ("at", _us(end), "<"), ("operation", operation, "="),
                              ("actor", subject, "="), ("target_id", target, "=")):
        if value is not None:
            key = f"{column}_{len(params)}"
            sql += f" AND {column} {op} %({key})s"
            params[key] = value
    sql += " ORDER BY seq DESC LIMIT %(limit)s OFFSET %(offset)s"
    with db.read() as cur:
        cur.execute(sql, params)
        return [from_db(v) for v in cur.fetchall()]
