"""Request and response bodies of the Conductor API 2.0.0 workflow, queue, schedule and version
operations, written from the reference (``../shared/reference/conductor-openapi-3.1.json``,
components/schemas; not vendored).

Field names are the reference's (``rename="camel"``); nullability is the reference's:

* A response field the reference types ``["string", "null"]`` is ``str | None`` with no
  default, so it is always sent, as ``null`` when there is no value. A field it requires but
  does not make nullable (``Workflow.createdAt``, ``Queue.pollingIntervalSecs``) has a plain
  type. A field it neither requires nor makes nullable (``WorkflowAggregate.count``) is
  ``UNSET`` when there is no value, and then omitted.
* Request bodies decode strictly (:func:`decode`): no conversion between JSON types, an unknown
  field refused (``additionalProperties: false``), ``null`` refused where the reference does
  not allow it (only the filter lists of ``WorkflowSearchBody`` and ``WorkflowAggregatesBody``
  are nullable), and a field not sent stays ``UNSET``, so a decoded body encodes back to the
  same JSON (but for the empty strings of the next point). Each accepts the ``$schema`` link the
  reference lists (and ignores it).
* An empty string, on which the reference is silent (no ``minLength``): an optional ID or name
  that, left out, has a meaning of its own (:data:`OptionalText`: a fork's ``newWorkflowId``, the
  executor picks one; ``appVersion``, the workflow's own; ``queueName``, the one it had;
  ``queuePartitionKey``, none) is left out (``UNSET``) when sent as ``""``, as a Go client's zero
  value would be (``_Body.__post_init__``); every other ID or name -- a required one
  (``versionName``), an item of a bulk action's ``workflowIds``, ``fromStepName`` (which picks
  the starting point: left out, it would be another one) -- is refused empty (:data:`Name`). A
  filter value may be empty (``user: [""]`` matches a TypeScript workflow started by no user).

Hostile input is bounded here, before any executor sees it (the refusal names the field):

* an ID, name, prefix, status or version is the executor's application's own text
  (:data:`EXECUTOR_TEXT`, the rule of such an ID in the path too, ``guard.valid_text``; ADR 15):
  passed on as the executor has it -- a tab, a no-break space, a joined emoji, a bidirectional
  mark --, refused only for what cannot be sent or stored: a NUL (Postgres text), a lone surrogate
  (no UTF-8 holds one; msgspec reads none from JSON either) and more than :data:`MAX_TEXT_BYTES`
  bytes of UTF-8 (:func:`text_fault`). Relay's own names in a body (a role, a receiving
  application, an autoscaled queue, which Relay keeps) stay printable (:data:`PRINTABLE`). What
  carries a caller's payload (an ``attributes`` filter, an imported workflow, an alert rule's
  metadata) is not text of either kind and is not checked. Text is JSON here and in every
  answer; where Relay writes it in prose (a problem's detail, a log line, the audit log's
  record) it is escaped there;
* :data:`MAX_FILTER_VALUES` values in one filter list, :data:`MAX_IDS` workflow IDs in a bulk
  action or an ID filter, :data:`MAX_ATTRIBUTES` keys in an ``attributes`` filter;
* date-times match RFC 3339 (:data:`RFC3339`) and are at most 64 characters;
* ``limit``, ``offset`` and step numbers are not negative; ``timeBucketSizeMs`` is positive;
  integers fit the reference's ``int32`` / ``int64``;
* a bulk action names at least one workflow; ``BulkForkFromFailureBody`` names at most one
  starting point (none means ``fromLastFailure``);
* :data:`MAX_SERIALIZED_WORKFLOW` characters in an imported workflow (the request body cap of
  the route that takes it must allow that much).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import msgspec.inspect as mi
from msgspec import UNSET, Meta, UnsetType

# UTF-8 bytes of one ID or name an executor's application chose (EXECUTOR_TEXT). DBOS bounds none
# (a 5,000-character workflow id ran and was listed); a body takes the whole bound, a path as much as
# fits in h11's 16 KiB request head: 8 KiB of ASCII, about 5 KiB of other bytes (each written %XX).
MAX_TEXT_BYTES = 8 * 1024
MAX_TEXT = MAX_TEXT_BYTES  # characters, checked first (msgspec's max_length): a character is 1 to 4 bytes
MAX_FILTER_VALUES = 1000
MAX_IDS = 10_000
MAX_ATTRIBUTES = 100
MAX_SERIALIZED_WORKFLOW = 64 * 1024 * 1024

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# RFC 3339 section 5.6 date-time (``T`` or ``t``; ``Z``, ``z`` or a numeric offset required).
RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"

# Marks a string of a body that is the executor's application's text (see the module's docstring):
# :func:`decode` checks it with :func:`text_fault`. Not in the OpenAPI document.
EXECUTOR_TEXT = {"executorText": True}
TEXT_RULE = f"any text without NUL or a lone surrogate, at most {MAX_TEXT_BYTES} bytes of UTF-8"
# Marks a string of a body that names something of Relay's own and must be printable
# (``str.isprintable``: no control, format -- bidirectional, zero-width --, separator, surrogate,
# private-use or unassigned character, and no space but U+0020); :func:`decode` checks it.
PRINTABLE = {"printable": True}
EMPTY_IS_UNSET = {"emptyIsUnset": True}  # marks an OptionalText; not in the OpenAPI document either
NOT_PRINTABLE = ("Expected printable text (no control, format, separator, private-use or unassigned character, "
                 "no space but ' ')")

Text = Annotated[str, Meta(max_length=MAX_TEXT, extra=EXECUTOR_TEXT)]
Name = Annotated[str, Meta(min_length=1, max_length=MAX_TEXT, extra=EXECUTOR_TEXT)]  # an ID or name never empty
# An optional ID or name whose "" a body reads as not given (UNSET): see the module's docstring.
OptionalText = Annotated[str, Meta(max_length=MAX_TEXT, extra=EXECUTOR_TEXT | EMPTY_IS_UNSET)]
Values = Annotated[list[Text], Meta(max_length=MAX_FILTER_VALUES)]
Ids = Annotated[list[Text], Meta(max_length=MAX_IDS)]
BulkIds = Annotated[list[Name], Meta(min_length=1, max_length=MAX_IDS)]
DateTime = Annotated[str, Meta(max_length=64, pattern=RFC3339)]
Attributes = Annotated[dict[str, Any], Meta(max_length=MAX_ATTRIBUTES)]
Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]  # limit, offset
StepNumber = Annotated[int, Meta(ge=0, le=INT32_MAX)]
BucketMs = Annotated[int, Meta(ge=1, le=INT64_MAX)]


class _Body(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """A request body: closed, every field optional unless a subclass says so. An
    :data:`OptionalText` field sent as ``""`` is ``UNSET``: not given."""

    schema: Annotated[str, Meta(max_length=MAX_TEXT)] | UnsetType = msgspec.field(name="$schema", default=UNSET)

    def __post_init__(self) -> None:
        for name in empty_is_unset(type(self)):
            if getattr(self, name) == "":
                setattr(self, name, UNSET)


class _Answer(msgspec.Struct, rename="camel", kw_only=True):
    """A response body (or an element of one): encoded with every field but the ``UNSET`` ones."""


B = TypeVar("B", bound=_Body)


def text_fault(value: str) -> str | None:
    """Why ``value`` cannot be an ID or a name of the executor's application (:data:`TEXT_RULE`),
    said with the rule, without the value; None when it can."""
    if "\x00" in value:
        fault = "holds a NUL"
    else:
        try:
            size = len(value) if value.isascii() else len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return f"holds a lone surrogate; an ID or name is {TEXT_RULE}"
        if size <= MAX_TEXT_BYTES:
            return None
        fault = f"is {size} bytes of UTF-8"
    return f"{fault}; an ID or name is {TEXT_RULE}"


def decode(raw: bytes | str, cls: type[B]) -> B:
    """``raw`` as request body ``cls``, strictly. Raises ``msgspec.ValidationError`` naming the
    field (``- at `$.workflowIds[3]```) or ``msgspec.DecodeError`` for what is not JSON. A
    string marked :data:`EXECUTOR_TEXT` or :data:`PRINTABLE` that breaks its rule is refused the
    same way, after decoding."""
    body = msgspec.json.decode(raw, type=cls, strict=True)
    refused = refused_text(body, _type_info(cls), "$")
    if refused is not None:
        where, why = refused
        raise msgspec.ValidationError(f"{why} - at `{where}`")
    return body


@functools.cache  # one entry per body class: the classes a module defines
def _type_info(cls: type) -> mi.Type:
    return mi.type_info(cls)


@functools.cache  # one entry per body class
def empty_is_unset(cls: type) -> tuple[str, ...]:
    """The attribute names of ``cls``'s :data:`OptionalText` fields."""
    return tuple(f.name for f in _type_info(cls).fields if _marked_empty_is_unset(f.type))


