"""The audit log, Conductor's ``listAuditLogs`` (``relay_es/adapters/rest/audit.py``), on a real
``relay serve``, both stores: every answer validated against the reference's ``AuditLogEntry``.

Who did what through the API: changes to applications and tokens (their successes and their
failures), workflow actions carried to an executor, and refusals (401, 403) -- one entry each,
newest first, with Conductor's filters and pages. Which events make which rows is
``tests/projections/test_actions.py``'s; the throttle of refusals is ``test_recording.py``'s.
A read waits for the read models to hold every action recorded before it (one test proves it on a
runtime whose read models move only when that wait moves them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import time
from datetime import datetime, timedelta
from typing import Any

import httpx
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.recording import MAX_REFUSALS_PER_WINDOW
from relay_es.composition.asgi import rest_context
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from relay_es.engine.action_commands import Actor
from tests.conductor_schema import check_response
from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.adapters.rest.servers import known
from tests.server import RELAY, RelayServer, admin_token

L = "/v2/orgs/local"
A = "/v2/orgs/acme"


def log(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    r = call(server, "GET", f"/v2/orgs/{org}/audit-logs", token, params=params)
    return conforms(r)


def conforms(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    body = r.json()
    check_response("listAuditLogs", status, body)
    return body


def wait_for(server: RelayServer, pred: Any, what: str, **kw: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        got = log(server, **kw)
        if pred(got):
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {got}"
        time.sleep(0.05)


def test_changes_to_applications_and_tokens_are_on_record_newest_first(server: RelayServer) -> None:
    assert log(server) == []
    assert call(server, "PUT", L + "/apps/orders", json={"privateMode": True}).status_code == 204
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 30}).status_code == 204
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 0}).status_code == 422
    assert call(server, "DELETE", L + "/apps/nope").status_code == 404
    made = call(server, "POST", L + "/tokens/ci", json={"appNames": ["orders"]})
    assert made.status_code == 201
    assert call(server, "DELETE", L + "/tokens/ci").status_code == 204

    entries = log(server)  # each change waits for the read models: on record when it answers
    assert [(e["operation"], e["status"]) for e in entries] == [
        ("deleteToken", "success"), ("createToken", "success"), ("deleteApp", "failure"),
        ("updateApp", "failure"), ("updateApp", "success"), ("registerApp", "success")]
    delete_token, create_token, delete_app, refused_patch, patch, register = entries
    assert made.json()["token"] not in str(entries)  # a secret is never on record
    assert create_token["target"] == {"type": "token", "id": "ci"}
    assert create_token["details"]["parameters"] == {"appCount": 1}
    assert register["subject"] == {"type": "user", "id": "development", "display": "development"}
    assert register["sourceIp"] == "127.0.0.1" and register["target"] == {"type": "application", "id": "orders"}
    assert register["details"]["parameters"] == {"privateMode": True}
    assert patch["details"]["parameters"] == {"executorTimeoutSecs": 30}
    assert patch["details"]["outcome"] == "succeeded" and patch["details"]["completedAt"]
    assert refused_patch["details"]["outcome"] == "failed"
    assert "executorTimeoutSecs" in refused_patch["details"]["message"]
    assert delete_app["details"]["outcome"] == "failed" and "nope" in delete_app["details"]["message"]
    assert len({e["id"] for e in entries}) == 6
    times = [datetime.fromisoformat(e["emitTime"].replace("Z", "+00:00")) for e in entries]
    assert times == sorted(times, reverse=True)

    # Conductor's filters and pages
    assert [e["operation"] for e in log(server, operation="updateApp")] == ["updateApp", "updateApp"]
    assert log(server, subject="development") == entries and log(server, subject="someone") == []
    assert [e["operation"] for e in log(server, target="ci")] == ["deleteToken", "createToken"]
    assert log(server, limit=2) == entries[:2] and log(server, limit=2, offset=4) == entries[4:]
    assert log(server, startTime=entries[1]["emitTime"]) == entries[:2]
    assert log(server, endTime=entries[4]["emitTime"]) == entries[5:]
    later = (times[0] + timedelta(seconds=1)).isoformat()
    assert log(server, startTime=later) == []
    # an application's id, as listApps answers it, finds what its name finds (the log records names)
    (orders,) = [a["id"] for a in call(server, "GET", L + "/apps").json() if a["name"] == "orders"]
    by_name = log(server, target="orders")
    assert [e["operation"] for e in by_name] == ["updateApp", "updateApp", "registerApp"]
    assert log(server, target=orders) == by_name and log(server, target=orders.upper()) == []
    assert call(server, "DELETE", L + "/apps/orders").status_code == 204
    assert [e["operation"] for e in log(server, target=orders)] == ["deleteApp"] + [e["operation"] for e in by_name]
    assert log(server, target="6f1c2b9e-2a5d-4c7e-9b1a-3d4e5f607182") == []  # a UUID no application has
    assert call(server, "GET", A + "/audit-logs").status_code == 404  # development mode: org local only
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"startTime": "yesterday"},
                {"endTime": "2026-01-01T00:00:00"}, {"startTime": "2026-01-01 00:00:00Z"}, {"operation": "x" * 300}, {"subject": "a\x00b"}):
        r = call(server, "GET", L + "/audit-logs", params=bad)
        assert r.status_code in (400, 422), (bad, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        check_response("listAuditLogs", r.status_code, r.json())


def test_a_workflow_action_is_one_entry_naming_the_executor_that_answered(server: RelayServer) -> None:
    async def go() -> None:
        ex = await FakeExecutor(server.ws, app="orders", executor_id="A",
                                answers={"cancel": lambda msg: {"success": True}}).connect()
        try:
            r = await asyncio.to_thread(call, server, "POST", L + "/apps/orders/workflows/wf-1/cancel")
            assert r.status_code == 204, r.text
            r = await asyncio.to_thread(call, server, "POST", L + "/apps/orders/workflows/bulk-cancel",
                                        json={"workflowIds": ["wf-2", "wf-3"]})
            assert r.status_code == 204, r.text
        finally:
            await ex.close()

    asyncio.run(go())
    bulk, one = wait_for(server, lambda got: len(got) == 2 and all(e["details"]["completedAt"] for e in got),
                         "both actions completed")
    assert one["operation"] == "cancelWorkflow" and one["status"] == "success"
    assert one["target"] == {"type": "workflow", "id": "wf-1"} and one["details"]["executorId"] == "A"
    assert one["details"]["app"] == "orders"
    assert bulk["operation"] == "bulkCancelWorkflows" and bulk["target"] == {"type": "application", "id": "orders"}
    assert bulk["details"]["targets"] == {"type": "workflow", "ids": ["wf-2", "wf-3"], "count": 2}
    assert [e["id"] for e in log(server, target="wf-1")] == [one["id"]]


def test_refusals_are_on_record_under_the_caller_s_org(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, tokens = auth_server
    admin, scoped, other = tokens["acme"], tokens["scoped"], tokens["other"]

    def mine(org: str = "acme", token: str = admin, **params: Any) -> list[dict[str, Any]]:
        return conforms(call(s, "GET", f"/v2/orgs/{org}/audit-logs", token, params=params))

    for _ in range(3):  # one a minute is recorded per client, status and operation
        assert call(s, "PATCH", A + "/apps/orders", json={"globalTimeoutMs": 1}).status_code == 401
    assert call(s, "PUT", A + "/apps/x", scoped).status_code == 403  # an application-limited token writes nothing
    assert call(s, "POST", A + "/apps/orders/workflows/wf-9/cancel", scoped).status_code == 403
    assert call(s, "DELETE", A + "/apps/orders", other).status_code == 403  # another org's token

    entries = mine(operation="updateApp")
    (anonymous,) = [e for e in entries if e["details"]["outcome"] == "refused"]
    assert anonymous["status"] == "failure" and anonymous["subject"]["type"] == "api_key"
    assert anonymous["subject"]["id"] == "no valid token"
    assert anonymous["subject"]["display"] == "anonymous (no valid token)"
    assert [e["id"] for e in mine(subject="no valid token", operation="updateApp")] == [anonymous["id"]]
    assert anonymous["details"]["result"] == {"status": 401, "suppressed": 0}
    assert anonymous["target"] == {"type": "application", "id": "orders"}

    (register,) = mine(operation="registerApp", subject="billing-only")
    assert register["subject"] == {"type": "api_key", "id": "billing-only", "display": "billing-only"}
    assert register["details"]["outcome"] == "refused" and register["details"]["result"]["status"] == 403
    assert "application.write" in register["details"]["message"] or "org-wide" in register["details"]["message"]
    (cancel,) = mine(operation="cancelWorkflow")
    assert cancel["target"] == {"type": "workflow", "id": "wf-9"} and cancel["subject"]["id"] == "billing-only"

    # another org's token is on record in its own org, not in the org it reached for
    assert not mine(operation="deleteApp")
    (reached,) = mine(org="other", token=other, operation="deleteApp")
    assert reached["target"] == {"type": "organization", "id": "other"} and reached["status"] == "failure"

    # the log itself: an org-wide token with organization.read
    assert call(s, "GET", A + "/audit-logs", scoped).status_code == 403
    assert call(s, "GET", A + "/audit-logs").status_code == 401
    assert call(s, "GET", A + "/audit-logs", other).status_code == 403


def test_anonymous_callers_write_into_no_org_that_does_not_exist_nor_crowd_out_known_tokens(
        auth_server: tuple[RelayServer, dict[str, str]], tmp_path, store_url) -> None:
    s, tokens = auth_server
    for i in range(MAX_REFUSALS_PER_WINDOW + 2):  # more made-up orgs than a window's records
        assert call(s, "GET", f"/v2/orgs/ghost{i}/executor-events").status_code == 401
    assert call(s, "GET", "/v2/orgs/ghost0/executor-events", "relay_not-a-real-token").status_code == 401
    assert call(s, "GET", A + "/audit-logs", tokens["scoped"]).status_code == 403  # a known token, right after
    (entry,) = conforms(call(s, "GET", A + "/audit-logs", tokens["acme"], params={"operation": "listAuditLogs"}))
    assert entry["subject"]["id"] == "billing-only" and entry["details"]["result"]["status"] == 403

    ghost = admin_token(tmp_path, store_url, "ghost0", "admin")  # the org made afterwards holds nothing from before
    known(s, "ghost0", ghost)
    assert conforms(call(s, "GET", "/v2/orgs/ghost0/audit-logs", ghost, params={"operation": "listExecutorEvents"})) == []
    metrics = call(s, "GET", "/metrics", tokens["acme"]).text
    refused = float(metrics.split('relay_auth_refused_total{where="rest"} ')[1].split()[0])
    assert refused >= MAX_REFUSALS_PER_WINDOW + 4  # every refusal counted


def test_development_mode_refuses_and_records_a_request_from_another_machine(server: RelayServer) -> None:
    r = call(server, "DELETE", L + "/apps/orders", headers={"Host": "relay.example.com"})
    assert r.status_code == 403, r.text
    (entry,) = log(server)  # the read waits for the read models: the refusal made before it is on record
    assert entry["operation"] == "deleteApp" and entry["details"]["outcome"] == "refused"
    assert entry["subject"]["display"] == "anonymous (not this machine)"
    assert entry["details"]["result"]["status"] == 403


def test_the_log_survives_a_restart_and_a_rebuild(tmp_path, store_url) -> None:
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    try:
        assert call(s, "PUT", L + "/apps/orders").status_code == 204
        assert call(s, "PATCH", L + "/apps/orders", json={"gcRowsThreshold": 1000}).status_code == 204
        before = log(s)
    finally:
        s.stop()
    out = subprocess.run(RELAY + ["projections", "rebuild", "--only", "actions", "--database-url", store_url],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    try:
        assert wait_for(s, lambda got: len(got) == 2, "the rebuilt log") == before
    finally:
        s.stop()


def test_a_read_waits_until_the_log_holds_every_action_recorded_before_it(tmp_path) -> None:
    """Deterministic, on a runtime whose read models move only when the wait moves them: an action
    recorded (by any endpoint or instance) and not yet folded is in the next read."""
    runtime = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", instance="test-instance"))
    try:
        waits: list[int] = []

        def read_your_writes() -> None:
            waits.append(1)
            runtime.runner.catch_up()

        ctx = dataclasses.replace(rest_context(runtime), read_your_writes=read_your_writes)
        client = TestClient(build_app(ctx), base_url="http://127.0.0.1")
        runtime.relay.record_action_requested("local", "orders", request_id="r1", operation="cancelWorkflow",
                                              actor=Actor.development(), source="127.0.0.1",
                                              target_type="workflow", target_ids=["w1"])
        r = client.get(L + "/audit-logs")
        assert [e["operation"] for e in conforms(r)] == ["cancelWorkflow"] and waits == [1]
        assert client.get(L + "/audit-logs", params={"operation": "x" * 300}).status_code == 422
        assert waits == [1]  # a bad filter is answered without waiting
    finally:
        runtime.close()
