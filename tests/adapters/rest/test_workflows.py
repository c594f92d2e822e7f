"""Workflows, read (``relay_es/adapters/rest/workflows.py``) on a real ``relay serve``, both stores,
with fake executors of both SDK dialects (Python sends nulls, TypeScript omits keys) over real
WebSockets.

Each of the nine operations round-trips: what the client asks reaches the executor under the
protocol's names (conductor-protocol.md section 10.4), what the executor answers comes back in
the reference's shape, validated with ``tests/conductor_schema.py``. And every way a call fails
is its problem: no executor 503, no answer 504, a dropped socket 502 at once, a hostile reply
502 -- none of which disturbs the executor's liveness (HEALTHY, pinged, answering the next call).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from websockets.frames import Opcode

from tests.adapters.rest.servers import known
from tests.conductor_schema import check_response, document
from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.server import admin_token as server_admin_token

L = "/v2/orgs/local"
FAST = {"RELAY_PING_INTERVAL_SECS": "1", "RELAY_PING_WAIT_SECS": "3", "RELAY_CALL_TIMEOUT_SECS": "2"}
STYLES = ("python", "typescript")
T0 = 1796040658645  # epoch ms


def rfc(ms: int) -> str:
    """Epoch milliseconds as the reference's date-time: RFC 3339, UTC, milliseconds, ``Z``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


T0_RFC = rfc(T0)
SCHEDULED = "sched-nightly-2026-12-01T11:00:00+00:00"
SLASHED = "orders/42/retry%2F"  # the last three characters are the id's own, encoded again when sent

# --- the executor's side -----------------------------------------------------------------------


