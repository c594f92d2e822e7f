"""The client CLI prints what executors and paths supplied without letting it
drive the terminal, and follows the server's pages (against a mock server).
``workflows``, ``queues``, ``schedules`` and ``versions`` run against a stub that
answers the Conductor reference's shapes and checks each request against it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from relay_es.composition import cli, client_cli
from tests.conductor_schema import check_response, check_schema, operations
from tests.server import TLS

REAL_CLIENT = httpx.Client
HOSTILE = "web-1\n\x1b[2J\x1b]0;pwned\x07\rroot\u202eexe.txt"


def run(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response], *argv: str) -> int:
    def client(**kw: Any) -> httpx.Client:
        return REAL_CLIENT(transport=httpx.MockTransport(handler), **kw)

    monkeypatch.setattr(client_cli.httpx, "Client", client)
    parser = argparse.ArgumentParser()
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))
    return client_cli.run(parser.parse_args(list(argv)))


def executor(executor_id: str, hostname: str = "web-1") -> dict[str, Any]:
    return {"executorId": executor_id, "status": "HEALTHY", "appVersion": "v1\r", "hostname": hostname,
            "language": "python", "dbosVersion": "3.2.0", "updatedAt": None, "deadline": None}


def clean(text: str) -> None:
    for bad in ("\x1b", "\r", "\x07", "\u202e"):
        assert bad not in text, repr(text)


def test_executor_supplied_strings_cannot_drive_the_terminal(monkeypatch, capsys) -> None:
    rows = [executor("A\x1b[2J", HOSTILE), executor("B")]
    assert run(monkeypatch, lambda r: httpx.Response(200, json=rows), "executors", "list", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 3  # the header and one line per executor: no injected line
    assert "A\\x1b[2J" in out and "web-1\\n\\x1b[2J" in out


def test_event_details_audit_entries_and_key_value_listings_are_escaped(monkeypatch, capsys) -> None:
    entries = [{"seq": 1, "at": "2026-11-30T12:00:00.000Z", "app": "orders", "executorId": "A\n2",
                "action": "protocol.violation", "detail": {"hostname": HOSTILE}}]
    asked: list[httpx.Request] = []

    def events(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        return httpx.Response(200, json=entries)

    assert run(monkeypatch, events, "events", "--app", "orders") == 0
    assert asked[0].url.path == "/v2/orgs/local/executor-events" and asked[0].url.params["app"] == "orders"
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 2

    logged = [{"id": "a1", "emitTime": "2026-11-30T12:00:00.000Z", "operation": "updateApp", "status": "failure",
               "subject": {"type": "api_key", "id": "", "display": f"anonymous ({HOSTILE})"},
               "sourceIp": "10.0.0.1\r\n", "target": {"type": "application", "id": "orders"},
               "details": {"outcome": "refused", "message": f"unknown token {HOSTILE}"}}]
    check_response("listAuditLogs", 200, logged)
    asked.clear()

    def audit(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        return httpx.Response(200, json=logged)

    assert run(monkeypatch, audit, "audit", "--operation", "updateApp", "--subject", "ci", "--target", "orders",
               "--since", "2026-11-30T00:00:00Z", "--until", "2026-12-01T00:00:00Z", "--limit", "5",
               "--offset", "10") == 0
    assert asked[0].url.path == "/v2/orgs/local/audit-logs"
    assert dict(asked[0].url.params) == {"operation": "updateApp", "subject": "ci", "target": "orders",
                                         "startTime": "2026-11-30T00:00:00Z", "endTime": "2026-12-01T00:00:00Z",
                                         "limit": "5", "offset": "10"}
    out = capsys.readouterr().out
    clean(out)
    lines = out.splitlines()
    assert len(lines) == 2 and "refused" in lines[1] and "application:orders" in lines[1]
    app = {"name": "orders", "status": "AVAILABLE", "language": HOSTILE, "x\x1b[2J": 1}
    assert run(monkeypatch, lambda r: httpx.Response(200, json=app), "apps", "show", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == len(app)


def test_error_texts_from_the_server_are_escaped(monkeypatch, capsys) -> None:
    problem = {"status": 404, "title": "Not found", "detail": f"no such executor {HOSTILE}"}
    code = run(monkeypatch, lambda r: httpx.Response(404, json=problem), "history", "A", "--app", "orders")
    assert code == 1
    err = capsys.readouterr().err
    clean(err)
    assert len(err.splitlines()) == 1


def test_names_typed_by_the_user_stay_one_path_segment(monkeypatch, capsys) -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.url.raw_path.decode())
        return httpx.Response(200, json=[])

    run(monkeypatch, handler, "history", "../../tokens/admin?x=", "--app", "orders")
    assert seen == ["/v2/orgs/local/apps/orders/executors/..%2F..%2Ftokens%2Fadmin%3Fx%3D/history"]


def test_as_of_follows_the_servers_pages(monkeypatch, capsys) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        after = r.url.params.get("after")
        if after is None:
            return httpx.Response(200, json=[executor("A")], headers={
                "Link": '</v2/orgs/local/apps/orders/executors?asOf=2026-01-01T00%3A00%3A00Z&after=A&limit=1>; rel="next"'})
        return httpx.Response(200, json=[executor("B")])

    assert run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z",
               "--json") == 0
    assert [e["executorId"] for e in json.loads(capsys.readouterr().out)] == ["A", "B"]


def test_tables_ask_for_relay_s_own_fields(monkeypatch, capsys) -> None:
    """Without ``?relay=extended`` the server answers Conductor's fields only: no deadline, no appNames."""
    asked: list[httpx.URL] = []
    tokens = [{"tokenName": "ci", "createdAt": "2026-01-01T00:00:00.000Z", "permissions": ["application.read"],
               "appIds": ["id-1"], "appNames": ["orders"]}]

    def handler(r: httpx.Request) -> httpx.Response:
        asked.append(r.url)
        if r.url.path.endswith("/tokens"):
            return httpx.Response(200, json=tokens)
        return httpx.Response(200, json=[{**executor("A"), "deadline": "2026-01-01T00:00:05.000Z"}])

    assert run(monkeypatch, handler, "executors", "list", "--app", "orders") == 0
    assert "2026-01-01T00:00:05.000Z" in capsys.readouterr().out
    assert run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z") == 0
    assert run(monkeypatch, handler, "tokens", "list") == 0
    out = capsys.readouterr().out
    assert "appNames" in out.splitlines()[-2] and "orders" in out.splitlines()[-1]
    assert [u.params.get("relay") for u in asked] == ["extended"] * 3
    assert asked[1].params["asOf"] == "2026-01-01T00:00:00Z"


