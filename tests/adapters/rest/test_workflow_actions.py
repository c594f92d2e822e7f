"""Workflow actions (``relay_es/adapters/rest/workflow_actions.py``) on a real ``relay serve``, both
stores, with fake executors of both SDK dialects (Python sends nulls, TypeScript omits keys).

Each of the ten operations round-trips: the executor gets its protocol message with every field
(conductor-protocol.md sections 5.4-5.7 and 5.18), the client gets Conductor's status and body
(validated with ``tests/conductor_schema.py``). Each action is two audit entries linked by
``actionId`` (who, what, the outcome), also when it fails (no executor 503, no answer 504, the
executor's error with the status its message calls for). Bad bodies and an app-limited token are
refused before anything is sent or recorded.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from relay_es.adapters.rest import releases
from relay_es.adapters.rest.conductor import mapping, models
from relay_es.adapters.rest.workflow_actions import (
    BULK_BODY,
    IMPORT_BODY,
    failed_status,
    query_flag,
)
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol.messages import encode
from tests.adapters.rest.servers import known
from tests.conductor_schema import check_response
from tests.fake_executor import FakeExecutor
from tests.rest_client import as_records, audit_log
from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.server import admin_token as server_admin_token

L = "/v2/orgs/local"
FAST = {"RELAY_PING_INTERVAL_SECS": "1", "RELAY_PING_WAIT_SECS": "3", "RELAY_CALL_TIMEOUT_SECS": "2"}
STYLES = ("python", "typescript")
BLOB = "H4sIAAAAAAAA/6tWKkktLlGyUlAqS8wpTVWqBQBm3+AnEgAAAA=="  # opaque to Relay: passed through
ACTION_TYPES = {"cancel", "resume", "fork_workflow", "delete", "fork_from_failure", "export_workflow",
                "import_workflow"}


# --- the executor's side -----------------------------------------------------------------------


def answers(errors: dict[str, str] | None = None) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The action types answered as an SDK would; ``errors``: type -> the error message it answers with."""
    errors = errors or {}

    def ok(type_: str, **fields: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def answer(req: dict[str, Any]) -> dict[str, Any]:
            if type_ in errors:
                return {"success": False, "error_message": errors[type_]}
            return {"success": True, **fields}
        return answer

    def fork(req: dict[str, Any]) -> dict[str, Any]:
        if "fork_workflow" in errors:
            return {"new_workflow_id": None, "error_message": errors["fork_workflow"]}
        return {"new_workflow_id": req["body"]["new_workflow_id"] or "wf-forked"}

    def fork_from_failure(req: dict[str, Any]) -> dict[str, Any]:
        if "fork_from_failure" in errors:
            return {"forked_workflow_ids": None, "error_message": errors["fork_from_failure"]}
        return {"forked_workflow_ids": [f"{w}-fork" for w in req["body"]["workflow_ids"]]}

    def export(req: dict[str, Any]) -> dict[str, Any]:
        if "export_workflow" in errors:
            return {"serialized_workflow": None, "error_message": errors["export_workflow"] or None}
        return {"serialized_workflow": BLOB}

    return {"cancel": ok("cancel"), "resume": ok("resume"), "delete": ok("delete"), "fork_workflow": fork,
            "fork_from_failure": fork_from_failure, "export_workflow": export,
            "import_workflow": ok("import_workflow")}


# --- the client's side -------------------------------------------------------------------------


def conforms(operation: str, r: httpx.Response, status: int) -> Any:
    assert r.status_code == status, (operation, r.status_code, r.text[:500])
    body = r.json() if r.content else None
    if status >= 400:
        assert r.headers["content-type"].startswith("application/problem+json"), r.headers
        assert body["status"] == status and body["detail"], body
    check_response(operation, status, body)
    return body


class Loop:
    """An event loop in a thread, for the fake executors while the test thread speaks REST."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 20) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


def healthy(s: RelayServer, f: FakeExecutor, org: str, token: str | None) -> bool:
    r = call(s, "GET", f"/v2/orgs/{org}/apps/{f.app}/executors", token)
    return r.status_code == 200 and any(e["executorId"] == f.executor_id and e["status"] == "HEALTHY"
                                        for e in r.json())


@contextmanager
def executors(s: RelayServer, *fakes: FakeExecutor, org: str = "local", token: str | None = None) -> Iterator[Loop]:
    loop = Loop()
    try:
        for f in fakes:
            loop.run(f.connect())
            wait(lambda f=f: healthy(s, f, org, token), f"{f.executor_id} healthy")
        yield loop
    finally:
        for f in fakes:
            with suppress(Exception):  # a fake the test already closed, or whose socket dropped
                loop.run(f.close(), 10)
        loop.stop()


def sent(ex: FakeExecutor) -> list[dict[str, Any]]:
    """The action requests ``ex`` received, in order."""
    return [r for r in ex.requests if r.get("type") in ACTION_TYPES]


def last(ex: FakeExecutor) -> dict[str, Any]:
    msg = dict(sent(ex)[-1])
    assert msg.pop("request_id")
    return msg


def actions(s: RelayServer, app: str, count: int, org: str = "local", token: str | None = None) -> list[dict[str, Any]]:
    """The app's actions from the audit log, once ``count`` have completed (the log is a read model,
    brought up to date in the background): ``{operation, actor, source, target, parameters,
    outcome, message, result, executorId}``, one per actionId, in order."""
    deadline = time.monotonic() + 15
    while True:
        found = _actions(s, app, org, token)
        if len([a for a in found if "outcome" in a]) >= count or time.monotonic() > deadline:
            assert len(found) == count and all("outcome" in a for a in found), found
            return found
        time.sleep(0.05)


# Relay's own changes, on record beside the workflow actions (test_audit.py checks them)
OWN = frozenset({"registerApp", "updateApp", "deleteApp", "createToken", "deleteToken"})


def _actions(s: RelayServer, app: str, org: str, token: str | None, *, refused: bool = False) -> list[dict[str, Any]]:
    """The workflow actions on ``app`` Relay carried out, or (``refused``) the calls it refused."""
    out = []
    for req, done in as_records(audit_log(s, org, token), app):
        if req["operation"] in OWN or (done is not None and done["outcome"] == "refused") != refused:
            continue
        a = {k: req[k] for k in ("operation", "actor", "target", "parameters", "source")}
        if done is not None:
            a.update(outcome=done["outcome"], message=done["message"], result=done["result"],
                     executorId=done["executorId"])
        out.append(a)
    return out


@pytest.fixture
def srv(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield s
    s.stop()


# --- every action, both dialects ---------------------------------------------------------------


def test_every_action_round_trips_in_both_dialects_and_is_on_record(srv: RelayServer) -> None:
    fakes = {style: FakeExecutor(srv.ws, app=f"act-{style[:2]}", executor_id=f"ex-{style[:2]}", style=style,
                                 answers=answers()) for style in STYLES}
    with executors(srv, *fakes.values()):
        for style, ex in fakes.items():
            try:
                check_every_action(srv, f"{L}/apps/{ex.app}", ex)
            except AssertionError as e:
                raise AssertionError(f"{style}: {e}") from e


def check_every_action(srv: RelayServer, A: str, ex: FakeExecutor) -> None:
    W = A + "/workflows"
    # cancelWorkflow: the body is optional
    conforms("cancelWorkflow", call(srv, "POST", W + "/wf-1/cancel", json={"cancelChildren": True}), 204)
    assert last(ex) == {"type": "cancel", "workflow_id": "wf-1", "workflow_ids": None, "cancel_children": True}
    conforms("cancelWorkflow", call(srv, "POST", W + "/wf-2/cancel"), 204)
    assert last(ex) == {"type": "cancel", "workflow_id": "wf-2", "workflow_ids": None, "cancel_children": False}
    # resumeWorkflow
    conforms("resumeWorkflow", call(srv, "POST", W + "/wf-1/resume", json={"queueName": "q"}), 204)
    assert last(ex) == {"type": "resume", "workflow_id": "wf-1", "workflow_ids": None, "queue_name": "q"}
    conforms("resumeWorkflow", call(srv, "POST", W + "/wf-2/resume", json={}), 204)
    assert last(ex)["queue_name"] is None
    # forkWorkflow: every key of the body on the wire (Python indexes the first four); without
    # startStep it starts at 0, which copies no step on either SDK
    r = call(srv, "POST", W + "/wf-1/fork", json={"startStep": 2, "newWorkflowId": "wf-new", "appVersion": "v2",
                                                 "queueName": "q", "queuePartitionKey": "k"})
    assert conforms("forkWorkflow", r, 201) == {"workflowId": "wf-new"}
    assert r.headers["location"] == W + "/wf-new"
    assert last(ex) == {"type": "fork_workflow", "body": {
        "workflow_id": "wf-1", "start_step": 2, "application_version": "v2", "new_workflow_id": "wf-new",
        "queue_name": "q", "queue_partition_key": "k"}}
    r = call(srv, "POST", W + "/wf:3+x/fork")
    assert conforms("forkWorkflow", r, 201) == {"workflowId": "wf-forked"}
    assert last(ex) == {"type": "fork_workflow", "body": {
        "workflow_id": "wf:3+x", "start_step": 0, "application_version": None, "new_workflow_id": None,
        "queue_name": None, "queue_partition_key": None}}
    # deleteWorkflow
    conforms("deleteWorkflow", call(srv, "DELETE", W + "/wf-1", params={"deleteChildren": "true"}), 204)
    assert last(ex) == {"type": "delete", "workflow_id": "wf-1", "workflow_ids": None, "delete_children": True}
    conforms("deleteWorkflow", call(srv, "DELETE", W + "/wf-2", params={"deleteChildren": "0"}), 204)
    assert last(ex)["delete_children"] is False
    # the bulk forms: the first id in workflow_id too (Python requires the key)
    conforms("bulkCancelWorkflows", call(srv, "POST", W + "/bulk-cancel",
                                         json={"workflowIds": ["a", "b"], "cancelChildren": True}), 204)
    assert last(ex) == {"type": "cancel", "workflow_id": "a", "workflow_ids": ["a", "b"], "cancel_children": True}
    conforms("bulkResumeWorkflows", call(srv, "POST", W + "/bulk-resume",
                                         json={"workflowIds": ["a", "b"], "queueName": "q"}), 204)
    assert last(ex) == {"type": "resume", "workflow_id": "a", "workflow_ids": ["a", "b"], "queue_name": "q"}
    conforms("bulkDeleteWorkflows", call(srv, "POST", W + "/bulk-delete", json={"workflowIds": ["a"]}), 204)
    assert last(ex) == {"type": "delete", "workflow_id": "a", "workflow_ids": ["a"], "delete_children": False}
    got = conforms("bulkForkWorkflowsFromFailure", call(srv, "POST", W + "/bulk-fork-from-failure",
                                                        json={"workflowIds": ["a", "b"]}), 200)
    assert got == {"workflowIds": ["a-fork", "b-fork"]}
    # what is not set is left out: TypeScript counts a null starting point as chosen
    assert last(ex) == {"type": "fork_from_failure", "body": {"workflow_ids": ["a", "b"], "from_last_failure": True}}
    conforms("bulkForkWorkflowsFromFailure", call(srv, "POST", W + "/bulk-fork-from-failure", json={
        "workflowIds": ["a"], "fromStepName": "charge", "appVersion": "v2", "queueName": "q",
        "queuePartitionKey": "k"}), 200)
    assert last(ex)["body"] == {"workflow_ids": ["a"], "application_version": "v2", "queue_name": "q",
                                "queue_partition_key": "k", "from_step_name": "charge"}
    conforms("bulkForkWorkflowsFromFailure", call(srv, "POST", W + "/bulk-fork-from-failure",
                                                  json={"workflowIds": ["a"], "fromStep": 0}), 200)
    assert last(ex)["body"] == {"workflow_ids": ["a"], "from_step": 0}
    # exportWorkflow (a read) and importWorkflow: the blob passes through as it is
    got = conforms("exportWorkflow", call(srv, "GET", W + "/wf-1/export", params={"exportChildren": "true"}), 200)
    assert got == {"serializedWorkflow": BLOB}
    assert last(ex) == {"type": "export_workflow", "workflow_id": "wf-1", "export_children": True}
    conforms("exportWorkflow", call(srv, "GET", W + "/wf-1/export"), 200)
    assert last(ex)["export_children"] is False
    r = call(srv, "POST", W + "/import", json={"serializedWorkflow": BLOB})
    conforms("importWorkflow", r, 201)
    assert r.content == b"" and "content-type" not in r.headers, r.headers  # the reference declares no content
    assert last(ex) == {"type": "import_workflow", "serialized_workflow": BLOB}
    # a serialized workflow far above the app-wide 64 KiB body cap: passed through, intact
    big = "A" * (8 * 1024 * 1024)
    conforms("importWorkflow", call(srv, "POST", W + "/import", json={"serializedWorkflow": big}), 201)
    assert sent(ex)[-1]["serialized_workflow"] == big

    # every action but export on record: who, what, the outcome; never a payload
    on_record = actions(srv, ex.app, 16)
    assert [a["operation"] for a in on_record] == [
        "cancelWorkflow", "cancelWorkflow", "resumeWorkflow", "resumeWorkflow", "forkWorkflow", "forkWorkflow",
        "deleteWorkflow", "deleteWorkflow", "bulkCancelWorkflows", "bulkResumeWorkflows", "bulkDeleteWorkflows",
        "bulkForkWorkflowsFromFailure", "bulkForkWorkflowsFromFailure", "bulkForkWorkflowsFromFailure",
        "importWorkflow", "importWorkflow"]
    for a in on_record:
        assert a["actor"] == {"kind": "user", "id": "development"} and a["source"] == "127.0.0.1", a
        assert a["outcome"] == "succeeded" and a["message"] is None and a["executorId"] == ex.executor_id, a
        assert a["target"]["type"] == "workflow", a
    by = {i: a for i, a in enumerate(on_record)}
    assert (by[0]["target"], by[0]["parameters"]) == ({"type": "workflow", "ids": ["wf-1"], "count": 1},
                                                      {"cancelChildren": True})
    assert by[3]["parameters"] == {"queueName": None}
    assert by[4]["parameters"] == {"startStep": 2, "newWorkflowId": "wf-new", "appVersion": "v2",
                                   "queueName": "q", "queuePartitionKey": "k"}
    assert (by[4]["result"], by[5]["result"]) == ({"workflowId": "wf-new"}, {"workflowId": "wf-forked"})
    assert by[5]["target"]["ids"] == ["wf:3+x"] and by[5]["parameters"]["startStep"] == 0
    assert by[6]["parameters"] == {"deleteChildren": True}
    assert (by[8]["target"], by[8]["parameters"]) == ({"type": "workflow", "ids": ["a", "b"], "count": 2},
                                                      {"workflowCount": 2, "cancelChildren": True})
    assert by[9]["parameters"] == {"workflowCount": 2, "queueName": "q"}
    assert by[11]["parameters"]["from"] == "lastFailure" and by[12]["parameters"]["from"] == "stepName"
    assert by[11]["result"] == {"forkedCount": 2, "firstWorkflowId": "a-fork"}
    assert by[13]["parameters"]["from"] == "step" and by[13]["parameters"]["fromStep"] == 0
    assert by[14]["target"] == {"type": "workflow", "ids": [], "count": 0}
    assert (by[14]["parameters"], by[15]["parameters"]) == ({"serializedChars": len(BLOB)},
                                                            {"serializedChars": len(big)})

    # an id holding "/" (the application chose it), sent encoded: one id, sent and on record as it is
    conforms("cancelWorkflow", call(srv, "POST", W + "/" + quote("orders/42", safe="") + "/cancel"), 204)
    assert last(ex)["workflow_id"] == "orders/42"
    assert actions(srv, ex.app, 17)[-1]["target"] == {"type": "workflow", "ids": ["orders/42"], "count": 1}


def test_resume_and_fork_go_to_the_latest_version_first(srv: RelayServer) -> None:
    old = FakeExecutor(srv.ws, app="shop", executor_id="ex-v1", version="v1", answers=answers())
    new = FakeExecutor(srv.ws, app="shop", executor_id="ex-v2", version="v2", answers=answers())
    with executors(srv, old, new):
        W = L + "/apps/shop/workflows"
        for _ in range(3):
            conforms("resumeWorkflow", call(srv, "POST", W + "/wf-1/resume"), 204)
            conforms("forkWorkflow", call(srv, "POST", W + "/wf-1/fork"), 201)
            conforms("bulkResumeWorkflows", call(srv, "POST", W + "/bulk-resume", json={"workflowIds": ["a"]}), 204)
            conforms("bulkForkWorkflowsFromFailure", call(srv, "POST", W + "/bulk-fork-from-failure",
                                                          json={"workflowIds": ["a"]}), 200)
        assert sent(old) == [] and len(sent(new)) == 12


BULKS = [  # operation, path, body of several workflows, executor type
    ("bulkCancelWorkflows", "/bulk-cancel", {"workflowIds": ["wf-a", "wf-b", "wf-c"]}, "cancel"),
    ("bulkResumeWorkflows", "/bulk-resume", {"workflowIds": ["wf-a", "wf-b"], "queueName": "q"}, "resume"),
    ("bulkDeleteWorkflows", "/bulk-delete", {"workflowIds": ["wf-a", "wf-b"], "deleteChildren": True}, "delete"),
]


def test_a_bulk_action_on_several_workflows_goes_only_to_an_sdk_that_acts_on_them_all(srv: RelayServer) -> None:
    """A Python SDK older than 2.15 (no ``language`` nor ``dbos_version`` in its executor_info) reads
    ``workflow_id`` alone: sent a bulk cancel of three workflows it cancels the first and answers
    success. So such a bulk goes to an executor with the bulk form, or is a 501 on record as failed,
    nothing sent; one workflow goes to any executor. Each id an executor acted on is what it was sent."""
    acted: dict[str, list[str]] = {}

    def acting(ex_id: str) -> dict[str, Callable[[dict[str, Any]], Any]]:
        def act(req: dict[str, Any]) -> dict[str, Any]:  # as an SDK of the executor's version does
            acted.setdefault(ex_id, []).extend(req["workflow_ids"] if ex_id != "ex-old" else [req["workflow_id"]])
            return {"success": True}
        return {"cancel": act, "resume": act, "delete": act}

    old = FakeExecutor(srv.ws, app="old", executor_id="ex-old", sdk=None, answers=acting("ex-old"))
    old_ts = FakeExecutor(srv.ws, app="mixed", executor_id="ex-ts", style="typescript",
                          sdk=("typescript", "4.10.15"), answers=acting("ex-ts"))
    new = FakeExecutor(srv.ws, app="mixed", executor_id="ex-new", sdk=("python", "2.15.0"), answers=acting("ex-new"))
    with executors(srv, old, old_ts, new):
        for op, path, body, _ in BULKS:
            got = conforms(op, call(srv, "POST", f"{L}/apps/old/workflows{path}", json=body), 501)
            assert got["title"] == "not supported by the executor", got
            assert "predates bulk actions" in got["detail"] and "Python dbos 2.15" in got["detail"] and \
                "one workflow at a time" in got["detail"], got
        assert sent(old) == [] and acted == {}
        # one workflow (twice over): the single form, which every SDK reads
        conforms("bulkCancelWorkflows", call(srv, "POST", f"{L}/apps/old/workflows/bulk-cancel",
                                             json={"workflowIds": ["wf-1", "wf-1"]}), 204)
        assert last(old) == {"type": "cancel", "workflow_id": "wf-1", "workflow_ids": ["wf-1", "wf-1"],
                             "cancel_children": False}
        for _ in range(2):  # among executors of both kinds: only the one that acts on them all
            for op, path, body, type_ in BULKS:
                conforms(op, call(srv, "POST", f"{L}/apps/mixed/workflows{path}", json=body), 204)
                assert last(new)["type"] == type_ and last(new)["workflow_ids"] == body["workflowIds"]
        assert sent(old_ts) == [] and len(sent(new)) == 6
    assert acted == {"ex-old": ["wf-1"], "ex-new": ["wf-a", "wf-b", "wf-c", "wf-a", "wf-b", "wf-a", "wf-b"] * 2}

    on_record = actions(srv, "old", 4)
    assert [(a["operation"], a["outcome"], a["executorId"]) for a in on_record] == [
        ("bulkCancelWorkflows", "failed", None), ("bulkResumeWorkflows", "failed", None),
        ("bulkDeleteWorkflows", "failed", None), ("bulkCancelWorkflows", "succeeded", "ex-old")]
    assert all("predates bulk actions" in a["message"] for a in on_record[:3]), on_record
    assert on_record[0]["target"] == {"type": "workflow", "ids": ["wf-a", "wf-b", "wf-c"], "count": 3}
    assert {(a["outcome"], a["executorId"]) for a in actions(srv, "mixed", 6)} == {("succeeded", "ex-new")}


@pytest.mark.parametrize("language,version,capable", [
    (None, None, False),  # Python before 2.15: neither key
    ("python", "2.14.2", False), ("python", "2.15.0", True), ("python", "3.2.0", True), ("python", None, False),
    ("typescript", "4.10.15", False), ("typescript", "4.11.11", True), ("typescript", "5.2.11", True),
    ("go", "v0.14.0", False), ("go", "v0.15.0", True), ("go", "v1.2.0", True), ("go", "(devel)", False),
    ("go", "unknown", False), ("java", "0.9.1", False), ("java", "1.0.0", True),
    ("rust", "9.0.0", False),  # an SDK Relay does not know is not trusted with it
    ("python", "2.1", False), ("python", "12.15", True), ("python", "2.15rc1", True), ("python", "x2.15", False),
])
def test_the_bulk_form_is_trusted_to_the_sdk_releases_that_have_it(language: str | None, version: str | None,
                                                                   capable: bool) -> None:
    assert releases.bulk_capable(language, version) is capable


# --- failures: problems, and on record ---------------------------------------------------------

CALLS = [  # operation, method, path, body, executor type
    ("cancelWorkflow", "POST", "/workflows/wf-1/cancel", None, "cancel"),
    ("resumeWorkflow", "POST", "/workflows/wf-1/resume", None, "resume"),
    ("forkWorkflow", "POST", "/workflows/wf-1/fork", {"startStep": 1}, "fork_workflow"),
    ("deleteWorkflow", "DELETE", "/workflows/wf-1", None, "delete"),
    ("bulkCancelWorkflows", "POST", "/workflows/bulk-cancel", {"workflowIds": ["a"]}, "cancel"),
    ("bulkResumeWorkflows", "POST", "/workflows/bulk-resume", {"workflowIds": ["a"]}, "resume"),
    ("bulkDeleteWorkflows", "POST", "/workflows/bulk-delete", {"workflowIds": ["a"]}, "delete"),
    ("bulkForkWorkflowsFromFailure", "POST", "/workflows/bulk-fork-from-failure", {"workflowIds": ["a"]},
     "fork_from_failure"),
    ("importWorkflow", "POST", "/workflows/import", {"serializedWorkflow": BLOB}, "import_workflow"),
]
ACTIONS = [c[0] for c in CALLS]


def test_no_executor_is_503_and_no_answer_504_both_on_record(srv: RelayServer) -> None:
    assert call(srv, "PUT", L + "/apps/idle").status_code in (201, 204)
    for op, method, path, body, _ in CALLS:
        r = call(srv, method, L + "/apps/idle" + path, json=body)
        assert conforms(op, r, 503)["title"] == "no healthy executor" and r.headers["retry-after"] == "5"
        conforms(op, call(srv, method, L + "/apps/nope" + path, json=body), 404)  # no application: not recorded
    conforms("exportWorkflow", call(srv, "GET", L + "/apps/idle/workflows/wf-1/export"), 503)
    on_record = actions(srv, "idle", len(ACTIONS))
    assert [a["operation"] for a in on_record] == ACTIONS
    assert {a["outcome"] for a in on_record} == {"no_healthy_executor"}
    assert _actions(srv, "nope", "local", None) == []

    silent = FakeExecutor(srv.ws, app="shop", executor_id="ex-silent",
                          answers={t: (lambda req: None) for t in ACTION_TYPES})
    with executors(srv, silent):
        for op, method, path, body, _ in CALLS[:2]:
            t = time.monotonic()
            assert conforms(op, call(srv, method, L + "/apps/shop" + path, json=body), 504)["title"] == \
                "executor did not answer"
            assert 1.8 < time.monotonic() - t < 10
    on_record = actions(srv, "shop", 2)
    assert [(a["operation"], a["outcome"], a["executorId"]) for a in on_record] == [
        ("cancelWorkflow", "timed_out", "ex-silent"), ("resumeWorkflow", "timed_out", "ex-silent")]


def test_a_fork_answered_with_an_empty_id_is_a_502_on_record_as_failed(srv: RelayServer) -> None:
    """An empty id names no workflow: the answer is refused (502), not a 500 'the executor reported an
    error' with no error, and not a success on record with a fork nobody can find."""
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-empty",
                      answers={"fork_workflow": lambda req: {"new_workflow_id": ""}})
    with executors(srv, ex):
        r = conforms("forkWorkflow", call(srv, "POST", L + "/apps/shop/workflows/wf-1/fork", json={}), 502)
        assert r["title"] == "executor reply refused" and "empty workflow id" in r["detail"]
    [fork] = actions(srv, "shop", 1)
    assert (fork["operation"], fork["outcome"]) == ("forkWorkflow", "failed")