def ts(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the TypeScript SDK sends it: ``undefined`` keys left out."""
    return {k: v for k, v in obj.items() if v is not None}


def workflow(wf_id: str, style: str, **over: Any) -> dict[str, Any]:
    w = {"WorkflowUUID": wf_id, "Status": "SUCCESS", "WorkflowName": "probe_workflow", "WorkflowClassName": None,
         "WorkflowConfigName": None, "AuthenticatedUser": None, "AssumedRole": None, "AuthenticatedRoles": None,
         "Input": "{'args': (20,), 'kwargs': {}}", "Output": "42", "Error": None, "CreatedAt": str(T0),
         "UpdatedAt": str(T0 + 43), "QueueName": None, "ApplicationVersion": "v1", "ExecutorID": "e-1",
         "WorkflowTimeoutMS": None, "WorkflowDeadlineEpochMS": None, "DeduplicationID": None, "Priority": "0",
         "QueuePartitionKey": None, "ForkedFrom": None, "WasForkedFrom": False, "ParentWorkflowID": None,
         "DequeuedAt": None, "DelayUntilEpochMS": None, "CompletedAt": str(T0 + 43), "Attributes": None,
         "ScheduleName": None, "ApplicationName": "probe-app", **over}
    return ts(w) if style == "typescript" else w


STEPS = [{"function_id": 1, "function_name": "add_one", "output": "21", "error": None, "child_workflow_id": None,
          "started_at_epoch_ms": str(T0), "completed_at_epoch_ms": str(T0 + 4)},
         {"function_id": 2, "function_name": "DBOS.setEvent", "output": None, "error": "boom",
          "child_workflow_id": "wf-child", "started_at_epoch_ms": None, "completed_at_epoch_ms": None}]


def answers(style: str) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The nine read types answered as an SDK of ``style`` would, from what the request asks."""
    s = ts if style == "typescript" else (lambda o: o)

    def listing(req: dict[str, Any]) -> dict[str, Any]:
        n = req["body"]["limit"] or 3
        return {"output": [workflow(f"wf-{i}", style, QueueName="q" if req["type"] == "list_queued_workflows"
                                    else None) for i in range(n)]}

    def get(req: dict[str, Any]) -> dict[str, Any]:
        if req["workflow_id"] == "missing":
            return {}  # Python: output null; TypeScript: no key; neither an error
        return {"output": workflow(req["workflow_id"], style, Status="ERROR", Error="ValueError('no')",
                                   WorkflowTimeoutMS="60000", WorkflowDeadlineEpochMS=str(T0 + 60000),
                                   Priority="5", ParentWorkflowID="wf-parent", Attributes='{"tenant": "t1"}')}

    return {
        "list_workflows": listing,
        "list_queued_workflows": listing,
        "get_workflow": get,
        "list_steps": lambda req: {"output": [s(x) for x in STEPS]},
        "get_workflow_events": lambda req: {"events": [{"key": "progress", "value": "{'done': 3}"}]},
        "get_workflow_notifications": lambda req: {"notifications": [
            s({"topic": None, "message": "'hello'", "created_at_epoch_ms": T0, "consumed": True})]},
        "get_workflow_streams": lambda req: {"streams": [{"key": "numbers", "values": ["0", "1", "2"]}]},
        "get_workflow_aggregates": lambda req: {"output": [
            s({"group": {"status": "SUCCESS", "name": "probe_workflow", "time_bucket": str(T0)}, "count": 7,
               "min_created_at": T0, "max_queue_wait_ms": None, "max_total_latency_ms": 12})]},
        "get_step_aggregates": lambda req: {"output": [
            s({"group": {"function_name": "add_one"}, "count": 3, "max_duration_ms": None})]},
    }


# --- the client's side -------------------------------------------------------------------------


def conforms(operation: str, r: httpx.Response, status: int) -> Any:
    assert r.status_code == status, r.text
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

    def connect(self, ex: FakeExecutor) -> FakeExecutor:
        self.run(ex.connect())
        return ex

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def executors(s: RelayServer, *fakes: FakeExecutor) -> Iterator[Loop]:
    loop = Loop()
    try:
        for f in fakes:
            loop.connect(f)
            org = "acme" if f.key != "dev-key" else "local"
            wait(lambda f=f, org=org: status_of(s, f.app, f.executor_id, org, None if org == "local" else f.key)
                 == "HEALTHY", f"{f.executor_id} healthy")
        yield loop
    finally:
        for f in fakes:
            loop.run(f.close(), 10)
        loop.stop()


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


def status_of(s: RelayServer, app: str, executor_id: str, org: str = "local", token: str | None = None) -> str | None:
    r = call(s, "GET", f"/v2/orgs/{org}/apps/{app}/executors", token)
    if r.status_code != 200:
        return None
    return {e["executorId"]: e["status"] for e in r.json()}.get(executor_id)


def requests_of(ex: FakeExecutor, type_: str) -> list[dict[str, Any]]:
    return [r for r in ex.requests if r.get("type") == type_]


def count_pings(ex: FakeExecutor) -> list[float]:
    """The times of the WebSocket pings ``ex`` receives from now on."""
    assert ex.ws is not None
    seen: list[float] = []
    process = ex.ws.process_event

    def counting(event: Any) -> None:
        if getattr(event, "opcode", None) is Opcode.PING:
            seen.append(time.monotonic())
        process(event)

    ex.ws.process_event = counting  # type: ignore[method-assign]
    return seen


@pytest.fixture
def srv(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield s
    s.stop()


# --- every operation, both dialects ------------------------------------------------------------

SEARCH = {"workflowIds": ["wf-1", "wf-2"], "workflowName": ["probe_workflow"], "user": ["alice"],
          "status": ["SUCCESS", "ERROR"], "appVersion": ["v1"], "executorId": ["e-1"], "queueName": ["q"],
          "forkedFrom": ["wf-0"], "parentWorkflowId": ["wf-p"], "workflowIdPrefix": ["wf-"],
          "scheduleName": ["nightly"], "attributes": {"tenant": "t1"}, "startTime": "2026-11-30T00:00:00Z",
          "endTime": "2026-11-30T23:59:59.5+01:00", "completedAfter": "2026-11-30T00:00:00Z",
          "completedBefore": "2026-12-01T00:00:00Z", "dequeuedAfter": "2026-11-29T00:00:00Z",
          "dequeuedBefore": "2026-12-02T00:00:00Z", "wasForkedFrom": False, "hasParent": True, "limit": 2,
          "offset": 4, "sortDesc": True, "loadInput": True, "loadOutput": False}
SEARCH_ON_WIRE = {"workflow_uuids": ["wf-1", "wf-2"], "workflow_name": ["probe_workflow"],
                  "authenticated_user": ["alice"], "status": ["SUCCESS", "ERROR"], "application_version": ["v1"],
                  "executor_id": ["e-1"], "queue_name": ["q"], "forked_from": ["wf-0"],
                  "parent_workflow_id": ["wf-p"], "workflow_id_prefix": ["wf-"], "schedule_name": ["nightly"],
                  "attributes": {"tenant": "t1"}, "start_time": "2026-11-30T00:00:00+00:00",
                  "end_time": "2026-11-30T22:59:59.500000+00:00", "completed_after": "2026-11-30T00:00:00+00:00",
                  "completed_before": "2026-12-01T00:00:00+00:00", "dequeued_after": "2026-11-29T00:00:00+00:00",
                  "dequeued_before": "2026-12-02T00:00:00+00:00", "was_forked_from": False, "has_parent": True,
                  "queues_only": False, "limit": 2, "offset": 4, "sort_desc": True, "load_input": True,
                  "load_output": False, "application_name": None}


def test_every_read_round_trips_in_both_dialects(srv: RelayServer) -> None:
    assert set(SEARCH) | {"queuesOnly"} == \
        set(document()["components"]["schemas"]["WorkflowSearchBody"]["properties"]) - {"$schema"}
    fakes = {style: FakeExecutor(srv.ws, app=f"app-{style[:2]}", executor_id=f"ex-{style[:2]}", style=style,
                                 answers=answers(style)) for style in STYLES}
    with executors(srv, *fakes.values()):
        for style, ex in fakes.items():
            A = f"{L}/apps/{ex.app}"
            try:
                check_every_read(srv, A, ex)
            except AssertionError as e:
                raise AssertionError(f"{style}: {e}") from e


def check_every_read(srv: RelayServer, A: str, ex: FakeExecutor) -> None:
    # listWorkflows: the query parameters, each under its protocol name; the rest null, tri-states left out
    got = conforms("listWorkflows", call(srv, "GET", A + "/workflows", params={
        "status": "ERROR", "workflowName": "probe_workflow", "limit": 2, "offset": 1, "sortDesc": "true",
        "loadInput": "true"}), 200)
    assert [w["workflowId"] for w in got] == ["wf-0", "wf-1"]
    w = got[0]
    assert (w["createdAt"], w["updatedAt"], w["input"], w["output"], w["priority"], w["wasForkedFrom"]) == (
        T0_RFC, rfc(T0 + 43), "{'args': (20,), 'kwargs': {}}", "42", 0, False)
    assert (w["queueName"], w["deadline"], w["timeoutMs"], w["applicationName"]) == (None, None, None, "probe-app")
    body = requests_of(ex, "list_workflows")[-1]["body"]
    assert {k: body[k] for k in ("status", "workflow_name", "limit", "offset", "sort_desc", "load_input",
                                 "load_output")} == {"status": "ERROR", "workflow_name": "probe_workflow",
                                                     "limit": 2, "offset": 1, "sort_desc": True,
                                                     "load_input": True, "load_output": False}
    assert "was_forked_from" not in body and "has_parent" not in body
    assert {k for k, v in body.items() if v not in (None, False)} == {"status", "workflow_name", "limit", "offset",
                                                                       "sort_desc", "load_input"}
    plain = conforms("listWorkflows", call(srv, "GET", A + "/workflows"), 200)
    assert len(plain) == 3
    body = requests_of(ex, "list_workflows")[-1]["body"]
    assert (body["limit"], body["offset"], body["sort_desc"], body["load_input"], body["load_output"]) == (
        None, None, False, False, False)

    # searchWorkflows: every filter of WorkflowSearchBody
    got = conforms("searchWorkflows", call(srv, "POST", A + "/workflows/search", json=SEARCH), 200)
    assert [w["workflowId"] for w in got] == ["wf-0", "wf-1"]
    assert requests_of(ex, "list_workflows")[-1]["body"] == SEARCH_ON_WIRE
    # the body may be left out, as the reference has it (not required): the same as {}
    got = conforms("searchWorkflows", call(srv, "POST", A + "/workflows/search"), 200)
    assert got == conforms("searchWorkflows", call(srv, "POST", A + "/workflows/search", json={}), 200)
    assert len(got) == 3 and requests_of(ex, "list_workflows")[-1] == {
        **requests_of(ex, "list_workflows")[-2], "request_id": requests_of(ex, "list_workflows")[-1]["request_id"]}
    got = conforms("searchWorkflows", call(srv, "POST", A + "/workflows/search", json={"queuesOnly": True}), 200)
    assert {w["queueName"] for w in got} == {"q"}
    body = requests_of(ex, "list_queued_workflows")[-1]["body"]
    assert {k for k, v in body.items() if v not in (None, False)} == {"queues_only"}
    assert "was_forked_from" not in body and "has_parent" not in body

    # getWorkflow: input and output loaded; one the executor does not know is a 404
    w = conforms("getWorkflow", call(srv, "GET", A + "/workflows/wf-7"), 200)
    assert (w["workflowId"], w["status"], w["error"], w["timeoutMs"], w["deadline"], w["priority"]) == (
        "wf-7", "ERROR", "ValueError('no')", 60000, rfc(T0 + 60000), 5)
    assert (w["parentWorkflowId"], w["attributes"]) == ("wf-parent", '{"tenant": "t1"}')
    req = requests_of(ex, "get_workflow")[-1]
    assert (req["workflow_id"], req["load_input"], req["load_output"]) == ("wf-7", True, True)
    missing = conforms("getWorkflow", call(srv, "GET", A + "/workflows/missing"), 404)
    assert "missing" in missing["detail"]
    # a scheduled workflow's id (both SDKs: sched-<schedule>-<ISO time>) is a workflow id like any other
    w = conforms("getWorkflow", call(srv, "GET", A + "/workflows/" + quote(SCHEDULED, safe="")), 200)
    assert w["workflowId"] == SCHEDULED and requests_of(ex, "get_workflow")[-1]["workflow_id"] == SCHEDULED
    conforms("listWorkflowSteps", call(srv, "GET", A + "/workflows/" + quote(SCHEDULED, safe="") + "/steps"), 200)
    # an id holding "/" (the application chose it), sent encoded, is one id and not more of the path
    w = conforms("getWorkflow", call(srv, "GET", A + "/workflows/" + quote(SLASHED, safe="")), 200)
    assert w["workflowId"] == SLASHED and requests_of(ex, "get_workflow")[-1]["workflow_id"] == SLASHED
    conforms("listWorkflowSteps", call(srv, "GET", A + "/workflows/" + quote(SLASHED, safe="") + "/steps"), 200)
    assert requests_of(ex, "list_steps")[-1]["workflow_id"] == SLASHED

    # steps, with limit and offset
    steps = conforms("listWorkflowSteps", call(srv, "GET", A + "/workflows/wf-7/steps",
                                               params={"limit": 5, "offset": 1}), 200)
    assert steps == [
        {"stepId": 1, "stepName": "add_one", "output": "21", "error": None, "childWorkflowId": None,
         "startedAt": T0_RFC, "completedAt": rfc(T0 + 4)},
        {"stepId": 2, "stepName": "DBOS.setEvent", "output": None, "error": "boom", "childWorkflowId": "wf-child",
         "startedAt": None, "completedAt": None}]
    req = requests_of(ex, "list_steps")[-1]
    assert (req["workflow_id"], req["limit"], req["offset"], req["load_output"]) == ("wf-7", 5, 1, True)
    conforms("listWorkflowSteps", call(srv, "GET", A + "/workflows/wf-7/steps"), 200)
    assert (requests_of(ex, "list_steps")[-1]["limit"], requests_of(ex, "list_steps")[-1]["offset"]) == (None, None)

    # events, notifications, streams
    assert conforms("listWorkflowEvents", call(srv, "GET", A + "/workflows/wf-7/events"), 200) == [
        {"key": "progress", "value": "{'done': 3}"}]
    assert conforms("listWorkflowNotifications", call(srv, "GET", A + "/workflows/wf-7/notifications"), 200) == [
        {"topic": None, "message": "'hello'", "createdAt": T0_RFC, "consumed": True}]
    assert conforms("listWorkflowStreams", call(srv, "GET", A + "/workflows/wf-7/streams"), 200) == [
        {"key": "numbers", "values": ["0", "1", "2"]}]
    for t in ("get_workflow_events", "get_workflow_notifications", "get_workflow_streams"):
        assert requests_of(ex, t)[-1]["workflow_id"] == "wf-7"

    # aggregates
    agg = {"groupByStatus": True, "groupByWorkflowName": True, "selectCount": True, "selectMinCreatedAt": True,
           "timeBucketSizeMs": 60000, "workflowName": ["probe_workflow"], "user": ["alice"], "appVersion": ["v1"],
           "workflowIds": ["wf-1"], "startTime": "2026-11-30T00:00:00Z"}
    assert conforms("getWorkflowAggregates", call(srv, "POST", A + "/workflows/aggregates", json=agg), 200) == [
        {"group": {"status": "SUCCESS", "name": "probe_workflow", "time_bucket": str(T0)}, "count": 7,
         "minCreatedAt": T0_RFC, "maxTotalLatencyMs": 12}]
    body = requests_of(ex, "get_workflow_aggregates")[-1]["body"]
    assert (body["group_by_status"], body["group_by_name"], body["select_count"], body["select_min_created_at"],
            body["time_bucket_size_ms"]) == (True, True, True, True, 60000)
    assert (body["name"], body["user"], body["app_version"], body["workflow_ids"], body["start_time"]) == (
        ["probe_workflow"], ["alice"], ["v1"], ["wf-1"], "2026-11-30T00:00:00+00:00")
    assert "was_forked_from" not in body and "has_parent" not in body
    conforms("getWorkflowAggregates", call(srv, "POST", A + "/workflows/aggregates",
                                           json={"groupByStatus": True, "hasParent": False}), 200)
    assert requests_of(ex, "get_workflow_aggregates")[-1]["body"]["has_parent"] is False
    steps_agg = {"groupByFunctionName": True, "selectMaxDurationMs": True, "stepName": ["add_one"],
                 "status": ["SUCCESS"], "completedBefore": "2026-12-01T00:00:00Z"}
    assert conforms("getStepAggregates", call(srv, "POST", A + "/steps/aggregates", json=steps_agg), 200) == [
        {"group": {"function_name": "add_one"}, "count": 3}]
    body = requests_of(ex, "get_step_aggregates")[-1]["body"]
    assert (body["group_by_function_name"], body["select_max_duration_ms"], body["function_name"], body["status"],
            body["completed_before"]) == (True, True, ["add_one"], ["SUCCESS"], "2026-12-01T00:00:00+00:00")
    # both aggregates' bodies may be left out too, read as {}: no group, which every SDK refuses (a 422,
    # nothing sent: tests/adapters/rest/test_releases.py)
    for op, path, t in (("getWorkflowAggregates", "/workflows/aggregates", "get_workflow_aggregates"),
                        ("getStepAggregates", "/steps/aggregates", "get_step_aggregates")):
        before = len(requests_of(ex, t))
        conforms(op, call(srv, "POST", A + path), 422)
        conforms(op, call(srv, "POST", A + path, json={}), 422)
        assert len(requests_of(ex, t)) == before


# --- refusals --------------------------------------------------------------------------------

READS = [("listWorkflows", "GET", "/workflows", None), ("searchWorkflows", "POST", "/workflows/search", {}),
         ("getWorkflow", "GET", "/workflows/wf-1", None), ("listWorkflowSteps", "GET", "/workflows/wf-1/steps", None),
         ("listWorkflowEvents", "GET", "/workflows/wf-1/events", None),
         ("listWorkflowNotifications", "GET", "/workflows/wf-1/notifications", None),
         ("listWorkflowStreams", "GET", "/workflows/wf-1/streams", None),
         ("getWorkflowAggregates", "POST", "/workflows/aggregates", {"groupByStatus": True}),
         ("getStepAggregates", "POST", "/steps/aggregates", {"groupByStatus": True})]


def test_refusals_are_problems_and_reach_no_executor(srv: RelayServer) -> None:
    call(srv, "PUT", L + "/apps/idle")  # an application with no executor
    for op, method, path, body in READS:
        conforms(op, call(srv, method, L + "/apps/nope" + path, json=body), 404)
        r = conforms(op, call(srv, method, L + "/apps/idle" + path, json=body), 503)
        assert r["title"] == "no healthy executor" and r.get("type") == "about:blank"
        assert call(srv, method, L + "/apps/idle" + path, json=body).headers["retry-after"] == "5"
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-1", answers=answers("python"))
    with executors(srv, ex):
        A = L + "/apps/shop"
        bad = [("listWorkflows", "GET", "/workflows", {"params": {"limit": "-1"}}, 422),
               ("listWorkflows", "GET", "/workflows", {"params": {"offset": "x"}}, 422),
               ("listWorkflows", "GET", "/workflows", {"params": {"sortDesc": "maybe"}}, 422),
               ("listWorkflows", "GET", "/workflows?status=A&status=B", {}, 400),
               ("listWorkflowSteps", "GET", "/workflows/wf-1/steps", {"params": {"limit": "1.5"}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"content": b"{"}, 400),
               ("searchWorkflows", "POST", "/workflows/search", {"json": {"wat": 1}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"json": {"limit": "10"}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"json": {"startTime": "yesterday"}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"json": {"status": ["x" * 8193]}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"json": {"hasParent": None}}, 422),
               ("searchWorkflows", "POST", "/workflows/search",
                {"json": {"workflowIds": ["w"] * 10_001}}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"content": b"[" * 5000 + b"]" * 5000}, 422),
               ("searchWorkflows", "POST", "/workflows/search", {"content": b" " * (3 * 1024 * 1024)}, 413),
               ("getWorkflowAggregates", "POST", "/workflows/aggregates", {"json": {"timeBucketSizeMs": 0}}, 422),
               ("getStepAggregates", "POST", "/steps/aggregates", {"json": {"workflowIds": ["w"]}}, 422)]
        for op, method, path, kw, status in bad:
            r = call(srv, method, A + path, **kw)
            assert r.status_code == status, (path, kw if len(str(kw)) < 200 else "...", r.text[:500])
            conforms(op, r, status)
        seen = {r["type"] for r in ex.requests} - {"executor_info", "exist_pending_workflows", "recovery",
                                                    "retention"}
        assert seen == set(), seen


def test_a_limit_or_offset_up_to_int64_is_accepted_and_sent_as_a_javascript_number_holds_it(srv: RelayServer) -> None:
    """A TypeScript executor read 9223372036854775807 as 9223372036854776000, out of Postgres' bigint:
    a 500. Every int64 is accepted (the reference's format) and sent at most 2**53-1, the largest
    integer a JavaScript number holds exactly: still every row, or none past the offset."""
    most, safe = 2**63 - 1, 2**53 - 1
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-ts", style="typescript", answers={
        "list_workflows": lambda req: {"output": []}, "list_steps": lambda req: {"output": []},
        "get_workflow_aggregates": lambda req: {"output": []}})
    with executors(srv, ex):
        A = L + "/apps/shop"
        for params in ({"limit": most}, {"offset": most}, {"limit": safe + 2, "offset": safe + 1}):
            assert conforms("listWorkflows", call(srv, "GET", A + "/workflows", params=params), 200) == []
            assert conforms("listWorkflowSteps", call(srv, "GET", A + "/workflows/wf-1/steps", params=params),
                            200) == []
            assert conforms("searchWorkflows", call(srv, "POST", A + "/workflows/search", json=params), 200) == []
        assert conforms("getWorkflowAggregates", call(srv, "POST", A + "/workflows/aggregates",
                                                      json={"timeBucketSizeMs": most}), 200) == []
    listed = [r["body"] for r in requests_of(ex, "list_workflows")]
    steps = requests_of(ex, "list_steps")
    expected = [(safe, None), (None, safe), (safe, safe)]
    assert [(b["limit"], b["offset"]) for b in listed] == [e for e in expected for _ in range(2)]
    assert [(r["limit"], r["offset"]) for r in steps] == expected
    assert requests_of(ex, "get_workflow_aggregates")[0]["body"]["time_bucket_size_ms"] == safe


