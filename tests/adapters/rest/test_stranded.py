"""Stranded work (``relay_es/adapters/rest/stranded.py``) on a real ``relay serve``, both stores,
with fake executors over real WebSockets: one executor stops or dies with PENDING workflows,
another (of another version, or the same) answers ``list_workflows`` for the whole application.

The route's own job: asking one executor for the PENDING and ENQUEUED workflows and joining them
with Relay's executors table (the classification itself is ``tests/engine/test_stranded.py``'s),
the shape of the answer, ``relayOnly`` and the 503 without an executor, the fixes sent as the
protocol's messages and recorded in the audit log, and the refusals (409 for a recovery that
cannot be done now, 422 for a body that does not say what to fix)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.fake_executor import FakeExecutor
from tests.rest_client import as_records, audit_log
from tests.rest_client import rest as call
from tests.adapters.readmodels.test_follower import is_follower
from tests.server import RelayServer, children_of

L = "/v2/orgs/local"
ORDERS = L + "/apps/orders"
STRANDED = ORDERS + "/stranded-workflows"
FIX = STRANDED + "/fix"
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
T0 = 1_764_590_400_000  # 2025-12-01T12:00:00Z in epoch ms


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


def status_of(server: RelayServer, executor_id: str) -> str | None:
    r = call(server, "GET", ORDERS + "/executors")
    return next((e["status"] for e in r.json() if e["executorId"] == executor_id), None) if r.status_code == 200 \
        else None


def workflow(wid: str, executor: str | None, status: str = "PENDING", queue: str | None = None,
             version: str = "v1", n: int = 0) -> dict[str, Any]:
    """A ``WorkflowsOutput`` as dbos 3.2.0 sends it (every value a string)."""
    return {"WorkflowUUID": wid, "Status": status, "WorkflowName": "checkout", "WorkflowClassName": None,
            "WorkflowConfigName": None, "AuthenticatedUser": None, "AssumedRole": None, "AuthenticatedRoles": None,
            "Input": None, "Output": None, "Error": None, "CreatedAt": str(T0 + n), "UpdatedAt": str(T0 + n),
            "QueueName": queue, "ApplicationVersion": version, "ExecutorID": executor,
            "WorkflowTimeoutMS": None, "WorkflowDeadlineEpochMS": None, "DeduplicationID": None, "Priority": "0",
            "QueuePartitionKey": None, "ForkedFrom": None, "WasForkedFrom": False, "ParentWorkflowID": None,
            "DequeuedAt": None, "DelayUntilEpochMS": None, "CompletedAt": None, "Attributes": None,
            "ScheduleName": None, "ApplicationName": None}


class SystemDatabase:
    """What the fake executors answer ``list_workflows`` from: a list of workflows, filtered by
    status, queue, limit and offset as the SDKs do."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.asked: list[dict[str, Any]] = []

    def list_workflows(self, msg: dict[str, Any]) -> dict[str, Any]:
        body = msg["body"]
        self.asked.append(body)

        def values(v: Any) -> list[Any] | None:
            return None if v is None else v if isinstance(v, list) else [v]

        status, queue = values(body.get("status")), values(body.get("queue_name"))
        ids = values(body.get("workflow_uuids"))
        rows = [w for w in self.rows if (status is None or w["Status"] in status)
                and (queue is None or w["QueueName"] in queue) and (ids is None or w["WorkflowUUID"] in ids)]
        rows.sort(key=lambda w: int(w["CreatedAt"]), reverse=bool(body.get("sort_desc")))
        offset = body.get("offset") or 0
        rows = rows[offset:]
        if body.get("limit") is not None:
            rows = rows[:body["limit"]]
        return {"output": rows}


def answering(db: SystemDatabase, **kw: Any) -> dict[str, Any]:
    """FakeExecutor keyword arguments: answers list_workflows from ``db``, resume, cancel and
    fork_from_failure with success (forks named ``fork-<id>``)."""
    return {"answers": {"list_workflows": db.list_workflows,
                        "resume": lambda msg: {"success": True},
                        "cancel": lambda msg: {"success": True},
                        "fork_from_failure": lambda msg: {"forked_workflow_ids": [
                            f"fork-{w}" for w in msg["body"]["workflow_ids"]]}}, **kw}


