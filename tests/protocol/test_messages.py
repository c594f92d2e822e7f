"""The core messages (executor_info, recovery, exist_pending_workflows, retention):
what Relay puts on the wire, and what it reads back from both SDK dialects
(Python sends every key, null when unset; TypeScript omits unset keys)."""

from __future__ import annotations

import json

import msgspec
import pytest

from relay_es.protocol import messages as m

R = "1d3a1428-944d-4103-8615-5d824f57b7ec"


def wire(message: msgspec.Struct) -> dict:
    return json.loads(m.encode(message))


# --- requests: every key, null when unset --------------------------------------------


def test_requests_carry_their_type_and_request_id() -> None:
    assert wire(m.ExecutorInfoRequest(request_id=R)) == {"type": "executor_info", "request_id": R}
    assert wire(m.RecoveryRequest(request_id=R, executor_ids=["a", "b"])) == {
        "type": "recovery", "request_id": R, "executor_ids": ["a", "b"]}
    assert wire(m.ExistPendingWorkflowsRequest(request_id=R, executor_id="a", application_version="v1")) == {
        "type": "exist_pending_workflows", "request_id": R, "executor_id": "a", "application_version": "v1"}


def test_a_retention_body_sends_every_key_null_when_unset() -> None:
    # The Python SDK indexes the body's keys directly: a missing one drops the connection.
    assert wire(m.RetentionRequest(request_id=R, body=m.RetentionBody())) == {
        "type": "retention", "request_id": R,
        "body": {"gc_cutoff_epoch_ms": None, "gc_rows_threshold": None, "gc_batch_size": None,
                 "timeout_cutoff_epoch_ms": None},
    }
    body = wire(m.RetentionRequest(request_id=R, body=m.RetentionBody(gc_cutoff_epoch_ms=1, gc_rows_threshold=2)))
    assert body["body"] == {"gc_cutoff_epoch_ms": 1, "gc_rows_threshold": 2, "gc_batch_size": None,
                            "timeout_cutoff_epoch_ms": None}


def test_each_request_s_type_is_its_wire_type() -> None:
    for cls in (m.ExecutorInfoRequest, m.RecoveryRequest, m.ExistPendingWorkflowsRequest, m.RetentionRequest):
        assert cls.TYPE in m.CORE_RESPONSES
        assert wire(_sample(cls))["type"] == cls.TYPE


def _sample(cls: type) -> m.Request:
    extra = {m.RecoveryRequest: {"executor_ids": []},
             m.ExistPendingWorkflowsRequest: {"executor_id": "a", "application_version": "v"},
             m.RetentionRequest: {"body": m.RetentionBody()}}.get(cls, {})
    return cls(request_id=R, **extra)


# --- responses: both dialects --------------------------------------------------------

PYTHON_INFO = {"type": "executor_info", "request_id": R, "executor_id": "e-1", "application_version": "v1",
               "hostname": None, "language": "python", "dbos_version": "3.2.0", "executor_metadata": None,
               "error_message": None}
TYPESCRIPT_INFO = {"type": "executor_info", "request_id": R, "executor_id": "e-1", "application_version": "v1",
                   "language": "typescript"}


def test_executor_info_decodes_from_both_dialects_to_the_same_defaults() -> None:
    py = m.decode_response(json.dumps(PYTHON_INFO), m.ExecutorInfoResponse)
    ts = m.decode_response(json.dumps(TYPESCRIPT_INFO), m.ExecutorInfoResponse)
    for r in (py, ts):
        assert isinstance(r, m.ExecutorInfoResponse)
        assert (r.executor_id, r.application_version, r.hostname, r.executor_metadata, r.error_message) == (
            "e-1", "v1", None, None, None)
        assert not r.failed
    assert (py.language, py.dbos_version) == ("python", "3.2.0")
    assert (ts.language, ts.dbos_version) == ("typescript", None)


def test_executor_info_without_an_executor_id_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        m.decode_response(json.dumps({"type": "executor_info", "request_id": R, "application_version": "v1"}),
                          m.ExecutorInfoResponse)


