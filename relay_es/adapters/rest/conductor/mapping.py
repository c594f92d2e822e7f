"""Pure mapping between the Conductor API bodies (:mod:`.models`) and the executor messages of
:mod:`relay_es.protocol.catalogue` (the protocol reference's section 10.4, field by field).

REST -> executor: each ``*_request`` function builds the request an operation sends, from the
operation's path parameters, query parameters and decoded body, with every key the oldest
supported SDK needs (the catalogue's rule). Date-time filters become ISO strings with a
``+00:00`` offset (Python 3.10's ``fromisoformat`` refuses ``Z``); a filter list the body sends
empty or ``null`` is no filter; ``wasForkedFrom`` and ``hasParent`` not sent are left out of the
request (the catalogue's ``TriState``: TypeScript would read ``null`` as a filter); query parameters given once are sent as one string, given
several times as a list. An optional ID or name not given or empty is not sent (``None``: the
rule of :mod:`.models`). ``limit``, ``offset`` and ``timeBucketSizeMs`` are sent capped at
:data:`JS_SAFE_MAX`. A value that cannot be sent raises :class:`InvalidSetting` (a 422).

Executor -> REST: each ``*_out`` function turns one executor output object into its REST model.
Both SDK dialects decode into the same catalogue objects (TypeScript omits the keys Python sends
as ``null``; older SDKs lack newer keys), so what an SDK did not send is ``None`` here and is
filled as the reference requires: ``null`` where it is nullable, else the SDK default
(``priority`` 0, ``wasForkedFrom`` false, ``pollingIntervalSecs`` 1.0, ...). Epoch
milliseconds (decimal strings in workflow and step objects, ints elsewhere) become RFC 3339 UTC
with milliseconds, ``Z`` suffix. Counts, concurrencies, limits and durations are whole numbers
from 0 within the reference's ``int32`` / ``int64`` (a duration below 0, two hosts' clocks apart,
reads as 0); intervals and periods finite numbers from 0.
What cannot be mapped (a time that is no number, a workflow without a creation time, a count
out of its format, an empty id, an answer about another object than the one asked for) raises
:class:`ExecutorReplyError` naming the executor's field.

Export and import blobs pass through as the strings they are: never decoded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from msgspec import UNSET, UnsetType

from relay_es.adapters.rest.conductor import models as m
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting, RelayError
from relay_es.protocol import catalogue as c

# Go's zero values and the SDKs' defaults, for keys an SDK did not send.
DEFAULT_PRIORITY = 0
DEFAULT_POLLING_INTERVAL_SECS = 1.0  # every SDK's queue default

# What the TypeScript SDK's ``String(x)`` makes of a missing value in an epoch-ms field.
_TS_MISSING = frozenset({"null", "undefined"})
_EPOCH_MS = re.compile(r"-?\d{1,16}")
# datetime's range, in epoch milliseconds: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z.
_MIN_MS = -62_135_596_800_000
_MAX_MS = 253_402_300_799_999
_RFC3339 = re.compile(m.RFC3339)

# The largest integer a JavaScript number holds exactly. A TypeScript executor reads ``limit``,
# ``offset`` and a time bucket's size as numbers: one above it reaches Postgres rounded up, past
# ``bigint`` (a 500). A limit that large is every row, an offset that large is past the last, a
# bucket that large holds every time in epoch ms since 1970 (below 2**53): capped, they mean the same.
JS_SAFE_MAX = 2**53 - 1


class ExecutorReplyError(RelayError, ValueError):
    """An executor's answer that does not map to the REST model. ``field`` is the executor's
    name for the value (``CreatedAt``, ``started_at_epoch_ms``)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"executor reply: {field}: {message}")


# --- times -------------------------------------------------------------------