def test_an_empty_optional_id_or_name_is_not_given_and_an_empty_required_one_is_a_422(srv: RelayServer) -> None:
    """Seen with real SDKs: a TypeScript executor made a fork of id '' (PENDING for ever, unreachable)
    while Relay answered 502; a fork of version '' and a resume on queue '' waited for ever. Now ""
    is sent as not given (the executor picks the id, the workflow keeps its version and queue), and
    on record so; a bulk action's empty id and an empty step name are refused, nothing sent."""
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-1", style="typescript", answers=answers())
    W = L + "/apps/shop/workflows"
    with executors(srv, ex):
        for op, path, body, status in [
                ("bulkCancelWorkflows", "/bulk-cancel", {"workflowIds": ["a", ""]}, 422),
                ("bulkForkWorkflowsFromFailure", "/bulk-fork-from-failure",
                 {"workflowIds": ["a"], "fromStepName": ""}, 422)]:
            assert ("length >= 1" in conforms(op, call(srv, "POST", W + path, json=body), status)["detail"])
        assert sent(ex) == []
        r = call(srv, "POST", W + "/wf-1/fork", json={"newWorkflowId": "", "appVersion": "", "queueName": "",
                                                      "queuePartitionKey": ""})
        assert conforms("forkWorkflow", r, 201) == {"workflowId": "wf-forked"}  # the id the executor picked
        assert last(ex)["body"] == {"workflow_id": "wf-1", "start_step": 0, "application_version": None,
                                    "new_workflow_id": None, "queue_name": None, "queue_partition_key": None}
        conforms("resumeWorkflow", call(srv, "POST", W + "/wf-1/resume", json={"queueName": ""}), 204)
        assert last(ex)["queue_name"] is None
        conforms("bulkResumeWorkflows", call(srv, "POST", W + "/bulk-resume",
                                             json={"workflowIds": ["a"], "queueName": ""}), 204)
        assert last(ex)["queue_name"] is None
        conforms("bulkForkWorkflowsFromFailure", call(srv, "POST", W + "/bulk-fork-from-failure", json={
            "workflowIds": ["a"], "appVersion": "", "queueName": "", "queuePartitionKey": ""}), 200)
        assert last(ex)["body"] == {"workflow_ids": ["a"], "from_last_failure": True}
    fork, resume, bulk_resume, bulk_fork = actions(srv, "shop", 4)
    assert fork["parameters"] == {"startStep": 0, "newWorkflowId": None, "appVersion": None, "queueName": None,
                                  "queuePartitionKey": None}
    assert fork["result"] == {"workflowId": "wf-forked"} and fork["outcome"] == "succeeded"
    assert resume["parameters"]["queueName"] is None and bulk_resume["parameters"]["queueName"] is None
    assert (bulk_fork["parameters"]["appVersion"], bulk_fork["parameters"]["queueName"]) == (None, None)