def test_unknown_keys_are_ignored() -> None:
    r = m.decode_response(json.dumps({**TYPESCRIPT_INFO, "future_field": {"x": 1}}), m.ExecutorInfoResponse)
    assert r.executor_id == "e-1" and not hasattr(r, "future_field")


@pytest.mark.parametrize("payload,failed", [
    ({"success": True}, False),
    ({"success": True, "error_message": None}, False),
    ({"success": False}, True),
    ({}, True),  # TypeScript omitted success: not a success
    ({"success": None}, True),
    ({"success": True, "error_message": "boom"}, True),  # an error message is a failure, whatever success says
    ({"error_message": "Unknown message type"}, True),
])
def test_a_success_response_fails_unless_it_says_success_and_no_error(payload: dict, failed: bool) -> None:
    for type_name in ("recovery", "retention"):
        cls = m.CORE_RESPONSES[type_name]
        r = m.decode_response(json.dumps({"type": type_name, "request_id": R, **payload}), cls)
        assert isinstance(r, m.SuccessResponse)
        assert r.failed is failed


@pytest.mark.parametrize("payload,failed,exist", [
    ({"exist": True}, False, True),
    ({"exist": False, "error_message": None}, False, False),
    ({}, True, None),  # no answer is not "no pending workflows"
    ({"exist": None}, True, None),
    ({"exist": True, "error_message": "db down"}, True, True),
])
def test_exist_pending_workflows_needs_an_answer(payload: dict, failed: bool, exist: bool | None) -> None:
    r = m.decode_response(json.dumps({"type": "exist_pending_workflows", "request_id": R, **payload}),
                          m.CORE_RESPONSES["exist_pending_workflows"])
    assert isinstance(r, m.ExistPendingWorkflowsResponse)
    assert (r.failed, r.exist) == (failed, exist)


def test_the_core_responses_are_the_engine_s_four_types() -> None:
    assert m.CORE_RESPONSES == {
        "executor_info": m.ExecutorInfoResponse,
        "recovery": m.SuccessResponse,
        "exist_pending_workflows": m.ExistPendingWorkflowsResponse,
        "retention": m.SuccessResponse,
    }


# --- routing a frame -----------------------------------------------------------------


def test_the_envelope_is_read_from_any_frame_and_the_rest_left_alone() -> None:
    env = m.decode_envelope(json.dumps({**PYTHON_INFO, "anything": [1, 2]}).encode())
    assert (env.type, env.request_id) == ("executor_info", R)
    assert m.decode_envelope('{"type": "x", "request_id": "r"}') == m.Envelope("x", "r")


@pytest.mark.parametrize("frame", [
    "[]", '"text"', "null", "{}", '{"type": "recovery"}', '{"request_id": "r"}',
    '{"type": 1, "request_id": "r"}', '{"type": "recovery", "request_id": null}', "{not json", "",
])
def test_anything_but_an_object_with_string_type_and_request_id_is_refused(frame: str) -> None:
    with pytest.raises(ValueError):
        m.decode_envelope(frame)


def test_a_frame_nested_too_deeply_is_a_decode_error_not_a_crash() -> None:
    deep = '{"type": "recovery", "request_id": "r", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(RecursionError):  # what msgspec itself raises: the reason for the wrappers
        msgspec.json.decode(deep, type=m.Envelope)
    for decode in (m.decode_envelope, lambda d: m.decode_response(d, m.SuccessResponse)):
        with pytest.raises(msgspec.DecodeError, match="nested too deeply"):  # a ValueError the session handles
            decode(deep)


def test_an_unknown_type_answer_decodes_to_the_envelope_and_its_error() -> None:
    r = m.decode_response(json.dumps({"type": "rewind_workflow", "request_id": R,
                                      "error_message": "Unknown message type"}), m.UnknownTypeResponse)
    assert r.failed and r.error_message == "Unknown message type"