def epoch_ms_to_rfc3339(field: str, value: str | int | None) -> str | None:
    """Epoch milliseconds (a decimal string or an int) as RFC 3339 UTC: ``"0"`` is
    ``1970-01-01T00:00:00.000Z``. ``None`` (and TypeScript's ``"null"``/``"undefined"``) is
    ``None``. Anything else raises :class:`ExecutorReplyError`."""
    if value is None or (isinstance(value, str) and value in _TS_MISSING):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ExecutorReplyError(field, f"not epoch milliseconds: {value!r}")
    if isinstance(value, str):
        if not _EPOCH_MS.fullmatch(value):
            raise ExecutorReplyError(field, f"not epoch milliseconds: {value[:64]!r}")
        value = int(value)
    if not _MIN_MS <= value <= _MAX_MS:
        raise ExecutorReplyError(field, f"epoch milliseconds out of range: {value}")
    return units.rfc3339(units.from_epoch_ms(value))


def _required_time(field: str, value: str | int | None) -> str:
    t = epoch_ms_to_rfc3339(field, value)
    if t is None:
        raise ExecutorReplyError(field, "missing")
    return t


def iso_to_rfc3339(field: str, value: str | None) -> str | None:
    """An ISO 8601 time from an executor (a schedule's ``last_fired_at``: Python's
    ``isoformat()``, ``+00:00``; TypeScript's ``toISOString()``, ``Z``) as RFC 3339 UTC. A time
    without an offset is UTC, as every SDK computes it. Epoch milliseconds are accepted too."""
    if value is None or value in _TS_MISSING:
        return None
    if _EPOCH_MS.fullmatch(value):
        return epoch_ms_to_rfc3339(field, value)
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ExecutorReplyError(field, f"not an ISO 8601 time: {value[:64]!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        return units.rfc3339(t)
    except OverflowError:
        raise ExecutorReplyError(field, f"out of range: {value[:64]!r}") from None


def rfc3339_to_executor(field: str, text: str) -> str:
    """A REST date-time as the ISO string executors parse: UTC, ``+00:00`` offset, microseconds
    kept (``2026-11-30T12:00:05.123000+00:00``). Raises :class:`InvalidSetting` naming
    ``field`` for what is not RFC 3339."""
    if not isinstance(text, str) or not _RFC3339.fullmatch(text):
        raise InvalidSetting(field, f"must be an RFC 3339 date-time, got {str(text)[:64]!r}")
    return units.parse_rfc3339(field, text).isoformat()  # to the microsecond, further digits dropped


def _time(field: str, value: str | UnsetType) -> str | None:
    return None if value is UNSET else rfc3339_to_executor(field, value)


def _int(field: str, value: str | None, default: int | None, bound: int) -> int | None:
    """An int the executor sends as a decimal string (``Priority``, ``WorkflowTimeoutMS``),
    within the reference's ``int32`` / ``int64`` (``bound``)."""
    if value is None or value in _TS_MISSING:
        return default
    if not _EPOCH_MS.fullmatch(value) or not -bound - 1 <= int(value) <= bound:
        raise ExecutorReplyError(field, f"not an integer up to {bound}: {value[:64]!r}")
    return int(value)


def _present(field: str, value: str | None) -> str:
    if value is None:
        raise ExecutorReplyError(field, "missing")
    return value


def _id(field: str, value: str | None) -> str:
    """An id Relay answers and links to (``Location``): present (the catalogue refuses an empty one
    as it decodes the reply, :func:`~relay_es.protocol.catalogue._names_a_workflow`)."""
    return _present(field, value)


def whole_number(field: str, value: int | None, bound: int = m.INT64_MAX) -> int | None:
    """A count, concurrency, limit or duration: ``None``, or a whole number from 0 to ``bound``
    (the reference's ``int32`` / ``int64``)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound):
        raise ExecutorReplyError(field, f"not a whole number from 0 to {bound}: {str(value)[:64]}")
    return value


def _duration(field: str, value: int | None) -> int | None:
    """A longest wait or run in milliseconds: within ``int64``, and below 0 read as 0 (the SDKs compute
    it from the clocks of the processes that enqueued and ran a workflow, which may disagree)."""
    if isinstance(value, int) and -m.INT64_MAX <= value < 0:  # (a bool is never below 0)
        return 0
    return whole_number(field, value)


def _seconds(field: str, value: float | None) -> float | None:
    """An interval or period in seconds: ``None``, or a finite number from 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value) or value < 0):
        raise ExecutorReplyError(field, f"not a finite number of seconds from 0: {str(value)[:64]}")
    return value