# The executor's error message -> the status it calls for (workflow_actions.failed_status).
ERRORS = [
    ("cancelWorkflow", "cancel", ("Exception encountered when cancelling workflow(s) ['wf-1']: Traceback ...\n"
     "dbos._error.DBOSNonExistentWorkflowError: Non-existent target workflow ID: wf-1"), 404),
    ("resumeWorkflow", "resume", "Exception encountered when resuming workflow wf-1: database is down", 500),
    ("forkWorkflow", "fork_workflow", ("Exception encountered when forking workflow wf-1: DBOSNonExistentWorkflowError: "
     "Workflow wf-1 does not exist"), 404),
    ("deleteWorkflow", "delete", "psycopg.OperationalError: connection refused", 500),
    ("bulkCancelWorkflows", "cancel", "Exception encountered when cancelling: out of memory", 500),
    ("bulkResumeWorkflows", "resume", "DBOSNonExistentWorkflowError: Non-existent target workflow ID: a", 404),
    ("bulkDeleteWorkflows", "delete", "Exception: timeout", 500),
    ("bulkForkWorkflowsFromFailure", "fork_from_failure", ("Exception encountered when bulk forking workflows: "
     "Workflow a has no step named 'charge'"), 422),
    ("importWorkflow", "import_workflow", ("Exception encountered when importing workflow: Traceback ...\n"
     "_pickle.UnpicklingError: invalid load key, '{'."), 422),
    # the executor's database: "does not exist" there is no 404, the workflow may well exist
    ("cancelWorkflow", "cancel", ("Exception encountered when cancelling workflow(s) ['wf-1']: Traceback ...\n"
     'psycopg.errors.UndefinedTable: relation "dbos.workflow_status" does not exist'), 500),
    ("bulkDeleteWorkflows", "delete", ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  '
     'database "shop_dbos_sys" does not exist'), 500),
]