def _marked_empty_is_unset(t: mi.Type) -> bool:
    if isinstance(t, mi.UnionType):
        return any(_marked_empty_is_unset(member) for member in t.types)
    return isinstance(t, mi.Metadata) and t.extra is not None and bool(t.extra.get("emptyIsUnset"))


def refused_text(value: Any, t: mi.Type, at: str) -> tuple[str, str] | None:
    """Where in ``value``, decoded as ``t``, the first string marked :data:`EXECUTOR_TEXT` or
    :data:`PRINTABLE` breaks its rule (a path below ``at``: ``$.workflowIds[3]``), and why; or
    None. Walks what ``t`` describes as structs, lists and unions of them; dicts and ``Any`` are
    payloads and are not entered."""
    if isinstance(t, mi.Metadata):
        if isinstance(value, str) and t.extra is not None:
            if t.extra.get("executorText") and (fault := text_fault(value)) is not None:
                return at, fault
            if t.extra.get("printable") and not value.isprintable():
                return at, NOT_PRINTABLE
        return refused_text(value, t.type, at)
    if isinstance(t, mi.UnionType):
        return next((w for member in t.types if (w := refused_text(value, member, at)) is not None), None)
    if isinstance(t, mi.ListType) and isinstance(value, list):
        return next((w for i, item in enumerate(value)
                     if (w := refused_text(item, t.item_type, f"{at}[{i}]")) is not None), None)
    if isinstance(t, mi.StructType) and isinstance(value, t.cls):
        return next((w for f in t.fields
                     if (w := refused_text(getattr(value, f.name), f.type, f"{at}.{f.encode_name}")) is not None),
                    None)
    return None