def same_as_asked(field: str, asked: str, answered: str | None) -> None:
    """A ``get_*`` answer is about the object asked for: ``answered`` (its id or name) is ``asked``."""
    if answered != asked:
        raise ExecutorReplyError(field, f"answers for {str(answered)[:64]!r}, not the {asked[:64]!r} asked for")


# --- executor -> REST ----------------------------------------------------------


def workflow_out(w: c.WorkflowsOutput) -> m.Workflow:
    """One executor ``WorkflowsOutput`` (section 5.9) as a REST ``Workflow``."""
    created = _required_time("CreatedAt", w.CreatedAt)
    # A workflow never updated since its creation: TypeScript omits a falsy UpdatedAt.
    updated = epoch_ms_to_rfc3339("UpdatedAt", w.UpdatedAt) or created
    priority = _int("Priority", w.Priority, DEFAULT_PRIORITY, m.INT32_MAX)
    return m.Workflow(
        workflow_id=w.WorkflowUUID,
        status=_present("Status", w.Status),
        workflow_name=w.WorkflowName,
        workflow_class=w.WorkflowClassName,
        workflow_config=w.WorkflowConfigName,
        user=w.AuthenticatedUser,
        assumed_role=w.AssumedRole,
        roles=w.AuthenticatedRoles,
        input=w.Input,
        output=w.Output,
        error=w.Error,
        created_at=created,
        updated_at=updated,
        queue_name=w.QueueName,
        app_version=w.ApplicationVersion,
        executor_id=w.ExecutorID,
        timeout_ms=_int("WorkflowTimeoutMS", w.WorkflowTimeoutMS, None, m.INT64_MAX),
        deadline=epoch_ms_to_rfc3339("WorkflowDeadlineEpochMS", w.WorkflowDeadlineEpochMS),
        deduplication_id=w.DeduplicationID,
        priority=DEFAULT_PRIORITY if priority is None else priority,
        queue_partition_key=w.QueuePartitionKey,
        forked_from=w.ForkedFrom,
        was_forked_from=bool(w.WasForkedFrom),
        parent_workflow_id=w.ParentWorkflowID,
        dequeued_at=epoch_ms_to_rfc3339("DequeuedAt", w.DequeuedAt),
        delay_until=epoch_ms_to_rfc3339("DelayUntilEpochMS", w.DelayUntilEpochMS),
        completed_at=epoch_ms_to_rfc3339("CompletedAt", w.CompletedAt),
        attributes=w.Attributes,
        schedule_name=w.ScheduleName,
        application_name=w.ApplicationName,
    )


def workflows_out(r: c.ListWorkflowsResponse) -> list[m.Workflow]:
    return [workflow_out(w) for w in r.output or ()]


def step_out(s: c.StepOutput) -> m.Step:
    if not 0 <= s.function_id <= m.INT32_MAX:
        raise ExecutorReplyError("function_id", f"not a step number: {s.function_id}")
    return m.Step(
        step_id=s.function_id,
        step_name=s.function_name,
        output=s.output,
        error=s.error,
        child_workflow_id=s.child_workflow_id,
        started_at=epoch_ms_to_rfc3339("started_at_epoch_ms", s.started_at_epoch_ms),
        completed_at=epoch_ms_to_rfc3339("completed_at_epoch_ms", s.completed_at_epoch_ms),
    )


def steps_out(r: c.ListStepsResponse) -> list[m.Step]:
    return [step_out(s) for s in r.output or ()]


def events_out(r: c.GetWorkflowEventsResponse) -> list[m.Event]:
    # A display string; a value the SDK did not render (TypeScript drops undefined) is "".
    return [m.Event(key=e.key, value="" if e.value is None else e.value) for e in r.events or ()]


def notifications_out(r: c.GetWorkflowNotificationsResponse) -> list[m.Notification]:
    return [m.Notification(topic=n.topic, message="" if n.message is None else n.message,
                           created_at=_required_time("created_at_epoch_ms", n.created_at_epoch_ms),
                           consumed=bool(n.consumed))
            for n in r.notifications or ()]


def streams_out(r: c.GetWorkflowStreamsResponse) -> list[m.StreamEntry]:
    return [m.StreamEntry(key=s.key, values=list(s.values)) for s in r.streams or ()]