# --- failures of the call ----------------------------------------------------------------------


def test_no_answer_is_504_and_a_dropped_socket_502_at_once(srv: RelayServer) -> None:
    silent = FakeExecutor(srv.ws, app="shop", executor_id="ex-silent",
                          answers={"get_workflow": lambda req: None, "list_workflows": lambda req: None})
    with executors(srv, silent) as loop:
        pings = count_pings(silent)
        t = time.monotonic()
        r = conforms("getWorkflow", call(srv, "GET", L + "/apps/shop/workflows/wf-1"), 504)
        assert 1.8 < time.monotonic() - t < 10 and r["title"] == "executor did not answer"
        assert status_of(srv, "shop", "ex-silent") == "HEALTHY" and pings  # pinged, and pongs went back

        # the socket drops while a call waits: it fails at once, not at its timeout
        result: dict[str, Any] = {}

        def ask() -> None:
            t0 = time.monotonic()
            result["r"] = call(srv, "GET", L + "/apps/shop/workflows")
            result["secs"] = time.monotonic() - t0

        asker = threading.Thread(target=ask)
        asker.start()
        loop.run(silent.wait_for("list_workflows"))
        loop.loop.call_soon_threadsafe(silent.abort)
        asker.join(10)
        r = result["r"]
        conforms("listWorkflows", r, 502)
        assert result["secs"] < 1.5 and r.json()["title"] == "executor disconnected", result


