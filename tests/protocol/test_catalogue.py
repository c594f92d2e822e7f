"""The message catalogue against the wire contract (sections 4-6 of ../shared/docs/conductor-protocol.md).

Requests must carry every key (null for unset); responses must decode in
both SDK styles (Python: every key, nulls; TypeScript: unset keys omitted),
ignore unknown keys and survive a round trip.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from relay_es.protocol import catalogue as c
from relay_es.protocol.messages import (
    ExecutorInfoRequest,
    ExecutorInfoResponse,
    ExistPendingWorkflowsRequest,
    RecoveryRequest,
    Request,
    Response,
    RetentionBody,
    RetentionRequest,
    SuccessResponse,
    UnknownTypeResponse,
    encode,
)

# Every wire type of the section 5.0 summary table.
WIRE_TYPES = {
    "executor_info", "recovery", "exist_pending_workflows", "cancel", "resume", "delete",
    "restart", "fork_workflow", "fork_from_failure", "rewind_workflow", "list_workflows",
    "list_queued_workflows", "get_workflow", "list_steps", "get_workflow_events",
    "get_workflow_notifications", "get_workflow_streams", "get_workflow_aggregates",
    "get_step_aggregates", "get_metrics", "retention", "alert", "export_workflow",
    "import_workflow", "list_schedules", "get_schedule", "pause_schedule", "resume_schedule",
    "backfill_schedule", "trigger_schedule", "list_application_versions",
    "set_latest_application_version", "list_queues", "get_queue",
}

ISO_START = "2026-08-20T10:00:00+00:00"
ISO_END = "2026-08-20T10:05:00.000000+00:00"
R = "1d3a1428-944d-4103-8615-5d824f57b7ec"


# --- requests ----------------------------------------------------------------

# One request per wire type, built with only what the constructor requires, so
# every optional field is unset and must still be on the wire as null.
REQUEST_SAMPLES: list[Request] = [
    ExecutorInfoRequest(request_id=R),
    RecoveryRequest(request_id=R, executor_ids=["e-1"]),
    ExistPendingWorkflowsRequest(request_id=R, executor_id="e-1", application_version="v1"),
    RetentionRequest(request_id=R, body=RetentionBody()),
    c.CancelRequest(request_id=R, workflow_id="wf-1"),
    c.ResumeRequest(request_id=R, workflow_id="wf-1"),
    c.DeleteRequest(request_id=R, workflow_id="wf-1", delete_children=False),
    c.RestartRequest(request_id=R, workflow_id="wf-1"),
    c.ForkWorkflowRequest(request_id=R, body=c.ForkWorkflowBody(workflow_id="wf-1", start_step=1)),
    c.ForkFromFailureRequest(request_id=R, body=c.ForkFromFailureBody(workflow_ids=["wf-1"], from_last_failure=True)),
    c.RewindWorkflowRequest(request_id=R, body=c.RewindWorkflowBody(workflow_id="wf-1")),
    c.ListWorkflowsRequest(request_id=R, body=c.ListWorkflowsBody(load_input=False, load_output=False)),
    c.ListQueuedWorkflowsRequest(request_id=R, body=c.ListWorkflowsBody(load_input=True, load_output=True)),
    c.GetWorkflowRequest(request_id=R, workflow_id="wf-1"),
    c.ListStepsRequest(request_id=R, workflow_id="wf-1"),
    c.GetWorkflowEventsRequest(request_id=R, workflow_id="wf-1"),
    c.GetWorkflowNotificationsRequest(request_id=R, workflow_id="wf-1"),
    c.GetWorkflowStreamsRequest(request_id=R, workflow_id="wf-1"),
    c.GetWorkflowAggregatesRequest(request_id=R, body=c.WorkflowAggregatesBody()),
    c.GetStepAggregatesRequest(request_id=R, body=c.StepAggregatesBody()),
    c.GetMetricsRequest(request_id=R, start_time=ISO_START, end_time=ISO_END),
    c.AlertRequest(request_id=R, name="WorkflowFailure", message="wf-1 failed", metadata={"workflow_id": "wf-1"}),
    c.ExportWorkflowRequest(request_id=R, workflow_id="wf-1", export_children=False),
    c.ImportWorkflowRequest(request_id=R, serialized_workflow="H4sIAAAAAAAA"),
    c.ListSchedulesRequest(request_id=R, body=c.ListSchedulesBody()),
    c.GetScheduleRequest(request_id=R, schedule_name="nightly"),
    c.PauseScheduleRequest(request_id=R, schedule_name="nightly"),
    c.ResumeScheduleRequest(request_id=R, schedule_name="nightly"),
    c.BackfillScheduleRequest(request_id=R, schedule_name="nightly", start=ISO_START, end=ISO_END),
    c.TriggerScheduleRequest(request_id=R, schedule_name="nightly"),
    c.ListApplicationVersionsRequest(request_id=R),
    c.SetLatestApplicationVersionRequest(request_id=R, version_name="v2"),
    c.ListQueuesRequest(request_id=R),
    c.GetQueueRequest(request_id=R, name="q"),
]


def assert_every_key(struct: msgspec.Struct, obj: dict[str, Any]) -> None:
    """``obj`` (stdlib-decoded JSON) has exactly ``struct``'s fields, nulls as
    null, recursively into nested Structs (an ``UNSET`` tri-state filter left out, and a sparse
    body's -- ``omit_defaults``, fork_from_failure's -- unset fields left out)."""
    sparse = type(struct).__struct_config__.omit_defaults
    defaults = dict(zip(type(struct).__struct_fields__[-len(type(struct).__struct_defaults__):] if
                        type(struct).__struct_defaults__ else (), type(struct).__struct_defaults__, strict=True))
    fields = [f for f in type(struct).__struct_fields__ if getattr(struct, f) is not msgspec.UNSET
              and not (sparse and f in defaults and getattr(struct, f) == defaults[f])]
    assert set(obj) == set(fields), f"{type(struct).__name__}: {set(fields) ^ set(obj)}"
    for name in fields:
        value = getattr(struct, name)
        if value is None:
            assert obj[name] is None
        elif isinstance(value, msgspec.Struct):
            assert_every_key(value, obj[name])


def test_registries_cover_every_wire_type() -> None:
    assert set(c.REQUESTS) == WIRE_TYPES
    assert set(c.RESPONSES) == WIRE_TYPES
    assert {s.TYPE for s in REQUEST_SAMPLES} == WIRE_TYPES
    for wire_type, cls in c.REQUESTS.items():
        assert cls.TYPE == wire_type


@pytest.mark.parametrize("request_", REQUEST_SAMPLES, ids=lambda r: r.TYPE)
def test_request_encodes_every_field(request_: Request) -> None:
    assert type(request_) is c.REQUESTS[request_.TYPE]
    obj = json.loads(encode(request_))
    assert obj["type"] == request_.TYPE
    assert obj["request_id"] == R
    assert_every_key(request_, obj)
    # And it reads back as itself.
    assert msgspec.json.decode(encode(request_), type=type(request_)) == request_


def test_optional_request_fields_go_out_as_null() -> None:
    obj = json.loads(encode(c.ResumeRequest(request_id=R, workflow_id="wf-1")))
    assert obj == {"type": "resume", "request_id": R, "workflow_id": "wf-1",
                   "workflow_ids": None, "queue_name": None}


@pytest.mark.parametrize("body_type", [c.ListWorkflowsBody, c.WorkflowAggregatesBody])
def test_an_unset_tri_state_filter_is_left_out_not_null(body_type: type[msgspec.Struct]) -> None:
    """TypeScript 5.2.11 reads a null ``was_forked_from`` / ``has_parent`` as a filter
    (``!== undefined``), so unset they are left out; set, they go out as they are."""
    extra = {"load_input": False, "load_output": False} if body_type is c.ListWorkflowsBody else {}
    unset = json.loads(msgspec.json.encode(body_type(**extra)))
    assert "was_forked_from" not in unset and "has_parent" not in unset
    assert all(v is None or v is False for v in unset.values())  # every other key, null or false
    both = json.loads(msgspec.json.encode(body_type(**extra, was_forked_from=False, has_parent=True)))
    assert (both["was_forked_from"], both["has_parent"]) == (False, True)
    assert msgspec.json.decode(msgspec.json.encode(body_type(**extra)), type=body_type) == body_type(**extra)


def test_fork_workflow_matches_the_live_request() -> None:
    live = json.loads('{"type":"fork_workflow","request_id":"b04c…","body":{"workflow_id":"9a8a3952-…",'
                      '"start_step":1,"application_version":null,"new_workflow_id":null}}')
    ours = json.loads(encode(c.ForkWorkflowRequest(
        request_id="b04c…", body=c.ForkWorkflowBody(workflow_id="9a8a3952-…", start_step=1))))
    # Python indexes these four keys before its error handling.
    assert {k: ours["body"][k] for k in live["body"]} == live["body"]
    assert ours["body"]["queue_name"] is None and ours["body"]["queue_partition_key"] is None
    assert {k: v for k, v in ours.items() if k != "body"} == {k: v for k, v in live.items() if k != "body"}


def test_bulk_cancel_still_carries_workflow_id() -> None:
    obj = json.loads(encode(c.CancelRequest(request_id=R, workflow_id="a", workflow_ids=["a", "b"],
                                            cancel_children=True)))
    assert obj["workflow_id"] == "a"
    assert obj["workflow_ids"] == ["a", "b"]
    assert obj["cancel_children"] is True


@pytest.mark.parametrize("build", [
    lambda: c.CancelRequest(request_id=R),  # type: ignore[call-arg]
    lambda: c.DeleteRequest(request_id=R, workflow_id="wf-1"),  # type: ignore[call-arg]
    lambda: c.ExportWorkflowRequest(request_id=R, workflow_id="wf-1"),  # type: ignore[call-arg]
    lambda: c.ListWorkflowsRequest(request_id=R),  # type: ignore[call-arg]
    lambda: c.ListWorkflowsBody(load_input=True),  # type: ignore[call-arg]
    lambda: c.ForkWorkflowBody(workflow_id="wf-1"),  # type: ignore[call-arg]
], ids=["cancel.workflow_id", "delete.delete_children", "export.export_children",
        "list_workflows.body", "list_workflows.load_output", "fork.start_step"])
def test_keys_python_requires_cannot_be_left_out(build: Any) -> None:
    with pytest.raises(TypeError):
        build()


def test_string_or_list_filters_take_either() -> None:
    body = c.ListWorkflowsBody(load_input=True, load_output=True, status="PENDING",
                               workflow_name=["a", "b"], application_name="app")
    obj = json.loads(encode(c.ListQueuedWorkflowsRequest(request_id=R, body=body)))["body"]
    assert obj["status"] == "PENDING"
    assert obj["workflow_name"] == ["a", "b"]
    assert obj["application_name"] == "app"
    assert obj["load_input"] is True and obj["sort_desc"] is False and obj["queues_only"] is False


def test_list_queues_always_sends_a_body() -> None:
    obj = json.loads(encode(c.ListQueuesRequest(request_id=R)))
    assert obj["body"] == {"application_name": None}


def test_get_workflow_sends_load_flags_explicitly() -> None:
    # Go defaults both to false when absent.
    obj = json.loads(encode(c.GetWorkflowRequest(request_id=R, workflow_id="wf-1")))
    assert obj["load_input"] is True and obj["load_output"] is True


@pytest.mark.parametrize("selectors", [
    {}, {"from_last_failure": True, "from_step": 3}, {"from_last_step": True, "from_step_name": "s"},
    {"from_last_failure": False},
])
def test_fork_from_failure_needs_exactly_one_starting_point(selectors: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        c.ForkFromFailureBody(workflow_ids=["wf-1"], **selectors)


@pytest.mark.parametrize("selector", [
    {"from_last_failure": True}, {"from_last_step": True}, {"from_step": 0}, {"from_step_name": "charge"},
])
def test_fork_from_failure_leaves_the_unused_selectors_out(selector: dict[str, Any]) -> None:
    body = json.loads(encode(c.ForkFromFailureBody(workflow_ids=["wf-1"], **selector)))
    assert body == {"workflow_ids": ["wf-1"], **selector}


# --- responses ---------------------------------------------------------------

LIVE_EXECUTOR_INFO = (
    '{"type": "executor_info", "request_id": "1d3a1428-944d-4103-8615-5d824f57b7ec",'
    ' "executor_id": "365b48ef-ca98-472b-a11c-13190ad2706b",'
    ' "application_version": "1d6ccc5e8501c9d77084185b3c54db01",'
    ' "hostname": "vm", "language": "python", "dbos_version": "3.2.0",'
    ' "executor_metadata": {"region": "local-test"}, "error_message": null}'
)
LIVE_FORK = ('{"type":"fork_workflow","request_id":"b04c…",'
             '"new_workflow_id":"bc64813d-ef03-4c8d-a2c4-2048083b8809","error_message":null}')
LIVE_METRICS = json.loads(
    '{"metrics":[{"metric_type":"workflow_count","metric_name":"probe_workflow","value":1},'
    '{"metric_type":"step_count","metric_name":"add_one","value":1}]}')
LIVE_VERSION = json.loads('{"version_id":"8e5752fe-…","version_name":"1d6ccc5e…",'
                          '"version_timestamp":1796040658569,"created_at":1796040658569}')
LIVE_WORKFLOW = json.loads(
    '{"WorkflowUUID":"9a8a3952-97d5-44d0-9e72-b9da22cef2fe","Status":"SUCCESS","WorkflowName":"probe_workflow",'
    '"WorkflowClassName":null,"WorkflowConfigName":null,"AuthenticatedUser":null,"AssumedRole":null,'
    '"AuthenticatedRoles":null,"Input":"{\'args\': (20,), \'kwargs\': {}}","Output":"42","Error":null,'
    '"CreatedAt":"1796040658645","UpdatedAt":"1796040658688","QueueName":null,'
    '"ApplicationVersion":"1d6ccc5e8501c9d77084185b3c54db01","ExecutorID":"365b48ef-…",'
    '"WorkflowTimeoutMS":null,"WorkflowDeadlineEpochMS":null,"DeduplicationID":null,"Priority":"0",'
    '"QueuePartitionKey":null,"ForkedFrom":null,"WasForkedFrom":false,"ParentWorkflowID":null,'
    '"DequeuedAt":null,"DelayUntilEpochMS":null,"CompletedAt":"1796040658688","Attributes":null,'
    '"ScheduleName":null,"ApplicationName":"relay-probe-app"}')
LIVE_STEP = json.loads(
    '{"function_id":2,"function_name":"add_one","output":"21","error":null,"child_workflow_id":null,'
    '"started_at_epoch_ms":"1796040658675","completed_at_epoch_ms":"1796040658679"}')
LIVE_AGGREGATE = json.loads('{"group":{"status":"SUCCESS","name":"probe_workflow"},"count":1,'
                            '"min_created_at":null,"max_queue_wait_ms":null,"max_total_latency_ms":null}')
TS_STEP = {"function_id": 0, "function_name": "DBOS.setEvent", "output": None, "error": None,
           "child_workflow_id": "wf-child", "started_at_epoch_ms": "1796040658675", "completed_at_epoch_ms": None}
SCHEDULE = {"schedule_id": "s-1", "schedule_name": "nightly", "workflow_name": "report",
            "workflow_class_name": None, "schedule": "0 0 * * *", "status": "ACTIVE", "context": None,
            "last_fired_at": None, "automatic_backfill": False, "cron_timezone": None, "queue_name": None,
            "application_name": "relay-probe-app"}
QUEUE = {"name": "q", "concurrency": None, "worker_concurrency": 2, "rate_limit_max": 10,
         "rate_limit_period_sec": 1,  # an int on the wire for a float field (Go, JS)
         "priority_enabled": True, "partition_queue": False, "polling_interval_sec": 1.5,
         "application_name": "relay-probe-app", "partition_concurrency": None,
         "partition_worker_concurrency": None, "partition_rate_limit_max": None,
         "partition_rate_limit_period_sec": None}


def frame(wire_type: str, **payload: Any) -> dict[str, Any]:
    """A successful Python-style frame: envelope, payload, ``error_message: null``."""
    return {"type": wire_type, "request_id": R, **payload, "error_message": None}


def ok(wire_type: str) -> dict[str, Any]:
    return frame(wire_type, success=True)


# One successful, Python-style (every key, nulls) frame per wire type.
RESPONSE_SAMPLES: dict[str, dict[str, Any]] = {
    "executor_info": json.loads(LIVE_EXECUTOR_INFO),
    "recovery": ok("recovery"),
    "exist_pending_workflows": frame("exist_pending_workflows", exist=False),
    "retention": ok("retention"),
    "cancel": ok("cancel"),
    "resume": ok("resume"),
    "delete": ok("delete"),
    "restart": ok("restart"),
    "fork_workflow": json.loads(LIVE_FORK),
    "fork_from_failure": frame("fork_from_failure", forked_workflow_ids=["wf-2", "wf-3"]),
    "rewind_workflow": ok("rewind_workflow"),
    "list_workflows": frame("list_workflows", output=[LIVE_WORKFLOW]),
    "list_queued_workflows": frame("list_queued_workflows", output=[LIVE_WORKFLOW, LIVE_WORKFLOW]),
    "get_workflow": frame("get_workflow", output=LIVE_WORKFLOW),
    "list_steps": frame("list_steps", output=[LIVE_STEP, TS_STEP]),
    "get_workflow_events": frame("get_workflow_events", events=[{"key": "progress", "value": "50"},
                                                                {"key": "unset", "value": None}]),
    "get_workflow_notifications": frame("get_workflow_notifications", notifications=[
        {"topic": None, "message": "hello", "created_at_epoch_ms": 1796040658645, "consumed": True}]),
    "get_workflow_streams": frame("get_workflow_streams", streams=[{"key": "tokens", "values": ["a", "b"]}]),
    "get_workflow_aggregates": frame("get_workflow_aggregates", output=[LIVE_AGGREGATE]),
    "get_step_aggregates": frame("get_step_aggregates", output=[
        {"group": {"function_name": "add_one", "time_bucket": "1796040600000"}, "count": 3,
         "max_duration_ms": None}]),
    "get_metrics": frame("get_metrics", **LIVE_METRICS),
    "alert": ok("alert"),
    "export_workflow": frame("export_workflow", serialized_workflow="H4sIAAAAAAAA"),
    "import_workflow": ok("import_workflow"),
    "list_schedules": frame("list_schedules", output=[SCHEDULE]),
    "get_schedule": frame("get_schedule", output=SCHEDULE),
    "pause_schedule": ok("pause_schedule"),
    "resume_schedule": ok("resume_schedule"),
    "backfill_schedule": frame("backfill_schedule", workflow_ids=["wf-4"]),
    "trigger_schedule": frame("trigger_schedule", workflow_id="wf-5"),
    "list_application_versions": frame("list_application_versions", output=[LIVE_VERSION]),
    "set_latest_application_version": ok("set_latest_application_version"),
    "list_queues": frame("list_queues", output=[QUEUE]),
    "get_queue": frame("get_queue", output=QUEUE),
}


def ts_style(value: Any) -> Any:
    """What TypeScript's ``JSON.stringify`` sends: unset keys are left out."""
    if isinstance(value, dict):
        return {k: ts_style(v) for k, v in value.items() if v is not None and k != "error_message"}
    if isinstance(value, list):
        return [ts_style(v) for v in value]
    return value