def _unset(value: int | None) -> int | UnsetType:
    return UNSET if value is None else value


def _group(group: dict[str, str | None]) -> dict[str, str | None]:
    """Group values as the executor sent them (stringified; ``time_bucket`` is epoch ms): the
    reference types them only as strings, so none is converted."""
    return dict(group)


def workflow_aggregates_out(r: c.GetWorkflowAggregatesResponse) -> list[m.WorkflowAggregate]:
    out = []
    for a in r.output or ():
        created = epoch_ms_to_rfc3339("min_created_at", a.min_created_at)
        out.append(m.WorkflowAggregate(
            group=_group(a.group), count=_unset(whole_number("count", a.count)),
            min_created_at=UNSET if created is None else created,
            max_queue_wait_ms=_unset(_duration("max_queue_wait_ms", a.max_queue_wait_ms)),
            max_total_latency_ms=_unset(_duration("max_total_latency_ms", a.max_total_latency_ms))))
    return out


def step_aggregates_out(r: c.GetStepAggregatesResponse) -> list[m.StepAggregate]:
    return [m.StepAggregate(group=_group(a.group), count=_unset(whole_number("count", a.count)),
                            max_duration_ms=_unset(_duration("max_duration_ms", a.max_duration_ms)))
            for a in r.output or ()]


def fork_out(r: c.ForkWorkflowResponse) -> m.ForkWorkflowOutputBody:
    return m.ForkWorkflowOutputBody(workflow_id=_id("new_workflow_id", r.new_workflow_id))


def fork_from_failure_out(r: c.ForkFromFailureResponse) -> m.BulkForkFromFailureOutputBody:
    return m.BulkForkFromFailureOutputBody(workflow_ids=list(r.forked_workflow_ids or ()))


def export_out(r: c.ExportWorkflowResponse) -> m.ExportWorkflowOutputBody:
    return m.ExportWorkflowOutputBody(serialized_workflow=_present("serialized_workflow", r.serialized_workflow))


def queue_out(q: c.QueueOutput) -> m.Queue:
    """Partition limits (newer SDKs) are not in the reference's ``Queue``: left out. Concurrencies
    and the rate limit are ``int32`` from 0, the period and the polling interval finite from 0."""
    polling = _seconds("polling_interval_sec", q.polling_interval_sec)
    return m.Queue(
        name=q.name,
        concurrency=whole_number("concurrency", q.concurrency, m.INT32_MAX),
        worker_concurrency=whole_number("worker_concurrency", q.worker_concurrency, m.INT32_MAX),
        rate_limit_max=whole_number("rate_limit_max", q.rate_limit_max, m.INT32_MAX),
        rate_limit_period_secs=_seconds("rate_limit_period_sec", q.rate_limit_period_sec),
        priority_enabled=bool(q.priority_enabled),
        partition_queue=bool(q.partition_queue),
        polling_interval_secs=DEFAULT_POLLING_INTERVAL_SECS if polling is None else polling,
        application_name=q.application_name,
    )


def queues_out(r: c.ListQueuesResponse) -> list[m.Queue]:
    return [queue_out(q) for q in r.output or ()]


def schedule_out(s: c.ScheduleOutput) -> m.Schedule:
    return m.Schedule(
        schedule_id=_present("schedule_id", s.schedule_id),
        schedule_name=s.schedule_name,
        workflow_name=_present("workflow_name", s.workflow_name),
        workflow_class=s.workflow_class_name,
        cron_expression=_present("schedule", s.schedule),
        status=_present("status", s.status),
        context=s.context,
        last_fired_at=iso_to_rfc3339("last_fired_at", s.last_fired_at),
        automatic_backfill=bool(s.automatic_backfill),
        cron_timezone=s.cron_timezone,
        application_name=s.application_name,
    )


def schedules_out(r: c.ListSchedulesResponse) -> list[m.Schedule]:
    return [schedule_out(s) for s in r.output or ()]


def backfill_out(r: c.BackfillScheduleResponse) -> m.BackfillOutputBody:
    return m.BackfillOutputBody(workflow_ids=list(r.workflow_ids or ()))