def hostile(style: str) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Answers that are not what the request asked for."""
    huge = "x" * (4 * 1024 * 1024)

    def frame(req: dict[str, Any], **fields: Any) -> str:
        return json.dumps({"type": req["type"], "request_id": req["request_id"], "error_message": None, **fields})

    return {
        # a field of the wrong JSON type: the frame does not decode into the catalogue's type
        "get_workflow": lambda req: frame(req, output={"WorkflowUUID": 7}),
        # a list where an object is expected, and a huge frame of the wrong type
        "list_steps": lambda req: frame(req, output={"function_id": "one"}),
        "get_workflow_events": lambda req: frame(req, events=huge),
        # decodes, but does not map: a creation time that is no number
        "list_workflows": lambda req: {"output": [workflow("wf-1", style, CreatedAt="yesterday")]},
        # answered under another type
        "get_workflow_streams": lambda req: json.dumps({"type": "list_queues", "request_id": req["request_id"],
                                                        "output": []}),
        # not JSON at all (so it names no request)
        "get_workflow_notifications": lambda req: "{not json",
    }


@pytest.mark.parametrize("style", STYLES)
def test_hostile_replies_are_refused_and_liveness_is_undisturbed(srv: RelayServer, style: str) -> None:
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-h", style=style, answers=hostile(style))
    with executors(srv, ex) as loop:
        pings = count_pings(ex)
        A = L + "/apps/shop/workflows"
        for op, path in (("getWorkflow", "/wf-1"), ("listWorkflowSteps", "/wf-1/steps"),
                         ("listWorkflowEvents", "/wf-1/events"), ("listWorkflows", ""),
                         ("listWorkflowStreams", "/wf-1/streams")):
            t = time.monotonic()
            r = call(srv, "GET", A + path)
            assert r.status_code == 502, (op, r.text)
            r = conforms(op, r, 502)
            assert time.monotonic() - t < 1.5, (op, "refused at once, not at the call's timeout")
            assert r["title"] == "executor reply refused", r
            assert len(r["detail"]) < 2000, r["detail"][:200]  # bounded: never the huge frame echoed
        # a frame that is not JSON names no request: the call it was meant for goes unanswered
        r = conforms("listWorkflowNotifications", call(srv, "GET", A + "/wf-1/notifications"), 504)
        assert r["title"] == "executor did not answer"
        assert "CreatedAt" in call(srv, "GET", A).json()["detail"]
        # an answer to a request never made
        loop.run(ex.send_raw(json.dumps({"type": "list_workflows", "request_id": "never-asked", "output": []})))
        loop.run(ex.send_raw(json.dumps({"type": "get_workflow", "request_id": "never-asked-2",
                                         "output": {"WorkflowUUID": "x" * 100_000}})))
        # the executor is still HEALTHY, still pinged, and answers the next call
        ex.answers["get_workflow"] = answers(style)["get_workflow"]
        before = len(pings)
        time.sleep(3.5)  # beyond the ping wait
        assert len(pings) >= before + 2, pings
        assert status_of(srv, "shop", "ex-h") == "HEALTHY"
        assert conforms("getWorkflow", call(srv, "GET", A + "/wf-9"), 200)["workflowId"] == "wf-9"
        assert ex.close_code is None


def test_a_workflow_of_another_id_and_counts_out_of_int64_are_refused(srv: RelayServer) -> None:
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-o", answers={
        "get_workflow": lambda req: {"output": workflow("someone-elses", "python")},
        "get_workflow_aggregates": lambda req: {"output": [{"group": {"application_version": "v1"}, "count": 10**25}]},
        "get_step_aggregates": lambda req: {"output": [{"group": {}, "count": 1, "max_duration_ms": 2**63}]}})
    with executors(srv, ex):
        A = L + "/apps/shop"
        for op, method, path, field in (("getWorkflow", "GET", "/workflows/w1", "WorkflowUUID"),
                                        ("getWorkflowAggregates", "POST", "/workflows/aggregates", "count"),
                                        ("getStepAggregates", "POST", "/steps/aggregates", "max_duration_ms")):
            r = conforms(op, call(srv, method, A + path, json={"groupByStatus": True} if method == "POST" else None),
                         502)
            assert r["title"] == "executor reply refused" and field in r["detail"], (op, r)
        assert "someone-elses" in call(srv, "GET", A + "/workflows/w1").json()["detail"]
        assert status_of(srv, "shop", "ex-o") == "HEALTHY"


def test_a_large_answer_round_trips(srv: RelayServer) -> None:
    """5,000 workflows with inputs and outputs (a frame of about 9 MiB) through one call."""
    blob = "y" * 800

    def many(req: dict[str, Any]) -> dict[str, Any]:
        return {"output": [workflow(f"wf-{i}", "python", Input=blob, Output=blob) for i in range(5000)]}

    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-big", answers={"list_workflows": many})
    with executors(srv, ex):
        r = call(srv, "GET", L + "/apps/shop/workflows", params={"loadInput": "true", "loadOutput": "true"})
        got = conforms("listWorkflows", r, 200)
        assert len(got) == 5000 and got[-1]["workflowId"] == "wf-4999" and got[0]["input"] == blob
        assert status_of(srv, "shop", "ex-big") == "HEALTHY"


def test_an_executor_error_is_its_message_with_the_route_s_status(srv: RelayServer) -> None:
    def err(text: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda req: {"output": [], "error_message": text}

    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-e", answers={
        "list_workflows": err("Exception encountered when listing workflows: <db down>"),
        "list_steps": err("Workflow wf-1 does not exist"),
        "get_workflow_events": lambda req: {"error_message": "get_workflow_events is not allowed in conductor "
                                                             "metadata-only mode"}})
    with executors(srv, ex):
        A = L + "/apps/shop/workflows"
        r = conforms("listWorkflows", call(srv, "GET", A), 500)
        assert "db down" in r["detail"]
        assert "does not exist" in conforms("listWorkflowSteps", call(srv, "GET", A + "/wf-1/steps"), 404)["detail"]
        # the refusal of data in metadata-only mode: 403 here as for the actions (it was a 500, "retrying may cure")
        assert "metadata-only" in conforms("listWorkflowEvents", call(srv, "GET", A + "/wf-1/events"), 403)["detail"]


DATABASE_DOWN = ('connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  database "shop_dbos_sys" '
                 'does not exist')
NO_TABLE = 'psycopg.errors.UndefinedTable: relation "dbos.workflow_status" does not exist'


def test_the_executor_s_database_failing_is_a_500_on_every_read_never_a_404(srv: RelayServer) -> None:
    """Its "does not exist" is a table's or a database's, not the workflow's: a list answers no 404
    for its executor's failure, and one workflow's reads are 404 only for the SDK's own words."""
    def err(text: str, **empty: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda req: {**empty, "error_message": f"Exception encountered when reading: {text}"}

    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-db", answers={
        "list_workflows": err(DATABASE_DOWN, output=[]),
        "list_queued_workflows": err(NO_TABLE, output=[]),
        "get_workflow": err(NO_TABLE),
        "list_steps": err(DATABASE_DOWN, output=[]),
        "get_workflow_events": err(NO_TABLE, events=[]),
        "get_workflow_notifications": err("psycopg.errors.UndefinedFunction: function json_not_found() does not "
                                          "exist", notifications=[]),
        "get_workflow_streams": err("Workflow wf-child does not exist", streams=[])})  # another workflow's
    with executors(srv, ex):
        A = L + "/apps/shop/workflows"
        for op, method, path, body in (("listWorkflows", "GET", "", None),
                                       ("searchWorkflows", "POST", "/search", {"queuesOnly": True}),
                                       ("getWorkflow", "GET", "/wf-1", None),
                                       ("listWorkflowSteps", "GET", "/wf-1/steps", None),
                                       ("listWorkflowEvents", "GET", "/wf-1/events", None),
                                       ("listWorkflowNotifications", "GET", "/wf-1/notifications", None),
                                       ("listWorkflowStreams", "GET", "/wf-1/streams", None)):
            r = conforms(op, call(srv, method, A + path, json=body), 500)
            assert r["title"] == "executor reported an error" and "does not exist" in r["detail"], (op, r)


