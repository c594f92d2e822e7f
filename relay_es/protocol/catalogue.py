"""The workflow-management catalogue of the executor protocol, as msgspec Structs.

One request and one response type per wire ``type`` of section 5 of the
protocol reference (``../shared/docs/conductor-protocol.md``, outside this
repository; its 5.0 table lists 34 types, and :data:`REQUESTS` has each) that
:mod:`relay_es.protocol.messages` does not already define, plus the registries
:data:`REQUESTS` and :data:`RESPONSES` over *every* wire type (core ones
included) and :func:`decode_response_for`. Pure data: nothing here does I/O.

The session (:mod:`relay_es.protocol.session`) decodes every reply with
:data:`RESPONSES`, and the hub's calls (``relay_es.adapters.hub.calls``) send
these requests: every workflow operation of the Conductor API (list, get, steps,
cancel, resume, fork, delete, queues, schedules, versions, export/import) is one
of these requests to an executor and one of these responses back.

The conventions of :mod:`relay_es.protocol.messages` hold throughout:

* Requests and their ``body`` objects are encoded with **every** field,
  ``null`` for "not set". Python's parsers index keys directly (a missing one
  drops the connection, or, in older SDKs, answers with a ``KeyError``
  traceback) and a malformed frame can crash a TypeScript process. Fields the
  SDKs treat as required have no default here, so a caller cannot forget them.
  The one exception is the tri-state filters ``was_forked_from`` and
  ``has_parent`` (:data:`TriState`): ``UNSET`` by default and then left out,
  because TypeScript 5.2.11 tests them ``!== undefined`` and reads ``null`` as a
  filter (``was_forked_from = NULL`` lists nothing); every SDK reads them with
  ``.get`` or ``??``, so leaving them out is safe.
* Every response field past the envelope has a default, so a frame decodes
  whether the SDK sent ``null`` (Python), omitted the key (TypeScript's
  ``JSON.stringify`` drops ``undefined``; Go's ``omitempty``), or answered
  ``"Unknown message type"`` with nothing but the envelope and
  ``error_message`` (the reference's section 6: Python 3.x and TS 5.x for ``restart``, Go and
  Java for ``rewind_workflow``). Unknown extra keys are ignored.
* ``failed`` is true whenever ``error_message`` is not null, even when
  ``success`` is absent or true.

Traps to know when filling these in:

* ISO timestamps sent to executors are typed ``str``, not ``datetime``: msgspec
  would encode an aware UTC datetime with a trailing ``Z``, which Python 3.10's
  ``datetime.fromisoformat`` rejects. Send ``YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00``.
* Timestamps *from* executors inside workflow and step objects are epoch
  milliseconds encoded as decimal **strings** (``"1796040658645"``); the
  application-version, notification, aggregate and metric ones are ints.
* Go encodes an empty (nil) slice as ``null``, so every list in a response is
  ``list[...] | None``: ``null`` is not an error by itself.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from relay_es.protocol.messages import (
    CORE_RESPONSES,
    ExecutorInfoRequest,
    ExistPendingWorkflowsRequest,
    RecoveryRequest,
    Request,
    Response,
    RetentionRequest,
    SuccessResponse,
    UnknownTypeResponse,
    decode_response,
)

# A filter that every SDK accepts as one string or a list of strings ("S|L").
StrOrList: TypeAlias = str | list[str]
# A filter that is true, false, or "either" (UNSET: the key is left out; never null, see above).
TriState: TypeAlias = bool | UnsetType


class _Body(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A request's ``body`` object: encoded with every key, like the request.
    (msgspec inherits ``omit_defaults`` but not ``kw_only``: subclasses repeat it.)"""


def _names_a_workflow(workflow_id: str | None, error_message: str | None) -> None:
    """An answer that starts a workflow (fork, trigger) names it, or says why not: null is every
    SDK's "it did not happen" (a failure, its ``error_message`` the reason); an empty id with no
    error names nothing and breaks the protocol (the reply is refused, a 502)."""
    if workflow_id == "" and error_message is None:
        raise ValueError("an empty workflow id names no workflow")