def trigger_out(r: c.TriggerScheduleResponse) -> m.TriggerOutputBody:
    return m.TriggerOutputBody(workflow_id=_id("workflow_id", r.workflow_id))


def version_out(v: c.ApplicationVersionOutput) -> m.ApplicationVersion:
    return m.ApplicationVersion(
        version_id=v.version_id,
        version_name=v.version_name,
        version_timestamp=_required_time("version_timestamp", v.version_timestamp),
        created_at=_required_time("created_at", v.created_at),
    )


def versions_out(r: c.ListApplicationVersionsResponse) -> list[m.ApplicationVersion]:
    return [version_out(v) for v in r.output or ()]


# --- REST -> executor ----------------------------------------------------------


def _values(value: list[str] | None | UnsetType) -> list[str] | None:
    return list(value) if value else None  # UNSET, null and [] are no filter


def _flag(value: bool | UnsetType, default: bool) -> bool:
    return default if value is UNSET else value


def _given(value: str | UnsetType) -> str | None:
    """An optional ID or name (:data:`.models.OptionalText`): not given or ``""`` is ``None``."""
    return None if value is UNSET or value == "" else value


def sendable(n: int | None) -> int | None:
    """A ``limit``, ``offset`` or time bucket's size as sent: at most :data:`JS_SAFE_MAX`."""
    return None if n is None else min(n, JS_SAFE_MAX)


