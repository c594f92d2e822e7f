"""The Sans-I/O session against hostile executors: nothing out of bounds registers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay_es.protocol import messages as m
from relay_es.protocol.session import Answered, Registered, Session, State, Violation


def opened() -> tuple[Session, str]:
    s = Session()
    req = json.loads(s.open())
    return s, req["request_id"]


def reply(rid: str, **fields: Any) -> str:
    base = {"type": "executor_info", "request_id": rid, "executor_id": "e-1", "application_version": "v1",
            "hostname": "h", "language": "python", "dbos_version": "3.2.0", "executor_metadata": None,
            "error_message": None}
    base.update(fields)
    return json.dumps(base)


def registered() -> Session:
    s, rid = opened()
    [ev] = s.receive(reply(rid))
    assert isinstance(ev, Registered)
    return s


def test_a_well_behaved_reply_registers() -> None:
    s, rid = opened()
    [ev] = s.receive(reply(rid, executor_metadata={"region": "eu"}))
    assert isinstance(ev, Registered) and ev.info.executor_id == "e-1"
    assert s.state is State.REGISTERED


@pytest.mark.parametrize("fields", [
    {"hostname": "web\u00001"},
    {"executor_id": "x" * 5000},
    {"executor_id": "e\n2"},
    {"application_version": "v1\x1b[31m"},
    {"language": "py\u202ethon"},
    {"dbos_version": "3" * 65},
    {"executor_metadata": {"k": "v" * 20_000}},
    {"executor_metadata": {"k\u0000": 1}},
    {"executor_metadata": [1, 2, 3]},
])
def test_a_reply_out_of_bounds_is_fatal_and_never_registers(fields: dict[str, Any]) -> None:
    s, rid = opened()
    events = s.receive(reply(rid, **fields))
    assert [type(e) for e in events] == [Violation]
    v = events[0]
    assert v.kind == "info_out_of_bounds" and v.fatal
    assert "\x00" not in v.detail and "\n" not in v.detail and "\x1b" not in v.detail and len(v.detail) < 400
    assert s.state is State.CLOSED and s.info is None


@pytest.mark.parametrize("frame", [
    b"\x00binary",
    "not json",
    json.dumps({"type": "recovery", "request_id": "nobody-asked", "success": True}),
    json.dumps({"type": "executor_info", "request_id": "another-id", "executor_id": "e", "application_version": "v"}),
])
def test_any_other_frame_before_the_executor_info_reply_is_fatal(frame: Any) -> None:
    s, _ = opened()
    [v] = s.receive(frame)
    assert isinstance(v, Violation) and v.kind == "handshake_frame" and v.fatal
    assert s.state is State.CLOSED


def test_a_reply_of_another_type_to_executor_info_is_fatal() -> None:
    s, rid = opened()
    [v] = s.receive(json.dumps({"type": "recovery", "request_id": rid, "success": True}))
    assert isinstance(v, Violation) and v.kind == "type_mismatch" and v.fatal


def test_executor_text_in_a_violation_is_escaped_and_bounded() -> None:
    s = registered()
    [v] = s.receive(json.dumps({"type": "\x00\n" + "t" * 100_000, "request_id": "nobody"}))
    assert v.kind == "unsolicited" and not v.fatal
    assert "\x00" not in v.detail and "\n" not in v.detail and len(v.detail) < 400
    s2, rid = opened()
    [v] = s2.receive(reply(rid, error_message="boom\x00" * 10_000))
    assert v.kind == "info_refused" and "\x00" not in v.detail and len(v.detail) < 400


def test_a_reply_after_relay_stopped_waiting_is_late_not_an_answer() -> None:
    s = registered()
    rid, _ = s.request(lambda r: m.RecoveryRequest(request_id=r, executor_ids=["d"]))
    s.forget(rid)  # the deadline passed
    [v] = s.receive(json.dumps({"type": "recovery", "request_id": rid, "success": True}))
    assert isinstance(v, Violation) and v.kind == "late_reply" and not v.fatal
    # answered once: a second copy is merely unsolicited
    [v] = s.receive(json.dumps({"type": "recovery", "request_id": rid, "success": True}))
    assert v.kind == "unsolicited"


def test_answers_in_time_are_answers() -> None:
    s = registered()
    rid, _ = s.request(lambda r: m.RecoveryRequest(request_id=r, executor_ids=["d"]))
    [a] = s.receive(json.dumps({"type": "recovery", "request_id": rid, "success": True}))
    assert isinstance(a, Answered) and not a.response.failed
    s.forget(rid)  # forgetting an answered request leaves nothing behind
    [v] = s.receive(json.dumps({"type": "recovery", "request_id": rid, "success": True}))
    assert v.kind == "unsolicited"


def test_the_late_ids_kept_are_bounded() -> None:
    s = registered()
    for _ in range(Session.LATE_KEPT * 3):
        rid, _ = s.request(lambda r: m.RecoveryRequest(request_id=r, executor_ids=["d"]))
        s.forget(rid)
    assert len(s._expired) == Session.LATE_KEPT


def test_nothing_is_acted_on_after_a_fatal_violation() -> None:
    """A valid executor_info reply right behind junk never registers: the junk
    closed the session (seen live: the reply was queued before the close)."""
    s, rid = opened()
    [v] = s.receive("junk")
    assert v.fatal and s.state is State.CLOSED
    assert s.receive(reply(rid)) == []
    s2, rid2 = opened()
    s2.receive(reply(rid2, hostname="a\x00"))
    assert s2.receive(reply(rid2)) == [] and s2.info is None


def test_every_catalogue_reply_decodes_into_its_type_straight_from_the_frame() -> None:
    from relay_es.protocol import catalogue as c

    s = registered()
    rid, _ = s.request(lambda r: c.ListWorkflowsRequest(request_id=r, body=c.ListWorkflowsBody(
        load_input=False, load_output=False)))
    [ev] = s.receive(json.dumps({"type": "list_workflows", "request_id": rid,
                                 "output": [{"WorkflowUUID": "w1", "CreatedAt": "1796040658645"}]}))
    assert isinstance(ev, Answered) and isinstance(ev.response, c.ListWorkflowsResponse)
    assert ev.response.output is not None and ev.response.output[0].WorkflowUUID == "w1"


def test_an_unusable_reply_answers_its_request_with_a_refused_reply_and_nothing_else() -> None:
    """A field of the wrong type, or a reply of another type than the request's: a non-fatal
    violation, and the request answered with a RefusedReply (never with the executor's
    data); an answer to no request answers nothing; the other requests stay outstanding."""
    from relay_es.protocol import catalogue as c
    from relay_es.protocol.session import RefusedReply

    s = registered()
    wrong, _ = s.request(lambda r: c.GetWorkflowRequest(request_id=r, workflow_id="w"))
    other, _ = s.request(lambda r: c.ListStepsRequest(request_id=r, workflow_id="w"))
    waiting, _ = s.request(lambda r: c.GetQueueRequest(request_id=r, name="q"))
    bad, refused = s.receive(json.dumps({"type": "get_workflow", "request_id": wrong, "output": "not an object"}))
    assert isinstance(bad, Violation) and bad.kind == "malformed_reply" and not bad.fatal
    assert isinstance(refused, Answered) and isinstance(refused.response, RefusedReply)
    assert "malformed 'get_workflow' reply" in (refused.response.error_message or "")
    mismatch, refused = s.receive(json.dumps({"type": "cancel", "request_id": other, "success": True}))
    assert mismatch.kind == "type_mismatch" and isinstance(refused.response, RefusedReply)
    [unsolicited] = s.receive(json.dumps({"type": "get_queue", "request_id": "never-made", "output": None}))
    assert isinstance(unsolicited, Violation) and unsolicited.kind == "unsolicited" and not unsolicited.fatal
    assert s.state is State.REGISTERED and list(s.pending) == [waiting]