def recorded(server: RelayServer, operation: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each ``operation`` action in the audit log, once it has completed there: (what was
    requested, how it completed)."""

    def read() -> list[tuple[dict[str, Any], dict[str, Any] | None]] | None:
        got = _recorded(server, operation)
        return got if got and all(done is not None for _, done in got) else None

    return wait(read, f"{operation} completed in the audit log")


def _recorded(server: RelayServer, operation: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    return as_records(audit_log(server, operation=operation), "orders")


def assert_problem(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return r.json()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server for the refusals, which change nothing."""
    s = RelayServer(tmp_path_factory.mktemp("dev")).start()
    call(s, "PUT", ORDERS)
    yield s
    s.stop()


# ------------------------------------------------------------------ the listing


def test_a_stopped_executor_s_pending_workflows_are_listed_with_their_queues_and_fixes(server: RelayServer) -> None:
    assert call(server, "PUT", ORDERS).status_code == 204
    db = SystemDatabase([
        workflow("w1", "A", queue="payments", n=1),
        workflow("w2", "B", version="v2", n=2),  # B is alive: not stranded
        workflow("w3", "local", n=3),  # never connected to Relay
        workflow("w4", "A", n=4),
        workflow("q1", None, status="ENQUEUED", queue="payments", n=5),
        workflow("q2", None, status="ENQUEUED", queue="payments", n=6),
        workflow("q3", None, status="ENQUEUED", queue="other", n=7),
        workflow("done", "A", status="SUCCESS", n=8),
    ])

    async def go() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
        b = await FakeExecutor(server.ws, app="orders", executor_id="B", version="v2", **answering(db)).connect()
        try:
            await a.close()  # a clean close, as a deploy stops a process
            await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
            r = await asyncio.to_thread(call, server, "GET", STRANDED)
            assert r.status_code == 200, r.text
            got = r.json()
            assert INSTANT.match(got["at"]) and got["relayOnly"] is False
            assert got["examined"] == 4 and got["nextOffset"] is None  # the PENDING ones, oldest first
            assert [w["workflowId"] for w in got["workflows"]] == ["w1", "w3", "w4"]
            w1 = got["workflows"][0]
            state = w1.pop("relayState")
            # a clean close is polite once the hub tells it from a dropped socket (until then: socket_closed)
            polite = "stopped_politely" if state["disconnectReason"] == "clean_close" else "disconnected"
            assert state["disconnectReason"] in ("clean_close", "socket_closed")
            assert w1 == {"workflowId": "w1", "name": "checkout", "status": "PENDING", "queueName": "payments",
                          "executorId": "A", "appVersion": "v1", "createdAt": "2025-12-01T12:00:00.001Z",
                          "reason": polite, "fixes": ["fork", "cancel"]}  # no v1 executor left
            assert state["status"] == "DISCONNECTED"
            assert INSTANT.match(state["deadline"]) and state["recoveryPhase"] is None and state["appVersion"] == "v1"
            assert got["workflows"][1]["reason"] == "executor_unknown" and got["workflows"][1]["relayState"] is None
            assert got["queues"] == [{"queueName": "payments", "strandedWorkflows": 1, "enqueued": 2,
                                      "enqueuedCapped": False}]
            assert [(e["executorId"], e["reason"], e["strandedWorkflows"]) for e in got["executors"]] == [
                ("A", polite, 2), ("local", "executor_unknown", 1)]
            # the executor was asked for PENDING workflows, oldest first, without inputs or outputs
            first = db.asked[0]
            assert first["status"] == "PENDING" and first["sort_desc"] is False
            assert first["load_input"] is False and first["load_output"] is False
            assert db.asked[1]["status"] == ["ENQUEUED"] and db.asked[1]["queue_name"] == ["payments"]

            # pages: limit PENDING workflows examined, the next from nextOffset
            p1 = (await asyncio.to_thread(call, server, "GET", STRANDED, params={"limit": 2})).json()
            assert p1["examined"] == 2 and p1["nextOffset"] == 2
            assert [w["workflowId"] for w in p1["workflows"]] == ["w1"]
            p2 = (await asyncio.to_thread(call, server, "GET", STRANDED,
                                          params={"limit": 2, "offset": p1["nextOffset"]})).json()
            assert [w["workflowId"] for w in p2["workflows"]] == ["w3", "w4"] and p2["nextOffset"] == 2 + 2
            p3 = (await asyncio.to_thread(call, server, "GET", STRANDED, params={"limit": 2, "offset": 4})).json()
            assert p3["examined"] == 0 and p3["nextOffset"] is None and p3["workflows"] == []
        finally:
            await b.close()

    asyncio.run(go())


def test_a_dead_executor_deferred_for_want_of_its_version_is_fixed_by_fork_not_recover(server: RelayServer) -> None:
    call(server, "PUT", ORDERS)
    assert call(server, "PATCH", ORDERS, json={"executorTimeoutSecs": 1}).status_code == 204
    db = SystemDatabase([workflow("w1", "A", n=1), workflow("w2", "A", n=2)])

    async def go() -> None:
        b = await FakeExecutor(server.ws, app="orders", executor_id="B", version="v2", **answering(db)).connect()
        try:
            a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
            a.abort()  # killed
            await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DEAD", "A declared dead")

            def deferred() -> Any:
                got = call(server, "GET", STRANDED).json()
                return got if got["workflows"] and got["workflows"][0]["reason"] == "recovery_deferred" else None

            got = await asyncio.to_thread(wait, deferred, "A's recovery deferred")
            w1 = got["workflows"][0]
            assert w1["fixes"] == ["fork", "cancel"]
            assert w1["relayState"]["recoveryPhase"] == "deferred" and INSTANT.match(w1["relayState"]["declaredDeadAt"])
            assert w1["relayState"]["recoveryVersion"] == "v1" and w1["relayState"]["deadline"] is None

            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "recover", "executorIds": ["A"]})
            body = assert_problem(r, 409)
            assert "fork is the fix" in body["detail"].lower() and "nothing was sent" in body["detail"]
            assert body["errors"][0]["location"] == "executorIds[A]" and "'v1'" in body["errors"][0]["message"]
            assert not [q for q in b.requests if q["type"] == "recovery"]

            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "resume", "workflowIds": ["w1", "w2"]})
            assert r.status_code == 200, r.text
            assert r.json() == {"fix": "resume", "workflowIds": ["w1", "w2"]}
            (resume,) = [q for q in b.requests if q["type"] == "resume"]
            assert resume["workflow_ids"] == ["w1", "w2"]

            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "cancel", "workflowIds": ["w2"]})
            assert r.status_code == 200, r.text
            (cancel,) = [q for q in b.requests if q["type"] == "cancel"]
            assert cancel["workflow_ids"] == ["w2"]

            # fork: cancelled first (no v1 executor may ever run them again), then forked from the last step
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "fork", "workflowIds": ["w1"],
                                                                         "appVersion": "v2"})
            assert r.status_code == 200, r.text
            assert r.json() == {"fix": "fork", "workflowIds": ["w1"], "forkedWorkflowIds": ["fork-w1"]}
            sent = [q for q in b.requests if q["type"] in ("cancel", "fork_from_failure")]
            assert [q["type"] for q in sent] == ["cancel", "cancel", "fork_from_failure"]
            assert sent[1]["workflow_ids"] == ["w1"]
            fork = sent[2]["body"]
            assert fork["workflow_ids"] == ["w1"] and fork["from_last_step"] is True
            assert "from_last_failure" not in fork and fork["application_version"] == "v2"  # only what is set

            # without appVersion Relay names the latest version running: an SDK left to choose keeps
            # the original's (TypeScript 5.2.11), and the fork would wait for a v1 executor forever
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "fork", "workflowIds": ["w1"]})
            assert r.status_code == 200, r.text
            fork = [q for q in b.requests if q["type"] == "fork_from_failure"][-1]["body"]
            assert fork["application_version"] == "v2"

            # an id the application does not have: DBOS refuses the whole fork, so nothing is
            # cancelled (it was, and the others were left CANCELLED and not forked)
            before = len(b.requests)
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "fork",
                                                                         "workflowIds": ["w1", "no-such"]})
            body = assert_problem(r, 404)
            assert "'no-such'" in body["detail"] and "nothing was cancelled" in body["detail"]
            assert [q["type"] for q in b.requests[before:]] == ["list_workflows"]
            assert db.asked[-1]["workflow_uuids"] == ["w1", "no-such"]
        finally:
            await b.close()

    asyncio.run(go())
    ((resumed, outcome),) = recorded(server, "strandedResume")
    assert resumed["target"] == {"type": "workflow", "ids": ["w1", "w2"], "count": 2}
    assert resumed["parameters"] == {"workflowCount": 2} and outcome and outcome["outcome"] == "succeeded"
    (cancelled, outcome), (for_fork, _), _ = recorded(server, "strandedCancel")
    assert cancelled["target"]["ids"] == ["w2"] and outcome and outcome["outcome"] == "succeeded"
    assert for_fork["parameters"] == {"workflowCount": 1, "forFork": True}
    (forked, outcome), (defaulted, _) = recorded(server, "strandedFork")
    assert forked["parameters"] == {"workflowCount": 1, "fromLastStep": True, "appVersion": "v2"}
    assert outcome and outcome["result"] == {"forkedCount": 1}
    assert defaulted["parameters"]["appVersion"] == "v2"  # the version it was sent with, on record