# --- workflows ---------------------------------------------------------------


class Workflow(_Answer, kw_only=True):
    """Every key required; all but six nullable."""

    workflow_id: str
    status: str  # open set: ENQUEUED, DELAYED, PENDING, SUCCESS, ERROR, MAX_RECOVERY_ATTEMPTS_EXCEEDED, CANCELLED
    workflow_name: str | None
    workflow_class: str | None
    workflow_config: str | None
    user: str | None
    assumed_role: str | None
    roles: str | None
    input: str | None
    output: str | None
    error: str | None
    created_at: str
    updated_at: str
    queue_name: str | None
    app_version: str | None
    executor_id: str | None
    timeout_ms: int | None
    deadline: str | None
    deduplication_id: str | None
    priority: int
    queue_partition_key: str | None
    forked_from: str | None
    was_forked_from: bool
    parent_workflow_id: str | None
    dequeued_at: str | None
    delay_until: str | None
    completed_at: str | None
    attributes: str | None
    schedule_name: str | None
    application_name: str | None


class _Filters(_Body, kw_only=True):
    """The workflow filters ``WorkflowSearchBody`` and ``WorkflowAggregatesBody`` share."""

    workflow_ids: Ids | None | UnsetType = UNSET
    workflow_name: Values | None | UnsetType = UNSET
    user: Values | None | UnsetType = UNSET
    status: Values | None | UnsetType = UNSET
    app_version: Values | None | UnsetType = UNSET
    executor_id: Values | None | UnsetType = UNSET
    queue_name: Values | None | UnsetType = UNSET
    forked_from: Values | None | UnsetType = UNSET
    parent_workflow_id: Values | None | UnsetType = UNSET
    workflow_id_prefix: Values | None | UnsetType = UNSET
    schedule_name: Values | None | UnsetType = UNSET
    attributes: Attributes | UnsetType = UNSET
    start_time: DateTime | UnsetType = UNSET
    end_time: DateTime | UnsetType = UNSET
    completed_after: DateTime | UnsetType = UNSET
    completed_before: DateTime | UnsetType = UNSET
    dequeued_after: DateTime | UnsetType = UNSET
    dequeued_before: DateTime | UnsetType = UNSET
    was_forked_from: bool | UnsetType = UNSET
    has_parent: bool | UnsetType = UNSET