def test_a_refused_query_parameter_is_named_as_the_client_sent_it(srv: RelayServer) -> None:
    ex = FakeExecutor(srv.ws, app="shop", executor_id="ex-q", answers=answers("python"))
    with executors(srv, ex):
        A = L + "/apps/shop/workflows"
        for name, value in (("sortDesc", "maybe"), ("loadInput", "yes"), ("loadOutput", "2"), ("sortDesc", ""),
                            ("workflowName", "x" * 8193), ("workflowName", "wf\x00"), ("limit", "-1")):
            r = conforms("listWorkflows", call(srv, "GET", A, params={name: value}), 422)
            assert [e["location"] for e in r["errors"]] == [name], r
        assert len(requests_of(ex, "list_workflows")) == 0  # nothing sent
        # as Conductor's server reads them (Go's strconv.ParseBool)
        flags = {"sortDesc": "T", "loadInput": "1", "loadOutput": "False"}
        conforms("listWorkflows", call(srv, "GET", A, params=flags), 200)
        body = requests_of(ex, "list_workflows")[-1]["body"]
        assert (body["sort_desc"], body["load_input"], body["load_output"]) == (True, True, False)
        conforms("listWorkflows", call(srv, "GET", A), 200)
        body = requests_of(ex, "list_workflows")[-1]["body"]
        assert (body["sort_desc"], body["load_input"], body["load_output"]) == (False, False, False)


