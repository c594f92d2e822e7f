"""The audit log: one row per operator action, in the order they were asked (a pure fold).

Who did what through the API: every change (applications, tokens, workflow actions,
schedules, versions, stranded work) and every call Relay refused, each an
:class:`~relay_es.aggregates.action.Action` stream. ``Requested`` makes the row (when,
operation, who, from where, on what, with which parameters); ``Completed`` finishes it (the
outcome, its message, its result, the executor that answered). A row never completed is an
action whose end Relay did not record (it stopped while the call was in flight): its
``outcome`` stays None.

``seq`` is the ``Requested`` event's notification id: the log's order, stable under paging
and identical after a rebuild. :func:`conductor_target` says what Conductor's
``AuditTarget`` of an action is; it is stored with the row so the log can be filtered by it.
The REST API answers the rows as Conductor's ``AuditLogEntry``
(:mod:`relay_es.adapters.rest.audit`); the table is stored by
:mod:`relay_es.adapters.readmodels.actions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from relay_es.aggregates.action import Action, recorded_target_ids
from relay_es.projections.storable import check_event, check_keys

# Conductor's AuditTarget types (the reference's enum).
CONDUCTOR_TARGETS = frozenset({"application", "token", "role", "user", "organization", "workflow", "schedule",
                               "alerting_rule", "domain_claim"})


@dataclass(frozen=True)
class ActionRow:
    action_id: str
    seq: int
    version: int
    org: str
    app: str | None
    at: datetime
    operation: str
    actor_kind: str  # token, user, anonymous (relay_es.aggregates.action.ACTOR_KINDS)
    actor: str
    source: str | None
    target_type: str  # the action's own: workflow, schedule, version, executor, application, token...
    target_ids: list[str]  # the first ones named (aggregates.action.recorded_target_ids: at most 100, 4 KB)
    target_count: int  # how many the request named
    parameters: dict[str, Any]
    outcome: str | None = None  # None: not completed (yet, or ever)
    message: str | None = None
    executor_id: str | None = None
    result: dict[str, Any] | None = None
    completed_at: datetime | None = None


def conductor_target(row: ActionRow) -> tuple[str, str]:
    """Conductor's ``(type, id)`` for what the action acted on: the one target it named, when
    Conductor has a type for it; else its application (several workflows, a version, an
    executor), else its organization. The exact targets stay in the row."""
    if row.target_count == 1 and row.target_ids and row.target_type in CONDUCTOR_TARGETS:
        return row.target_type, row.target_ids[0]
    if row.app is not None:
        return "application", row.app
    return "organization", row.org


def reduce(row: ActionRow | None, notification_id: int, e: Any) -> ActionRow:
    if isinstance(e, Action.Requested):
        return ActionRow(str(e.originator_id), notification_id, e.originator_version, e.org, e.app, e.timestamp,
                         e.operation, e.actor_kind, e.actor, e.source, e.target_type,
                         recorded_target_ids(e.target_ids),  # an event from before the budget: cut to it
                         e.target_count, dict(e.parameters))
    assert row is not None
    if isinstance(e, Action.Completed):
        return replace(row, version=e.originator_version, outcome=e.outcome, message=e.message,
                       executor_id=e.executor_id, result=dict(e.result), completed_at=e.timestamp)
    return replace(row, version=e.originator_version)


ACTION_EVENTS = (Action.Requested, Action.Completed)


class ActionsProjection:
    """The audit log between batches: the rows of recent actions (a completion usually
    follows its request within a batch or two), and those changed."""

    NAME = "actions"
    name = NAME
    kept_from = None  # keeps no row per stream for ever
    event_types = ACTION_EVENTS
    cache_limit = 10_000

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.rows: dict[str, ActionRow | None] = {}
        self.dirty: set[str] = set()

    def missing(self, items: list[tuple[int, str, Any]]) -> list[str]:
        """The batch's completed actions not cached (a request makes its row: nothing to read)."""
        rows = self.rows
        return list(dict.fromkeys(sid for _, sid, e in items
                                  if sid not in rows and not isinstance(e, Action.Requested)))

    def loaded(self, asked: Sequence[str], found: dict[str, ActionRow]) -> None:
        for sid in asked:
            self.rows[sid] = found.get(sid)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        row = self.rows.get(sid)
        if row is not None and row.version >= event.originator_version:
            return  # folded already
        if row is None and not isinstance(event, Action.Requested):
            return  # its request was skipped as unstorable (ADR 16): nothing to complete
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        new = reduce(row, notification_id, event)
        if isinstance(event, Action.Requested):  # its keys, and those indexed together (org, target)
            check_keys(org=event.org, app=event.app)
            check_keys(org=event.org, target_id=conductor_target(new)[1])
        self.rows[sid] = new
        self.dirty.add(sid)

    def changes(self) -> list[ActionRow]:
        """The rows made or changed since the last call."""
        out = [r for sid in self.dirty if (r := self.rows.get(sid)) is not None]
        self.dirty = set()
        return out

    def committed(self) -> None:
        if len(self.rows) > self.cache_limit:
            self.rows = {}


class AuditLogStore(Protocol):
    """Where the log is read (the read models' database)."""

    def action_rows(self, *, org: str, start: datetime | None = None, end: datetime | None = None,
                    operation: str | None = None, subject: str | None = None, target: str | None = None,
                    limit: int = 100, offset: int = 0) -> list[ActionRow]: ...


def query(db: AuditLogStore, *, org: str, start: datetime | None = None, end: datetime | None = None,
          operation: str | None = None, subject: str | None = None, target: str | None = None,
          limit: int = 100, offset: int = 0) -> list[ActionRow]:
    """The org's actions, newest first: asked at or after ``start`` and before ``end``, of
    ``operation``, by ``subject`` (the actor's id: a token's name, a user's id), on
    ``target`` (Conductor's target id); a page of ``limit`` after skipping ``offset``."""
    return db.action_rows(org=org, start=start, end=end, operation=operation, subject=subject, target=target,
                          limit=limit, offset=offset)