# Free-form maps: any key is data there, not an unknown field.
FREE_FORM = {"group", "executor_metadata"}


def with_extra_keys(value: Any) -> Any:
    """A newer SDK: an unknown key in the frame and in every object inside it."""
    if isinstance(value, dict):
        return {**{k: v if k in FREE_FORM else with_extra_keys(v) for k, v in value.items()},
                "shard_key": {"from": "the future"}}
    if isinstance(value, list):
        return [with_extra_keys(v) for v in value]
    return value


def read(reply: Response) -> Response:
    """``reply`` with get_metrics' entries, held unread, read as :class:`MetricOutput` (as
    relay_es.protocol.metrics reads them), so that answers compare by what they say."""
    if isinstance(reply, c.GetMetricsResponse) and reply.metrics is not None:
        return msgspec.structs.replace(reply, metrics=[msgspec.json.decode(m, type=c.MetricOutput)
                                                       for m in reply.metrics])
    return reply


def decode(wire_type: str, obj: dict[str, Any]) -> Response:
    return read(c.decode_response_for(wire_type, json.dumps(obj)))


def test_every_wire_type_has_a_response_sample() -> None:
    assert set(RESPONSE_SAMPLES) == WIRE_TYPES


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES))
def test_python_style_frame_decodes(wire_type: str) -> None:
    sample = RESPONSE_SAMPLES[wire_type]
    decoded = decode(wire_type, sample)
    assert type(decoded) is c.RESPONSES[wire_type]
    # The sample really is Python style: every field of every object present.
    assert_every_key(decoded, sample)
    assert decoded.request_id == sample["request_id"]
    assert not decoded.failed


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES))
def test_typescript_style_frame_decodes_the_same(wire_type: str) -> None:
    ts = ts_style(RESPONSE_SAMPLES[wire_type])
    assert "error_message" not in ts
    decoded = decode(wire_type, ts)
    assert decoded == decode(wire_type, RESPONSE_SAMPLES[wire_type])
    assert not decoded.failed


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES))
def test_unknown_keys_are_ignored(wire_type: str) -> None:
    sample = RESPONSE_SAMPLES[wire_type]
    assert decode(wire_type, with_extra_keys(sample)) == decode(wire_type, sample)
    assert decode(wire_type, with_extra_keys(ts_style(sample))) == decode(wire_type, sample)


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES))
def test_round_trip(wire_type: str) -> None:
    for sample in (RESPONSE_SAMPLES[wire_type], ts_style(RESPONSE_SAMPLES[wire_type])):
        decoded = decode(wire_type, sample)
        again = read(c.decode_response_for(wire_type, encode(decoded)))
        assert again == decoded
        assert type(again) is type(decoded)


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES))
@pytest.mark.parametrize("style", ["python", "typescript"])
def test_error_message_means_failed_whatever_the_payload(wire_type: str, style: str) -> None:
    sample = RESPONSE_SAMPLES[wire_type]
    failing = {**(sample if style == "python" else ts_style(sample)), "error_message": "boom"}
    if "success" in failing:
        failing["success"] = True
    assert decode(wire_type, failing).failed