class WorkflowSearchBody(_Filters, kw_only=True):
    queues_only: bool | UnsetType = UNSET
    limit: Count | UnsetType = UNSET
    offset: Count | UnsetType = UNSET
    sort_desc: bool | UnsetType = UNSET
    load_input: bool | UnsetType = UNSET
    load_output: bool | UnsetType = UNSET


class Step(_Answer, kw_only=True):
    step_id: int
    step_name: str
    output: str | None
    error: str | None
    child_workflow_id: str | None
    started_at: str | None
    completed_at: str | None


class Event(_Answer, kw_only=True):
    key: str
    value: str


class Notification(_Answer, kw_only=True):
    topic: str | None
    message: str
    created_at: str
    consumed: bool


class StreamEntry(_Answer, kw_only=True):
    key: str
    values: list[str]


class WorkflowAggregate(_Answer, kw_only=True):
    group: dict[str, str | None]
    count: int | UnsetType = UNSET
    min_created_at: str | UnsetType = UNSET
    max_queue_wait_ms: int | UnsetType = UNSET
    max_total_latency_ms: int | UnsetType = UNSET


class WorkflowAggregatesBody(_Filters, kw_only=True):
    group_by_status: bool | UnsetType = UNSET
    group_by_workflow_name: bool | UnsetType = UNSET
    group_by_queue_name: bool | UnsetType = UNSET
    group_by_executor_id: bool | UnsetType = UNSET
    group_by_app_version: bool | UnsetType = UNSET
    group_by_application_name: bool | UnsetType = UNSET
    select_count: bool | UnsetType = UNSET
    select_min_created_at: bool | UnsetType = UNSET
    select_max_queue_wait_ms: bool | UnsetType = UNSET
    select_max_total_latency_ms: bool | UnsetType = UNSET
    time_bucket_size_ms: BucketMs | UnsetType = UNSET


class StepAggregate(_Answer, kw_only=True):
    group: dict[str, str | None]
    count: int | UnsetType = UNSET
    max_duration_ms: int | UnsetType = UNSET


class StepAggregatesBody(_Body, kw_only=True):
    group_by_function_name: bool | UnsetType = UNSET
    group_by_status: bool | UnsetType = UNSET
    select_count: bool | UnsetType = UNSET
    select_max_duration_ms: bool | UnsetType = UNSET
    time_bucket_size_ms: BucketMs | UnsetType = UNSET
    status: Values | UnsetType = UNSET  # SUCCESS, ERROR
    step_name: Values | UnsetType = UNSET
    workflow_id_prefix: Values | UnsetType = UNSET
    completed_after: DateTime | UnsetType = UNSET
    completed_before: DateTime | UnsetType = UNSET


# --- actions -----------------------------------------------------------------


class CancelWorkflowInputBody(_Body, kw_only=True):
    cancel_children: bool | UnsetType = UNSET


class ResumeWorkflowInputBody(_Body, kw_only=True):
    queue_name: OptionalText | UnsetType = UNSET


class ForkWorkflowInputBody(_Body, kw_only=True):
    start_step: StepNumber | UnsetType = UNSET
    new_workflow_id: OptionalText | UnsetType = UNSET
    app_version: OptionalText | UnsetType = UNSET
    queue_name: OptionalText | UnsetType = UNSET
    queue_partition_key: OptionalText | UnsetType = UNSET