def test_a_fork_that_fails_after_the_cancel_says_the_workflows_are_cancelled(server: RelayServer) -> None:
    """The fork fix cancels, then forks: a fork the executor refuses leaves the workflows
    CANCELLED, and the problem says so (a client reading only 'fork failed' would think nothing
    changed)."""
    call(server, "PUT", ORDERS)
    db = SystemDatabase([workflow("w1", "A", version="v2")])
    kw = answering(db)
    kw["answers"]["fork_from_failure"] = lambda msg: {"error_message": "Exception encountered when bulk forking"}

    async def go() -> None:
        b = await FakeExecutor(server.ws, app="orders", executor_id="B", version="v2", **kw).connect()
        try:
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "fork", "workflowIds": ["w1"]})
            body = assert_problem(r, 500)
            assert "Exception encountered when bulk forking" in body["detail"]
            assert "cancelled" in body["detail"] and "CANCELLED now, not forked" in body["detail"]
            assert [q["type"] for q in b.requests if q["type"] not in ("executor_info", "list_application_versions")] == [
                "list_workflows", "cancel", "fork_from_failure"]
        finally:
            await b.close()

    asyncio.run(go())


def test_a_queue_count_not_answered_is_null_and_the_listing_does_not_fail(tmp_path: Any, store_url: str) -> None:
    """The blocked queues are counted at once, within one call's timeout in all: one the executor never
    answers is ``enqueued: null``, the rest are counted (before: the listing failed with a 504, after
    waiting for each count in turn)."""
    server = RelayServer(tmp_path, args=["--database-url", store_url, "--call-timeout-secs", "1"]).start()
    db = SystemDatabase([workflow("w1", "A", queue="payments", n=1), workflow("w2", "A", queue="slow", n=2),
                         workflow("q1", None, status="ENQUEUED", queue="payments", n=3)])

    def list_workflows(msg: dict[str, Any]) -> dict[str, Any] | None:
        return None if msg["body"].get("queue_name") == ["slow"] else db.list_workflows(msg)

    async def go() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
        b = await FakeExecutor(server.ws, app="orders", executor_id="B", version="v2",
                               answers={"list_workflows": list_workflows}).connect()
        try:
            await a.close()
            await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
            r = await asyncio.to_thread(call, server, "GET", STRANDED)
            assert r.status_code == 200, r.text
            assert [w["workflowId"] for w in r.json()["workflows"]] == ["w1", "w2"]
            assert r.json()["queues"] == [
                {"queueName": "payments", "strandedWorkflows": 1, "enqueued": 1, "enqueuedCapped": False},
                {"queueName": "slow", "strandedWorkflows": 1, "enqueued": None, "enqueuedCapped": False}]
        finally:
            await b.close()

    try:
        assert call(server, "PUT", ORDERS).status_code == 204
        asyncio.run(go())
    finally:
        server.stop()


