"""Application versions (``relay_es/adapters/rest/versions.py``) on a real ``relay serve``, both
stores, with fake executors answering like each SDK over real WebSockets.

``listAppVersions`` sends ``list_application_versions`` (protocol section 5.20) and answers
Conductor's ``ApplicationVersion`` (int epoch ms to RFC 3339); ``setLatestAppVersion`` sends
``set_latest_application_version``, answers 204 and is in the audit log; a version not
registered is 404 with nothing sent or recorded, a bad body 422 likewise; an SDK without the
message 501; no executor 503 (recorded), no answer 504 (recorded). In auth mode an
application-limited token reads versions and queues but may not set the latest version.
"""

from __future__ import annotations

from typing import Any

from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

V = L + "/apps/shop/versions"


def registry(*names: str) -> dict[str, Any]:
    """Handlers of a fake executor whose system database registers ``names`` (oldest first);
    set-latest gives a version a timestamp above all others, as the SDKs do."""
    stamps = {n: 1796040658569 + i * 1000 for i, n in enumerate(names)}

    def listed(req: dict[str, Any]) -> dict[str, Any]:
        return {"output": [{"version_id": f"id-{n}", "version_name": n, "version_timestamp": t,
                            "created_at": 1796040658569}
                           for n, t in sorted(stamps.items(), key=lambda kv: -kv[1])]}

    def set_latest(req: dict[str, Any]) -> dict[str, Any]:
        stamps[req["version_name"]] = max(stamps.values()) + 1
        return {"success": True}

    return {"list_application_versions": listed, "set_latest_application_version": set_latest}


def test_versions_round_trip_and_setting_the_latest_is_recorded(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": registry("v1", "v2")},
                   {"app": "tshop", "style": "typescript", "answers": registry("a")}) as (py, _ts):
        listed = conforms("listAppVersions", call(relay, "GET", V), 200)
        assert listed == [
            {"versionId": "id-v2", "versionName": "v2", "versionTimestamp": "2026-11-30T12:10:59.569Z",
             "createdAt": "2026-11-30T12:10:58.569Z"},
            {"versionId": "id-v1", "versionName": "v1", "versionTimestamp": "2026-11-30T12:10:58.569Z",
             "createdAt": "2026-11-30T12:10:58.569Z"}]
        assert sent(py, "list_application_versions")[-1].keys() == {"type", "request_id"}
        assert [v["versionName"] for v in conforms("listAppVersions", call(relay, "GET", L + "/apps/tshop/versions"),
                                                   200)] == ["a"]

        conforms("setLatestAppVersion", call(relay, "PATCH", V + "/latest", json={"versionName": "v1"}), 204)
        assert [r["version_name"] for r in sent(py, "set_latest_application_version")] == ["v1"]
        assert [v["versionName"] for v in conforms("listAppVersions", call(relay, "GET", V), 200)] == ["v1", "v2"]

        # not registered: 404, nothing sent, nothing recorded; bad bodies: 422 (400: not JSON), likewise
        assert "v9" in conforms("setLatestAppVersion",
                                call(relay, "PATCH", V + "/latest", json={"versionName": "v9"}), 404)["detail"]
        for body in ({}, {"versionName": 1}, {"versionName": "v1", "x": True}, {"versionName": "v" * 8193}, []):
            conforms("setLatestAppVersion", call(relay, "PATCH", V + "/latest", json=body), 422)
        conforms("setLatestAppVersion", call(relay, "PATCH", V + "/latest"), 422)
        conforms("setLatestAppVersion", call(relay, "PATCH", V + "/latest", content=b'{"versionName": ',
                                             headers={"content-type": "application/json"}), 400)
        assert len(sent(py, "set_latest_application_version")) == 1

        [(req, done)] = actions(relay, "shop", "setLatestAppVersion")
        assert req["target"] == {"type": "version", "ids": ["v1"], "count": 1}
        assert req["parameters"] == {"versionName": "v1"} and done["outcome"] == "succeeded"


