"""REST ⇄ executor mapping (``relay_es/adapters/rest/conductor/mapping.py``).

Executor frames are written as each SDK sends them (Python: every key, null for none; TypeScript:
keys of missing values omitted; older SDKs: fewer keys), decoded with the catalogue, mapped, and
the answer checked against the reference's component schema, date-times included (the schema
checker does not check ``format``, so :func:`check` does). Requests are built from REST bodies and
query parameters and checked on the wire: every filter under its executor name (section 10.4),
every key the oldest SDK needs present. Times convert both ways with their edge cases; bad
values fail with an error naming the field.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import msgspec
import pytest

from relay_es.adapters.rest.conductor import mapping as mp
from relay_es.adapters.rest.conductor import models as m
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol import catalogue as c
from relay_es.protocol.messages import encode
from tests.conductor_schema import check_schema, document

RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def check(name: str, value: msgspec.Struct) -> dict[str, Any]:
    """``value`` encoded, validated against component ``name``, its date-times RFC 3339."""
    out = json.loads(msgspec.json.encode(value))
    check_schema(name, out)
    for prop, spec in document()["components"]["schemas"][name]["properties"].items():
        if spec.get("format") == "date-time" and out.get(prop) is not None:
            assert RFC3339.fullmatch(out[prop]), f"{name}.{prop}: {out[prop]!r}"
            datetime.fromisoformat(out[prop])
    return out


def frame(type_name: str, **fields: Any) -> str:
    return json.dumps({"type": type_name, "request_id": "r1", **fields})


def wire(request: msgspec.Struct) -> dict[str, Any]:
    return json.loads(encode(request))


# --- workflows, both dialects ----------------------------------------------------

PYTHON_WORKFLOW = {  # the protocol reference's live example (section 5.9), Python 3.2.0
    "WorkflowUUID": "9a8a3952-97d5-44d0-9e72-b9da22cef2fe", "Status": "SUCCESS", "WorkflowName": "probe_workflow",
    "WorkflowClassName": None, "WorkflowConfigName": None, "AuthenticatedUser": None, "AssumedRole": None,
    "AuthenticatedRoles": None, "Input": "{'args': (20,), 'kwargs': {}}", "Output": "42", "Error": None,
    "CreatedAt": "1796040658645", "UpdatedAt": "1796040658688", "QueueName": None,
    "ApplicationVersion": "1d6ccc5e8501c9d77084185b3c54db01", "ExecutorID": "365b48ef-ca98-472b-a11c-13190ad2706b",
    "WorkflowTimeoutMS": None, "WorkflowDeadlineEpochMS": None, "DeduplicationID": None, "Priority": "0",
    "QueuePartitionKey": None, "ForkedFrom": None, "WasForkedFrom": False, "ParentWorkflowID": None,
    "DequeuedAt": None, "DelayUntilEpochMS": None, "CompletedAt": "1796040658688", "Attributes": None,
    "ScheduleName": None, "ApplicationName": "relay-probe-app"}

# TypeScript 5.x: undefined values are dropped by JSON.stringify.
TS_WORKFLOW = {k: v for k, v in PYTHON_WORKFLOW.items() if v is not None} | {"Input": "[ 20 ]"}

# A queued, timed, forked child (every optional value present).
FULL_WORKFLOW = PYTHON_WORKFLOW | {
    "Status": "ENQUEUED", "WorkflowClassName": "Billing", "WorkflowConfigName": "cfg", "AuthenticatedUser": "alice",
    "AssumedRole": "admin", "AuthenticatedRoles": "['admin']", "Error": None, "QueueName": "payments",
    "WorkflowTimeoutMS": "60000", "WorkflowDeadlineEpochMS": "1796040718645", "DeduplicationID": "d1",
    "Priority": "5", "QueuePartitionKey": "tenant-1", "ForkedFrom": "w0", "WasForkedFrom": True,
    "ParentWorkflowID": "parent", "DequeuedAt": "1796040658650", "DelayUntilEpochMS": "1796040660000",
    "CompletedAt": None, "Attributes": '{"tenant": "t1"}', "ScheduleName": "nightly"}

# Python 0.27: the first protocol, with only these keys.
OLD_PYTHON_WORKFLOW = {k: PYTHON_WORKFLOW[k] for k in (
    "WorkflowUUID", "Status", "WorkflowName", "WorkflowClassName", "WorkflowConfigName", "AuthenticatedUser",
    "AssumedRole", "AuthenticatedRoles", "Input", "Output", "Error", "CreatedAt", "UpdatedAt", "QueueName",
    "ApplicationVersion", "ExecutorID")}
# TypeScript 1.x: the same, plus a "Request" key since dropped.
OLD_TS_WORKFLOW = {k: v for k, v in OLD_PYTHON_WORKFLOW.items() if v is not None} | {"Request": "{}"}


@pytest.mark.parametrize("row", [PYTHON_WORKFLOW, TS_WORKFLOW, FULL_WORKFLOW, OLD_PYTHON_WORKFLOW, OLD_TS_WORKFLOW],
                         ids=["python", "typescript", "full", "python-0.27", "typescript-1.x"])
def test_a_listed_workflow_from_either_dialect_is_a_valid_workflow(row: dict[str, Any]) -> None:
    r = c.decode_response_for("list_workflows", frame("list_workflows", output=[row], error_message=None))
    assert isinstance(r, c.ListWorkflowsResponse)
    (out,) = [check("Workflow", w) for w in mp.workflows_out(r)]
    assert out["workflowId"] == row["WorkflowUUID"]
    assert out["createdAt"] == "2026-11-30T12:10:58.645Z"
    assert out["updatedAt"] == "2026-11-30T12:10:58.688Z"


def test_the_python_and_typescript_renderings_of_one_workflow_map_alike() -> None:
    py, ts = (mp.workflow_out(msgspec.convert(row, c.WorkflowsOutput)) for row in (PYTHON_WORKFLOW, TS_WORKFLOW))
    assert msgspec.structs.replace(ts, input=py.input) == py


def test_every_field_of_a_workflow_maps_as_section_10_4_says() -> None:
    w = mp.workflow_out(msgspec.convert(FULL_WORKFLOW, c.WorkflowsOutput))
    assert check("Workflow", w) == {
        "workflowId": "9a8a3952-97d5-44d0-9e72-b9da22cef2fe", "status": "ENQUEUED", "workflowName": "probe_workflow",
        "workflowClass": "Billing", "workflowConfig": "cfg", "user": "alice", "assumedRole": "admin",
        "roles": "['admin']", "input": "{'args': (20,), 'kwargs': {}}", "output": "42", "error": None,
        "createdAt": "2026-11-30T12:10:58.645Z", "updatedAt": "2026-11-30T12:10:58.688Z", "queueName": "payments",
        "appVersion": "1d6ccc5e8501c9d77084185b3c54db01", "executorId": "365b48ef-ca98-472b-a11c-13190ad2706b",
        "timeoutMs": 60000, "deadline": "2026-11-30T12:11:58.645Z", "deduplicationId": "d1", "priority": 5,
        "queuePartitionKey": "tenant-1", "forkedFrom": "w0", "wasForkedFrom": True, "parentWorkflowId": "parent",
        "dequeuedAt": "2026-11-30T12:10:58.650Z", "delayUntil": "2026-11-30T12:11:00.000Z", "completedAt": None,
        "attributes": '{"tenant": "t1"}', "scheduleName": "nightly", "applicationName": "relay-probe-app"}


def test_what_an_sdk_did_not_send_gets_the_references_value() -> None:
    w = check("Workflow", mp.workflow_out(msgspec.convert(OLD_TS_WORKFLOW | {"UpdatedAt": None}, c.WorkflowsOutput)))
    assert w["priority"] == 0 and w["wasForkedFrom"] is False
    assert w["updatedAt"] == w["createdAt"]  # never updated since creation
    assert w["timeoutMs"] is None and w["deadline"] is None and w["applicationName"] is None


def test_typescripts_string_of_a_missing_value_is_no_value() -> None:
    """TypeScript writes ``String(x)`` when ``x !== undefined``: a null is ``"null"``."""
    row = TS_WORKFLOW | {"WorkflowTimeoutMS": "null", "DequeuedAt": "null", "CompletedAt": "undefined",
                         "Priority": "undefined"}
    w = check("Workflow", mp.workflow_out(msgspec.convert(row, c.WorkflowsOutput)))
    assert (w["timeoutMs"], w["dequeuedAt"], w["completedAt"], w["priority"]) == (None, None, None, 0)


def test_get_workflow_in_both_dialects() -> None:
    r = c.decode_response_for("get_workflow", frame("get_workflow", output=PYTHON_WORKFLOW, error_message=None))
    assert isinstance(r, c.GetWorkflowResponse) and r.output is not None
    check("Workflow", mp.workflow_out(r.output))
    # Unknown ID: Python output null, TypeScript no key; both no error (the route answers 404).
    for raw in (frame("get_workflow", output=None, error_message=None), frame("get_workflow")):
        unknown = c.decode_response_for("get_workflow", raw)
        assert isinstance(unknown, c.GetWorkflowResponse) and unknown.output is None and not unknown.failed


@pytest.mark.parametrize("change, field", [
    ({"CreatedAt": "yesterday"}, "CreatedAt"), ({"CreatedAt": None}, "CreatedAt"), ({"UpdatedAt": "1.5"}, "UpdatedAt"),
    ({"CompletedAt": "1e12"}, "CompletedAt"), ({"DequeuedAt": ""}, "DequeuedAt"),
    ({"WorkflowDeadlineEpochMS": "99999999999999999"}, "WorkflowDeadlineEpochMS"),
    ({"Priority": "high"}, "Priority"), ({"Priority": "2147483648"}, "Priority"), ({"WorkflowTimeoutMS": "10s"}, "WorkflowTimeoutMS"), ({"Status": None}, "Status"),
])
def test_an_unmappable_workflow_is_a_clear_error_naming_the_executors_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(mp.ExecutorReplyError) as e:
        mp.workflow_out(msgspec.convert(PYTHON_WORKFLOW | change, c.WorkflowsOutput))
    assert e.value.field == field and field in str(e.value)


@pytest.mark.parametrize("output", [
    [PYTHON_WORKFLOW | {"Priority": 0}],  # an int where the protocol has a string
    [PYTHON_WORKFLOW | {"WasForkedFrom": "no"}],
    [{"Status": "SUCCESS"}],  # no ID
    "not a list",
    [PYTHON_WORKFLOW] + [17],
])
def test_a_hostile_list_reply_is_refused_by_the_catalogue_before_mapping(output: Any) -> None:
    with pytest.raises(msgspec.ValidationError):
        c.decode_response_for("list_workflows", frame("list_workflows", output=output))


def test_an_empty_or_failed_list_maps_to_no_workflows() -> None:
    for raw in (frame("list_workflows", output=[], error_message=None), frame("list_workflows", output=None)):
        r = c.decode_response_for("list_workflows", raw)
        assert isinstance(r, c.ListWorkflowsResponse) and mp.workflows_out(r) == []


# --- steps, events, notifications, streams -------------------------------------------


def test_steps_in_both_dialects() -> None:
    python = {"function_id": 2, "function_name": "add_one", "output": "21", "error": None, "child_workflow_id": None,
              "started_at_epoch_ms": "1796040658675", "completed_at_epoch_ms": "1796040658679"}
    typescript = {"function_id": 0, "function_name": "DBOS.setEvent", "started_at_epoch_ms": "1796040658675"}
    r = c.decode_response_for("list_steps", frame("list_steps", output=[python, typescript], error_message=None))
    assert isinstance(r, c.ListStepsResponse)
    py, ts = (check("Step", s) for s in mp.steps_out(r))
    assert py == {"stepId": 2, "stepName": "add_one", "output": "21", "error": None, "childWorkflowId": None,
                  "startedAt": "2026-11-30T12:10:58.675Z", "completedAt": "2026-11-30T12:10:58.679Z"}
    assert ts == {"stepId": 0, "stepName": "DBOS.setEvent", "output": None, "error": None, "childWorkflowId": None,
                  "startedAt": "2026-11-30T12:10:58.675Z", "completedAt": None}
    with pytest.raises(mp.ExecutorReplyError, match="started_at_epoch_ms"):
        mp.step_out(c.StepOutput(function_id=1, function_name="f", started_at_epoch_ms="soon"))
    for step in (-1, 2**31):
        with pytest.raises(mp.ExecutorReplyError, match="function_id"):
            mp.step_out(c.StepOutput(function_id=step, function_name="f"))


def test_events_notifications_and_streams() -> None:
    ev = c.decode_response_for("get_workflow_events", frame(
        "get_workflow_events", events=[{"key": "k", "value": "{'a': 1}"}, {"key": "undefined-in-ts"}]))
    assert isinstance(ev, c.GetWorkflowEventsResponse)
    assert [check("Event", e) for e in mp.events_out(ev)] == [{"key": "k", "value": "{'a': 1}"},
                                                             {"key": "undefined-in-ts", "value": ""}]

    no = c.decode_response_for("get_workflow_notifications", frame("get_workflow_notifications", notifications=[
        {"topic": None, "message": "hi", "created_at_epoch_ms": 1796040658645, "consumed": True},
        {"message": "ts", "created_at_epoch_ms": 0, "consumed": False}]))
    assert isinstance(no, c.GetWorkflowNotificationsResponse)
    assert [check("Notification", n) for n in mp.notifications_out(no)] == [
        {"topic": None, "message": "hi", "createdAt": "2026-11-30T12:10:58.645Z", "consumed": True},
        {"topic": None, "message": "ts", "createdAt": "1970-01-01T00:00:00.000Z", "consumed": False}]
    with pytest.raises(mp.ExecutorReplyError, match="created_at_epoch_ms"):
        mp.notifications_out(c.GetWorkflowNotificationsResponse(
            type="get_workflow_notifications", request_id="r", notifications=[c.NotificationOutput(message="m")]))

    st = c.decode_response_for("get_workflow_streams", frame("get_workflow_streams", streams=[
        {"key": "s", "values": ["1", "2"]}, {"key": "empty"}]))
    assert isinstance(st, c.GetWorkflowStreamsResponse)
    assert [check("StreamEntry", s) for s in mp.streams_out(st)] == [{"key": "s", "values": ["1", "2"]},
                                                                     {"key": "empty", "values": []}]
    # Go answers null for an empty list; metadata-only mode answers only an error.
    for kind, key in (("get_workflow_events", "events"), ("get_workflow_streams", "streams")):
        r = c.decode_response_for(kind, frame(kind, **{key: None}))
        assert (mp.events_out(r) if key == "events" else mp.streams_out(r)) == []  # type: ignore[arg-type]


# --- aggregates ------------------------------------------------------------------------


def test_workflow_aggregates_in_both_dialects() -> None:
    python = {"group": {"status": "SUCCESS", "name": "probe_workflow"}, "count": 1, "min_created_at": None,
              "max_queue_wait_ms": None, "max_total_latency_ms": None}
    typescript = {"group": {"time_bucket": "1796040600000", "queue_name": None}, "count": 3,
                  "min_created_at": 1796040658645, "max_queue_wait_ms": 12, "max_total_latency_ms": 40}
    r = c.decode_response_for("get_workflow_aggregates", frame("get_workflow_aggregates", output=[python, typescript]))
    assert isinstance(r, c.GetWorkflowAggregatesResponse)
    py, ts = (check("WorkflowAggregate", a) for a in mp.workflow_aggregates_out(r))
    assert py == {"group": {"status": "SUCCESS", "name": "probe_workflow"}, "count": 1}
    assert ts == {"group": {"time_bucket": "1796040600000", "queue_name": None}, "count": 3,
                  "minCreatedAt": "2026-11-30T12:10:58.645Z", "maxQueueWaitMs": 12, "maxTotalLatencyMs": 40}


def test_step_aggregates() -> None:
    r = c.decode_response_for("get_step_aggregates", frame("get_step_aggregates", output=[
        {"group": {"function_name": "add_one", "status": "SUCCESS"}, "count": 2, "max_duration_ms": None},
        {"group": {}, "max_duration_ms": 7}]))
    assert isinstance(r, c.GetStepAggregatesResponse)
    assert [check("StepAggregate", a) for a in mp.step_aggregates_out(r)] == [
        {"group": {"function_name": "add_one", "status": "SUCCESS"}, "count": 2},
        {"group": {}, "maxDurationMs": 7}]


@pytest.mark.parametrize("field, value", [(f, v) for f in ("count", "max_queue_wait_ms", "max_total_latency_ms")
                                          for v in (2**63, 10**25)] + [("count", -1)])
def test_a_workflow_aggregate_out_of_int64_or_below_0_is_refused(field: str, value: int) -> None:
    r = c.decode_response_for("get_workflow_aggregates", frame("get_workflow_aggregates", output=[
        {"group": {"status": "SUCCESS"}, "count": 1, field: value}]))
    with pytest.raises(mp.ExecutorReplyError, match=field):
        mp.workflow_aggregates_out(r)  # type: ignore[arg-type]


def test_a_duration_below_0_reads_as_0() -> None:
    """The SDKs compute a queue wait from the clocks of the process that enqueued a workflow and the
    one that ran it: hosts a few milliseconds apart give a negative wait, not a broken executor."""
    r = c.decode_response_for("get_workflow_aggregates", frame("get_workflow_aggregates", output=[
        {"group": {}, "count": 1, "max_queue_wait_ms": -3, "max_total_latency_ms": -1}]))
    [a] = mp.workflow_aggregates_out(r)  # type: ignore[arg-type]
    assert (a.max_queue_wait_ms, a.max_total_latency_ms) == (0, 0)
    s = c.decode_response_for("get_step_aggregates", frame("get_step_aggregates", output=[
        {"group": {}, "count": 1, "max_duration_ms": -5}]))
    assert mp.step_aggregates_out(s)[0].max_duration_ms == 0  # type: ignore[arg-type]


def test_aggregates_up_to_int64_max_pass() -> None:
    top = m.INT64_MAX
    r = c.decode_response_for("get_workflow_aggregates", frame("get_workflow_aggregates", output=[
        {"group": {}, "count": top, "max_queue_wait_ms": 0, "max_total_latency_ms": top}]))
    assert [check("WorkflowAggregate", a) for a in mp.workflow_aggregates_out(r)] == [  # type: ignore[arg-type]
        {"group": {}, "count": top, "maxQueueWaitMs": 0, "maxTotalLatencyMs": top}]
    s = c.decode_response_for("get_step_aggregates", frame("get_step_aggregates", output=[
        {"group": {}, "count": 0, "max_duration_ms": top}]))
    assert [check("StepAggregate", a) for a in mp.step_aggregates_out(s)] == [  # type: ignore[arg-type]
        {"group": {}, "count": 0, "maxDurationMs": top}]


@pytest.mark.parametrize("field, value", [("count", 2**63), ("count", -5), ("max_duration_ms", 2**63),
                                          ("max_duration_ms", -(2**63))])
def test_a_step_aggregate_out_of_int64_or_below_0_is_refused(field: str, value: int) -> None:
    r = c.decode_response_for("get_step_aggregates", frame("get_step_aggregates", output=[
        {"group": {}, field: value}]))
    with pytest.raises(mp.ExecutorReplyError, match=field):
        mp.step_aggregates_out(r)  # type: ignore[arg-type]


# --- actions' answers ---------------------------------------------------------------------


def test_action_answers() -> None:
    fork = c.decode_response_for("fork_workflow", frame("fork_workflow", new_workflow_id="bc64", error_message=None))
    assert check("ForkWorkflowOutputBody", mp.fork_out(fork)) == {"workflowId": "bc64"}  # type: ignore[arg-type]
    with pytest.raises(mp.ExecutorReplyError, match="new_workflow_id"):
        mp.fork_out(c.decode_response_for("fork_workflow", frame("fork_workflow")))  # type: ignore[arg-type]

    for ids in (["a", "b"], None):
        r = c.decode_response_for("fork_from_failure", frame("fork_from_failure", forked_workflow_ids=ids))
        assert check("BulkForkFromFailureOutputBody", mp.fork_from_failure_out(r)) == {  # type: ignore[arg-type]
            "workflowIds": ids or []}

    b = c.decode_response_for("backfill_schedule", frame("backfill_schedule", workflow_ids=["sched-x-1"]))
    assert check("BackfillOutputBody", mp.backfill_out(b)) == {"workflowIds": ["sched-x-1"]}  # type: ignore[arg-type]
    t = c.decode_response_for("trigger_schedule", frame("trigger_schedule", workflow_id="sched-x-trigger"))
    assert check("TriggerOutputBody", mp.trigger_out(t)) == {"workflowId": "sched-x-trigger"}  # type: ignore[arg-type]
    with pytest.raises(mp.ExecutorReplyError, match="workflow_id"):
        mp.trigger_out(c.decode_response_for("trigger_schedule", frame("trigger_schedule")))  # type: ignore[arg-type]


def test_an_empty_new_workflow_id_is_refused() -> None:
    for kind, field in (("fork_workflow", "new_workflow_id"), ("trigger_schedule", "workflow_id")):
        # with no error, the reply itself is refused (a protocol violation, a 502) ...
        with pytest.raises(msgspec.ValidationError, match="empty workflow id"):
            c.decode_response_for(kind, frame(kind, **{field: "", "error_message": None}))
        # ... with one, it is the executor's failure, its reason kept
        failed = c.decode_response_for(kind, frame(kind, **{field: "", "error_message": "no such workflow"}))
        assert failed.failed and failed.error_message == "no such workflow"


def test_export_and_import_pass_the_blob_through_untouched() -> None:
    blob = "H4sIAAAA" + "é\\u0000 not even base64 " * 1000  # opaque: whatever the executor sent
    r = c.decode_response_for("export_workflow", json.dumps({"type": "export_workflow", "request_id": "r",
                                                              "serialized_workflow": blob}))
    out = check("ExportWorkflowOutputBody", mp.export_out(r))  # type: ignore[arg-type]
    assert out == {"serializedWorkflow": blob}
    request = mp.import_request(m.decode(json.dumps(out), m.ImportWorkflowInputBody), request_id="r2")
    assert wire(request) == {"type": "import_workflow", "request_id": "r2", "serialized_workflow": blob}
    with pytest.raises(mp.ExecutorReplyError, match="serialized_workflow"):
        mp.export_out(c.decode_response_for("export_workflow", frame(  # type: ignore[arg-type]
            "export_workflow", serialized_workflow=None, error_message="Traceback ...")))


# --- queues, schedules, versions -------------------------------------------------------------

PYTHON_QUEUE = {"name": "payments", "concurrency": 10, "worker_concurrency": 2, "rate_limit_max": 100,
                "rate_limit_period_sec": 60.0, "priority_enabled": True, "partition_queue": False,
                "polling_interval_sec": 1.0, "application_name": "app", "partition_concurrency": None,
                "partition_worker_concurrency": None, "partition_rate_limit_max": None,
                "partition_rate_limit_period_sec": None}
TS_QUEUE = {"name": "q", "concurrency": None, "worker_concurrency": None, "rate_limit_max": None,
            "rate_limit_period_sec": 1, "priority_enabled": True, "partition_queue": True, "polling_interval_sec": 1,
            "application_name": None, "partition_concurrency": 3}
OLD_QUEUE = {"name": "old", "concurrency": 1}  # an SDK that knew fewer keys


def test_queues_in_every_dialect() -> None:
    r = c.decode_response_for("list_queues", frame("list_queues", output=[PYTHON_QUEUE, TS_QUEUE, OLD_QUEUE]))
    assert isinstance(r, c.ListQueuesResponse)
    py, ts, old = (check("Queue", q) for q in mp.queues_out(r))
    assert py == {"name": "payments", "concurrency": 10, "workerConcurrency": 2, "rateLimitMax": 100,
                  "rateLimitPeriodSecs": 60.0, "priorityEnabled": True, "partitionQueue": False,
                  "pollingIntervalSecs": 1.0, "applicationName": "app"}
    assert ts["partitionQueue"] is True and "partitionConcurrency" not in ts  # not in the reference's Queue
    assert old == {"name": "old", "concurrency": 1, "workerConcurrency": None, "rateLimitMax": None,
                   "rateLimitPeriodSecs": None, "priorityEnabled": False, "partitionQueue": False,
                   "pollingIntervalSecs": 1.0, "applicationName": None}
    g = c.decode_response_for("get_queue", frame("get_queue", output=PYTHON_QUEUE))
    assert isinstance(g, c.GetQueueResponse) and g.output is not None
    check("Queue", mp.queue_out(g.output))


@pytest.mark.parametrize("field, value", [
    ("concurrency", 2**40), ("concurrency", 2**31), ("worker_concurrency", 2**35), ("worker_concurrency", -1),
    ("rate_limit_max", -7), ("rate_limit_max", 2**31), ("rate_limit_period_sec", -1.5),
    ("polling_interval_sec", -3.0), ("polling_interval_sec", float("inf")), ("rate_limit_period_sec", float("nan"))])
def test_a_queue_number_out_of_its_format_or_below_0_is_refused(field: str, value: Any) -> None:
    q = msgspec.structs.replace(msgspec.convert(PYTHON_QUEUE, c.QueueOutput), **{field: value})
    with pytest.raises(mp.ExecutorReplyError, match=field):
        mp.queue_out(q)


def test_queue_numbers_at_their_bounds_pass() -> None:
    top = m.INT32_MAX
    q = msgspec.convert(PYTHON_QUEUE | {"concurrency": top, "worker_concurrency": 0, "rate_limit_max": top,
                                        "rate_limit_period_sec": 0.0, "polling_interval_sec": 0}, c.QueueOutput)
    out = check("Queue", mp.queue_out(q))
    assert (out["concurrency"], out["workerConcurrency"], out["rateLimitMax"], out["rateLimitPeriodSecs"],
            out["pollingIntervalSecs"]) == (top, 0, top, 0.0, 0)


def test_an_answer_about_another_object_than_asked_is_refused() -> None:
    mp.same_as_asked("name", "q", "q")
    for answered in ("someone-elses", "", None, "Q"):
        with pytest.raises(mp.ExecutorReplyError, match="name: answers for .*'q' asked for"):
            mp.same_as_asked("name", "q", answered)


PYTHON_SCHEDULE = {"schedule_id": "s-1", "schedule_name": "nightly", "workflow_name": "report",
                   "workflow_class_name": None, "schedule": "0 0 * * *", "status": "ACTIVE", "context": "None",
                   "last_fired_at": "2026-11-30T00:00:00+00:00", "automatic_backfill": False,
                   "cron_timezone": None, "queue_name": None, "application_name": "app"}
TS_SCHEDULE = {"schedule_id": "s-2", "schedule_name": "hourly", "workflow_name": "tick", "schedule": "0 * * * *",
               "status": "PAUSED", "last_fired_at": "2026-11-30T11:00:00.000Z", "automatic_backfill": True,
               "cron_timezone": "Europe/Paris", "queue_name": None, "application_name": None}


def test_schedules_in_both_dialects() -> None:
    r = c.decode_response_for("list_schedules", frame("list_schedules", output=[PYTHON_SCHEDULE, TS_SCHEDULE]))
    assert isinstance(r, c.ListSchedulesResponse)
    py, ts = (check("Schedule", s) for s in mp.schedules_out(r))
    assert py == {"scheduleId": "s-1", "scheduleName": "nightly", "workflowName": "report", "workflowClass": None,
                  "cronExpression": "0 0 * * *", "status": "ACTIVE", "context": "None",
                  "lastFiredAt": "2026-11-30T00:00:00.000Z", "automaticBackfill": False, "cronTimezone": None,
                  "applicationName": "app"}
    assert ts["lastFiredAt"] == "2026-11-30T11:00:00.000Z" and ts["context"] is None and ts["workflowClass"] is None
    never = mp.schedule_out(msgspec.convert(PYTHON_SCHEDULE | {"last_fired_at": None}, c.ScheduleOutput))
    assert check("Schedule", never)["lastFiredAt"] is None
    with pytest.raises(mp.ExecutorReplyError, match="schedule_id"):
        mp.schedule_out(c.ScheduleOutput(schedule_name="x"))
    with pytest.raises(mp.ExecutorReplyError, match="last_fired_at"):
        mp.schedule_out(msgspec.convert(PYTHON_SCHEDULE | {"last_fired_at": "tuesday"}, c.ScheduleOutput))


def test_application_versions() -> None:
    live = {"version_id": "8e5752fe", "version_name": "1d6ccc5e", "version_timestamp": 1796040658569,
            "created_at": 1796040658569}
    r = c.decode_response_for("list_application_versions", frame("list_application_versions", output=[live]))
    assert isinstance(r, c.ListApplicationVersionsResponse)
    assert [check("ApplicationVersion", v) for v in mp.versions_out(r)] == [{
        "versionId": "8e5752fe", "versionName": "1d6ccc5e", "versionTimestamp": "2026-11-30T12:10:58.569Z",
        "createdAt": "2026-11-30T12:10:58.569Z"}]
    with pytest.raises(mp.ExecutorReplyError, match="version_timestamp"):
        mp.version_out(c.ApplicationVersionOutput(version_id="v", version_name="n"))


# --- times -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("0", "1970-01-01T00:00:00.000Z"), (0, "1970-01-01T00:00:00.000Z"), ("1", "1970-01-01T00:00:00.001Z"),
    ("-1", "1969-12-31T23:59:59.999Z"), ("1796040658645", "2026-11-30T12:10:58.645Z"),
    (1796040658645, "2026-11-30T12:10:58.645Z"), ("253402300799999", "9999-12-31T23:59:59.999Z"),
    (None, None), ("null", None), ("undefined", None),
])
def test_epoch_milliseconds_to_rfc3339(value: Any, expected: str | None) -> None:
    assert mp.epoch_ms_to_rfc3339("CreatedAt", value) == expected


@pytest.mark.parametrize("value", ["", " 12", "12 ", "1.5", "1e3", "0x10", "1_000", "abc", "253402300800000",
                                   "-62135596800001", "9" * 40, True, 1.5, [1], {"ms": 1}])
def test_what_is_not_epoch_milliseconds_is_a_clear_error(value: Any) -> None:
    with pytest.raises(mp.ExecutorReplyError) as e:
        mp.epoch_ms_to_rfc3339("CreatedAt", value)
    assert e.value.field == "CreatedAt" and str(e.value).startswith("executor reply: CreatedAt: ")


@pytest.mark.parametrize("text, expected", [
    ("2026-11-30T12:00:05Z", "2026-11-30T12:00:05+00:00"),
    ("2026-11-30t12:00:05z", "2026-11-30T12:00:05+00:00"),
    ("2026-11-30T12:00:05.123Z", "2026-11-30T12:00:05.123000+00:00"),
    ("2026-11-30T12:00:05.123456789Z", "2026-11-30T12:00:05.123456+00:00"),  # Python keeps microseconds
    ("2026-11-30T14:00:05+02:00", "2026-11-30T12:00:05+00:00"),
    ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00+00:00"),
])
def test_rfc3339_to_the_executors_iso(text: str, expected: str) -> None:
    assert mp.rfc3339_to_executor("startTime", text) == expected
    datetime.fromisoformat(expected)  # what Python 3.10's parser accepts: no "Z"


@pytest.mark.parametrize("text", ["", "2026-11-30", "2026-11-30T12:00:05", "2026-11-30 12:00:05Z",
                                  "2026-13-30T12:00:05Z", "2026-11-31T12:00:05Z", "2026-11-30T25:00:05Z",
                                  "2026-11-30T12:00:05+25:00", "now", None, 1796040658645])
def test_what_is_not_rfc3339_is_refused_naming_the_field(text: Any) -> None:
    with pytest.raises(InvalidSetting) as e:
        mp.rfc3339_to_executor("startTime", text)
    assert e.value.field == "startTime"


@pytest.mark.parametrize("value, expected", [
    ("2026-11-30T00:00:00+00:00", "2026-11-30T00:00:00.000Z"), ("2026-11-30T00:00:00.000Z", "2026-11-30T00:00:00.000Z"),
    ("2026-11-30T01:00:00+01:00", "2026-11-30T00:00:00.000Z"), ("2026-11-30T00:00:00", "2026-11-30T00:00:00.000Z"),
    ("1796040658645", "2026-11-30T12:10:58.645Z"), (None, None),
])
def test_iso_times_from_executors_to_rfc3339(value: str | None, expected: str | None) -> None:
    assert mp.iso_to_rfc3339("last_fired_at", value) == expected


# --- REST -> executor: search and list filters --------------------------------------------------

SEARCH = {
    "workflowIds": ["a", "b"], "workflowName": ["wf"], "user": ["alice"], "status": ["SUCCESS", "ERROR"],
    "appVersion": ["v1"], "executorId": ["e1"], "queueName": ["q"], "forkedFrom": ["w0"], "parentWorkflowId": ["p"],
    "workflowIdPrefix": ["sched-"], "scheduleName": ["s"], "attributes": {"tenant": "t1"},
    "startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T23:59:59.999Z",
    "completedAfter": "2026-11-30T01:00:00+01:00", "completedBefore": "2026-12-01T00:00:00Z",
    "dequeuedAfter": "2026-11-29T00:00:00Z", "dequeuedBefore": "2026-12-02T00:00:00Z",
    "wasForkedFrom": False, "hasParent": True, "limit": 50, "offset": 100, "sortDesc": True,
    "loadInput": True, "loadOutput": False}

# REST name -> (executor name, value on the wire), section 10.4.
SEARCH_ON_WIRE = {
    "workflowIds": ("workflow_uuids", ["a", "b"]), "workflowName": ("workflow_name", ["wf"]),
    "user": ("authenticated_user", ["alice"]), "status": ("status", ["SUCCESS", "ERROR"]),
    "appVersion": ("application_version", ["v1"]), "executorId": ("executor_id", ["e1"]),
    "queueName": ("queue_name", ["q"]), "forkedFrom": ("forked_from", ["w0"]),
    "parentWorkflowId": ("parent_workflow_id", ["p"]), "workflowIdPrefix": ("workflow_id_prefix", ["sched-"]),
    "scheduleName": ("schedule_name", ["s"]), "attributes": ("attributes", {"tenant": "t1"}),
    "startTime": ("start_time", "2026-11-30T00:00:00+00:00"), "endTime": ("end_time", "2026-11-30T23:59:59.999000+00:00"),
    "completedAfter": ("completed_after", "2026-11-30T00:00:00+00:00"),
    "completedBefore": ("completed_before", "2026-12-01T00:00:00+00:00"),
    "dequeuedAfter": ("dequeued_after", "2026-11-29T00:00:00+00:00"),
    "dequeuedBefore": ("dequeued_before", "2026-12-02T00:00:00+00:00"),
    "wasForkedFrom": ("was_forked_from", False), "hasParent": ("has_parent", True), "limit": ("limit", 50),
    "offset": ("offset", 100), "sortDesc": ("sort_desc", True), "loadInput": ("load_input", True),
    "loadOutput": ("load_output", False)}

EVERY_LIST_KEY = {f.encode_name for f in msgspec.structs.fields(c.ListWorkflowsBody)}
TRI_STATE = {"was_forked_from", "has_parent"}  # left out when unset: TypeScript reads null as a filter


def test_every_search_filter_reaches_the_executor_under_its_name() -> None:
    body = m.decode(json.dumps(SEARCH), m.WorkflowSearchBody)
    out = wire(mp.search_request(body, request_id="r1"))
    assert out["type"] == "list_workflows"
    assert set(out["body"]) == EVERY_LIST_KEY  # every key goes out (null when unset; here all are set)
    for rest, (name, value) in SEARCH_ON_WIRE.items():
        assert out["body"][name] == value, rest
    assert set(SEARCH) | {"queuesOnly"} == set(document()["components"]["schemas"]["WorkflowSearchBody"]["properties"]) - {"$schema"}
    assert out["body"]["queues_only"] is False and out["body"]["application_name"] is None


def test_an_empty_search_sends_no_filter_and_loads_nothing() -> None:
    out = wire(mp.search_request(m.decode(b"{}", m.WorkflowSearchBody), request_id="r1"))
    assert set(out["body"]) == EVERY_LIST_KEY - TRI_STATE  # every other key goes out, null when unset
    assert {k: v for k, v in out["body"].items() if v not in (None, False)} == {}


@pytest.mark.parametrize("raw,sent", [(b"{}", {}), (b'{"wasForkedFrom": false}', {"was_forked_from": False}),
                                      (b'{"hasParent": true}', {"has_parent": True}),
                                      (b'{"hasParent": false, "wasForkedFrom": true}',
                                       {"has_parent": False, "was_forked_from": True})])
def test_an_unset_tri_state_filter_is_left_out_never_null(raw: bytes, sent: dict[str, bool]) -> None:
    """TypeScript 5.2.11 tests ``was_forked_from`` / ``has_parent`` with ``!== undefined``: a null
    would list nothing (tests/e2e/test_ground_probe.py pins it). Search and aggregates alike."""
    search = wire(mp.search_request(m.decode(raw, m.WorkflowSearchBody), request_id="r"))["body"]
    aggregates = wire(mp.workflow_aggregates_request(m.decode(raw, m.WorkflowAggregatesBody), request_id="r"))["body"]
    listing = wire(mp.list_workflows_request(request_id="r"))["body"]
    for body in (search, aggregates):
        assert {k: body[k] for k in TRI_STATE if k in body} == sent
    assert not TRI_STATE & set(listing)


def test_empty_and_null_filter_lists_are_no_filter() -> None:
    body = m.decode(b'{"status": [], "workflowIds": null, "user": []}', m.WorkflowSearchBody)
    out = wire(mp.search_request(body, request_id="r"))["body"]
    assert out["status"] is None and out["workflow_uuids"] is None and out["authenticated_user"] is None


def test_a_queues_only_search_is_list_queued_workflows() -> None:
    out = wire(mp.search_request(m.decode(b'{"queuesOnly": true, "queueName": ["q"]}', m.WorkflowSearchBody),
                                 request_id="r"))
    assert out["type"] == "list_queued_workflows" and out["body"]["queues_only"] is True
    assert out["body"]["queue_name"] == ["q"]


def test_a_search_round_trips_rest_json_to_the_executors_decoded_body() -> None:
    """REST JSON -> model -> executor frame -> what an executor decodes: the same filters."""
    body = m.decode(json.dumps(SEARCH), m.WorkflowSearchBody)
    assert json.loads(msgspec.json.encode(body)) == SEARCH
    frame_ = encode(mp.search_request(body, request_id="r"))
    seen = msgspec.json.decode(frame_, type=c.ListWorkflowsRequest).body
    assert seen == mp.search_body(body)
    assert seen.workflow_uuids == SEARCH["workflowIds"] and seen.authenticated_user == SEARCH["user"]


@pytest.mark.parametrize("given, sent", [
    (None, None), ("SUCCESS", "SUCCESS"), (["SUCCESS"], "SUCCESS"), (["SUCCESS", "ERROR"], ["SUCCESS", "ERROR"]),
    ([], None), (("A", "B"), ["A", "B"]),
])
def test_query_parameters_given_once_are_one_value_given_often_a_list(given: Any, sent: Any) -> None:
    assert mp.query_values("status", given) == sent
    out = wire(mp.list_workflows_request(request_id="r", status=given, workflow_name=given))
    assert out["body"]["status"] == sent and out["body"]["workflow_name"] == sent


def test_list_workflows_query_parameters() -> None:
    out = wire(mp.list_workflows_request(request_id="r", status="PENDING", limit=10, offset=20, sort_desc=True,
                                         load_input=True))
    assert out["type"] == "list_workflows"
    assert set(out["body"]) == EVERY_LIST_KEY - TRI_STATE
    b = out["body"]
    assert (b["status"], b["limit"], b["offset"], b["sort_desc"], b["load_input"], b["load_output"]) == (
        "PENDING", 10, 20, True, True, False)
    plain = wire(mp.list_workflows_request(request_id="r"))["body"]
    assert (plain["limit"], plain["offset"], plain["sort_desc"], plain["load_input"]) == (None, None, False, False)


@pytest.mark.parametrize("kwargs, field", [
    ({"limit": -1}, "limit"), ({"offset": -1}, "offset"), ({"limit": 2**63}, "limit"), ({"limit": True}, "limit"),
    ({"limit": "10"}, "limit"), ({"status": ["x"] * (m.MAX_FILTER_VALUES + 1)}, "status"),
    ({"workflow_name": "x" * (m.MAX_TEXT + 1)}, "workflowName"), ({"status": [3]}, "status"),
])
def test_bad_query_parameters_are_refused_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        mp.list_workflows_request(request_id="r", **kwargs)
    assert e.value.field == field


def test_steps_page_and_path_parameters() -> None:
    out = wire(mp.list_steps_request("w1", request_id="r", limit=5, offset=10))
    assert out == {"type": "list_steps", "request_id": "r", "workflow_id": "w1", "load_output": True,
                   "limit": 5, "offset": 10}
    assert wire(mp.get_workflow_request("w1", request_id="r")) == {
        "type": "get_workflow", "request_id": "r", "workflow_id": "w1", "load_input": True, "load_output": True}
    for build, kind in ((mp.events_request, "get_workflow_events"),
                        (mp.notifications_request, "get_workflow_notifications"),
                        (mp.streams_request, "get_workflow_streams")):
        assert wire(build("w1", request_id="r")) == {"type": kind, "request_id": "r", "workflow_id": "w1"}
    for bad in ("", "x" * (m.MAX_TEXT + 1)):
        with pytest.raises(InvalidSetting, match="workflowId"):
            mp.get_workflow_request(bad, request_id="r")
    with pytest.raises(InvalidSetting, match="offset"):
        mp.list_steps_request("w1", request_id="r", offset=-1)


JS_SAFE = 2**53 - 1  # 9007199254740991, the largest integer a JavaScript number holds exactly


@pytest.mark.parametrize("given, sent", [(2**63 - 1, JS_SAFE), (2**53, JS_SAFE), (JS_SAFE, JS_SAFE), (10, 10),
                                         (0, 0)])
def test_a_limit_or_offset_past_javascripts_exact_integers_is_sent_capped(given: int, sent: int) -> None:
    """A TypeScript executor rounded 2**63-1 to 9223372036854776000, which Postgres refused (a 500):
    every int64 is accepted, and sent at most 2**53-1 (every row; past the last)."""
    listed = wire(mp.list_workflows_request(request_id="r", limit=given, offset=given))["body"]
    steps = wire(mp.list_steps_request("w1", request_id="r", limit=given, offset=given))
    searched = wire(mp.search_request(m.decode(json.dumps({"limit": given, "offset": given}), m.WorkflowSearchBody),
                                      request_id="r"))["body"]
    queued = wire(mp.search_request(m.decode(json.dumps({"limit": given, "queuesOnly": True}), m.WorkflowSearchBody),
                                    request_id="r"))["body"]
    for out in (listed, steps, searched):
        assert (out["limit"], out["offset"]) == (sent, sent)
    assert queued["limit"] == sent
    if given:
        bucket = {"timeBucketSizeMs": given}
        flows = wire(mp.workflow_aggregates_request(m.decode(json.dumps(bucket), m.WorkflowAggregatesBody),
                                                    request_id="r"))["body"]
        step_aggs = wire(mp.step_aggregates_request(m.decode(json.dumps(bucket), m.StepAggregatesBody),
                                                    request_id="r"))["body"]
        assert flows["time_bucket_size_ms"] == step_aggs["time_bucket_size_ms"] == sent
    assert mp.JS_SAFE_MAX == JS_SAFE


# --- REST -> executor: aggregates ---------------------------------------------------------------


def test_every_workflow_aggregates_field_reaches_the_executor_under_its_name() -> None:
    raw = {
        "groupByStatus": True, "groupByWorkflowName": True, "groupByQueueName": True, "groupByExecutorId": True,
        "groupByAppVersion": True, "groupByApplicationName": True, "selectCount": True, "selectMinCreatedAt": True,
        "selectMaxQueueWaitMs": True, "selectMaxTotalLatencyMs": True, "timeBucketSizeMs": 60000,
        "workflowIds": ["a"], "workflowName": ["wf"], "user": ["u"], "status": ["PENDING"], "appVersion": ["v"],
        "executorId": ["e"], "queueName": ["q"], "forkedFrom": ["f"], "parentWorkflowId": ["p"],
        "workflowIdPrefix": ["x"], "scheduleName": ["s"], "attributes": {"a": 1},
        "startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T01:00:00Z",
        "completedAfter": "2026-11-30T00:00:00Z", "completedBefore": "2026-11-30T01:00:00Z",
        "dequeuedAfter": "2026-11-30T00:00:00Z", "dequeuedBefore": "2026-11-30T01:00:00Z",
        "wasForkedFrom": True, "hasParent": False}
    assert set(raw) == set(document()["components"]["schemas"]["WorkflowAggregatesBody"]["properties"]) - {"$schema"}
    out = wire(mp.workflow_aggregates_request(m.decode(json.dumps(raw), m.WorkflowAggregatesBody), request_id="r"))
    assert out["type"] == "get_workflow_aggregates"
    b = out["body"]
    assert set(b) == {f.encode_name for f in msgspec.structs.fields(c.WorkflowAggregatesBody)}
    assert all(b[k] is True for k in b if k.startswith(("group_by_", "select_")))
    assert (b["name"], b["app_version"], b["user"], b["workflow_ids"]) == (["wf"], ["v"], ["u"], ["a"])
    assert (b["time_bucket_size_ms"], b["status"], b["executor_id"], b["queue_name"]) == (60000, ["PENDING"], ["e"], ["q"])
    assert (b["forked_from"], b["parent_workflow_id"], b["workflow_id_prefix"], b["schedule_name"]) == (
        ["f"], ["p"], ["x"], ["s"])
    assert b["start_time"] == "2026-11-30T00:00:00+00:00" and b["dequeued_before"] == "2026-11-30T01:00:00+00:00"
    assert (b["was_forked_from"], b["has_parent"], b["attributes"], b["application_name"]) == (True, False, {"a": 1}, None)


def test_step_aggregates_fields_reach_the_executor_under_their_names() -> None:
    raw = {"groupByFunctionName": True, "groupByStatus": True, "selectCount": True, "selectMaxDurationMs": True,
           "timeBucketSizeMs": 1000, "status": ["SUCCESS"], "stepName": ["add_one"], "workflowIdPrefix": ["w"],
           "completedAfter": "2026-11-30T00:00:00Z", "completedBefore": "2026-11-30T01:00:00Z"}
    out = wire(mp.step_aggregates_request(m.decode(json.dumps(raw), m.StepAggregatesBody), request_id="r"))["body"]
    assert out == {"group_by_function_name": True, "group_by_status": True, "select_count": True,
                   "select_max_duration_ms": True, "time_bucket_size_ms": 1000, "status": ["SUCCESS"],
                   "function_name": ["add_one"], "workflow_id_prefix": ["w"],
                   "completed_after": "2026-11-30T00:00:00+00:00", "completed_before": "2026-11-30T01:00:00+00:00",
                   "application_name": None}
    empty = wire(mp.step_aggregates_request(m.StepAggregatesBody(), request_id="r"))["body"]
    assert {k: v for k, v in empty.items() if v not in (None, False)} == {}


def test_a_date_time_the_pattern_lets_through_but_the_calendar_refuses_is_a_422() -> None:
    body = m.decode(b'{"startTime": "2026-02-30T00:00:00Z"}', m.WorkflowSearchBody)
    with pytest.raises(InvalidSetting) as e:
        mp.search_request(body, request_id="r")
    assert e.value.field == "startTime"


# --- REST -> executor: actions ------------------------------------------------------------------


def test_single_actions() -> None:
    assert wire(mp.cancel_request("w1", None, request_id="r")) == {
        "type": "cancel", "request_id": "r", "workflow_id": "w1", "workflow_ids": None, "cancel_children": False}
    assert wire(mp.cancel_request("w1", m.CancelWorkflowInputBody(cancel_children=True), request_id="r"))[
        "cancel_children"] is True
    assert wire(mp.resume_request("w1", m.decode(b'{"queueName": "q"}', m.ResumeWorkflowInputBody), request_id="r")) == {
        "type": "resume", "request_id": "r", "workflow_id": "w1", "workflow_ids": None, "queue_name": "q"}
    assert wire(mp.resume_request("w1", None, request_id="r"))["queue_name"] is None
    assert wire(mp.delete_request("w1", None, request_id="r")) == {
        "type": "delete", "request_id": "r", "workflow_id": "w1", "workflow_ids": None, "delete_children": False}
    assert wire(mp.delete_request("w1", True, request_id="r"))["delete_children"] is True


def test_fork() -> None:
    full = m.decode(b'{"startStep": 3, "newWorkflowId": "n", "appVersion": "v2", "queueName": "q", '
                    b'"queuePartitionKey": "k"}', m.ForkWorkflowInputBody)
    assert wire(mp.fork_request("w1", full, request_id="r")) == {"type": "fork_workflow", "request_id": "r", "body": {
        "workflow_id": "w1", "start_step": 3, "application_version": "v2", "new_workflow_id": "n",
        "queue_name": "q", "queue_partition_key": "k"}}
    # Python reads the first four keys by indexing: all present, null allowed.
    body = wire(mp.fork_request("w1", None, request_id="r"))["body"]
    assert body == {"workflow_id": "w1", "start_step": 0, "application_version": None, "new_workflow_id": None,
                    "queue_name": None, "queue_partition_key": None}  # 0: no step copied, on every SDK
    assert wire(mp.fork_request("w1", m.ForkWorkflowInputBody(), request_id="r", first_step=2))["body"]["start_step"] == 2
    assert wire(mp.fork_request("w1", m.ForkWorkflowInputBody(start_step=0), request_id="r"))["body"]["start_step"] == 0


def test_an_empty_optional_id_or_name_is_not_given() -> None:
    """A TypeScript executor made a fork of id '' (PENDING for ever, unreachable) and forks of version
    '' and resumes on queue '' that no executor serves: "" is sent as not given (None, or left out)."""
    fork = m.decode(b'{"newWorkflowId": "", "appVersion": "", "queueName": "", "queuePartitionKey": ""}',
                    m.ForkWorkflowInputBody)
    unset = wire(mp.fork_request("w1", None, request_id="r"))["body"]
    assert wire(mp.fork_request("w1", fork, request_id="r"))["body"] == unset  # every key null: the executor chooses
    resume = m.decode(b'{"queueName": ""}', m.ResumeWorkflowInputBody)
    assert wire(mp.resume_request("w1", resume, request_id="r"))["queue_name"] is None
    bulk = m.decode(b'{"workflowIds": ["a", "b"], "queueName": ""}', m.BulkResumeInputBody)
    assert wire(mp.bulk_resume_request(bulk, request_id="r"))["queue_name"] is None
    again = m.decode(b'{"workflowIds": ["a"], "appVersion": "", "queueName": "", "queuePartitionKey": ""}',
                     m.BulkForkFromFailureBody)
    assert wire(mp.fork_from_failure_request(again, request_id="r"))["body"] == {
        "workflow_ids": ["a"], "from_last_failure": True}
    # a body made without decoding (replace runs no __post_init__) is sent the same way
    made = msgspec.structs.replace(m.ForkWorkflowInputBody(), new_workflow_id="", app_version="")
    sent = wire(mp.fork_request("w1", made, request_id="r"))["body"]
    assert (sent["new_workflow_id"], sent["application_version"]) == (None, None)


def test_bulk_actions_name_the_first_workflow_too() -> None:
    ids = {"workflowIds": ["a", "b", "c"]}
    cancel = wire(mp.bulk_cancel_request(m.decode(json.dumps(ids | {"cancelChildren": True}), m.BulkCancelInputBody),
                                         request_id="r"))
    assert cancel == {"type": "cancel", "request_id": "r", "workflow_id": "a", "workflow_ids": ["a", "b", "c"],
                      "cancel_children": True}
    resume = wire(mp.bulk_resume_request(m.decode(json.dumps(ids), m.BulkResumeInputBody), request_id="r"))
    assert resume == {"type": "resume", "request_id": "r", "workflow_id": "a", "workflow_ids": ["a", "b", "c"],
                      "queue_name": None}
    delete = wire(mp.bulk_delete_request(m.decode(json.dumps(ids), m.BulkDeleteInputBody), request_id="r"))
    assert delete == {"type": "delete", "request_id": "r", "workflow_id": "a", "workflow_ids": ["a", "b", "c"],
                      "delete_children": False}


@pytest.mark.parametrize("extra, start", [
    ({}, {"from_last_failure": True}),
    ({"fromLastFailure": True}, {"from_last_failure": True}),
    ({"fromLastFailure": False}, {"from_last_failure": True}),
    ({"fromLastStep": True}, {"from_last_step": True}),
    ({"fromStep": 0}, {"from_step": 0}),
    ({"fromStepName": "charge", "fromLastStep": False},
     {"from_step_name": "charge"}),
])
def test_fork_from_failure_sends_exactly_one_starting_point(extra: dict[str, Any], start: dict[str, Any]) -> None:
    body = m.decode(json.dumps({"workflowIds": ["a", "b"], "appVersion": "v", "queueName": "q"} | extra),
                    m.BulkForkFromFailureBody)
    out = wire(mp.fork_from_failure_request(body, request_id="r"))
    assert out == {"type": "fork_from_failure", "request_id": "r", "body": {
        "workflow_ids": ["a", "b"], "application_version": "v", "queue_name": "q", **start}}  # only what is set: TS 5.2.11 reads a null as given


def test_export_request() -> None:
    assert wire(mp.export_request("w1", None, request_id="r")) == {
        "type": "export_workflow", "request_id": "r", "workflow_id": "w1", "export_children": False}
    assert wire(mp.export_request("w1", True, request_id="r"))["export_children"] is True


# --- REST -> executor: queues, schedules, versions ------------------------------------------------


def test_queue_schedule_and_version_requests() -> None:
    assert wire(mp.list_queues_request(request_id="r")) == {"type": "list_queues", "request_id": "r",
                                                            "body": {"application_name": None}}
    assert wire(mp.get_queue_request("q", request_id="r")) == {"type": "get_queue", "request_id": "r", "name": "q"}
    assert wire(mp.list_schedules_request(request_id="r")) == {"type": "list_schedules", "request_id": "r", "body": {
        "status": None, "workflow_name": None, "schedule_name_prefix": None, "application_name": None,
        "load_context": True}}
    out = wire(mp.list_schedules_request(request_id="r", status=["ACTIVE", "PAUSED"], workflow_name="report",
                                         schedule_name_prefix="night", load_context=False))["body"]
    assert (out["status"], out["workflow_name"], out["schedule_name_prefix"], out["load_context"]) == (
        ["ACTIVE", "PAUSED"], "report", "night", False)
    assert wire(mp.get_schedule_request("s", request_id="r")) == {
        "type": "get_schedule", "request_id": "r", "schedule_name": "s", "load_context": True}
    for build, kind in ((mp.pause_schedule_request, "pause_schedule"), (mp.resume_schedule_request, "resume_schedule"),
                        (mp.trigger_schedule_request, "trigger_schedule")):
        assert wire(build("s", request_id="r")) == {"type": kind, "request_id": "r", "schedule_name": "s"}
    backfill = m.decode(b'{"startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T06:00:00.5+01:00"}',
                        m.BackfillInputBody)
    assert wire(mp.backfill_schedule_request("s", backfill, request_id="r")) == {
        "type": "backfill_schedule", "request_id": "r", "schedule_name": "s",
        "start": "2026-11-30T00:00:00+00:00", "end": "2026-11-30T05:00:00.500000+00:00"}
    with pytest.raises(InvalidSetting, match="scheduleName"):
        mp.pause_schedule_request("", request_id="r")
    assert wire(mp.list_versions_request(request_id="r")) == {"type": "list_application_versions", "request_id": "r"}
    assert wire(mp.set_latest_version_request(m.PatchLatestVersionInputBody(version_name="v2"), request_id="r")) == {
        "type": "set_latest_application_version", "request_id": "r", "version_name": "v2"}