def test_recover_now_refuses_an_executor_back_before_the_table_has_it(server: RelayServer) -> None:
    """The executors table trails the hub: an executor back a moment ago is DISCONNECTED there still.
    Held there (the read models' process stopped), a forced recover of it must send nothing: its
    workflows run on it again, and a recovery elsewhere (or on itself) would run them twice."""
    call(server, "PUT", ORDERS)
    db = SystemDatabase([workflow("w1", "A", n=1)])

    async def go() -> None:
        c = await FakeExecutor(server.ws, app="orders", executor_id="C", version="v1", **answering(db)).connect()
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
        await a.close()
        await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
        for _ in range(50):
            frozen = [p for p in children_of(server.proc.pid) if is_follower(p)]
            for p in frozen:
                os.kill(p, signal.SIGSTOP)
            back = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
            await asyncio.sleep(0.3)
            if frozen and await asyncio.to_thread(status_of, server, "A") == "DISCONNECTED":
                break  # the child follows the log, and it is stopped: the table is stale
            # the child was not following yet (the server folds meanwhile): again, once it does
            for p in frozen:
                os.kill(p, signal.SIGCONT)
            await back.close()
            await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
        else:
            raise AssertionError("the read models' process never followed the log")
        try:
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "recover", "executorIds": ["A"],
                                                                         "force": True})
            body = assert_problem(r, 409)
            assert body["errors"] == [{"location": "executorIds[A]",
                                       "message": "the executor is connected again: its workflows are not stranded"}]
            assert not [q for q in c.requests + back.requests if q["type"] == "recovery"]
        finally:
            for p in frozen:
                os.kill(p, signal.SIGCONT)
        await back.close()
        await c.close()

    asyncio.run(go())