@pytest.mark.parametrize("wire_type, field", [("fork_workflow", "new_workflow_id"), ("trigger_schedule", "workflow_id")])
def test_an_empty_new_workflow_id_is_refused_unless_the_executor_said_why(wire_type: str, field: str) -> None:
    """An empty id names no workflow: with no error the reply breaks the protocol (refused, a 502),
    not a success with a workflow nobody can find; with one it is the executor's failure."""
    assert not decode(wire_type, {"type": wire_type, "request_id": R, field: "w-1"}).failed
    with pytest.raises(msgspec.ValidationError, match="empty workflow id"):
        decode(wire_type, {"type": wire_type, "request_id": R, field: ""})
    assert decode(wire_type, {"type": wire_type, "request_id": R, field: "", "error_message": "no"}).failed
    assert decode(wire_type, {"type": wire_type, "request_id": R, field: None}).failed


@pytest.mark.parametrize("wire_type", sorted(WIRE_TYPES - {"executor_info"}))
def test_unknown_message_type_reply_to_a_known_type(wire_type: str) -> None:
    # Section 6: Python 3.x answers this to restart, Go and Java to
    # rewind_workflow -- nothing but the envelope and error_message.
    reply = {"type": wire_type, "request_id": R, "error_message": "Unknown message type"}
    decoded = decode(wire_type, reply)
    assert type(decoded) is c.RESPONSES[wire_type]
    assert decoded.failed
    assert decoded.error_message == "Unknown message type"