@pytest.mark.parametrize("style", STYLES)
def test_the_executors_error_is_a_problem_with_the_status_its_message_calls_for(srv: RelayServer,
                                                                                style: str) -> None:
    calls = {c[0]: c for c in CALLS}
    for n, (op, type_, message, status) in enumerate(ERRORS):
        ex = FakeExecutor(srv.ws, app=f"err-{n}", executor_id=f"ex-{n}", style=style,
                          answers=answers({type_: message}))
        with executors(srv, ex):
            _, method, path, body, _ = calls[op]
            r = conforms(op, call(srv, method, f"{L}/apps/{ex.app}{path}", json=body), status)
            assert r["title"] == "executor reported an error" and message.splitlines()[-1][-30:] in r["detail"], r
        [a] = actions(srv, ex.app, 1)
        assert (a["operation"], a["outcome"]) == (op, "failed") and message[:40] in a["message"], a
        assert not a["result"]

    more = [  # what else an executor says
        ("forkWorkflow", {"fork_workflow": "DBOSWorkflowConflictIDError: Conflicting workflow invocation with the "
                                          "same ID (wf-new): already exists"}, "/workflows/wf-1/fork", 409),
        ("importWorkflow", {"import_workflow": "Exception encountered when importing workflow: IntegrityError: "
                                               "duplicate key value violates unique constraint"},
         "/workflows/import", 409),
        ("importWorkflow", {"import_workflow": "import_workflow is not allowed in conductor metadata-only mode"},
         "/workflows/import", 403),
        ("exportWorkflow", {"export_workflow": "export_workflow is not allowed in conductor metadata-only mode"},
         "/workflows/wf-1/export", 403),
        ("exportWorkflow", {"export_workflow": "Exception encountered when exporting workflow wf-9: "
                                               "Workflow wf-9 does not exist"}, "/workflows/wf-9/export", 404),
        # TypeScript exports an unknown id as nothing, without an error
        ("exportWorkflow", {"export_workflow": ""}, "/workflows/wf-9/export", 404),
    ]
    for n, (op, errors, path, status) in enumerate(more):
        ex = FakeExecutor(srv.ws, app=f"more-{n}", executor_id=f"mx-{n}", style=style, answers=answers(errors))
        with executors(srv, ex):
            body = {"serializedWorkflow": BLOB} if op == "importWorkflow" else None
            conforms(op, call(srv, "GET" if op == "exportWorkflow" else "POST", f"{L}/apps/{ex.app}{path}",
                              json=body), status)