class _Output(msgspec.Struct, kw_only=True):
    """An object inside a response. Lenient like the responses: everything but
    its identifying key has a default, unknown keys are ignored."""


# --- cancel / resume / delete (5.4) ----------------------------------------
#
# ``workflow_id`` is required by Python's parser even in the bulk form, where a
# non-empty ``workflow_ids`` replaces it (Python >= 2.15). For a bulk request
# put one of the IDs (say the first) there too: an SDK that predates the bulk
# form then acts on that one instead of dropping the connection.


class CancelRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "cancel"
    type: str = "cancel"
    workflow_id: str
    workflow_ids: list[str] | None = None
    cancel_children: bool = False


class ResumeRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "resume"
    type: str = "resume"
    workflow_id: str
    workflow_ids: list[str] | None = None
    queue_name: str | None = None


class DeleteRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "delete"
    type: str = "delete"
    workflow_id: str
    workflow_ids: list[str] | None = None
    # No default on purpose: Python requires the key, and whether children go
    # too is the caller's decision.
    delete_children: bool


# --- restart (5.5, legacy) -------------------------------------------------


class RestartRequest(Request, kw_only=True):
    """Legacy: Python >= 3.0 and TS 5.x answer "Unknown message type". Prefer
    :class:`ForkWorkflowRequest`; this exists so Java executors and old SDKs
    can still be spoken to and their replies decoded."""

    TYPE: ClassVar[str] = "restart"
    type: str = "restart"
    workflow_id: str


# --- fork_workflow (5.6) ---------------------------------------------------


class ForkWorkflowBody(_Body, kw_only=True):
    # Python reads the first four keys by indexing *before* its error handling:
    # all four must be on the wire, null allowed (always so here).
    workflow_id: str
    # Python numbers steps from 1, TypeScript from 0.
    start_step: int
    application_version: str | None = None  # null: keep the original's
    new_workflow_id: str | None = None  # null: the executor picks a UUID
    queue_name: str | None = None
    queue_partition_key: str | None = None


class ForkWorkflowRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "fork_workflow"
    type: str = "fork_workflow"
    body: ForkWorkflowBody


class ForkWorkflowResponse(Response, kw_only=True):
    new_workflow_id: str | None = None

    def __post_init__(self) -> None:
        _names_a_workflow(self.new_workflow_id, self.error_message)

    @property
    def failed(self) -> bool:
        # Every SDK answers null here when the fork did not happen.
        return self.error_message is not None or not self.new_workflow_id


# --- fork_from_failure (5.7) -----------------------------------------------


class ForkFromFailureBody(_Body, kw_only=True, omit_defaults=True):
    workflow_ids: list[str]
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None
    # Exactly one starting point: a true flag or a non-null value. Only what is set goes on
    # the wire (omit_defaults): TypeScript 5.2.11 counts a starting point as chosen when its
    # key is not undefined (``options.fromStep !== undefined``), so a null beside the chosen
    # one made it refuse every request -- seen live. Python reads every key but workflow_ids
    # with ``.get`` (defaults false and None); Go takes zero values.
    from_last_failure: bool = False
    from_last_step: bool = False
    from_step: int | None = None
    from_step_name: str | None = None

    def __post_init__(self) -> None:
        chosen = [self.from_last_failure, self.from_last_step,
                  self.from_step is not None, self.from_step_name is not None]
        if sum(chosen) != 1:
            raise ValueError("fork_from_failure needs exactly one of from_last_failure, "
                             "from_last_step, from_step, from_step_name")


class ForkFromFailureRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "fork_from_failure"
    type: str = "fork_from_failure"
    body: ForkFromFailureBody


class ForkFromFailureResponse(Response, kw_only=True):
    # Not a failure signal when null: Go omits the key for an empty result.
    forked_workflow_ids: list[str] | None = None