def test_recover_now_sends_recovery_to_an_executor_of_its_version_and_is_audited(server: RelayServer) -> None:
    call(server, "PUT", ORDERS)
    db = SystemDatabase([workflow("w1", "A", n=1)])

    async def go() -> None:
        c = await FakeExecutor(server.ws, app="orders", executor_id="C", version="v1", **answering(db)).connect()
        try:
            a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
            await a.close()
            await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
            got = (await asyncio.to_thread(call, server, "GET", STRANDED)).json()
            assert got["workflows"][0]["fixes"] == ["recover", "resume", "fork", "cancel"]

            # DISCONNECTED (60 s of grace left): it may be running, so only when forced
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "recover", "executorIds": ["A"]})
            assert "force=true" in assert_problem(r, 409)["errors"][0]["message"]
            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "recover", "executorIds": ["A", "C"],
                                                                         "force": True})
            body = assert_problem(r, 409)  # C is HEALTHY: nothing is sent for A either
            assert [e["location"] for e in body["errors"]] == ["executorIds[C]"]
            assert not [q for q in c.requests if q["type"] == "recovery"]

            r = await asyncio.to_thread(call, server, "POST", FIX, json={"fix": "recover", "executorIds": ["A"],
                                                                         "force": True})
            assert r.status_code == 200, r.text
            assert r.json() == {"fix": "recover", "recovered": [{"appVersion": "v1", "executorIds": ["A"]}]}
            (rec,) = [q for q in c.requests if q["type"] == "recovery"]
            assert rec["executor_ids"] == ["A"]
        finally:
            await c.close()

    asyncio.run(go())
    ((asked, outcome),) = recorded(server, "strandedRecover")
    assert asked["target"] == {"type": "executor", "ids": ["A"], "count": 1}
    assert asked["parameters"] == {"appVersion": "v1", "executorCount": 1, "force": True}
    assert outcome and outcome["outcome"] == "succeeded" and outcome["result"] == {"executorCount": 1}