def query_values(field: str, values: str | Sequence[str] | None) -> str | list[str] | None:
    """A query parameter as the executor's "S|L" filter: absent is ``None``, given once one
    string, given several times a list. Each value by the rule of body filters
    (:func:`.models.text_fault`: a NUL, ``%00`` in the query, is refused here, never sent)."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    if len(values) > m.MAX_FILTER_VALUES:
        raise InvalidSetting(field, f"at most {m.MAX_FILTER_VALUES} values, got {len(values)}")
    for v in values:
        if not isinstance(v, str):
            raise InvalidSetting(field, f"must be a string, got {type(v).__name__}")
        if (fault := m.text_fault(v)) is not None:
            raise InvalidSetting(field, f"a value {fault}")
    if not values:
        return None
    return values[0] if len(values) == 1 else list(values)


def page(limit: int | None, offset: int | None) -> tuple[int | None, int | None]:
    """``limit`` and ``offset`` query parameters, checked (whole numbers from 0 to ``int64``'s
    largest), as sent (:func:`sendable`)."""
    for field, n in (("limit", limit), ("offset", offset)):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= m.INT64_MAX):
            raise InvalidSetting(field, f"must be a whole number from 0 to {m.INT64_MAX}, got {n!r}")
    return sendable(limit), sendable(offset)


def text(field: str, value: str) -> str:
    """A path parameter (workflow ID, queue or schedule name), by the rule of body text
    (:func:`.models.text_fault`; the guard has checked it already)."""
    if not isinstance(value, str) or not value:
        raise InvalidSetting(field, "must be a non-empty string")
    if (fault := m.text_fault(value)) is not None:
        raise InvalidSetting(field, fault)
    return value


def list_workflows_request(*, request_id: str, status: str | Sequence[str] | None = None,
                           workflow_name: str | Sequence[str] | None = None, limit: int | None = None,
                           offset: int | None = None, sort_desc: bool | None = None,
                           load_input: bool | None = None, load_output: bool | None = None) -> c.ListWorkflowsRequest:
    """``listWorkflows``' query parameters. Not asked to load input or output, it does not (Go's zero value)."""
    limit, offset = page(limit, offset)
    return c.ListWorkflowsRequest(request_id=request_id, body=c.ListWorkflowsBody(
        status=query_values("status", status), workflow_name=query_values("workflowName", workflow_name),
        limit=limit, offset=offset, sort_desc=bool(sort_desc),
        load_input=bool(load_input), load_output=bool(load_output)))


def search_body(b: m.WorkflowSearchBody) -> c.ListWorkflowsBody:
    """``WorkflowSearchBody`` as ``list_workflows``' body (section 10.4's names)."""
    return c.ListWorkflowsBody(
        workflow_uuids=_values(b.workflow_ids),
        workflow_name=_values(b.workflow_name),
        authenticated_user=_values(b.user),
        start_time=_time("startTime", b.start_time),
        end_time=_time("endTime", b.end_time),
        completed_after=_time("completedAfter", b.completed_after),
        completed_before=_time("completedBefore", b.completed_before),
        dequeued_after=_time("dequeuedAfter", b.dequeued_after),
        dequeued_before=_time("dequeuedBefore", b.dequeued_before),
        status=_values(b.status),
        application_version=_values(b.app_version),
        forked_from=_values(b.forked_from),
        parent_workflow_id=_values(b.parent_workflow_id),
        queue_name=_values(b.queue_name),
        workflow_id_prefix=_values(b.workflow_id_prefix),
        executor_id=_values(b.executor_id),
        schedule_name=_values(b.schedule_name),
        attributes=None if b.attributes is UNSET else dict(b.attributes),
        was_forked_from=b.was_forked_from,  # UNSET stays UNSET: left out, never null (the catalogue's TriState)
        has_parent=b.has_parent,
        queues_only=_flag(b.queues_only, False),
        limit=None if b.limit is UNSET else sendable(b.limit),
        offset=None if b.offset is UNSET else sendable(b.offset),
        sort_desc=_flag(b.sort_desc, False),
        load_input=_flag(b.load_input, False),
        load_output=_flag(b.load_output, False),
    )


def search_request(b: m.WorkflowSearchBody, *, request_id: str) -> c.ListWorkflowsRequest | c.ListQueuedWorkflowsRequest:
    """``searchWorkflows``. ``queuesOnly`` goes as ``list_queued_workflows``, which every SDK
    answers with enqueued workflows only (the oldest ignore ``queues_only``)."""
    body = search_body(b)
    if body.queues_only:
        return c.ListQueuedWorkflowsRequest(request_id=request_id, body=body)
    return c.ListWorkflowsRequest(request_id=request_id, body=body)


def get_workflow_request(workflow_id: str, *, request_id: str) -> c.GetWorkflowRequest:
    return c.GetWorkflowRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id),
                                load_input=True, load_output=True)


def list_steps_request(workflow_id: str, *, request_id: str, limit: int | None = None,
                       offset: int | None = None) -> c.ListStepsRequest:
    limit, offset = page(limit, offset)
    return c.ListStepsRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id),
                              load_output=True, limit=limit, offset=offset)


def events_request(workflow_id: str, *, request_id: str) -> c.GetWorkflowEventsRequest:
    return c.GetWorkflowEventsRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id))


def notifications_request(workflow_id: str, *, request_id: str) -> c.GetWorkflowNotificationsRequest:
    return c.GetWorkflowNotificationsRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id))


def streams_request(workflow_id: str, *, request_id: str) -> c.GetWorkflowStreamsRequest:
    return c.GetWorkflowStreamsRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id))


def workflow_aggregates_request(b: m.WorkflowAggregatesBody, *, request_id: str) -> c.GetWorkflowAggregatesRequest:
    """Note the executor's names here: ``name``, ``app_version``, ``user``, ``workflow_ids``."""
    return c.GetWorkflowAggregatesRequest(request_id=request_id, body=c.WorkflowAggregatesBody(
        group_by_status=_flag(b.group_by_status, False),
        group_by_name=_flag(b.group_by_workflow_name, False),
        group_by_queue_name=_flag(b.group_by_queue_name, False),
        group_by_executor_id=_flag(b.group_by_executor_id, False),
        group_by_application_version=_flag(b.group_by_app_version, False),
        group_by_application_name=_flag(b.group_by_application_name, False),
        select_count=_flag(b.select_count, False),
        select_min_created_at=_flag(b.select_min_created_at, False),
        select_max_queue_wait_ms=_flag(b.select_max_queue_wait_ms, False),
        select_max_total_latency_ms=_flag(b.select_max_total_latency_ms, False),
        time_bucket_size_ms=None if b.time_bucket_size_ms is UNSET else sendable(b.time_bucket_size_ms),
        status=_values(b.status),
        name=_values(b.workflow_name),
        app_version=_values(b.app_version),
        executor_id=_values(b.executor_id),
        queue_name=_values(b.queue_name),
        workflow_id_prefix=_values(b.workflow_id_prefix),
        workflow_ids=_values(b.workflow_ids),
        forked_from=_values(b.forked_from),
        parent_workflow_id=_values(b.parent_workflow_id),
        user=_values(b.user),
        schedule_name=_values(b.schedule_name),
        start_time=_time("startTime", b.start_time),
        end_time=_time("endTime", b.end_time),
        completed_after=_time("completedAfter", b.completed_after),
        completed_before=_time("completedBefore", b.completed_before),
        dequeued_after=_time("dequeuedAfter", b.dequeued_after),
        dequeued_before=_time("dequeuedBefore", b.dequeued_before),
        was_forked_from=b.was_forked_from,  # UNSET stays UNSET: left out, never null (the catalogue's TriState)
        has_parent=b.has_parent,
        attributes=None if b.attributes is UNSET else dict(b.attributes),
    ))