# --- rewind_workflow (5.8; Python >= 3.1, TS 5.x) ----------------------------


class RewindWorkflowBody(_Body, kw_only=True):
    workflow_id: str
    start_step: int | None = None  # Python: null or 0 means 1; TS: 0
    application_version: str | None = None
    queue_name: str | None = None
    queue_partition_key: str | None = None


class RewindWorkflowRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "rewind_workflow"
    type: str = "rewind_workflow"
    body: RewindWorkflowBody


# --- list_workflows / list_queued_workflows (5.9) --------------------------


class ListWorkflowsBody(_Body, kw_only=True):
    """Every key is optional on the wire, but older Python SDKs index several
    of them directly, so all go out (null when unset), but for the tri-state
    filters (left out when unset)."""

    workflow_uuids: list[str] | None = None
    workflow_name: StrOrList | None = None
    authenticated_user: StrOrList | None = None
    start_time: str | None = None  # created_at window, inclusive; ISO, +00:00
    end_time: str | None = None
    completed_after: str | None = None
    completed_before: str | None = None
    dequeued_after: str | None = None
    dequeued_before: str | None = None
    status: StrOrList | None = None
    application_version: StrOrList | None = None
    application_name: StrOrList | None = None  # Python >= 2.31
    forked_from: StrOrList | None = None
    parent_workflow_id: StrOrList | None = None
    queue_name: StrOrList | None = None
    workflow_id_prefix: StrOrList | None = None
    executor_id: StrOrList | None = None
    schedule_name: StrOrList | None = None
    attributes: dict[str, Any] | None = None
    # Tri-state filters: UNSET (left out) means "either"; null would filter in TypeScript.
    was_forked_from: TriState = UNSET
    has_parent: TriState = UNSET
    queues_only: bool = False  # the executor forces it for list_queued_workflows
    limit: int | None = None
    offset: int | None = None
    sort_desc: bool = False
    # No defaults: Python defaults both to true, TS and Go to false, so the
    # caller must say.
    load_input: bool
    load_output: bool


class ListWorkflowsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_workflows"
    type: str = "list_workflows"
    body: ListWorkflowsBody  # required: Python drops the connection without it


class ListQueuedWorkflowsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_queued_workflows"
    type: str = "list_queued_workflows"
    body: ListWorkflowsBody


class WorkflowsOutput(_Output, kw_only=True):
    """One workflow. Keys are PascalCase on the wire. Every value is a string
    (epoch ms and ints included) except ``WasForkedFrom``. ``Input``,
    ``Output`` and ``Error`` are human-readable renderings (Python ``str()``,
    TS ``util.inspect``), not JSON; ``Attributes`` is a JSON-encoded string."""

    WorkflowUUID: str
    Status: str | None = None
    WorkflowName: str | None = None
    WorkflowClassName: str | None = None
    WorkflowConfigName: str | None = None
    AuthenticatedUser: str | None = None
    AssumedRole: str | None = None
    AuthenticatedRoles: str | None = None  # a display string of a list
    Input: str | None = None
    Output: str | None = None
    Error: str | None = None
    CreatedAt: str | None = None
    UpdatedAt: str | None = None
    DequeuedAt: str | None = None
    CompletedAt: str | None = None
    QueueName: str | None = None
    QueuePartitionKey: str | None = None
    DeduplicationID: str | None = None
    Priority: str | None = None
    ApplicationVersion: str | None = None
    ExecutorID: str | None = None
    ApplicationName: str | None = None
    WorkflowTimeoutMS: str | None = None
    WorkflowDeadlineEpochMS: str | None = None
    DelayUntilEpochMS: str | None = None
    ForkedFrom: str | None = None
    ParentWorkflowID: str | None = None
    WasForkedFrom: bool | None = None
    Attributes: str | None = None
    ScheduleName: str | None = None


class ListWorkflowsResponse(Response, kw_only=True):
    # Python answers [] together with error_message on failure.
    output: list[WorkflowsOutput] | None = None


