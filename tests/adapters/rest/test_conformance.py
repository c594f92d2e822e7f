"""Every Conductor operation Relay serves answers as the Conductor API 2.0.0 reference allows,
on a real ``relay serve``, both stores, with fake executors connected over real WebSockets.

Each answer -- successes and refusals (404, 405, 409, 422; 401 and 403 in auth mode) -- is
validated with ``tests/conductor_schema.py`` against the reference's schema for that
operation and status: exactly Conductor's fields, types and nullability (the schemas are
closed), errors as ``ErrorModel`` problem documents. Relay's extras come only with
``?relay=extended`` (a query parameter no Conductor client sends): then an answer is the
Conductor one plus exactly the documented extra fields. ``/executor-events`` has Relay's own shape
until issue 14 moves it, and is not checked here.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay_es.adapters import authz
from relay_es.adapters.rest import build_app
from tests.adapters.rest.fakes import fake_context
from tests.conductor_schema import check_response, check_schema, operations
from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.server import RelayServer, TLS

L = "/v2/orgs/local"
FUTURE = "2100-01-01T00:00:00Z"

# The Conductor operations Relay serves, each checked below.
CHECKED = {"listApps", "registerApp", "getApp", "updateApp", "deleteApp", "listExecutors",
           "listTokens", "createToken", "deleteToken"}
# Issue 13's operations, each checked against the reference in its own module (on a real relay
# serve with fake executors of both dialects, and end to end with real SDKs in tests/e2e).
CHECKED_IN = {
    "test_workflows.py": {"listWorkflows", "searchWorkflows", "getWorkflow", "listWorkflowSteps",
                          "listWorkflowEvents", "listWorkflowNotifications", "listWorkflowStreams",
                          "getWorkflowAggregates", "getStepAggregates"},
    "test_workflow_actions.py": {"cancelWorkflow", "resumeWorkflow", "forkWorkflow", "deleteWorkflow",
                                 "bulkCancelWorkflows", "bulkResumeWorkflows", "bulkDeleteWorkflows",
                                 "bulkForkWorkflowsFromFailure", "exportWorkflow", "importWorkflow"},
    "test_queues.py": {"listQueues", "getQueue"},
    "test_schedules.py": {"listSchedules", "getSchedule", "pauseSchedule", "resumeSchedule", "triggerSchedule",
                          "backfillSchedule"},
    "test_versions.py": {"listAppVersions", "setLatestAppVersion"},
    "test_audit.py": {"listAuditLogs"},
    "test_app_metrics.py": {"listMetrics"},
    "test_roles.py": {"listRoles", "createRole", "deleteRole", "listPermissions"},
    "test_org.py": {"getOrg", "updateOrg", "listMembers", "grantRole", "removeMember", "getCurrentUser",
                    "generateSecret"},
    "test_alerting.py": {"listAlertingRules", "createAlertingRule", "deleteAlertingRule"},
    "test_autoscaling.py": {"getAutoscale", "getAutoscalingPolicy", "setAutoscalingPolicy", "deleteAutoscalingPolicy"},
}

# Relay's fields that ?relay=extended adds, by operation.
EXTRAS = {"listExecutors": {"deadline"}, "listTokens": {"appNames"}}
EXTENDED = {"relay": "extended"}


def body_of(r: httpx.Response) -> Any:
    return r.json() if r.content else None


def conforms(operation: str, r: httpx.Response, status: int | None = None) -> Any:
    """``r`` is an answer the reference allows ``operation`` (with ``status``, when given); its body."""
    if status is not None:
        assert r.status_code == status, r.text
    body = body_of(r)
    if r.status_code >= 400:
        assert r.headers["content-type"].startswith("application/problem+json"), r.headers
        assert body["status"] == r.status_code and body["detail"], body
    check_response(operation, r.status_code, body)
    return body


def conforms_extended(operation: str, r: httpx.Response) -> list[dict[str, Any]]:
    """An extended list: each item is Conductor's plus exactly Relay's extra fields."""
    assert r.status_code == 200, r.text
    items = r.json()
    for item in items:
        assert EXTRAS[operation] <= set(item), item
    check_response(operation, 200, [{k: v for k, v in i.items() if k not in EXTRAS[operation]} for i in items])
    return items


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


@contextmanager
def executors(server: RelayServer, *specs: dict[str, Any]) -> Iterator[list[FakeExecutor]]:
    """Fake executors (each spec: FakeExecutor's fields) connected, on their own event loop in a
    thread, while the block runs; closed after it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(20)

    fakes = [FakeExecutor(server.ws, **spec) for spec in specs]
    try:
        for f in fakes:
            run(f.connect())
        yield fakes
    finally:
        for f in fakes:
            run(f.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def listed(server: RelayServer, app: str, token: str | None = None, org: str = "local") -> dict[str, Any]:
    r = call(server, "GET", f"/v2/orgs/{org}/apps/{app}/executors", token, params=EXTENDED)
    return {e["executorId"]: e for e in r.json()} if r.status_code == 200 else {}


# ------------------------------------------------------------------ what is served


def _shape(template: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", template)


def test_the_checker_refuses_a_field_out_of_its_format() -> None:
    """A timestamp that is not RFC 3339 fails as an extra field does (``format`` is checked)."""
    good = {"versionId": "v", "versionName": "v1", "versionTimestamp": "2026-12-06T12:00:00.000Z",
            "createdAt": "2026-12-06T12:00:00Z"}
    check_schema("ApplicationVersion", good)
    for bad in ({**good, "createdAt": "1767225600000"}, {**good, "versionTimestamp": "yesterday"},
                {**good, "extra": 1}):
        with pytest.raises(AssertionError):
            check_schema("ApplicationVersion", bad)


def test_every_conductor_path_relay_serves_is_checked_here() -> None:
    """Relay's routes (the authorization table has one row per route) matched to the
    reference's operations by method and path: each is checked by this module."""
    by_route = {(m, _shape(p)): op for op, (m, p, _) in operations().items()}
    served = {by_route[(m, _shape(p))] for (m, p) in authz.TABLE if (m, _shape(p)) in by_route}
    elsewhere = set().union(*CHECKED_IN.values())
    assert served == CHECKED | elsewhere
    here = Path(__file__).parent
    for module, ops in CHECKED_IN.items():
        text = (here / module).read_text()
        unchecked = {op for op in ops if f'conforms("{op}"' not in text and f'check_response("{op}"' not in text}
        assert not unchecked, f"{module} does not check {sorted(unchecked)} against the reference"
    app = build_app(fake_context())
    routes = {(m, _shape(r.path)) for r in app.routes for m in getattr(r, "methods", ()) if m not in ("OPTIONS", "HEAD")}
    assert {(m, _shape(p)) for (m, p) in authz.TABLE} <= routes


# ------------------------------------------------------------------ development mode


def test_applications_answer_as_conductor_does(server: RelayServer) -> None:
    base = L + "/apps/orders"
    conforms("registerApp", call(server, "PUT", base), 204)  # no body
    conforms("registerApp", call(server, "PUT", base, json={}), 204)
    conforms("registerApp", call(server, "PUT", L + "/apps/billing", json={"privateMode": True}), 204)
    conforms("registerApp", call(server, "PUT", L + "/apps/billing", json={"$schema": "x", "privateMode": True}), 204)
    conforms("registerApp", call(server, "PUT", L + "/apps/-lead"), 422)
    conforms("registerApp", call(server, "PUT", base, json={"privateMode": "yes"}), 422)
    conforms("registerApp", call(server, "PUT", base, json={"name": "x"}), 422)
    conforms("registerApp", call(server, "PUT", "/v2/orgs/acme/apps/orders"), 404)  # dev mode: only org local

    unset = conforms("getApp", call(server, "GET", base), 200)
    assert unset["status"] == "UNAVAILABLE" and unset["language"] is None and unset["gcTimeThresholdMs"] is None
    conforms("updateApp", call(server, "PATCH", base, json={"executorTimeoutSecs": 30, "gcTimeThresholdMs": 86_400_000,
                                                          "gcRowsThreshold": 1000, "globalTimeoutMs": 7_200_000,
                                                          "privateMode": True, "$schema": "x"}), 204)
    for bad in ({"executorTimeoutSecs": "60"}, {"executorTimeoutSecs": 0}, {"gcRowsThreshold": -1},
                {"executorTimeoutSec": 60}, [], "x"):
        conforms("updateApp", call(server, "PATCH", base, json=bad), 422)
    conforms("updateApp", call(server, "PATCH", base, content=b"{", headers={"content-type": "application/json"}))
    conforms("updateApp", call(server, "PATCH", L + "/apps/nope", json={"privateMode": True}), 404)

    with executors(server, {"app": "orders", "executor_id": "A"}):
        wait(lambda: listed(server, "orders"), "A listed")
        got = conforms("getApp", call(server, "GET", base), 200)
        assert got["status"] == "AVAILABLE" and got["language"] == "python" and got["executorTimeoutSecs"] == 30
        apps = conforms("listApps", call(server, "GET", L + "/apps"), 200)
        assert sorted(a["name"] for a in apps) == ["billing", "orders"]
    conforms("getApp", call(server, "GET", L + "/apps/nope"), 404)
    conforms("listApps", call(server, "GET", "/v2/orgs/acme/apps"), 404)
    conforms("listApps", call(server, "POST", L + "/apps"), 405)

    conforms("deleteApp", call(server, "DELETE", base), 204)
    conforms("deleteApp", call(server, "DELETE", base), 404)
    conforms("getApp", call(server, "GET", base), 404)
    assert [a["name"] for a in conforms("listApps", call(server, "GET", L + "/apps"), 200)] == ["billing"]


def test_executors_answer_as_conductor_does_and_relay_s_deadline_is_extended(server: RelayServer) -> None:
    path = L + "/apps/orders/executors"
    conforms("listExecutors", call(server, "GET", path), 404)
    call(server, "PUT", L + "/apps/orders")
    assert conforms("listExecutors", call(server, "GET", path), 200) == []
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 1}).status_code == 204

    with executors(server, {"app": "orders", "executor_id": "D"}):
        wait(lambda: "D" in listed(server, "orders"), "D listed")
    wait(lambda: listed(server, "orders")["D"]["status"] == "DEAD", "D declared dead")  # after its 1 s
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 60}).status_code == 204
    # another version than D's: D's recovery waits for a v1 executor, so D stays listed, DEAD
    with executors(server, {"app": "orders", "executor_id": "A", "version": "v2"},
                   {"app": "orders", "executor_id": "B", "version": "v2", "style": "typescript"}):
        wait(lambda: len(listed(server, "orders")) == 3, "A and B listed")
        conforms("listExecutors", call(server, "GET", path), 200)
    wait(lambda: {e["status"] for e in listed(server, "orders").values()} == {"DISCONNECTED", "DEAD"},
         "A and B disconnected")

    items = conforms("listExecutors", call(server, "GET", path), 200)
    assert {e["executorId"]: e["status"] for e in items} == {"A": "DISCONNECTED", "B": "DISCONNECTED", "D": "DEAD"}
    assert all("deadline" not in e for e in items)
    extended = {e["executorId"]: e for e in conforms_extended("listExecutors", call(server, "GET", path, params=EXTENDED))}
    assert extended["A"]["deadline"] > extended["A"]["updatedAt"] and extended["D"]["deadline"] is None
    assert {k: v for k, v in extended["A"].items() if k != "deadline"} == next(e for e in items if e["executorId"] == "A")

    # as of an instant, page by page: the same shapes, and the next page keeps ?relay=extended
    past = conforms("listExecutors", call(server, "GET", path, params={"asOf": FUTURE}), 200)
    assert past == items
    first = call(server, "GET", path, params={"asOf": FUTURE, "limit": 2, **EXTENDED})
    conforms_extended("listExecutors", first)
    assert "relay=extended" in first.links["next"]["url"]
    rest = conforms_extended("listExecutors", httpx.get(server.http + first.links["next"]["url"], verify=TLS, timeout=10))
    assert [e["executorId"] for e in first.json() + rest] == ["A", "B", "D"]
    plain = call(server, "GET", path, params={"asOf": FUTURE, "limit": 2})
    assert "relay" not in plain.links["next"]["url"]

    for params in ({"relay": "yes"}, {"relay": ""}, {"asOf": "yesterday"}, {"asOf": FUTURE, "limit": 0}):
        conforms("listExecutors", call(server, "GET", path, params=params), 422)
    conforms("listExecutors", call(server, "GET", path + "?relay=extended&relay=extended"), 400)
    conforms("listExecutors", call(server, "DELETE", path), 405)