def step_aggregates_request(b: m.StepAggregatesBody, *, request_id: str) -> c.GetStepAggregatesRequest:
    return c.GetStepAggregatesRequest(request_id=request_id, body=c.StepAggregatesBody(
        group_by_function_name=_flag(b.group_by_function_name, False),
        group_by_status=_flag(b.group_by_status, False),
        select_count=_flag(b.select_count, False),
        select_max_duration_ms=_flag(b.select_max_duration_ms, False),
        time_bucket_size_ms=None if b.time_bucket_size_ms is UNSET else sendable(b.time_bucket_size_ms),
        status=_values(b.status),
        function_name=_values(b.step_name),
        workflow_id_prefix=_values(b.workflow_id_prefix),
        completed_after=_time("completedAfter", b.completed_after),
        completed_before=_time("completedBefore", b.completed_before),
    ))


# Actions. A bulk request also names its first workflow in ``workflow_id``: Python requires the
# key. An SDK older than the bulk form would act on that one alone and answer success, so a bulk
# request of several workflows goes only to an executor that has the form (releases.py).


def cancel_request(workflow_id: str, b: m.CancelWorkflowInputBody | None, *, request_id: str) -> c.CancelRequest:
    children = False if b is None else _flag(b.cancel_children, False)
    return c.CancelRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id), cancel_children=children)


def resume_request(workflow_id: str, b: m.ResumeWorkflowInputBody | None, *, request_id: str) -> c.ResumeRequest:
    queue = None if b is None else _given(b.queue_name)
    return c.ResumeRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id), queue_name=queue)


def delete_request(workflow_id: str, delete_children: bool | None, *, request_id: str) -> c.DeleteRequest:
    return c.DeleteRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id),
                           delete_children=bool(delete_children))


def fork_request(workflow_id: str, b: m.ForkWorkflowInputBody | None, *, request_id: str,
                 first_step: int = 0) -> c.ForkWorkflowRequest:
    """Without ``startStep`` the fork starts at ``first_step``, 0: no step copied on any SDK
    (TypeScript copies the steps below ``start_step``, counting from 0; Python copies none for
    anything up to 1)."""
    b = b or m.ForkWorkflowInputBody()
    return c.ForkWorkflowRequest(request_id=request_id, body=c.ForkWorkflowBody(
        workflow_id=text("workflowId", workflow_id),
        start_step=first_step if b.start_step is UNSET else b.start_step,
        application_version=_given(b.app_version),
        new_workflow_id=_given(b.new_workflow_id),
        queue_name=_given(b.queue_name),
        queue_partition_key=_given(b.queue_partition_key),
    ))


def bulk_cancel_request(b: m.BulkCancelInputBody, *, request_id: str) -> c.CancelRequest:
    return c.CancelRequest(request_id=request_id, workflow_id=b.workflow_ids[0], workflow_ids=list(b.workflow_ids),
                           cancel_children=_flag(b.cancel_children, False))


def bulk_resume_request(b: m.BulkResumeInputBody, *, request_id: str) -> c.ResumeRequest:
    return c.ResumeRequest(request_id=request_id, workflow_id=b.workflow_ids[0], workflow_ids=list(b.workflow_ids),
                           queue_name=_given(b.queue_name))


def bulk_delete_request(b: m.BulkDeleteInputBody, *, request_id: str) -> c.DeleteRequest:
    return c.DeleteRequest(request_id=request_id, workflow_id=b.workflow_ids[0], workflow_ids=list(b.workflow_ids),
                           delete_children=_flag(b.delete_children, False))