# --- get_workflow (5.10) ---------------------------------------------------


class GetWorkflowRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_workflow"
    type: str = "get_workflow"
    workflow_id: str
    # Python and TS default to true, Go to false: always sent explicitly.
    load_input: bool = True
    load_output: bool = True


class GetWorkflowResponse(Response, kw_only=True):
    # An unknown ID is output null (TS: no key) with *no* error.
    output: WorkflowsOutput | None = None


# --- list_steps (5.11) -----------------------------------------------------


class ListStepsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_steps"
    type: str = "list_steps"
    workflow_id: str
    load_output: bool = True
    limit: int | None = None
    offset: int | None = None


class StepOutput(_Output, kw_only=True):
    function_id: int  # Python starts at 1, TS at 0
    function_name: str
    output: str | None = None  # display strings, not JSON
    error: str | None = None
    child_workflow_id: str | None = None
    started_at_epoch_ms: str | None = None  # epoch ms as a *string*
    completed_at_epoch_ms: str | None = None


class ListStepsResponse(Response, kw_only=True):
    output: list[StepOutput] | None = None


# --- get_workflow_events / _notifications / _streams (5.12) -----------------
#
# Data messages: refused in metadata-only mode with an error_message.


class GetWorkflowEventsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_workflow_events"
    type: str = "get_workflow_events"
    workflow_id: str


class EventOutput(_Output, kw_only=True):
    key: str
    value: str | None = None  # display string


class GetWorkflowEventsResponse(Response, kw_only=True):
    events: list[EventOutput] | None = None


class GetWorkflowNotificationsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_workflow_notifications"
    type: str = "get_workflow_notifications"
    workflow_id: str


class NotificationOutput(_Output, kw_only=True):
    topic: str | None = None
    message: str | None = None  # display string
    created_at_epoch_ms: int | None = None  # an int here, unlike workflow times
    consumed: bool | None = None


class GetWorkflowNotificationsResponse(Response, kw_only=True):
    notifications: list[NotificationOutput] | None = None


class GetWorkflowStreamsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_workflow_streams"
    type: str = "get_workflow_streams"
    workflow_id: str


class StreamEntryOutput(_Output, kw_only=True):
    key: str
    values: list[str] = []  # display strings, in write order


class GetWorkflowStreamsResponse(Response, kw_only=True):
    streams: list[StreamEntryOutput] | None = None


# --- get_workflow_aggregates (5.13) ----------------------------------------