def test_executor_info_is_the_only_response_with_required_payload() -> None:
    # Beyond the envelope's type and request_id, every field has a default,
    # so any reply that carries just the envelope and an error decodes.
    required = {t for t, cls in c.RESPONSES.items()
                if {f.name for f in msgspec.structs.fields(cls) if f.required} != {"type", "request_id"}}
    assert required == {"executor_info"}


def test_executor_info_live_example() -> None:
    info = c.decode_response_for("executor_info", LIVE_EXECUTOR_INFO)
    assert isinstance(info, ExecutorInfoResponse)
    assert info.executor_id == "365b48ef-ca98-472b-a11c-13190ad2706b"
    assert info.executor_metadata == {"region": "local-test"}
    assert not info.failed


def test_fork_workflow_live_example() -> None:
    fork = c.decode_response_for("fork_workflow", LIVE_FORK)
    assert isinstance(fork, c.ForkWorkflowResponse)
    assert fork.new_workflow_id == "bc64813d-ef03-4c8d-a2c4-2048083b8809"
    assert not fork.failed


def test_fork_workflow_without_new_id_failed() -> None:
    fork = decode("fork_workflow", {"type": "fork_workflow", "request_id": R, "new_workflow_id": None})
    assert fork.failed


def test_get_metrics_live_example() -> None:
    metrics = decode("get_metrics", frame("get_metrics", **LIVE_METRICS))
    assert isinstance(metrics, c.GetMetricsResponse)
    assert metrics.metrics == [c.MetricOutput(metric_type="workflow_count", metric_name="probe_workflow", value=1),
                               c.MetricOutput(metric_type="step_count", metric_name="add_one", value=1)]