def test_a_next_page_elsewhere_is_not_followed(monkeypatch, capsys) -> None:
    asked: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        asked.append(str(r.url))
        return httpx.Response(200, json=[executor("A")], headers={"Link": '<https://evil.example/steal>; rel="next"'})

    code = run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z",
               "--token", "relay_secret")
    assert code == 1 and len(asked) == 1 and "evil.example" in capsys.readouterr().err


def test_history_is_read_page_by_page(monkeypatch, capsys) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        after = int(r.url.params.get("after", "0"))
        n = 1000 if after == 0 else 5
        return httpx.Response(200, json=[{"version": after + i + 1, "at": "t", "type": "Connected", "data": {}}
                                         for i in range(n)])

    assert run(monkeypatch, handler, "history", "A", "--app", "orders", "--json") == 0
    assert [e["version"] for e in json.loads(capsys.readouterr().out)] == list(range(1, 1006))


def test_printable_keeps_ordinary_text() -> None:
    assert client_cli.printable("café-1.example_host~v2") == "café-1.example_host~v2"
    assert client_cli.printable("a\\nb") == "a\\\\nb"  # a typed backslash cannot fake an escape


# --- workflows, queues, schedules, versions: against a stub answering the reference's shapes ---

APP = "/v2/orgs/local/apps/orders"


def workflow(workflow_id: str, name: str = "checkout", status: str = "PENDING") -> dict[str, Any]:
    return {"workflowId": workflow_id, "status": status, "workflowName": name, "workflowClass": None,
            "workflowConfig": None, "user": None, "assumedRole": None, "roles": None, "input": None, "output": None,
            "error": None, "createdAt": "2026-11-30T12:00:00.000Z", "updatedAt": "2026-11-30T12:00:01.000Z",
            "queueName": "payments", "appVersion": "v1", "executorId": "exec-1", "timeoutMs": None, "deadline": None,
            "deduplicationId": None, "priority": 0, "queuePartitionKey": None, "forkedFrom": None,
            "wasForkedFrom": False, "parentWorkflowId": None, "dequeuedAt": None, "delayUntil": None,
            "completedAt": None, "attributes": None, "scheduleName": None, "applicationName": "orders"}


STEP = {"stepId": 0, "stepName": "charge", "output": "'ok'", "error": None, "childWorkflowId": None,
        "startedAt": "2026-11-30T12:00:00.100Z", "completedAt": "2026-11-30T12:00:00.200Z"}
QUEUE = {"name": "payments", "concurrency": 1, "workerConcurrency": None, "rateLimitMax": None,
         "rateLimitPeriodSecs": None, "priorityEnabled": False, "partitionQueue": False, "pollingIntervalSecs": 1.0,
         "applicationName": "orders"}
SCHEDULE = {"scheduleId": "s-1", "scheduleName": "nightly", "workflowName": "report", "workflowClass": None,
            "cronExpression": "0 0 * * *", "status": "ACTIVE", "context": None, "lastFiredAt": None,
            "automaticBackfill": False, "cronTimezone": "UTC", "applicationName": "orders"}
VERSION = {"versionId": "ver-1", "versionName": "v2", "versionTimestamp": "2026-11-30T11:00:00.000Z",
           "createdAt": "2026-11-30T11:00:00.000Z"}
DEAD_STATE = {"status": "DEAD", "appVersion": "v1", "disconnectReason": "ping_timeout", "deadline": None,
              "declaredDeadAt": "2026-11-30T12:00:05.000Z", "recoveryPhase": "deferred", "recoveryVersion": "v1",
              "recoveryAttempt": 0, "recoveryTarget": None, "recoveryDispatchedAt": None}
STRANDED = {"at": "2026-11-30T12:01:00.000Z", "relayOnly": False, "examined": 3, "nextOffset": None,
            "workflows": [{"workflowId": "wf-9", "name": "checkout", "status": "PENDING", "queueName": "payments",
                           "executorId": "dead-1", "appVersion": "v1", "createdAt": "2026-11-30T11:59:00.000Z",
                           "reason": "recovery_deferred", "fixes": ["fork", "cancel"], "relayState": DEAD_STATE}],
            "queues": [{"queueName": "payments", "strandedWorkflows": 1, "enqueued": 12, "enqueuedCapped": False}],
            "executors": [{"executorId": "dead-1", "reason": "recovery_deferred", "fixes": ["fork", "cancel"],
                           "strandedWorkflows": 1, "relayState": DEAD_STATE}]}


class Stub:
    """A Conductor server in miniature: each request is matched to its operation in the reference
    (Relay's stranded-work paths by hand), its query names and body checked against what the
    reference documents, and answered from ``answers`` (operationId -> (status, body, headers)),
    the body checked against the reference's schema for that status. ``seen``: (operationId,
    decoded path parameters, query, body) per request."""

    def __init__(self, answers: dict[str, tuple[int, Any] | tuple[int, Any, dict[str, str]]]) -> None:
        self.answers = answers
        self.seen: list[tuple[str, dict[str, str], dict[str, str], Any]] = []

    def operation(self, method: str, raw_path: str) -> tuple[str, dict[str, str]]:
        parts = raw_path.split("?", 1)[0].split("/")
        if raw_path.startswith(APP + "/stranded-workflows"):
            return ("fixStrandedWorkflows" if raw_path.endswith("/fix") else "listStrandedWorkflows"), {}
        for op_id, (m, template, _) in operations().items():
            names = template.split("/")
            if m == method and len(names) == len(parts) and all(
                    n.startswith("{") or n == p for n, p in zip(names, parts)):
                return op_id, {n.strip("{}"): unquote(p) for n, p in zip(names, parts) if n.startswith("{")}
        raise AssertionError(f"no Conductor operation {method} {raw_path}")

    def __call__(self, r: httpx.Request) -> httpx.Response:
        op_id, path_params = self.operation(r.method, r.url.raw_path.decode())
        query = dict(r.url.params)
        body = json.loads(r.content) if r.content else None
        if op_id in operations():
            _, _, op = operations()[op_id]
            documented = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
            assert set(query) <= documented, (op_id, query)
            schema = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                assert schema is not None, f"{op_id} takes no body, got {body!r}"
                check_schema(schema["$ref"].rsplit("/", 1)[-1], body)
            elif (op.get("requestBody") or {}).get("required"):
                raise AssertionError(f"{op_id} requires a body")
        self.seen.append((op_id, path_params, query, body))
        status, answer, *rest = self.answers[op_id]
        if op_id in operations():
            check_response(op_id, status, answer)
        headers = {"content-type": "application/problem+json" if status >= 400 else "application/json",
                   **(rest[0] if rest else {})}
        return httpx.Response(status, content=b"" if answer is None else json.dumps(answer).encode(), headers=headers)