def test_tokens_answer_as_conductor_does_and_relay_s_app_names_are_extended(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    orders_id = call(server, "GET", L + "/apps/orders").json()["id"]
    conforms("createToken", call(server, "POST", L + "/tokens/admin"), 201)  # no body: org-wide
    conforms("createToken", call(server, "POST", L + "/tokens/ci", json={"appNames": ["orders", "later"]}), 201)
    every = sorted(authz.PERMISSIONS)
    conforms("createToken", call(server, "POST", L + "/tokens/stated", json={"permissions": every, "appNames": None}), 201)
    conforms("createToken", call(server, "POST", L + "/tokens/exe",
                                 json={"appNames": ["orders"], "permissions": ["websocket.connect", "application.read"],
                                       "$schema": "x"}), 201)
    # permissions of its own: any of the eight its maker holds (repeats are one)
    conforms("createToken", call(server, "POST", L + "/tokens/reader", json={"permissions": ["token.read"] * 2}), 201)
    conforms("createToken", call(server, "POST", L + "/tokens/strong", json={"appNames": ["orders"],
                                                                            "permissions": every}), 201)
    for name, body in (("admin", {}), ("bad", {"appNames": []}), ("bad", {"appNames": "orders"}),
                       ("bad", {"permissions": ["token.read", "root"]}), ("bad", {"permissions": []}),
                       ("bad", {"permissions": "token.read"}), ("bad", {"tokenName": "x"}), ("-lead", {})):
        conforms("createToken", call(server, "POST", f"{L}/tokens/{name}", json=body), 409 if name == "admin" else 422)
    conforms("createToken", call(server, "POST", "/v2/orgs/acme/tokens/x"), 404)

    tokens = {t["tokenName"]: t for t in conforms("listTokens", call(server, "GET", L + "/tokens"), 200)}
    assert set(tokens) == {"admin", "ci", "stated", "exe", "reader", "strong"}
    assert tokens["reader"]["permissions"] == ["token.read"] and tokens["strong"]["permissions"] == every
    later_id = tokens["ci"]["appIds"][0]  # in the order of the names, which a token keeps sorted
    assert tokens["admin"] == {**tokens["admin"], "permissions": every, "appIds": []}
    assert tokens["stated"]["permissions"] == every
    assert tokens["ci"]["permissions"] == sorted(authz.APP_TOKEN_PERMISSIONS)
    assert tokens["ci"]["appIds"] == [later_id, orders_id] and tokens["exe"]["appIds"] == [orders_id]
    call(server, "PUT", L + "/apps/later")  # registered after the token: the id it already listed
    assert call(server, "GET", L + "/apps/later").json()["id"] == later_id

    extended = {t["tokenName"]: t for t in conforms_extended("listTokens", call(server, "GET", L + "/tokens",
                                                                                params=EXTENDED))}
    assert extended["ci"]["appNames"] == ["later", "orders"] and extended["admin"]["appNames"] is None
    assert {k: v for k, v in extended["ci"].items() if k != "appNames"} == tokens["ci"]
    conforms("listTokens", call(server, "GET", L + "/tokens", params={"relay": "full"}), 422)

    conforms("deleteToken", call(server, "DELETE", L + "/tokens/ci"), 204)
    conforms("deleteToken", call(server, "DELETE", L + "/tokens/ci"), 409)  # already revoked
    conforms("deleteToken", call(server, "DELETE", L + "/tokens/never"), 404)
    conforms("deleteToken", call(server, "DELETE", L + "/tokens/-lead"), 404)
    assert "ci" not in {t["tokenName"] for t in conforms("listTokens", call(server, "GET", L + "/tokens"), 200)}


# ------------------------------------------------------------------ auth mode


def test_auth_mode_answers_and_refusals_are_conductor_s(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, tokens = auth_server
    admin, scoped, other = tokens["acme"], tokens["scoped"], tokens["other"]
    A = "/v2/orgs/acme"

    for op, method, path in (("listApps", "GET", A + "/apps"), ("getApp", "GET", A + "/apps/orders"),
                             ("registerApp", "PUT", A + "/apps/x"), ("updateApp", "PATCH", A + "/apps/orders"),
                             ("deleteApp", "DELETE", A + "/apps/orders"),
                             ("listExecutors", "GET", A + "/apps/orders/executors"),
                             ("listTokens", "GET", A + "/tokens"), ("createToken", "POST", A + "/tokens/x"),
                             ("deleteToken", "DELETE", A + "/tokens/admin")):
        conforms(op, call(s, method, path, json={} if method in ("PUT", "PATCH", "POST") else None), 401)
        conforms(op, call(s, method, path, tokens["revoked"]), 401)
        conforms(op, call(s, method, path, headers={"Authorization": "Basic eDp5"}), 401)
        conforms(op, call(s, method, path, other), 403)  # another org's token
    conforms("listApps", call(s, "GET", A + "/apps", scoped), 403)  # org-wide operations need an org-wide token
    conforms("listTokens", call(s, "GET", A + "/tokens", scoped), 403)
    conforms("createToken", call(s, "POST", A + "/tokens/x", scoped, json={}), 403)
    conforms("registerApp", call(s, "PUT", A + "/apps/billing", scoped), 403)
    conforms("getApp", call(s, "GET", A + "/apps/orders", scoped), 403)  # another application
    conforms("listExecutors", call(s, "GET", A + "/apps/orders/executors", scoped), 403)

    with executors(s, {"app": "billing", "key": scoped, "executor_id": "B"},
                   {"app": "orders", "key": admin, "executor_id": "O"}):
        wait(lambda: listed(s, "billing", scoped, "acme"), "B listed")
        wait(lambda: listed(s, "orders", admin, "acme"), "O listed")
        (b,) = conforms("listExecutors", call(s, "GET", A + "/apps/billing/executors", scoped), 200)
        assert b["executorId"] == "B" and b["status"] == "HEALTHY"
        assert conforms("getApp", call(s, "GET", A + "/apps/billing", scoped), 200)["status"] == "AVAILABLE"
        conforms_extended("listExecutors", call(s, "GET", A + "/apps/orders/executors", admin, params=EXTENDED))
        conforms("listApps", call(s, "GET", A + "/apps", admin), 200)

    listed_tokens = {t["tokenName"]: t for t in conforms("listTokens", call(s, "GET", A + "/tokens", admin), 200)}
    assert set(listed_tokens) == {"admin", "billing-only"}  # "old" was revoked
    assert listed_tokens["admin"]["permissions"] == sorted(authz.permissions_for(None))
    assert listed_tokens["billing-only"]["permissions"] == sorted(authz.permissions_for(["billing"]))
    billing_id = call(s, "GET", A + "/apps/billing", admin).json()["id"]
    assert listed_tokens["billing-only"]["appIds"] == [billing_id]
    extended = conforms_extended("listTokens", call(s, "GET", A + "/tokens", admin, params=EXTENDED))
    assert {t["tokenName"]: t["appNames"] for t in extended} == {"admin": None, "billing-only": ["billing"]}

    made = conforms("createToken", call(s, "POST", A + "/tokens/ci", admin, json={"appNames": ["orders"]}), 201)
    assert made["tokenName"] == "ci"
    conforms("getApp", call(s, "GET", A + "/apps/orders", made["token"]), 200)
    conforms("deleteToken", call(s, "DELETE", A + "/tokens/ci", admin), 204)
    conforms("getApp", call(s, "GET", A + "/apps/orders", made["token"]), 401)
    conforms("updateApp", call(s, "PATCH", A + "/apps/orders", admin, json={"privateMode": True}), 204)
    conforms("deleteApp", call(s, "DELETE", A + "/apps/orders", admin), 204)


def test_problems_are_error_models() -> None:
    """Every kind of refusal the REST API makes, built without a server."""
    from relay_es.adapters.rest import problems

    for status, errors in ((404, None), (422, [{"location": "body.x", "message": "wrong"}]), (500, None)):
        r = problems.problem(status, problems.TITLES.get(status, "Error"), "what happened", errors)
        check_schema("ErrorModel", r.content)