def test_a_recover_whose_executor_goes_before_it_answers_is_on_record_unknown(server: RelayServer) -> None:
    """The recovery request was sent and its executor's socket closed before the answer: it may have
    recovered them. On record ``unknown`` (it was ``failed``), as an action's call is."""
    call(server, "PUT", ORDERS)
    db = SystemDatabase([workflow("w1", "A", n=1)])

    async def go() -> None:
        c = await FakeExecutor(server.ws, app="orders", executor_id="C", version="v1", **answering(db)).connect()
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
        await a.close()
        await asyncio.to_thread(wait, lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
        c.answer = False  # it reads the recovery request, answers nothing, and goes
        fix = asyncio.ensure_future(asyncio.to_thread(call, server, "POST", FIX, json={
            "fix": "recover", "executorIds": ["A"], "force": True}))
        await c.wait_for("recovery")
        c.abort()
        r = await fix
        assert r.status_code == 502, r.text
        assert "may have carried the action out" in r.json()["detail"]

    asyncio.run(go())
    ((_, outcome),) = recorded(server, "strandedRecover")
    assert outcome and outcome["outcome"] == "unknown" and outcome["executorId"] == "C"


def test_without_an_executor_the_listing_is_a_503_and_relay_only_lists_what_relay_knows(server: RelayServer) -> None:
    call(server, "PUT", ORDERS)

    async def go() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v1").connect()
        a.abort()

    asyncio.run(go())
    wait(lambda: status_of(server, "A") == "DISCONNECTED", "A disconnected")
    r = call(server, "GET", STRANDED)
    body = assert_problem(r, 503)
    assert r.headers["retry-after"] == "5" and "relayOnly=true" in body["detail"]
    r = call(server, "GET", STRANDED, params={"relayOnly": "true"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["relayOnly"] is True and got["workflows"] is None and got["queues"] is None
    assert got["examined"] is None and got["nextOffset"] is None
    (a,) = got["executors"]
    assert a["executorId"] == "A" and a["reason"] == "disconnected" and a["strandedWorkflows"] == 0  # dropped
    assert a["fixes"] == ["fork", "cancel"] and a["relayState"]["status"] == "DISCONNECTED"
    # a fix that needs an executor: 503, and on record as such
    r = call(server, "POST", FIX, json={"fix": "cancel", "workflowIds": ["w1"]})
    assert_problem(r, 503)
    ((_, outcome),) = recorded(server, "strandedCancel")
    assert outcome and outcome["outcome"] == "no_healthy_executor"


def test_a_hostile_listing_is_refused_with_a_502(server: RelayServer) -> None:
    call(server, "PUT", ORDERS)
    bad = workflow("w1", "A")
    bad["CreatedAt"] = "yesterday"

    async def go() -> None:
        b = await FakeExecutor(server.ws, app="orders", executor_id="B",
                               answers={"list_workflows": lambda msg: {"output": [bad]}}).connect()
        try:
            r = await asyncio.to_thread(call, server, "GET", STRANDED)
            assert_problem(r, 502)
            b.answers["list_workflows"] = lambda msg: {"output": "not a list"}
            r = await asyncio.to_thread(call, server, "GET", STRANDED)
            assert_problem(r, 502)
        finally:
            await b.close()

    asyncio.run(go())


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("body, location", [
    ({"fix": "recover"}, "executorIds"),
    ({"fix": "recover", "executorIds": ["A"], "workflowIds": ["w"]}, "workflowIds"),
    ({"fix": "resume"}, "workflowIds"),
    ({"fix": "cancel", "workflowIds": ["w"], "executorIds": ["A"]}, "executorIds"),
    ({"fix": "cancel", "workflowIds": ["w"], "force": True}, "force"),
    ({"fix": "resume", "workflowIds": []}, "workflowIds"),
    ({"fix": "resume", "workflowIds": ["w"] * 1001}, "workflowIds"),
    ({"fix": "recover", "executorIds": ["A"] * 21}, "executorIds"),
    ({"fix": "restart", "workflowIds": ["w"]}, "fix"),
    ({"fix": "resume", "workflowIds": ["w"], "extra": 1}, "body"),
    ({"fix": "resume", "workflowIds": ["w"], "appVersion": "v2"}, "appVersion"),
    ({"fix": "fork", "executorIds": ["A"]}, "executorIds"),
    ({"fix": "resume", "workflowIds": ["w", ""]}, "workflowIds"),  # an empty id names no workflow
    ({"fix": "recover", "executorIds": [""]}, "executorIds"),
])
def test_a_fix_body_that_does_not_say_what_to_fix_is_a_422(dev: RelayServer, body: dict[str, Any],
                                                          location: str) -> None:
    r = call(dev, "POST", FIX, json=body)
    problem = assert_problem(r, 422)
    assert location in problem["detail"], problem


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"offset": -1}, {"relayOnly": "maybe"}])
def test_bad_listing_parameters_are_422s(dev: RelayServer, params: dict[str, Any]) -> None:
    assert_problem(call(dev, "GET", STRANDED, params=params), 422)


def test_an_unknown_application_is_a_404(dev: RelayServer) -> None:
    assert_problem(call(dev, "GET", L + "/apps/nope/stranded-workflows"), 404)
    assert_problem(call(dev, "GET", L + "/apps/nope/stranded-workflows", params={"relayOnly": "true"}), 404)
    for body in ({"fix": "recover", "executorIds": ["A"]}, {"fix": "fork", "workflowIds": ["w1"]},
                 {"fix": "fork", "workflowIds": ["w1"], "appVersion": "v2"}, {"fix": "cancel", "workflowIds": ["w1"]}):
        assert_problem(call(dev, "POST", L + "/apps/nope/stranded-workflows/fix", json=body), 404)


def test_recover_of_executors_relay_does_not_know_is_a_409_naming_each(dev: RelayServer) -> None:
    r = call(dev, "POST", FIX, json={"fix": "recover", "executorIds": ["ghost", "local"]})
    body = assert_problem(r, 409)
    assert [e["location"] for e in body["errors"]] == ["executorIds[ghost]", "executorIds[local]"]