def test_get_metrics_unexpected_class() -> None:
    reply = decode("get_metrics", frame("get_metrics", metrics=[]) | {"error_message": "Unexpected metric class: x"})
    assert reply.failed


def test_list_application_versions_live_example() -> None:
    versions = decode("list_application_versions", frame("list_application_versions", output=[LIVE_VERSION]))
    assert isinstance(versions, c.ListApplicationVersionsResponse)
    assert versions.output == [c.ApplicationVersionOutput(version_id="8e5752fe-…", version_name="1d6ccc5e…",
                                                          version_timestamp=1796040658569,
                                                          created_at=1796040658569)]


def test_workflows_output_keeps_wire_strings() -> None:
    listed = decode("list_workflows", RESPONSE_SAMPLES["list_workflows"])
    assert isinstance(listed, c.ListWorkflowsResponse) and listed.output
    wf = listed.output[0]
    assert wf.CreatedAt == "1796040658645" and wf.Priority == "0"
    assert wf.Input == "{'args': (20,), 'kwargs': {}}"
    assert wf.WasForkedFrom is False


def test_list_workflows_error_with_empty_output() -> None:
    reply = decode("list_workflows", frame("list_workflows", output=[]) | {"error_message": "Traceback ..."})
    assert isinstance(reply, c.ListWorkflowsResponse)
    assert reply.failed and reply.output == []