# --- refusals before anything is sent ----------------------------------------------------------


def test_bad_bodies_are_refused_and_nothing_is_sent_or_recorded(srv: RelayServer) -> None:
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-1", answers=answers())
    with executors(srv, ex):
        W = L + "/apps/shop/workflows"
        bad = [
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"json": {"cancelChildren": "yes"}}, 422),
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"json": {"wat": 1}}, 422),
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"json": [1]}, 422),
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"content": b"{"}, 400),
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"content": b"[" * 5000 + b"]" * 5000}, 422),
            ("cancelWorkflow", "POST", "/wf-1/cancel", {"content": b" " * (65 * 1024)}, 413),
            ("cancelWorkflow", "POST", "/" + "w" * 8193 + "/cancel", {}, 422),  # the guard: past 8 KiB, no id
            ("resumeWorkflow", "POST", "/wf-1/resume", {"json": {"queueName": None}}, 422),
            ("resumeWorkflow", "POST", "/wf-1/resume", {"json": {"queueName": "q" * 8193}}, 422),
            ("forkWorkflow", "POST", "/wf-1/fork", {"json": {"startStep": -1}}, 422),
            ("forkWorkflow", "POST", "/wf-1/fork", {"json": {"startStep": 2**31}}, 422),
            ("forkWorkflow", "POST", "/wf-1/fork", {"json": {"startStep": "2"}}, 422),
            ("forkWorkflow", "POST", "/wf-1/fork", {"json": {"startStep": 1.5}}, 422),
            ("deleteWorkflow", "DELETE", "/wf-1", {"params": {"deleteChildren": "maybe"}}, 422),
            ("deleteWorkflow", "DELETE", "/wf-1?deleteChildren=true&deleteChildren=false", {}, 400),
            ("bulkCancelWorkflows", "POST", "/bulk-cancel", {"json": {}}, 422),
            ("bulkCancelWorkflows", "POST", "/bulk-cancel", {"content": b""}, 422),
            ("bulkCancelWorkflows", "POST", "/bulk-cancel", {"json": {"workflowIds": []}}, 422),
            ("bulkCancelWorkflows", "POST", "/bulk-cancel", {"json": {"workflowIds": ["a", 1]}}, 422),
            ("bulkResumeWorkflows", "POST", "/bulk-resume", {"json": {"workflowIds": ["w"] * 10_001}}, 422),
            ("bulkDeleteWorkflows", "POST", "/bulk-delete", {"json": {"workflowIds": "a"}}, 422),
            ("bulkDeleteWorkflows", "POST", "/bulk-delete", {"content": b" " * (BULK_BODY + 1)}, 413),
            ("bulkForkWorkflowsFromFailure", "POST", "/bulk-fork-from-failure",
             {"json": {"workflowIds": ["a"], "fromStep": 1, "fromLastStep": True}}, 422),
            ("bulkForkWorkflowsFromFailure", "POST", "/bulk-fork-from-failure",
             {"json": {"workflowIds": ["a"], "fromStep": -1}}, 422),
            ("exportWorkflow", "GET", "/wf-1/export", {"params": {"exportChildren": "2"}}, 422),
            ("importWorkflow", "POST", "/import", {"json": {}}, 422),
            ("importWorkflow", "POST", "/import", {"content": b"   "}, 422),
            ("importWorkflow", "POST", "/import", {"json": {"serializedWorkflow": 5}}, 422),
            ("importWorkflow", "POST", "/import", {"json": {"serializedWorkflow": BLOB, "workflowId": "x"}}, 422),
            ("importWorkflow", "POST", "/import", {"content": b'{"serializedWorkflow": "ab'}, 400),
        ]
        for op, method, path, kw, status in bad:
            r = call(srv, method, W + path, **kw)
            assert r.status_code == status, (op, path[:80], str(kw)[:200], r.text[:500])
            body = conforms(op, r, status)
            if "params" in kw:  # a refusal names the parameter as the client spelled it
                assert body["errors"][0]["location"] in kw["params"], body
        # an import body past its cap: refused from its Content-Length, before it is read
        r = call(srv, "POST", W + "/import", content=b" " * (IMPORT_BODY + 1))
        assert conforms("importWorkflow", r, 413)["detail"] == (
            "the request body is larger than 67,174,400 bytes (64.06 MiB), the most importWorkflow takes")
        assert sent(ex) == []
        # then one that is fine: the only action on record
        conforms("cancelWorkflow", call(srv, "POST", W + "/wf-1/cancel"), 204)
    [a] = actions(srv, "shop", 1)
    assert a["operation"] == "cancelWorkflow" and a["target"]["ids"] == ["wf-1"]