def fork_from_failure_request(b: m.BulkForkFromFailureBody, *, request_id: str) -> c.ForkFromFailureRequest:
    """No starting point named is ``fromLastFailure``, the operation's name."""
    named = (b.from_last_step is True or b.from_step is not UNSET or b.from_step_name is not UNSET)
    return c.ForkFromFailureRequest(request_id=request_id, body=c.ForkFromFailureBody(
        workflow_ids=list(b.workflow_ids),
        application_version=_given(b.app_version),
        queue_name=_given(b.queue_name),
        queue_partition_key=_given(b.queue_partition_key),
        from_last_failure=not named,
        from_last_step=b.from_last_step is True,
        from_step=None if b.from_step is UNSET else b.from_step,
        from_step_name=None if b.from_step_name is UNSET else b.from_step_name,
    ))


def export_request(workflow_id: str, export_children: bool | None, *, request_id: str) -> c.ExportWorkflowRequest:
    return c.ExportWorkflowRequest(request_id=request_id, workflow_id=text("workflowId", workflow_id),
                                   export_children=bool(export_children))


def import_request(b: m.ImportWorkflowInputBody, *, request_id: str) -> c.ImportWorkflowRequest:
    return c.ImportWorkflowRequest(request_id=request_id, serialized_workflow=b.serialized_workflow)


# Queues, schedules, versions.


def list_queues_request(*, request_id: str) -> c.ListQueuesRequest:
    return c.ListQueuesRequest(request_id=request_id)


def get_queue_request(queue_name: str, *, request_id: str) -> c.GetQueueRequest:
    return c.GetQueueRequest(request_id=request_id, name=text("queueName", queue_name))


def list_schedules_request(*, request_id: str, status: str | Sequence[str] | None = None,
                           workflow_name: str | Sequence[str] | None = None,
                           schedule_name_prefix: str | Sequence[str] | None = None,
                           load_context: bool | None = None) -> c.ListSchedulesRequest:
    """``listSchedules``' query parameters. ``loadContext`` defaults to true, as in every SDK."""
    return c.ListSchedulesRequest(request_id=request_id, body=c.ListSchedulesBody(
        status=query_values("status", status), workflow_name=query_values("workflowName", workflow_name),
        schedule_name_prefix=query_values("scheduleNamePrefix", schedule_name_prefix),
        load_context=True if load_context is None else load_context))


def get_schedule_request(schedule_name: str, *, request_id: str) -> c.GetScheduleRequest:
    return c.GetScheduleRequest(request_id=request_id, schedule_name=text("scheduleName", schedule_name),
                                load_context=True)


def pause_schedule_request(schedule_name: str, *, request_id: str) -> c.PauseScheduleRequest:
    return c.PauseScheduleRequest(request_id=request_id, schedule_name=text("scheduleName", schedule_name))


def resume_schedule_request(schedule_name: str, *, request_id: str) -> c.ResumeScheduleRequest:
    return c.ResumeScheduleRequest(request_id=request_id, schedule_name=text("scheduleName", schedule_name))


def trigger_schedule_request(schedule_name: str, *, request_id: str) -> c.TriggerScheduleRequest:
    return c.TriggerScheduleRequest(request_id=request_id, schedule_name=text("scheduleName", schedule_name))


def backfill_schedule_request(schedule_name: str, b: m.BackfillInputBody, *, request_id: str) -> c.BackfillScheduleRequest:
    return c.BackfillScheduleRequest(request_id=request_id, schedule_name=text("scheduleName", schedule_name),
                                     start=rfc3339_to_executor("startTime", b.start_time),
                                     end=rfc3339_to_executor("endTime", b.end_time))


def list_versions_request(*, request_id: str) -> c.ListApplicationVersionsRequest:
    return c.ListApplicationVersionsRequest(request_id=request_id)


def set_latest_version_request(b: m.PatchLatestVersionInputBody, *, request_id: str) -> c.SetLatestApplicationVersionRequest:
    return c.SetLatestApplicationVersionRequest(request_id=request_id, version_name=b.version_name)