def test_options_at_a_workflow_lists_get_as_a_405_there_does(srv: RelayServer) -> None:
    """getWorkflow is a handler beside deleteWorkflow's controller: OPTIONS lists both."""
    path = L + "/apps/shop/workflows/wf-1"
    r = call(srv, "OPTIONS", path)
    assert r.status_code == 204, r.text
    allowed = {m.strip() for m in r.headers["allow"].split(",")}
    assert allowed == {"DELETE", "GET", "OPTIONS"}
    refused = call(srv, "PUT", path)
    assert refused.status_code == 405
    assert {m.strip() for m in refused.headers["allow"].split(",")} == allowed
    assert {m.strip() for m in call(srv, "OPTIONS", L + "/apps/shop/workflows/wf-1/steps").headers["allow"]
            .split(",")} == {"GET", "OPTIONS"}


# --- auth ------------------------------------------------------------------------------------


def test_an_app_limited_token_reads_its_app_and_no_other(tmp_path, store_url) -> None:
    tokens = {"scoped": server_admin_token(tmp_path, store_url, "acme", "billing-only", "billing"),
              "other": server_admin_token(tmp_path, store_url, "other", "admin"),
              "admin": server_admin_token(tmp_path, store_url, "acme", "admin")}
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    try:
        known(s, "acme", tokens["admin"])  # made last: every token is in the read models
        for app in ("orders", "billing"):
            assert call(s, "PUT", f"/v2/orgs/acme/apps/{app}", tokens["admin"]).status_code in (201, 204)
        fakes = [FakeExecutor(s.ws, app=app, key=tokens["admin"], executor_id=f"ex-{app}", answers=answers("python"))
                 for app in ("billing", "orders")]
        with executors(s, *fakes):
            for op, method, path, body in READS:
                conforms(op, call(s, method, "/v2/orgs/acme/apps/billing" + path, tokens["scoped"], json=body), 200)
                conforms(op, call(s, method, "/v2/orgs/acme/apps/orders" + path, tokens["scoped"], json=body), 403)
                conforms(op, call(s, method, "/v2/orgs/acme/apps/billing" + path, tokens["other"], json=body), 403)
                conforms(op, call(s, method, "/v2/orgs/acme/apps/billing" + path, json=body), 401)
                conforms(op, call(s, method, "/v2/orgs/acme/apps/orders" + path, tokens["admin"], json=body), 200)
    finally:
        s.stop()