def test_failed_version_calls_are_their_problems(relay: RelayServer) -> None:
    assert call(relay, "PUT", L + "/apps/idle").status_code == 204
    conforms("listAppVersions", call(relay, "GET", L + "/apps/idle/versions"), 503)
    conforms("setLatestAppVersion", call(relay, "PATCH", L + "/apps/idle/versions/latest",
                                         json={"versionName": "v1"}), 503)
    conforms("listAppVersions", call(relay, "GET", L + "/apps/unknown/versions"), 404)
    handlers = registry("v1")
    with executors(relay, {"app": "mute", "answers": {**handlers, "set_latest_application_version": lambda r: None}},
                   {"app": "broken", "answers": {**handlers, "set_latest_application_version": lambda r: {
                       "success": False, "error_message": "Application version 'v1' is already registered by "
                                                          "application 'other'"}}},
                   {"app": "old"}):
        conforms("setLatestAppVersion", call(relay, "PATCH", L + "/apps/mute/versions/latest",
                                             json={"versionName": "v1"}), 504)
        [(_, done)] = actions(relay, "mute", "setLatestAppVersion")
        assert done["outcome"] == "timed_out"
        body = conforms("setLatestAppVersion", call(relay, "PATCH", L + "/apps/broken/versions/latest",
                                                    json={"versionName": "v1"}), 500)
        assert "already registered" in body["detail"]
        [(_, done)] = actions(relay, "broken", "setLatestAppVersion")
        assert done["outcome"] == "failed" and "already registered" in done["message"]
        for op, method, path, kw in (("listAppVersions", "GET", "", {}),
                                     ("setLatestAppVersion", "PATCH", "/latest", {"json": {"versionName": "v1"}})):
            body = conforms(op, call(relay, method, L + "/apps/old/versions" + path, **kw), 501)
            assert "list_application_versions" in body["detail"] and "Unknown message type" in body["detail"]


def test_an_application_limited_token_reads_versions_and_queues_but_does_not_act(
        auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, tokens = auth_server
    admin, scoped = tokens["acme"], tokens["scoped"]
    B = "/v2/orgs/acme/apps/billing"
    with executors(s, {"app": "billing", "key": scoped, "answers": {
            **registry("v1", "v2"), "list_queues": lambda r: {"output": []},
            "get_queue": lambda r: {"output": None}}}, org="acme", token=admin) as (ex,):
        assert conforms("listAppVersions", call(s, "GET", B + "/versions", scoped), 200)
        assert conforms("listQueues", call(s, "GET", B + "/queues", scoped), 200) == []
        conforms("getQueue", call(s, "GET", B + "/queues/q", scoped), 404)
        conforms("listAppVersions", call(s, "GET", "/v2/orgs/acme/apps/orders/versions", scoped), 403)
        conforms("setLatestAppVersion", call(s, "PATCH", B + "/versions/latest", scoped, json={"versionName": "v1"}),
                 403)
        assert sent(ex, "set_latest_application_version") == []
        [(req, done)] = actions(s, "billing", "setLatestAppVersion", org="acme", token=admin, refused=True)
        assert actions(s, "billing", "setLatestAppVersion", org="acme", token=admin) == []  # the refusal is all
        assert req["actor"] == {"kind": "token", "id": "billing-only"} and done and done["outcome"] == "refused"
        conforms("setLatestAppVersion", call(s, "PATCH", B + "/versions/latest", admin, json={"versionName": "v1"}),
                 204)
        [(req, _)] = actions(s, "billing", "setLatestAppVersion", org="acme", token=admin)
        assert req["actor"] == {"kind": "token", "id": "admin"}


def test_resume_and_fork_go_to_the_version_a_user_made_latest(relay: RelayServer) -> None:
    """The routing's 'latest' was always the newest registered version: a version made latest with
    setLatestAppVersion was ignored by resume and fork. It is asked of the executors' registry (and
    asked again after this Relay's own setLatestAppVersion)."""
    shared = registry("v1", "v2")  # one system database: both executors answer from it
    answers = {**shared, "resume": lambda req: {"success": True},
               "fork_workflow": lambda req: {"new_workflow_id": "wf-1-fork"}}
    W = L + "/apps/shop/workflows"
    with executors(relay, {"app": "shop", "executor_id": "ex-v1", "version": "v1", "answers": answers},
                   {"app": "shop", "executor_id": "ex-v2", "version": "v2", "answers": answers}) as (one, two):
        conforms("resumeWorkflow", call(relay, "POST", W + "/wf-1/resume"), 204)
        assert sent(two, "resume") and not sent(one, "resume")  # v2: the registry's latest, and the newest
        conforms("setLatestAppVersion", call(relay, "PATCH", V + "/latest", json={"versionName": "v1"}), 204)
        conforms("resumeWorkflow", call(relay, "POST", W + "/wf-1/resume"), 204)
        conforms("forkWorkflow", call(relay, "POST", W + "/wf-1/fork", json={"startStep": 1}), 201)
        assert len(sent(one, "resume")) == 1 and len(sent(one, "fork_workflow")) == 1
        assert len(sent(two, "resume")) == 1 and not sent(two, "fork_workflow")