class WorkflowAggregatesBody(_Body, kw_only=True):
    """Filter names differ from list_workflows': ``name``, ``app_version``,
    ``user``, ``workflow_ids`` (not ``workflow_name``, ``application_version``,
    ``authenticated_user``, ``workflow_uuids``), and filters are lists."""

    group_by_status: bool = False
    group_by_name: bool = False
    group_by_queue_name: bool = False
    group_by_executor_id: bool = False
    group_by_application_version: bool = False
    group_by_application_name: bool = False
    # With no select flag set the executor counts.
    select_count: bool = False
    select_min_created_at: bool = False
    select_max_queue_wait_ms: bool = False
    select_max_total_latency_ms: bool = False
    time_bucket_size_ms: int | None = None  # adds a time_bucket group on created_at
    status: list[str] | None = None
    name: list[str] | None = None
    app_version: list[str] | None = None
    executor_id: list[str] | None = None
    queue_name: list[str] | None = None
    workflow_id_prefix: list[str] | None = None
    workflow_ids: list[str] | None = None
    forked_from: list[str] | None = None
    parent_workflow_id: list[str] | None = None
    user: list[str] | None = None
    schedule_name: list[str] | None = None
    application_name: list[str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    completed_after: str | None = None
    completed_before: str | None = None
    dequeued_after: str | None = None
    dequeued_before: str | None = None
    was_forked_from: TriState = UNSET  # left out when UNSET, as in ListWorkflowsBody
    has_parent: TriState = UNSET
    attributes: dict[str, Any] | None = None


class GetWorkflowAggregatesRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_workflow_aggregates"
    type: str = "get_workflow_aggregates"
    body: WorkflowAggregatesBody


class WorkflowAggregateOutput(_Output, kw_only=True):
    # Group key (status, name, queue_name, executor_id, application_version,
    # application_name, time_bucket) -> stringified value; time_bucket is the
    # bucket start in epoch ms, as a string.
    group: dict[str, str | None] = {}
    count: int | None = None
    min_created_at: int | None = None  # epoch ms
    max_queue_wait_ms: int | None = None
    max_total_latency_ms: int | None = None


class GetWorkflowAggregatesResponse(Response, kw_only=True):
    output: list[WorkflowAggregateOutput] | None = None


# --- get_step_aggregates (5.14) --------------------------------------------


class StepAggregatesBody(_Body, kw_only=True):
    group_by_function_name: bool = False
    group_by_status: bool = False  # status is derived: SUCCESS or ERROR
    select_count: bool = False
    select_max_duration_ms: bool = False
    time_bucket_size_ms: int | None = None  # buckets on completed_at
    status: list[str] | None = None
    function_name: list[str] | None = None
    workflow_id_prefix: list[str] | None = None
    completed_after: str | None = None
    completed_before: str | None = None
    application_name: list[str] | None = None


class GetStepAggregatesRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_step_aggregates"
    type: str = "get_step_aggregates"
    body: StepAggregatesBody


class StepAggregateOutput(_Output, kw_only=True):
    group: dict[str, str | None] = {}  # function_name | status | time_bucket
    count: int | None = None
    max_duration_ms: int | None = None


class GetStepAggregatesResponse(Response, kw_only=True):
    output: list[StepAggregateOutput] | None = None


# --- get_metrics (5.15) ----------------------------------------------------


class GetMetricsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_metrics"
    type: str = "get_metrics"
    start_time: str  # ISO, +00:00; window is [start, end)
    end_time: str
    # The only class any SDK knows; another gets metrics [] and an error.
    metric_class: str = "workflow_step_count"
    application_name: list[str] | None = None  # null: this application only


class MetricOutput(_Output, kw_only=True):
    """One entry of ``metrics``, as :func:`relay_es.protocol.metrics.samples` reads it."""

    metric_type: str  # workflow_count (per workflow name) or step_count
    metric_name: str
    value: int


# Entries of one get_metrics answer held at all (relay_es.protocol.metrics looks at the first 20,000): an
# unread entry costs some 56 bytes however short it is ("0," is two), so a 128 MiB frame of them would
# have held 3.5 GB; past this many the answer is refused whole.
MAX_METRIC_ENTRIES = 200_000


class GetMetricsResponse(Response, kw_only=True):
    # Each entry as the executor sent it (valid JSON, not read yet): relay_es.protocol.metrics reads the
    # entries one by one as MetricOutput and drops one that is not (a null name, a value of 3.0, true or
    # 1e400), so a bad entry costs that sample, not the window's answer.
    metrics: Annotated[list[msgspec.Raw], msgspec.Meta(max_length=MAX_METRIC_ENTRIES)] | None = None


# --- alert (5.17) ----------------------------------------------------------


class AlertRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "alert"
    type: str = "alert"
    name: str  # rule type: WorkflowFailure, SlowQueue, UnresponsiveApplication
    message: str
    metadata: dict[str, str]


# --- export_workflow / import_workflow (5.18) ------------------------------
#
# Data messages, refused in metadata-only mode. The blob is opaque and
# language-specific (a pickle for Python, JSON for the others): import only
# into an executor of the language that exported it. Importing into Python
# unpickles the blob, so import_workflow is a privileged operation.


class ExportWorkflowRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "export_workflow"
    type: str = "export_workflow"
    workflow_id: str
    export_children: bool  # required by Python: no default on purpose


class ExportWorkflowResponse(Response, kw_only=True):
    # base64(gzip(...)); an unknown ID is null plus a traceback in error_message.
    serialized_workflow: str | None = None


class ImportWorkflowRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "import_workflow"
    type: str = "import_workflow"
    serialized_workflow: str


# --- schedules (5.19) ------------------------------------------------------


class ListSchedulesBody(_Body, kw_only=True):
    status: StrOrList | None = None  # ACTIVE | PAUSED
    workflow_name: StrOrList | None = None
    schedule_name_prefix: StrOrList | None = None
    application_name: StrOrList | None = None
    load_context: bool = True


class ListSchedulesRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_schedules"
    type: str = "list_schedules"
    body: ListSchedulesBody  # required by Python


class ScheduleOutput(_Output, kw_only=True):
    schedule_name: str
    schedule_id: str | None = None
    workflow_name: str | None = None
    workflow_class_name: str | None = None
    schedule: str | None = None  # the cron expression
    status: str | None = None  # ACTIVE | PAUSED
    context: str | None = None  # display string; null unless load_context
    last_fired_at: str | None = None
    automatic_backfill: bool | None = None
    cron_timezone: str | None = None
    queue_name: str | None = None
    application_name: str | None = None


class ListSchedulesResponse(Response, kw_only=True):
    output: list[ScheduleOutput] | None = None


class GetScheduleRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_schedule"
    type: str = "get_schedule"
    schedule_name: str
    load_context: bool = True


class GetScheduleResponse(Response, kw_only=True):
    output: ScheduleOutput | None = None


class PauseScheduleRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "pause_schedule"
    type: str = "pause_schedule"
    schedule_name: str


class ResumeScheduleRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "resume_schedule"
    type: str = "resume_schedule"
    schedule_name: str


class BackfillScheduleRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "backfill_schedule"
    type: str = "backfill_schedule"
    schedule_name: str
    start: str  # ISO, +00:00
    end: str


class BackfillScheduleResponse(Response, kw_only=True):
    workflow_ids: list[str] | None = None


class TriggerScheduleRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "trigger_schedule"
    type: str = "trigger_schedule"
    schedule_name: str


class TriggerScheduleResponse(Response, kw_only=True):
    workflow_id: str | None = None

    def __post_init__(self) -> None:
        _names_a_workflow(self.workflow_id, self.error_message)

    @property
    def failed(self) -> bool:
        # No workflow started (null): the trigger did not happen (audited as failed, not
        # succeeded and then a 502).
        return self.error_message is not None or not self.workflow_id


# --- application versions (5.20) -------------------------------------------


class ListApplicationVersionsRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_application_versions"
    type: str = "list_application_versions"


class ApplicationVersionOutput(_Output, kw_only=True):
    version_id: str
    version_name: str
    version_timestamp: int | None = None  # epoch ms as an int; latest = highest
    created_at: int | None = None  # epoch ms as an int


class ListApplicationVersionsResponse(Response, kw_only=True):
    output: list[ApplicationVersionOutput] | None = None


class SetLatestApplicationVersionRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "set_latest_application_version"
    type: str = "set_latest_application_version"
    version_name: str


# --- queues (5.21) ---------------------------------------------------------


class ListQueuesBody(_Body, kw_only=True):
    application_name: StrOrList | None = None


class ListQueuesRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "list_queues"
    type: str = "list_queues"
    # Optional on the wire, but always sent: harmless to SDKs that predate it.
    body: ListQueuesBody = msgspec.field(default_factory=ListQueuesBody)


class QueueOutput(_Output, kw_only=True):
    name: str
    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate_limit_max: int | None = None
    # Floats: Go and JS write 1.0 as ``1``, which msgspec accepts for a float.
    rate_limit_period_sec: float | None = None
    priority_enabled: bool | None = None  # always true in Python 3.2
    partition_queue: bool | None = None
    polling_interval_sec: float | None = None
    application_name: str | None = None
    # Newer SDKs only.
    partition_concurrency: int | None = None
    partition_worker_concurrency: int | None = None
    partition_rate_limit_max: int | None = None
    partition_rate_limit_period_sec: float | None = None


class ListQueuesResponse(Response, kw_only=True):
    output: list[QueueOutput] | None = None  # [] when no queue is registered


class GetQueueRequest(Request, kw_only=True):
    TYPE: ClassVar[str] = "get_queue"
    type: str = "get_queue"
    name: str


class GetQueueResponse(Response, kw_only=True):
    output: QueueOutput | None = None


# --- registries -------------------------------------------------------------

REQUESTS: dict[str, type[Request]] = {cls.TYPE: cls for cls in (
    ExecutorInfoRequest, RecoveryRequest, ExistPendingWorkflowsRequest, RetentionRequest,
    CancelRequest, ResumeRequest, DeleteRequest, RestartRequest,
    ForkWorkflowRequest, ForkFromFailureRequest, RewindWorkflowRequest,
    ListWorkflowsRequest, ListQueuedWorkflowsRequest, GetWorkflowRequest, ListStepsRequest,
    GetWorkflowEventsRequest, GetWorkflowNotificationsRequest, GetWorkflowStreamsRequest,
    GetWorkflowAggregatesRequest, GetStepAggregatesRequest, GetMetricsRequest,
    AlertRequest, ExportWorkflowRequest, ImportWorkflowRequest,
    ListSchedulesRequest, GetScheduleRequest, PauseScheduleRequest, ResumeScheduleRequest,
    BackfillScheduleRequest, TriggerScheduleRequest,
    ListApplicationVersionsRequest, SetLatestApplicationVersionRequest,
    ListQueuesRequest, GetQueueRequest,
)}

# Response class by wire type. Types whose only payload is ``success`` share
# :class:`SuccessResponse`.
RESPONSES: dict[str, type[Response]] = {
    **CORE_RESPONSES,
    "cancel": SuccessResponse,
    "resume": SuccessResponse,
    "delete": SuccessResponse,
    "restart": SuccessResponse,
    "fork_workflow": ForkWorkflowResponse,
    "fork_from_failure": ForkFromFailureResponse,
    "rewind_workflow": SuccessResponse,
    "list_workflows": ListWorkflowsResponse,
    "list_queued_workflows": ListWorkflowsResponse,
    "get_workflow": GetWorkflowResponse,
    "list_steps": ListStepsResponse,
    "get_workflow_events": GetWorkflowEventsResponse,
    "get_workflow_notifications": GetWorkflowNotificationsResponse,
    "get_workflow_streams": GetWorkflowStreamsResponse,
    "get_workflow_aggregates": GetWorkflowAggregatesResponse,
    "get_step_aggregates": GetStepAggregatesResponse,
    "get_metrics": GetMetricsResponse,
    "alert": SuccessResponse,
    "export_workflow": ExportWorkflowResponse,
    "import_workflow": SuccessResponse,
    "list_schedules": ListSchedulesResponse,
    "get_schedule": GetScheduleResponse,
    "pause_schedule": SuccessResponse,
    "resume_schedule": SuccessResponse,
    "backfill_schedule": BackfillScheduleResponse,
    "trigger_schedule": TriggerScheduleResponse,
    "list_application_versions": ListApplicationVersionsResponse,
    "set_latest_application_version": SuccessResponse,
    "list_queues": ListQueuesResponse,
    "get_queue": GetQueueResponse,
}


def decode_response_for(type_name: str, data: str | bytes) -> Response:
    """Decode an executor's answer to a request of wire type ``type_name``.

    A type Relay does not know decodes to the generic
    :class:`~relay_es.protocol.messages.UnknownTypeResponse` (envelope plus
    ``error_message``), the shape of every SDK's "Unknown message type" reply.
    Raises ``msgspec.DecodeError`` / ``msgspec.ValidationError`` (both
    ``ValueError``) on a frame that does not fit.
    """
    return decode_response(data, RESPONSES.get(type_name, UnknownTypeResponse))