def test_workflows_list_asks_with_conductor_s_query_and_prints_a_table(monkeypatch, capsys) -> None:
    rows = [workflow("wf-1", HOSTILE), workflow("wf-2\x1b[31m", "refund\u2066", "SUCCESS")]
    stub = Stub({"listWorkflows": (200, rows)})
    assert run(monkeypatch, stub, "workflows", "list", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    lines = out.splitlines()
    assert lines[0].split() == client_cli.COLUMNS["workflows"]
    assert len(lines) == 3 and "web-1\\n\\x1b[2J" in lines[1] and "wf-2\\x1b[31m" in lines[2]
    assert "\\u2066" in lines[2]
    assert stub.seen[-1][2] == {"limit": "100", "sortDesc": "true"}  # newest first, one page

    assert run(monkeypatch, stub, "workflows", "list", "--app", "orders", "--status", "ERROR", "--name", "checkout",
               "--limit", "2", "--offset", "4", "--oldest-first", "--load-input", "--load-output") == 0
    assert stub.seen[-1][2] == {"status": "ERROR", "workflowName": "checkout", "limit": "2", "offset": "4",
                                "sortDesc": "false", "loadInput": "true", "loadOutput": "true"}
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split()[-3:] == ["input", "output", "error"]
    assert "--offset 6 for the next" in captured.err  # a full page says where the next one starts


def test_workflows_list_searches_for_filters_listing_has_not(monkeypatch, capsys) -> None:
    """Conductor's listWorkflows filters by one status and one name; anything more is searchWorkflows."""
    stub = Stub({"listWorkflows": (200, []), "searchWorkflows": (200, [workflow("wf-1")])})
    assert run(monkeypatch, stub, "workflows", "list", "--app", "orders", "--status", "PENDING", "--status",
               "ENQUEUED", "--queue", "payments", "--executor", "exec-1", "--app-version", "v1", "--id-prefix", "wf-",
               "--parent", "wf-0", "--schedule", "nightly", "--name", "checkout", "--since", "2026-11-29T00:00:00Z",
               "--until", "2026-11-30T00:00:00Z", "--queued-only", "--offset", "10", "--load-output") == 0
    op_id, _, query, body = stub.seen[-1]
    assert (op_id, query) == ("searchWorkflows", {})
    assert body == {"status": ["PENDING", "ENQUEUED"], "workflowName": ["checkout"], "queueName": ["payments"],
                    "executorId": ["exec-1"], "appVersion": ["v1"], "workflowIdPrefix": ["wf-"],
                    "parentWorkflowId": ["wf-0"], "scheduleName": ["nightly"], "startTime": "2026-11-29T00:00:00Z",
                    "endTime": "2026-11-30T00:00:00Z", "queuesOnly": True, "limit": 100, "offset": 10,
                    "sortDesc": True, "loadOutput": True}
    assert "wf-1" in capsys.readouterr().out
    for argv, expected in ((["--queue", "payments"], {"queueName": ["payments"], "limit": 100, "sortDesc": True}),
                           (["--since", "2026-11-29T00:00:00Z", "--oldest-first"],
                            {"startTime": "2026-11-29T00:00:00Z", "limit": 100, "sortDesc": False})):
        assert run(monkeypatch, stub, "workflows", "list", "--app", "orders", *argv) == 0
        assert stub.seen[-1][0] == "searchWorkflows" and stub.seen[-1][3] == expected
    assert run(monkeypatch, stub, "workflows", "list", "--app", "orders", "--status", "ERROR", "--name", "x") == 0
    assert stub.seen[-1][0] == "listWorkflows" and stub.seen[-1][2]["status"] == "ERROR"


def test_json_prints_the_server_s_answer_as_it_came(monkeypatch, capsys) -> None:
    stub = Stub({"listWorkflows": (200, [workflow("wf-1", HOSTILE)]), "getWorkflow": (200, workflow("wf-1")),
                 "listWorkflowSteps": (200, [STEP]), "listQueues": (200, [QUEUE]), "getQueue": (200, QUEUE),
                 "listSchedules": (200, [SCHEDULE]), "getSchedule": (200, SCHEDULE),
                 "listAppVersions": (200, [VERSION]), "listStrandedWorkflows": (200, STRANDED)})
    for argv, op_id in ((["workflows", "list"], "listWorkflows"), (["workflows", "get", "wf-1"], "getWorkflow"),
                        (["workflows", "steps", "wf-1"], "listWorkflowSteps"), (["queues", "list"], "listQueues"),
                        (["queues", "get", "payments"], "getQueue"), (["schedules", "list"], "listSchedules"),
                        (["schedules", "get", "nightly"], "getSchedule"), (["versions", "list"], "listAppVersions"),
                        (["workflows", "stranded"], "listStrandedWorkflows")):
        assert run(monkeypatch, stub, *argv, "--app", "orders", "--json") == 0, argv
        assert json.loads(capsys.readouterr().out) == stub.answers[op_id][1], argv
        assert stub.seen[-1][0] == op_id


def test_tables_and_listings_of_each_kind(monkeypatch, capsys) -> None:
    hostile_step = {**STEP, "stepName": "charge\r\x1b[1A", "error": "boom\nTraceback"}
    stub = Stub({"getWorkflow": (200, workflow("wf-1", HOSTILE)), "listWorkflowSteps": (200, [hostile_step, STEP]),
                 "listQueues": (200, [QUEUE]), "listSchedules": (200, [{**SCHEDULE, "context": "{}"}]),
                 "listAppVersions": (200, []), "getQueue": (200, {**QUEUE, "name": "q\u202e"})})
    assert run(monkeypatch, stub, "workflows", "get", "wf-1", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == len(workflow("wf-1")) and "workflowName" in out
    assert run(monkeypatch, stub, "workflows", "steps", "wf-1", "--app", "orders", "--limit", "5") == 0
    out = capsys.readouterr().out
    clean(out)
    assert out.splitlines()[0].split() == client_cli.COLUMNS["steps"] and len(out.splitlines()) == 3
    assert stub.seen[-1][2] == {"limit": "5"}
    assert run(monkeypatch, stub, "queues", "list", "--app", "orders") == 0
    assert capsys.readouterr().out.splitlines()[0].split() == client_cli.COLUMNS["queues"]
    assert run(monkeypatch, stub, "queues", "get", "q\u202e", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert stub.seen[-1][1]["queueName"] == "q\u202e"
    assert run(monkeypatch, stub, "schedules", "list", "--app", "orders", "--status", "ACTIVE", "--workflow-name",
               "report", "--prefix", "night", "--load-context") == 0
    assert stub.seen[-1][2] == {"status": "ACTIVE", "workflowName": "report", "scheduleNamePrefix": "night",
                                "loadContext": "true"}
    assert capsys.readouterr().out.splitlines()[0].split() == client_cli.COLUMNS["schedules"] + ["context"]
    assert run(monkeypatch, stub, "versions", "list", "--app", "orders") == 0
    assert capsys.readouterr().out == "(no versions)\n"


def test_actions_send_conductor_s_paths_and_bodies(monkeypatch, capsys) -> None:
    stub = Stub({"cancelWorkflow": (204, None), "resumeWorkflow": (204, None),
                 "forkWorkflow": (201, {"workflowId": "wf-new\x1b[2J"}), "deleteWorkflow": (204, None),
                 "pauseSchedule": (204, None), "resumeSchedule": (204, None),
                 "triggerSchedule": (201, {"workflowId": "wf-t"}),
                 "backfillSchedule": (200, {"workflowIds": ["wf-b1", "wf-b2"]}),
                 "setLatestAppVersion": (204, None)})
    cases: list[tuple[list[str], tuple[str, dict[str, str], dict[str, str], Any], str]] = [
        (["workflows", "cancel", "wf-1"], ("cancelWorkflow", {"workflowId": "wf-1"}, {}, {}), "cancelled wf-1"),
        (["workflows", "cancel", "wf-1", "--cancel-children"],
         ("cancelWorkflow", {"workflowId": "wf-1"}, {}, {"cancelChildren": True}), "cancelled wf-1 and its children"),
        (["workflows", "resume", "wf-1"], ("resumeWorkflow", {"workflowId": "wf-1"}, {}, {}), "resumed wf-1"),
        (["workflows", "resume", "wf-1", "--queue", "slow"],
         ("resumeWorkflow", {"workflowId": "wf-1"}, {}, {"queueName": "slow"}), "resumed wf-1"),
        (["workflows", "fork", "wf-1"], ("forkWorkflow", {"workflowId": "wf-1"}, {}, {}),
         "forked wf-1: new workflow wf-new\\x1b[2J"),
        (["workflows", "fork", "wf-1", "--start-step", "3", "--new-id", "wf-2", "--app-version", "v2", "--queue",
          "slow", "--partition-key", "eu"],
         ("forkWorkflow", {"workflowId": "wf-1"}, {}, {"startStep": 3, "newWorkflowId": "wf-2", "appVersion": "v2",
                                                      "queueName": "slow", "queuePartitionKey": "eu"}),
         "forked wf-1: new workflow wf-new\\x1b[2J"),
        (["workflows", "delete", "wf-1"], ("deleteWorkflow", {"workflowId": "wf-1"}, {}, None), "deleted wf-1"),
        (["workflows", "delete", "wf-1", "--children"],
         ("deleteWorkflow", {"workflowId": "wf-1"}, {"deleteChildren": "true"}, None), "deleted wf-1 and its children"),
        (["schedules", "pause", "nightly"], ("pauseSchedule", {"scheduleName": "nightly"}, {}, None), "paused nightly"),
        (["schedules", "resume", "nightly"], ("resumeSchedule", {"scheduleName": "nightly"}, {}, None),
         "resumed nightly"),
        (["schedules", "trigger", "nightly"], ("triggerSchedule", {"scheduleName": "nightly"}, {}, None),
         "triggered nightly: workflow wf-t"),
        (["schedules", "backfill", "nightly", "--start", "2026-11-29T00:00:00Z", "--end", "2026-11-30T00:00:00Z"],
         ("backfillSchedule", {"scheduleName": "nightly"}, {},
          {"startTime": "2026-11-29T00:00:00Z", "endTime": "2026-11-30T00:00:00Z"}),
         "backfilled nightly: 2 workflow(s)\nwf-b1\nwf-b2"),
        (["versions", "set-latest", "v2"], ("setLatestAppVersion", {}, {}, {"versionName": "v2"}),
         "latest version of orders is now v2"),
    ]
    for argv, (op_id, path_params, query, body), printed in cases:
        assert run(monkeypatch, stub, *argv, "--app", "orders") == 0, argv
        seen = stub.seen[-1]
        assert seen[0] == op_id and query == seen[2] and body == seen[3], (argv, seen)
        assert path_params.items() <= seen[1].items()
        assert (seen[1]["orgName"], seen[1]["appName"]) == ("local", "orders")
        assert capsys.readouterr().out == printed + "\n", argv
    # --json: the answer when there is one, nothing for no content
    assert run(monkeypatch, stub, "workflows", "fork", "wf-1", "--app", "orders", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"workflowId": "wf-new\x1b[2J"}
    assert run(monkeypatch, stub, "schedules", "backfill", "nightly", "--start", "2026-11-29T00:00:00Z", "--end",
               "2026-11-30T00:00:00Z", "--app", "orders", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"workflowIds": ["wf-b1", "wf-b2"]}
    assert run(monkeypatch, stub, "workflows", "cancel", "wf-1", "--app", "orders", "--json") == 0
    assert capsys.readouterr().out == ""


def test_stranded_work_is_three_tables_and_the_next_page(monkeypatch, capsys) -> None:
    hostile = {**STRANDED, "nextOffset": 3,
               "workflows": [{**STRANDED["workflows"][0], "name": HOSTILE}],
               "queues": [*STRANDED["queues"], {"queueName": "bulk\u202e", "strandedWorkflows": 2, "enqueued": 1000,
                                                "enqueuedCapped": True}],
               "executors": [*STRANDED["executors"], {"executorId": "local", "reason": "executor_unknown",
                                                      "fixes": ["resume", "cancel"], "strandedWorkflows": 0,
                                                      "relayState": None}]}
    stub = Stub({"listStrandedWorkflows": (200, hostile)})
    assert run(monkeypatch, stub, "workflows", "stranded", "--app", "orders", "--limit", "3", "--offset", "0") == 0
    assert stub.seen[-1][:3] == ("listStrandedWorkflows", {}, {"limit": "3", "offset": "0"})
    out = capsys.readouterr().out
    clean(out)
    lines = out.splitlines()
    assert lines[0] == "stranded workflows (1 of 3 PENDING examined):"
    assert lines[1].split() == client_cli.COLUMNS["stranded workflows"]
    assert "web-1\\n\\x1b[2J" in lines[2] and lines[2].split()[-2:] == ["recovery_deferred", "fork,cancel"]
    assert lines[3:5] == ["", "blocked queues (2):"]
    assert [line.split() for line in lines[5:8]] == [["queueName", "strandedWorkflows", "enqueued"],
                                                     ["payments", "1", "12"],
                                                     ["bulk\\u202e", "2", "1000+"]]  # counted up to a cap
    assert lines[8:10] == ["", "executors not alive (2):"]
    assert lines[10].split() == client_cli.COLUMNS["executors not alive"]
    assert lines[11].split() == ["dead-1", "DEAD", "v1", "recovery_deferred", "deferred", "-", "1", "fork,cancel"]
    assert lines[12].split()[:5] == ["local", "(unknown", "to", "Relay)", "-"]
    assert lines[13:] == ["", "more PENDING workflows: --offset 3 for the next page"]

    stub.answers["listStrandedWorkflows"] = (200, {**STRANDED, "relayOnly": True, "examined": None,
                                                   "workflows": None, "queues": None})
    assert run(monkeypatch, stub, "workflows", "stranded", "--app", "orders", "--relay-only") == 0
    assert stub.seen[-1][2] == {"relayOnly": "true"}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("(relay only: no executor was asked") and lines[2] == "executors not alive (1):"
    assert len(lines) == 5
    assert run(monkeypatch, stub, "workflows", "stranded", "--app", "orders", "--relay-only", "--json") == 0
    assert json.loads(capsys.readouterr().out) == stub.answers["listStrandedWorkflows"][1]


def test_stranded_fixes_send_relay_s_bodies(monkeypatch, capsys) -> None:
    stub = Stub({"fixStrandedWorkflows": (200, None)})
    cases = (
        (["wf-1", "wf-2", "--fix", "resume"], {"fix": "resume", "workflowIds": ["wf-1", "wf-2"]},
         {"fix": "resume", "workflowIds": ["wf-1", "wf-2"]}, "resumed 2 workflow(s)\n"),
        (["wf-1", "--fix", "cancel"], {"fix": "cancel", "workflowIds": ["wf-1"]},
         {"fix": "cancel", "workflowIds": ["wf-1"]}, "cancelled 1 workflow(s)\n"),
        (["wf-1", "wf-2", "--fix", "fork", "--app-version", "v2"],
         {"fix": "fork", "workflowIds": ["wf-1", "wf-2"], "appVersion": "v2"},
         {"fix": "fork", "workflowIds": ["wf-1", "wf-2"], "forkedWorkflowIds": ["new-1", "new-2\x1b[2J"]},
         "cancelled 2 workflow(s) and forked them from their last step; new workflows:\nnew-1\nnew-2\\x1b[2J\n"),
        (["dead-1", "dead-2", "gone-3", "--fix", "recover", "--force"],
         {"fix": "recover", "executorIds": ["dead-1", "dead-2", "gone-3"], "force": True},
         {"fix": "recover", "recovered": [{"appVersion": "v1", "executorIds": ["dead-1", "dead-2"]},
                                          {"appVersion": "v2", "executorIds": ["gone-3"]}]},
         ("recovering dead-1, dead-2 with an executor of version v1\n"
         "recovering gone-3 with an executor of version v2\n")),
    )
    for argv, body, answer, printed in cases:
        stub.answers["fixStrandedWorkflows"] = (200, answer)
        assert run(monkeypatch, stub, "workflows", "fix-stranded", *argv, "--app", "orders") == 0, argv
        assert stub.seen[-1][3] == body
        assert capsys.readouterr().out == printed
        assert run(monkeypatch, stub, "workflows", "fix-stranded", *argv, "--app", "orders", "--json") == 0
        assert json.loads(capsys.readouterr().out) == answer
    n = len(stub.seen)
    for argv in (["wf-1", "--fix", "resume", "--app-version", "v2"], ["wf-1", "--fix", "cancel", "--force"]):
        assert run(monkeypatch, stub, "workflows", "fix-stranded", *argv, "--app", "orders") == 2
        assert "relay: --" in capsys.readouterr().err
    assert len(stub.seen) == n  # nothing sent

    refused = {"type": "about:blank", "title": "Conflict", "status": 409,
               "detail": "1 of 2 executors cannot be recovered now; nothing was sent.",
               "errors": [{"location": "executorIds[dead-1]", "message": f"no executor of version 'v1' {HOSTILE}"}]}
    stub.answers["fixStrandedWorkflows"] = (409, refused)
    assert run(monkeypatch, stub, "workflows", "fix-stranded", "dead-1", "A", "--fix", "recover", "--app",
               "orders") == 1
    err = capsys.readouterr().err
    clean(err)
    assert err.splitlines() == ["relay: 409 1 of 2 executors cannot be recovered now; nothing was sent.",
                                ("  executorIds[dead-1]: no executor of version 'v1' web-1\\n\\x1b[2J\\x1b]0;pwned"
                                "\\x07\\rroot\\u202eexe.txt")]


def test_problems_are_one_escaped_line_and_exit_1(monkeypatch, capsys) -> None:
    no_executor = {"type": "about:blank", "title": "no healthy executor", "status": 503,
                   "detail": "no healthy executor of application 'orders' is connected"}
    missing = {"type": "about:blank", "title": "Not found", "status": 404, "detail": f"no workflow {HOSTILE}"}
    invalid = {"type": "about:blank", "title": "Unprocessable entity", "status": 422,
               "detail": "body.startStep: Expected `int`", "errors": [{"location": "startStep", "message": "int"}]}
    stub = Stub({"listWorkflows": (503, no_executor, {"Retry-After": "5"}), "getWorkflow": (404, missing),
                 "forkWorkflow": (422, invalid), "listQueues": (504, {**no_executor, "status": 504,
                                                                      "title": "executor did not answer",
                                                                      "detail": "executor 'e' did not answer"})})
    for argv, expected in ((["workflows", "list"], ("relay: 503 no healthy executor of application "
                                                    "'orders' is connected (retry in 5s)")),
                           (["workflows", "get", "wf-1"], None),
                           (["workflows", "fork", "wf-1"], "relay: 422 body.startStep: Expected `int`"),
                           (["queues", "list"], "relay: 504 executor 'e' did not answer")):
        assert run(monkeypatch, stub, *argv, "--app", "orders") == 1, argv
        captured = capsys.readouterr()
        clean(captured.err)
        assert captured.out == "" and len(captured.err.splitlines()) == 1, argv
        if expected:
            assert captured.err == expected + "\n"
        else:
            assert captured.err.startswith("relay: 404 no workflow web-1\\n\\x1b[2J")


def test_answers_that_are_not_the_expected_shape_are_refused(monkeypatch, capsys) -> None:
    for body, argv in ((b"<html>proxy</html>", ["workflows", "list"]), (b"[1, 2]", ["workflows", "list"]),
                       (b'{"id": "x"}', ["workflows", "fork", "wf-1"]), (b'"text"', ["workflows", "stranded"])):
        answer = httpx.Response(200, content=body)
        assert run(monkeypatch, lambda r, a=answer: a, *argv, "--app", "orders") == 1, body
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("relay: ") and len(captured.err.splitlines()) == 1


def test_workflow_and_schedule_names_stay_one_path_segment(monkeypatch, capsys) -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.url.raw_path.decode())
        return httpx.Response(204)

    run(monkeypatch, handler, "workflows", "cancel", "../../versions/latest?x=", "--app", "orders")
    run(monkeypatch, handler, "schedules", "pause", "a/b#c", "--app", "../tokens")
    assert seen == [APP + "/workflows/..%2F..%2Fversions%2Flatest%3Fx%3D/cancel",
                    "/v2/orgs/local/apps/..%2Ftokens/schedules/a%2Fb%23c/pause"]


def test_usage_errors_exit_2_before_anything_is_sent(capsys) -> None:
    for argv in (["workflows", "list"], ["workflows", "list", "--app", "orders", "--limit", "-1"],
                 ["workflows", "stranded", "--app", "orders", "--limit", "0"],
                 ["workflows", "fork", "wf-1", "--app", "orders", "--start-step", "-1"],
                 ["workflows", "fix-stranded", "wf-1", "--app", "orders", "--fix", "drop"],
                 ["workflows", "fix-stranded", "--app", "orders", "--fix", "cancel"],
                 ["schedules", "backfill", "nightly", "--app", "orders", "--start", "2026-11-29T00:00:00Z"],
                 ["versions", "set-latest", "--app", "orders"]):
        with pytest.raises(SystemExit) as e:
            cli.main([*argv, "--server", "http://127.0.0.1:9"])
        assert e.value.code == 2, argv
    capsys.readouterr()


def test_the_relay_command_runs_them_against_a_server(tmp_path) -> None:
    """``relay workflows|queues|schedules|versions`` are wired into the ``relay`` command: a real
    process against a real HTTP server (a stub of two answers), exit codes included."""
    asked: list[tuple[str, str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(("GET", self.path, self.headers.get("Authorization")))
            if self.path.startswith(APP + "/workflows?"):
                status, body = 200, [workflow("wf-1", HOSTILE)]
            else:
                status, body = 503, {"type": "about:blank", "title": "no healthy executor", "status": 503,
                                     "detail": "no healthy executor of application 'orders' is connected"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if status == 200 else "application/problem+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {"PATH": "/usr/bin:/bin", "RELAY_SERVER": url, "RELAY_TOKEN": "relay_t"}
    try:
        ok = subprocess.run([sys.executable, "-m", "relay_es", "workflows", "list", "--app", "orders"],
                            capture_output=True, text=True, env=env, timeout=60, check=False)
        down = subprocess.run([sys.executable, "-m", "relay_es", "queues", "list", "--app", "orders"],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert ok.returncode == 0, ok.stderr
    clean(ok.stdout)
    assert ok.stdout.splitlines()[0].split() == client_cli.COLUMNS["workflows"] and len(ok.stdout.splitlines()) == 2
    assert down.returncode == 1 and down.stdout == ""
    assert down.stderr == "relay: 503 no healthy executor of application 'orders' is connected\n"
    assert asked == [("GET", APP + "/workflows?limit=100&sortDesc=true", "Bearer relay_t"),
                     ("GET", APP + "/queues", "Bearer relay_t")]


def test_against_a_real_relay_serve_with_a_fake_executor(tmp_path, capsys) -> None:
    """The commands against ``relay serve`` itself, its routes asking a fake executor over a real
    WebSocket: tables of what the executor answered (escaped), ``--json`` equal to the REST
    answer, an action reaching the executor; once no executor is connected, 503 and Relay's
    own stranded listing."""
    from tests.adapters.rest.test_queues import executors
    from tests.server import RelayServer

    queue = {"name": "orders\x1b[2J", "concurrency": 1, "worker_concurrency": None, "rate_limit_max": None,
             "rate_limit_period_sec": None, "priority_enabled": False, "partition_queue": False,
             "polling_interval_sec": 1.0, "application_name": "shop"}
    version = {"version_id": "ver-1", "version_name": "v1", "version_timestamp": 1764504000000,
               "created_at": 1764504000000}
    wire_workflow = {"WorkflowUUID": "wf-1\u202e", "Status": "PENDING", "WorkflowName": HOSTILE,
                     "CreatedAt": "1764504000000", "UpdatedAt": "1764504000500", "QueueName": None,
                     "ApplicationVersion": "v1", "ExecutorID": "e-1", "Priority": "0", "WasForkedFrom": False}
    relay = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/relay.db"],
                        env={"RELAY_CALL_TIMEOUT_SECS": "2"})
    relay.start()
    common = ["--app", "shop", "--server", relay.http]
    try:
        with executors(relay, {"app": "shop", "answers": {
                "list_queues": lambda req: {"output": [queue]},
                "list_workflows": lambda req: {"output": [wire_workflow]},
                "cancel": lambda req: {"success": True},
                "fork_workflow": lambda req: {"new_workflow_id": "wf-2"},
                "get_schedule": lambda req: {"output": {"schedule_name": req["schedule_name"], "schedule_id": "s-1",
                                                        "workflow_name": "report", "schedule": "0 0 * * *",
                                                        "status": "ACTIVE"}},
                "pause_schedule": lambda req: {"success": True},
                "list_application_versions": lambda req: {"output": [version]}}}) as (fake,):
            assert cli.main(["queues", "list", *common]) == 0
            out = capsys.readouterr().out
            clean(out)
            assert out.splitlines()[0].split() == client_cli.COLUMNS["queues"]
            assert out.splitlines()[1].startswith("orders\\x1b[2J  1 ")
            assert cli.main(["queues", "list", *common, "--json"]) == 0
            listed = json.loads(capsys.readouterr().out)
            assert listed == httpx.get(relay.http + "/v2/orgs/local/apps/shop/queues", verify=TLS).json()
            check_response("listQueues", 200, listed)
            assert cli.main(["workflows", "list", *common, "--status", "PENDING"]) == 0
            out = capsys.readouterr().out
            clean(out)
            assert out.splitlines()[1].split()[:3] == ["wf-1\\u202e", "PENDING", client_cli.printable(HOSTILE)]
            [asked] = [r for r in fake.requests if r["type"] == "list_workflows"]
            assert (asked["body"]["status"], asked["body"]["limit"], asked["body"]["sort_desc"]) == (
                "PENDING", 100, True)
            assert cli.main(["workflows", "list", *common, "--json"]) == 0
            listed = json.loads(capsys.readouterr().out)
            check_response("listWorkflows", 200, listed)
            assert listed == httpx.get(relay.http + "/v2/orgs/local/apps/shop/workflows",
                                       params={"limit": 100, "sortDesc": True}, verify=TLS).json()
            assert cli.main(["workflows", "cancel", "wf-1", *common, "--cancel-children"]) == 0
            assert capsys.readouterr().out == "cancelled wf-1 and its children\n"
            [cancel] = [r for r in fake.requests if r["type"] == "cancel"]
            assert cancel["workflow_id"] == "wf-1"
            assert cli.main(["workflows", "fork", "wf-1", *common, "--start-step", "2", "--json"]) == 0
            assert json.loads(capsys.readouterr().out) == {"workflowId": "wf-2"}
            [fork] = [r for r in fake.requests if r["type"] == "fork_workflow"]
            assert (fork["body"]["workflow_id"], fork["body"]["start_step"]) == ("wf-1", 2)
            assert cli.main(["versions", "list", *common]) == 0
            out = capsys.readouterr().out
            assert out.splitlines()[1].split() == ["v1", "2025-11-30T12:00:00.000Z", "2025-11-30T12:00:00.000Z",
                                                   "ver-1"]
            assert cli.main(["schedules", "pause", "nightly", *common]) == 0
            assert capsys.readouterr().out == "paused nightly\n"
            assert [r["schedule_name"] for r in fake.requests if r["type"] == "pause_schedule"] == ["nightly"]
        assert cli.main(["queues", "list", *common]) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("relay: 503 no healthy executor")
        assert captured.err.endswith("(retry in 5s)\n")
        assert cli.main(["workflows", "stranded", *common, "--relay-only", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["relayOnly"] is True
        assert cli.main(["queues", "list", "--app", "nosuchapp", "--server", relay.http]) == 1
        assert capsys.readouterr().err.startswith("relay: 404 ")
    finally:
        relay.stop()


def test_events_follow_asks_for_what_came_after_the_last_entry_until_interrupted(monkeypatch, capsys) -> None:
    pages = [[{"seq": 3, "at": "2026-11-30T12:00:00.000Z", "app": "orders", "executorId": "A",
               "action": "executor.connected", "detail": {}}],
             [],
             [{"seq": 9, "at": "2026-11-30T12:00:01.000Z", "app": "orders", "executorId": "A",
               "action": "executor.disconnected", "detail": {"reason": "socket_closed"}}]]
    afters: list[str | None] = []

    def feed(r: httpx.Request) -> httpx.Response:
        afters.append(r.url.params.get("after"))
        if not pages:
            raise KeyboardInterrupt  # the user's Ctrl-C
        return httpx.Response(200, json=pages.pop(0))

    assert run(monkeypatch, feed, "events", "--follow", "--interval", "0") == 130
    assert afters == [None, "3", "3", "9"]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("seq") and "executor.connected" in lines[1]
    assert "executor.disconnected" in lines[2]  # no second header


def test_metrics_asks_for_the_last_hour_by_default_and_totals_each_series(monkeypatch, capsys) -> None:
    rows = [{"appId": "x", "metricType": "workflow_count", "metricName": "checkout", "granularity": 300,
             "timeBucket": "2026-11-30T12:00:00.000Z", "value": 3},
            {"appId": "x", "metricType": "workflow_count", "metricName": "checkout", "granularity": 300,
             "timeBucket": "2026-11-30T12:05:00.000Z", "value": 4},
            {"appId": "x", "metricType": "step_count", "metricName": HOSTILE, "granularity": 300,
             "timeBucket": "2026-11-30T12:05:00.000Z", "value": 1}]
    asked: list[httpx.Request] = []

    def metrics(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        return httpx.Response(200, json=rows)

    assert run(monkeypatch, metrics, "metrics", "orders") == 0
    r = asked[0]
    assert r.url.path == "/v2/orgs/local/apps/orders/metrics"
    start = datetime.fromisoformat(r.url.params["startTime"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(r.url.params["endTime"].replace("Z", "+00:00"))
    assert abs((end - start).total_seconds() - 3600) < 1 and abs(end.timestamp() - time.time()) < 60
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 4  # header and one line per bucket

    assert run(monkeypatch, metrics, "metrics", "orders", "--since", "2026-11-30T12:00:00Z", "--until",
               "2026-11-30T13:00:00Z", "--total") == 0
    assert asked[1].url.params["startTime"] == "2026-11-30T12:00:00Z"
    assert asked[1].url.params["endTime"] == "2026-11-30T13:00:00Z"
    out = capsys.readouterr().out
    clean(out)
    lines = out.splitlines()
    assert len(lines) == 3 and any("checkout" in line and " 7" in line for line in lines), out


def test_autoscaling_sets_shows_and_clears_a_policy(monkeypatch, capsys) -> None:
    asked: list[httpx.Request] = []
    recs = [{"applicationVersion": "v2\x1b[2J", "isLatest": True, "desiredExecutors": 3, "queueDepth": 9,
             "observedAt": 1796040658569, "queueName": "orders_queue"}]

    def server(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        if r.method == "DELETE":
            return httpx.Response(204)
        if r.url.path.endswith("/autoscale"):
            return httpx.Response(200, json=recs)
        return httpx.Response(200, json={"policy": json.loads(r.content) if r.content else {"queue": "orders_queue"}})

    assert run(monkeypatch, server, "autoscaling", "set", "orders_queue", "--app", "orders",
               "--max-old-versions", "1") == 0
    assert asked[-1].method == "PUT" and asked[-1].url.path == "/v2/orgs/local/apps/orders/autoscaling-policy"
    assert json.loads(asked[-1].content) == {"queue": "orders_queue", "rollout": {"maxOldApplicationVersions": 1}}
    assert run(monkeypatch, server, "autoscaling", "show", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert "desiredExecutors" in out and "v2\\x1b[2J" in out
    assert run(monkeypatch, server, "autoscaling", "clear", "--app", "orders") == 0
    assert asked[-1].method == "DELETE"
    assert "deleted" in capsys.readouterr().out


def test_alerts_lists_creates_and_deletes_rules(monkeypatch, capsys) -> None:
    asked: list[httpx.Request] = []
    rule = {"id": "r1", "appId": "a", "receivingAppId": "b", "ruleType": "WorkflowFailure",
            "ruleMetadata": {"threshold": 2, "windowSecs": 300}, "minIntervalSecs": 600,
            "lastFiredAt": "2026-11-30T12:00:00.000Z\x1b[2J"}

    def server(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        if r.method == "DELETE":
            return httpx.Response(204)
        if r.method == "POST":
            return httpx.Response(201, json=rule)
        return httpx.Response(200, json=[rule])

    assert run(monkeypatch, server, "alerts", "create", "WorkflowFailure", "--app", "orders", "--metadata",
               '{"threshold": 2}', "--min-interval", "600", "--to", "ops") == 0
    assert asked[-1].method == "POST" and asked[-1].url.path == "/v2/orgs/local/apps/orders/alerting-rules"
    assert json.loads(asked[-1].content) == {"ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 2},
                                             "minIntervalSecs": 600, "receivingAppName": "ops"}
    assert run(monkeypatch, server, "alerts", "list", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert "lastFiredAt" in out and "\\x1b[2J" in out
    assert run(monkeypatch, server, "alerts", "delete", "r1", "--app", "orders") == 0
    assert asked[-1].method == "DELETE" and asked[-1].url.path.endswith("/alerting-rules/r1")
    assert "deleted" in capsys.readouterr().out
    n = len(asked)
    assert run(monkeypatch, server, "alerts", "create", "SlowQueue", "--app", "orders", "--metadata", "{x") == 2
    assert len(asked) == n  # nothing sent
    assert "--metadata is not JSON" in capsys.readouterr().err


def test_roles_and_token_permissions(monkeypatch, capsys) -> None:
    asked: list[httpx.Request] = []

    def server(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        if r.method == "DELETE":
            return httpx.Response(204)
        if r.url.path.endswith("/tokens/ci"):
            return httpx.Response(201, json={"token": "relay_secret", "tokenName": "ci"})
        if r.method == "POST":
            return httpx.Response(201, json=json.loads(r.content))
        return httpx.Response(200, json=[{"name": "admin", "isGlobal": True, "permissions": ["token.read"]}])

    assert run(monkeypatch, server, "tokens", "create", "ci", "--permission", "application.read",
               "--permission", "metric.read") == 0
    assert json.loads(asked[-1].content) == {"permissions": ["application.read", "metric.read"]}
    assert run(monkeypatch, server, "roles", "create", "deployer", "--permission", "application.write") == 0
    assert asked[-1].url.path == "/v2/orgs/local/roles"
    assert json.loads(asked[-1].content) == {"name": "deployer", "permissions": ["application.write"]}
    assert run(monkeypatch, server, "roles", "list") == 0
    assert "isGlobal" in capsys.readouterr().out
    assert run(monkeypatch, server, "roles", "delete", "deployer") == 0
    assert asked[-1].method == "DELETE" and asked[-1].url.path == "/v2/orgs/local/roles/deployer"


NEED_OIDC = "relay: roles are served only when the server has OIDC configured (relay serve --oidc-issuer)"


def test_roles_against_a_real_server_without_oidc_say_plainly_that_they_need_it(tmp_path, capsys) -> None:
    """Relay serves roles only with OIDC configured, as Conductor serves them only with OAuth: against
    ``relay serve`` without it each ``relay roles`` command exits 1 saying so, the server's 404 after."""
    from tests.server import RelayServer

    relay = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/relay.db"]).start()
    try:
        for argv in (["roles", "list"], ["roles", "list", "--json"], ["roles", "delete", "deployer"],
                     ["roles", "create", "deployer", "--permission", "application.read"]):
            assert cli.main([*argv, "--server", relay.http]) == 1, argv
            out, err = capsys.readouterr()
            assert out == "" and err.startswith(NEED_OIDC) and len(err.splitlines()) == 1, (argv, err)
            assert "404" in err and "--oidc-issuer" in err, err
    finally:
        relay.stop()


def test_roles_against_a_real_server_with_oidc_work_and_an_unknown_role_is_the_servers_own_404(tmp_path,
                                                                                                capsys) -> None:
    """With OIDC configured the same commands work (a token of the OIDC org), and deleting a role that
    does not exist is the server's own 404, not the one about OIDC."""
    from tests.oidc_issuer import Issuer
    from tests.server import RelayServer, admin_token

    url = f"sqlite:///{tmp_path}/relay.db"
    token = admin_token(tmp_path, url, "acme", "admin")
    with Issuer() as issuer:
        relay = RelayServer(tmp_path, args=["--database-url", url, "--auth", "--oidc-issuer", issuer.url,
                                            "--oidc-audience", "relay", "--oidc-org", "acme"]).start()
        common = ["--server", relay.http, "--org", "acme", "--token", token]
        try:
            assert cli.main(["roles", "create", "deployer", "--permission", "application.write", *common]) == 0
            assert capsys.readouterr().out.split() == ["name", "deployer", "permissions", '["application.write"]']
            assert cli.main(["roles", "list", *common, "--json"]) == 0
            listed = json.loads(capsys.readouterr().out)
            assert [r["name"] for r in listed] == ["admin", "operator", "viewer", "deployer"]
            assert cli.main(["roles", "delete", "deployer", *common]) == 0
            assert "deleted" in capsys.readouterr().out
            assert cli.main(["roles", "delete", "deployer", *common]) == 1
            err = capsys.readouterr().err
            assert err.startswith("relay: 404 ") and "OIDC" not in err, err
            assert cli.main(["roles", "list", *common[:2], "--org", "other", "--token", token]) == 1  # not its org
            assert capsys.readouterr().err.startswith(NEED_OIDC)
        finally:
            relay.stop()


def test_a_roles_404_is_put_down_to_oidc_only_when_the_roles_are_not_listed(monkeypatch, capsys) -> None:
    """``roles delete``'s 404 may be an unknown role: the CLI asks for the list, and a refusal of that
    (403 here) leaves the server's own answer standing."""
    problem = {"content-type": "application/problem+json"}

    def server(r: httpx.Request) -> httpx.Response:
        if r.method == "DELETE":
            return httpx.Response(404, headers=problem, json={"status": 404, "detail": "no role 'ghost'"})
        return httpx.Response(403, headers=problem, json={"status": 403, "detail": "lacks organization.read"})

    assert run(monkeypatch, server, "roles", "delete", "ghost") == 1
    assert capsys.readouterr().err == "relay: 404 no role 'ghost'\n"
    assert run(monkeypatch, server, "roles", "list") == 1  # a refusal is no 404: said as it is
    assert capsys.readouterr().err == "relay: 403 lacks organization.read\n"