def test_an_app_limited_token_cannot_act(tmp_path, store_url) -> None:
    """The key on every executor host (limited to its applications) reads, and acts on nothing."""
    org_wide = server_admin_token(tmp_path, store_url, "acme", "admin")
    limited = server_admin_token(tmp_path, store_url, "acme", "shop-key", "shop")
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"], env=FAST).start()
    try:
        known(s, "acme", org_wide)
        assert call(s, "PUT", "/v2/orgs/acme/apps/shop", org_wide).status_code in (201, 204)
        ex = FakeExecutor(s.ws, app="shop", executor_id="ex-1", key=limited, answers=answers())
        with executors(s, ex, org="acme", token=org_wide):
            A = "/v2/orgs/acme/apps/shop"
            for op, method, path, body, _ in CALLS:
                r = call(s, method, A + path, limited, json=body)
                assert conforms(op, r, 403)["detail"] == "this token lacks the application.write permission"
            assert sent(ex) == []
            deadline = time.monotonic() + 15  # one each, under the caller's name, once the log has folded them
            while len(refusals := _actions(s, "shop", "acme", org_wide, refused=True)) < len(CALLS):
                assert time.monotonic() < deadline, refusals
                time.sleep(0.05)
            assert sorted(a["operation"] for a in refusals) == sorted(op for op, *_ in CALLS)
            assert all(a["actor"] == {"kind": "token", "id": "shop-key"} and a["result"]["status"] == 403
                       for a in refusals)
            # export is a read: the limited token may
            conforms("exportWorkflow", call(s, "GET", A + "/workflows/wf-1/export", limited), 200)
            # the org-wide token acts, on record under its name
            conforms("cancelWorkflow", call(s, "POST", A + "/workflows/wf-1/cancel", org_wide), 204)
            [a] = actions(s, "shop", 1, "acme", org_wide)  # the only one on record
            assert (a["operation"], a["actor"], a["outcome"]) == (
                "cancelWorkflow", {"kind": "token", "id": "admin"}, "succeeded")
    finally:
        s.stop()


