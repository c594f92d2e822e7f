"""The audit log, Conductor's ``listAuditLogs``: ``GET /v2/orgs/{org}/audit-logs``.

Who did what through the API: one ``AuditLogEntry`` per operator action
(:mod:`relay_es.projections.actions`), newest first. Filters as Conductor's:
``startTime`` (inclusive) and ``endTime`` (exclusive), RFC 3339; ``operation`` (an
``operationId``, e.g. ``cancelWorkflow``); ``subject`` (the caller: a token's name, a user's
id); ``target`` (the target's id: an application's or the org's name, a workflow's, schedule's or
rule's id, a token's or role's name, a user's id; an application's or the org's UUID, as
``listApps`` and ``getOrg`` answer it, is taken for its name). The log records a target id escaped
and cut (a tab as ``\t``, at most 255 characters and a "…": ``engine.action_commands``), and the
filter is read the same way, so the id as the executor has it finds it, and so does the id as the
log shows it; ``limit`` (1-1000, default 100) and ``offset``.

An entry: ``id`` (the action's), ``emitTime`` (when it was asked), ``operation``, ``status``
(``success`` when it succeeded; ``failure`` when it failed, timed out, found no executor, was
refused, its executor's socket closed before the answer came, or it never recorded its end), ``subject`` (``api_key`` for a token, ``user`` for a
user; a caller Relay could not identify is an ``api_key`` whose id says why, e.g. ``no valid
token``, displayed ``anonymous (no valid token)``),
``sourceIp`` (empty when unknown), ``target`` (:func:`~relay_es.projections.actions.conductor_target`)
and ``details``: ``outcome`` (succeeded, failed, timed_out, no_healthy_executor, refused,
unknown: the executor's socket closed before it answered, so it may have acted, or pending: never
completed), ``app``, ``targets`` (``type``, ``ids``: the first ones named, at most
100 and 4 KB of them, each cut to 255 characters with a "…"; ``count``: how many were named),
``parameters``, ``message``, ``result``, ``executorId`` (the executor that
answered) and ``completedAt``. Conductor serves this operation only with OAuth; Relay serves
it in every mode (an org-wide token with ``organization.read`` in auth mode).

The log is a read model, folded in the background (its own process under ``relay serve``). A read
first waits, a few seconds at most, until it holds every event recorded when it was asked (by any
instance): an action whose answer the caller has, or a refusal it was given and Relay recorded (refusals
are throttled: :mod:`~relay_es.adapters.rest.recording`), is on record in the next read, whichever
endpoint made it. A read during a storm may wait; one that cannot catch up in
time answers what the log holds and says so in Relay's log.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, get
from litestar.params import FromPath, QueryParameter

from relay_es.adapters.rest.conductor.models import text_fault
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.aggregates.action import ID_CHARS
from relay_es.aggregates.members import members_stream_id
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.text import sanitized
from relay_es.projections import actions as actions_view
from relay_es.projections import apps as apps_view
from relay_es.projections.actions import ActionRow, conductor_target

MAX_FILTER = 256  # characters of the operation and subject filters (every recorded id fits)
MAX_OFFSET = 2**31 - 1


class AuditSubject(msgspec.Struct):
    type: Literal["user", "api_key"]
    id: str
    display: str


class AuditTarget(msgspec.Struct):
    type: Literal["application", "token", "role", "user", "organization", "workflow", "schedule",
                  "alerting_rule", "domain_claim"]
    id: str


class AuditLogEntry(msgspec.Struct, rename="camel"):
    id: str
    emit_time: str
    operation: str
    status: Literal["success", "failure"]
    subject: AuditSubject
    source_ip: str
    details: dict[str, Any] | None
    target: AuditTarget


def subject_of(row: ActionRow) -> AuditSubject:
    if row.actor_kind == "token":
        return AuditSubject(type="api_key", id=row.actor, display=row.actor)
    if row.actor_kind == "user":
        return AuditSubject(type="user", id=row.actor, display=row.actor)
    return AuditSubject(type="api_key", id=row.actor, display=f"anonymous ({row.actor})")


def entry_out(row: ActionRow) -> AuditLogEntry:
    target_type, target_id = conductor_target(row)
    return AuditLogEntry(
        id=row.action_id, emit_time=units.rfc3339(row.at) or "", operation=row.operation,
        status="success" if row.outcome == "succeeded" else "failure", subject=subject_of(row),
        source_ip=row.source or "", target=AuditTarget(type=target_type, id=target_id),
        details={
            "outcome": row.outcome or "pending",
            "app": row.app,
            "targets": {"type": row.target_type, "ids": row.target_ids, "count": row.target_count},
            "parameters": row.parameters,
            "message": row.message,
            "result": row.result,
            "executorId": row.executor_id,
            "completedAt": units.rfc3339(row.completed_at),
        })


def _text(name: str, value: str | None, most: int = MAX_FILTER) -> str | None:
    if value is not None and ("\x00" in value or len(value) > most):
        raise InvalidSetting(name, f"must be at most {most} characters, without NUL")
    return value


def recorded_target(value: str | None) -> str | None:
    """The ``target`` filter as the log records a target id: escaped and cut as
    ``engine.action_commands`` records every one (``sanitized(id, ID_CHARS)``; a form already
    escaped and cut stays as it is). Any id an executor's application may choose is taken
    (``models.text_fault``: no NUL, at most 8 KiB)."""
    if value is None:
        return None
    if (fault := text_fault(value)) is not None:
        raise InvalidSetting("target", fault)
    return sanitized(value, ID_CHARS)


def target_named(db: Any, org: str, target: str) -> str:
    """The ``target`` filter as the log records it: the org's id (``getOrg``'s) is its name, an
    application's id (``listApps``', deleted ones too) its name, anything else as given. Both ids
    are UUIDs made from the name (version 5, Relay's namespace): no workflow, schedule or rule id
    Relay or an SDK makes is one of them. Only a canonical UUID is looked up (one read of the org's
    applications)."""
    try:
        if str(uuid.UUID(target)) != target:
            return target
    except ValueError:
        return target
    if target == str(members_stream_id(org)):
        return org
    return next((a.name for a in apps_view.list_apps(db, org, include_deleted=True) if a.stream_id == target),
                target)


class AuditController(Controller):
    path = ORG + "/audit-logs"

    @get("/", sync_to_thread=True, operation_id="listAuditLogs", summary="List audit logs (newest first)")
    def list_audit_logs(
        self, org: FromPath[str], ctx: Context,
        start_time: Annotated[str | None, QueryParameter(name="startTime", required=False,
                                                          schema_extra={"format": "date-time"})] = None,
        end_time: Annotated[str | None, QueryParameter(name="endTime", required=False,
                                                        schema_extra={"format": "date-time"})] = None,
        operation: Annotated[str | None, QueryParameter(name="operation", required=False)] = None,
        subject: Annotated[str | None, QueryParameter(name="subject", required=False)] = None,
        target: Annotated[str | None, QueryParameter(name="target", required=False)] = None,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=1000)] = 100,
        offset: Annotated[int, QueryParameter(name="offset", ge=0, le=MAX_OFFSET)] = 0,
    ) -> list[AuditLogEntry]:
        start = None if start_time is None else units.parse_rfc3339("startTime", _text("startTime", start_time, 64))
        end = None if end_time is None else units.parse_rfc3339("endTime", _text("endTime", end_time, 64))
        operation, subject, target = (_text("operation", operation), _text("subject", subject),
                                      recorded_target(target))
        ctx.read_your_writes()  # a bad filter is answered at once; a good one waits for the log to be whole
        if target is not None:
            target = target_named(ctx.db, org, target)
        rows = actions_view.query(ctx.db, org=org, start=start, end=end, operation=operation, subject=subject,
                                  target=target, limit=limit, offset=offset)
        return [entry_out(r) for r in rows]