class ForkWorkflowOutputBody(_Answer, kw_only=True):
    workflow_id: str


class BulkCancelInputBody(_Body, kw_only=True):
    workflow_ids: BulkIds
    cancel_children: bool | UnsetType = UNSET


class BulkResumeInputBody(_Body, kw_only=True):
    workflow_ids: BulkIds
    queue_name: OptionalText | UnsetType = UNSET


class BulkDeleteInputBody(_Body, kw_only=True):
    workflow_ids: BulkIds
    delete_children: bool | UnsetType = UNSET


class BulkForkFromFailureBody(_Body, kw_only=True):
    workflow_ids: BulkIds
    app_version: OptionalText | UnsetType = UNSET
    queue_name: OptionalText | UnsetType = UNSET
    queue_partition_key: OptionalText | UnsetType = UNSET
    from_last_failure: bool | UnsetType = UNSET
    from_last_step: bool | UnsetType = UNSET
    from_step: StepNumber | UnsetType = UNSET
    from_step_name: Name | UnsetType = UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        chosen = [self.from_last_failure is True, self.from_last_step is True,
                  self.from_step is not UNSET, self.from_step_name is not UNSET]
        if sum(chosen) > 1:
            raise ValueError("fromLastFailure, fromLastStep, fromStep and fromStepName are mutually exclusive")


class BulkForkFromFailureOutputBody(_Answer, kw_only=True):
    workflow_ids: list[str]


class ExportWorkflowOutputBody(_Answer, kw_only=True):
    serialized_workflow: str  # opaque: base64 of gzip of a pickle (Python) or of JSON


class ImportWorkflowInputBody(_Body, kw_only=True):
    serialized_workflow: Annotated[str, Meta(max_length=MAX_SERIALIZED_WORKFLOW)]


# --- queues, schedules, versions ---------------------------------------------


class Queue(_Answer, kw_only=True):
    name: str
    concurrency: int | None
    worker_concurrency: int | None
    rate_limit_max: int | None
    rate_limit_period_secs: float | None
    priority_enabled: bool
    partition_queue: bool
    polling_interval_secs: float
    application_name: str | None


class Schedule(_Answer, kw_only=True):
    schedule_id: str
    schedule_name: str
    workflow_name: str
    workflow_class: str | None
    cron_expression: str
    status: str  # open set: ACTIVE, PAUSED
    context: str | None
    last_fired_at: str | None
    automatic_backfill: bool
    cron_timezone: str | None
    application_name: str | None


class BackfillInputBody(_Body, kw_only=True):
    start_time: DateTime
    end_time: DateTime


class BackfillOutputBody(_Answer, kw_only=True):
    workflow_ids: list[str]


class TriggerOutputBody(_Answer, kw_only=True):
    workflow_id: str


class ApplicationVersion(_Answer, kw_only=True):
    version_id: str
    version_name: str
    version_timestamp: str
    created_at: str


class PatchLatestVersionInputBody(_Body, kw_only=True):
    version_name: Name


# --- autoscaling -------------------------------------------------------------

RolloutCount = Annotated[int, Meta(ge=0, le=1_000_000)]


class RolloutPolicy(msgspec.Struct, rename="camel", kw_only=True, forbid_unknown_fields=True):
    """Inside an ``AutoscalePolicy`` (both ways): closed, without the ``$schema`` link."""

    max_old_application_versions: RolloutCount | UnsetType = UNSET
    max_executors_for_old_application_versions: RolloutCount | UnsetType = UNSET


class AutoscalePolicy(_Body, kw_only=True):
    queue: Annotated[str, Meta(min_length=1, max_length=256, extra=PRINTABLE)]
    rollout: RolloutPolicy | UnsetType = UNSET


class PolicyOutputBody(_Answer, kw_only=True):
    policy: AutoscalePolicy