# --- the pure parts ----------------------------------------------------------------------------


@pytest.mark.parametrize("message,payload,status", [
    ("Non-existent target workflow ID: wf-1", False, 404),
    ("DBOSNonExistentWorkflowError: Workflow wf-1 does not exist", False, 404),
    ("Conflicting workflow invocation with the same ID (wf-1)", False, 409),
    ("psycopg.errors.UniqueViolation: duplicate key value violates unique constraint", True, 409),
    ("sqlite3.IntegrityError: UNIQUE constraint failed: workflow_status.workflow_uuid", True, 409),
    ("import_workflow is not allowed in conductor metadata-only mode", True, 403),
    # metadata-only mode names an error's class and withholds the rest: what it was still decides
    ("Exception encountered when resuming workflow(s) ['nope']: DBOSNonExistentWorkflowError (details withheld "
     "in metadata-only mode)", False, 404),
    ("Exception encountered when forking workflow wf-1: DBOSConflictingWorkflowError (details withheld in "
     "metadata-only mode)", False, 409),
    ("Exception encountered when cancelling workflow(s): OperationalError (details withheld in metadata-only "
     "mode)", False, 500),
    ("_pickle.UnpicklingError: invalid load key, '['.", True, 422),
    ("gzip.BadGzipFile: Not a gzipped file (b'ab')", True, 422),
    ("Error: incorrect header check", True, 422),
    ('SyntaxError: Unexpected token \'\x80\', "\x80\x04" is not valid JSON', True, 422),
    ("binascii.Error: Incorrect padding", True, 422),
    ("binascii.Error: Incorrect padding", False, 500),  # only a payload can be unloadable
    ("Workflow a has no step named 'charge'", False, 422),
    ("database is down", False, 500),
])
def test_the_executors_message_picks_the_status(message: str, payload: bool, status: int) -> None:
    assert failed_status(payload=payload)(message) == status