def test_go_sends_null_for_an_empty_list() -> None:
    reply = decode("list_queues", {"type": "list_queues", "request_id": R, "output": None})
    assert not reply.failed


def test_get_workflow_unknown_id_typescript() -> None:
    # TS omits the output key entirely, with no error.
    reply = decode("get_workflow", {"type": "get_workflow", "request_id": R})
    assert isinstance(reply, c.GetWorkflowResponse)
    assert reply.output is None and not reply.failed


def test_queue_float_fields_accept_ints() -> None:
    queue = decode("get_queue", frame("get_queue", output=QUEUE))
    assert isinstance(queue, c.GetQueueResponse) and queue.output
    assert queue.output.rate_limit_period_sec == 1.0
    assert isinstance(queue.output.rate_limit_period_sec, float)


@pytest.mark.parametrize("payload, failed", [
    ({"success": True}, False),
    ({"success": True, "error_message": None}, False),
    ({"success": True, "error_message": "boom"}, True),
    ({"error_message": "boom"}, True),
    ({"success": False}, True),
    ({}, True),
])
def test_success_response_failed(payload: dict[str, Any], failed: bool) -> None:
    reply = decode("cancel", {"type": "cancel", "request_id": R, **payload})
    assert isinstance(reply, SuccessResponse)
    assert reply.failed is failed


@pytest.mark.parametrize("reply", [
    '{"type":"no_such_type","request_id":"r-1","error_message":"Unknown message type"}',
    '{"type":"no_such_type","request_id":"r-1","error_message":"Unknown message type","extra":1}',
])
def test_unknown_type_decodes_to_the_generic_response(reply: str) -> None:
    decoded = c.decode_response_for("no_such_type", reply)
    assert type(decoded) is UnknownTypeResponse
    assert decoded.type == "no_such_type" and decoded.request_id == "r-1"
    assert decoded.failed


def test_malformed_frame_raises_value_error() -> None:
    with pytest.raises(ValueError):
        c.decode_response_for("fork_workflow", '{"type":"fork_workflow","request_id":"r","new_workflow_id":7}')
    with pytest.raises(ValueError):
        c.decode_response_for("fork_workflow", "not json")