class QueueAutoscale(_Answer, kw_only=True):
    application_version: str
    is_latest: bool
    desired_executors: int
    queue_depth: int
    observed_at: int
    queue_name: str | UnsetType = UNSET


RULE_TYPE = Literal["WorkflowFailure", "SlowQueue", "UnresponsiveApplication", "ExecutorDead", "RecoveryDeferred",
                    "RecoveryFailed", "ExecutorFlapping"]  # Conductor's three, then Relay's own


class CreateAlertInputBody(_Body, kw_only=True):
    rule_type: RULE_TYPE
    rule_metadata: Any
    min_interval_secs: Annotated[int, Meta(ge=0, le=2**31 - 1)] | UnsetType = UNSET
    receiving_app_name: Annotated[str, Meta(min_length=1, max_length=256, extra=PRINTABLE)] | UnsetType = UNSET


class AlertingRule(_Answer, kw_only=True):
    id: str
    app_id: str
    receiving_app_id: str
    rule_type: str
    rule_metadata: Any
    min_interval_secs: int | None
    last_fired_at: str | None


class RoleOutput(_Answer, kw_only=True):
    name: str
    is_global: bool  # a built-in role: the same in every org
    permissions: list[str]


class CreateRoleInputBody(_Body, kw_only=True):
    name: Annotated[str, Meta(extra=PRINTABLE)]  # its alphabet and length: the role's own check
    permissions: list[Annotated[str, Meta(extra=PRINTABLE)]] | None | UnsetType = UNSET


class CreateRoleOutputBody(_Answer, kw_only=True):
    name: str
    permissions: list[str]


class Organization(_Answer, kw_only=True):
    id: str
    name: str
    created_at: str
    subscription_plan: str
    max_database_instances: int
    max_apps: int
    max_vms: int
    default_rds_instance_class_type: str
    max_team_members: int
    max_conductor_apps: int
    audit_log_retention_days: int


class UpdateOrgInputBody(_Body, kw_only=True):
    new_name: Annotated[str, Meta(min_length=3, max_length=30, pattern="^[a-z0-9_]+$")] | UnsetType = UNSET
    audit_log_retention_days: Annotated[int, Meta(ge=7, le=3650)] | UnsetType = UNSET


class OrgMembers(_Answer, kw_only=True):
    org_name: str
    users: dict[str, RoleOutput]


class Member(_Answer, kw_only=True):
    id: str
    org_id: str
    email: str
    name: str
    given_name: str
    family_name: str
    company: str


class UserProfile(_Answer, kw_only=True):
    name: str
    email: str
    org_name: str
    org_id: str
    subscription_plan: str
    created_at: str
    role: RoleOutput | UnsetType = UNSET
    is_dbos_admin: bool | UnsetType = UNSET  # DBOS's own staff: never in Relay


class GenerateSecretOutputBody(_Answer, kw_only=True):
    secret: str


# Component schema name -> class, for every body this module defines.
SCHEMAS: dict[str, type[msgspec.Struct]] = {cls.__name__: cls for cls in (
    Workflow, WorkflowSearchBody, Step, Event, Notification, StreamEntry,
    WorkflowAggregate, WorkflowAggregatesBody, StepAggregate, StepAggregatesBody,
    CancelWorkflowInputBody, ResumeWorkflowInputBody, ForkWorkflowInputBody, ForkWorkflowOutputBody,
    BulkCancelInputBody, BulkResumeInputBody, BulkDeleteInputBody,
    BulkForkFromFailureBody, BulkForkFromFailureOutputBody,
    ExportWorkflowOutputBody, ImportWorkflowInputBody,
    Queue, Schedule, BackfillInputBody, BackfillOutputBody, TriggerOutputBody,
    ApplicationVersion, PatchLatestVersionInputBody,
    RolloutPolicy, AutoscalePolicy, PolicyOutputBody, QueueAutoscale,
    CreateAlertInputBody, AlertingRule, RoleOutput, CreateRoleInputBody, CreateRoleOutputBody,
    Organization, UpdateOrgInputBody, OrgMembers, Member, UserProfile, GenerateSecretOutputBody,
)}