@pytest.mark.parametrize("message,ids,status", [
    ("Exception encountered when cancelling workflow(s) ['wf-1']: DBOSNonExistentWorkflowError: DBOS Error 5: "
     "Non-existent target workflow ID: wf-1", ["wf-1"], 404),
    ("Workflow b does not exist", ["a", "b"], 404),  # a bulk action: one of its workflows
    ("Workflow c does not exist", ["a", "b"], 500),  # none of them (a child, say)
    ("Workflow wf-10 does not exist", ["wf-1"], 500),
    ('Exception encountered when forking workflow wf-1: relation "dbos.operation_outputs" does not exist',
     ["wf-1"], 500),
    ("psycopg.errors.UndefinedFunction: function json_not_found() does not exist", ["wf-1"], 500),
    ("Exception encountered when exporting workflow wf-1: sqlalchemy.exc.NoSuchTableError: not found", ["wf-1"], 500),
    ("Workflow wf-1 does not exist", [], 500),  # import names no workflow: it creates one
])
def test_a_404_is_an_sdk_saying_it_has_no_workflow_the_action_names(message: str, ids: list[str],
                                                                      status: int) -> None:
    assert failed_status(workflow_ids=ids)(message) == status


def test_boolean_query_parameters_are_read_as_conductor_reads_them() -> None:
    assert [query_flag("x", v) for v in (None, "true", "True", "1", "t", "false", "0", "F")] == \
        [False, True, True, True, True, False, False, False]
    with pytest.raises(InvalidSetting) as e:
        query_flag("deleteChildren", "yes")
    assert e.value.field == "deleteChildren"


def test_a_bulk_fork_leaves_out_what_is_not_set() -> None:
    """TypeScript 5.2.11 counts a null ``from_step`` as chosen: only what is set goes out."""
    b = models.decode(b'{"workflowIds": ["a"], "fromStep": 0}', models.BulkForkFromFailureBody)
    assert json.loads(encode(mapping.fork_from_failure_request(b, request_id="r"))) == {
        "type": "fork_from_failure", "request_id": "r", "body": {"workflow_ids": ["a"], "from_step": 0}}
