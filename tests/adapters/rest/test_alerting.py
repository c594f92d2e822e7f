"""Alerting (``relay_es/adapters/rest/alerting.py`` and the alert manager behind it) on a real
``relay serve``, both stores, with fake executors answering like the SDKs over real WebSockets
and a real HTTP receiver for the webhooks.

The three operations answer the reference's shapes and statuses (validated against it);
``ruleMetadata`` is checked (422 naming the key), never answered with a webhook's secret or its
URL's path; making and deleting rules are in the audit log. A rule fires from what an executor
answers, the alert reaches the receiving application's executor (the ``alert`` message) and
both webhooks (a signed JSON one, retried after a 503, and a Slack one); every attempt is in the
lifecycle feed; and the rule fires once in its ``minIntervalSecs``, also through a Relay restart.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent, wait
from tests.rest_client import audit_log
from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.webhook_receiver import Receiver, verify

A = L + "/apps/shop"
RULES = A + "/alerting-rules"
SECRET = "a-webhook-secret-of-some-length"
ENV = {"RELAY_CALL_TIMEOUT_SECS": "1", "RELAY_ALERT_CHECK_SECS": "0.5", "RELAY_ALERT_RETRY_SECS": "0.3",
       "RELAY_ALERT_WEBHOOK_ALLOW": "127.0.0.0/8"}  # the receivers are on loopback


@pytest.fixture
def relay(tmp_path, store_url):
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=ENV)
    s.start()
    yield s
    s.stop()


def failed_rows(req: dict[str, Any]) -> dict[str, Any]:
    b = req["body"]
    assert b["status"] == ["ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"] and b["load_input"] is False and b["load_output"] is False, b
    return {"output": [{"WorkflowUUID": f"wf-{i}", "Status": "ERROR", "WorkflowName": "charge"}
                       for i in range(b["limit"])]}


def feed(server: RelayServer, app: str = "shop") -> list[dict[str, Any]]:
    r = call(server, "GET", L + "/executor-events", params={"app": app, "limit": 1000})
    assert r.status_code == 200, r.text
    return r.json()


def test_rules_are_made_listed_and_deleted_in_conductors_shapes(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop"}, {"app": "ops"}):
        assert conforms("listAlertingRules", call(relay, "GET", RULES), 200) == []
        body = {"ruleType": "WorkflowFailure", "minIntervalSecs": 600, "receivingAppName": "ops",
                "ruleMetadata": {"workflowName": "charge", "threshold": 3,
                                 "webhooks": [{"url": "https://hooks.example.com/relay/x?token=abc", "secret": SECRET},
                                              {"url": "https://hooks.slack.com/services/T/B/C", "format": "slack"}]}}
        made = conforms("createAlertingRule", call(relay, "POST", RULES, json=body), 201)
        apps = {a["name"]: a["id"] for a in call(relay, "GET", L + "/apps").json()}
        assert made["appId"] == apps["shop"] and made["receivingAppId"] == apps["ops"]
        assert made["ruleType"] == "WorkflowFailure" and made["minIntervalSecs"] == 600 and made["lastFiredAt"] is None
        assert made["ruleMetadata"] == {"workflowName": "charge", "threshold": 3, "windowSecs": 300, "webhooks": [
            {"url": "https://hooks.example.com/…", "format": "json", "signed": True},
            {"url": "https://hooks.slack.com/…", "format": "slack", "signed": False}]}
        assert SECRET not in json.dumps(made) and "token=abc" not in json.dumps(made)

        # defaults: the watched application receives, a 300 s interval
        plain = conforms("createAlertingRule", call(relay, "POST", RULES, json={
            "ruleType": "SlowQueue", "ruleMetadata": {"queueName": "orders"}}), 201)
        assert plain["receivingAppId"] == apps["shop"] and plain["minIntervalSecs"] == 300
        assert plain["ruleMetadata"] == {"queueName": "orders", "thresholdSecs": 300}
        # Relay's own types: the reference's shape but for the type's name
        own = call(relay, "POST", RULES, json={"ruleType": "ExecutorDead", "ruleMetadata": {}})
        assert own.status_code == 201 and own.json()["ruleType"] == "ExecutorDead", own.text

        listed = call(relay, "GET", RULES).json()  # not checked against the reference: it holds ExecutorDead
        assert [r["id"] for r in listed] == [made["id"], plain["id"], own.json()["id"]]
        assert listed[0] == made

        conforms("deleteAlertingRule", call(relay, "DELETE", f"{RULES}/{plain['id']}"), 204)
        conforms("deleteAlertingRule", call(relay, "DELETE", f"{RULES}/{plain['id']}"), 404)
        assert [r["id"] for r in call(relay, "GET", RULES).json()] == [made["id"], own.json()["id"]]

        (created, done), *_ = actions(relay, "shop", "createAlertingRule")
        assert created["target"] == {"type": "alerting_rule", "ids": [made["id"]], "count": 1}
        assert created["parameters"]["webhooks"] == 2
        # the rule's own entries, found by its id: its making (once recorded without it) and its deletions
        by_rule = audit_log(relay, target=plain["id"])
        assert [(e["operation"], e["status"]) for e in by_rule] == [
            ("deleteAlertingRule", "failure"), ("deleteAlertingRule", "success"), ("createAlertingRule", "success")]
        assert by_rule[-1]["target"] == {"type": "alerting_rule", "id": plain["id"]}
        assert done["outcome"] == "succeeded" and done["result"]["ruleId"] == made["id"]
        assert SECRET not in json.dumps(actions(relay, "shop", "createAlertingRule"))
        (deleted, ended), = [a for a in actions(relay, "shop", "deleteAlertingRule") if a[1]["outcome"] == "succeeded"]
        assert deleted["target"]["ids"] == [plain["id"]]
        assert [e["action"] for e in feed(relay) if e["action"].startswith("alerting.")] == [
            "alerting.rule_created", "alerting.rule_created", "alerting.rule_created", "alerting.rule_deleted"]


BAD_RULES = [
    ({"ruleType": "Nope", "ruleMetadata": {}}, 422, "ruleType"),
    ({"ruleMetadata": {}}, 422, "ruleType"),
    ({"ruleType": "WorkflowFailure", "ruleMetadata": {"treshold": 2}}, 422, "treshold"),
    ({"ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": 0}}, 422, "ruleMetadata.threshold"),
    ({"ruleType": "WorkflowFailure", "ruleMetadata": {"threshold": True}}, 422, "ruleMetadata.threshold"),
    ({"ruleType": "SlowQueue", "ruleMetadata": "x"}, 422, "ruleMetadata"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {}, "minIntervalSecs": -1}, 422, "minIntervalSecs"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {}, "minIntervalSecs": 10**9}, 422, "minIntervalSecs"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {"webhooks": [{"url": "ftp://x/y"}]}}, 422, "webhooks[0].url"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {"webhooks": [{"url": "http://u:p@x/y"}]}}, 422, "credentials"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {"webhooks": [{"url": "https://x/y", "secret": "short"}]}}, 422,
     "secret"),
    ({"ruleType": "UnresponsiveApplication", "ruleMetadata": {}}, 422, "receivingAppName"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {}, "receivingAppName": "ghost"}, 422, "ghost"),
    ({"ruleType": "SlowQueue", "ruleMetadata": {}, "extra": 1}, 422, "extra"),
]


def test_bad_rules_are_refused_naming_what_is_wrong_and_nothing_is_made(relay: RelayServer) -> None:
    call(relay, "PUT", A)
    for body, status, key in BAD_RULES:  # one server for all: each case is one request
        r = conforms("createAlertingRule", call(relay, "POST", RULES, json=body), status)
        assert key in json.dumps(r), (body, r)
    assert call(relay, "GET", RULES).json() == []


def test_an_unknown_application_is_a_404(relay: RelayServer) -> None:
    conforms("listAlertingRules", call(relay, "GET", L + "/apps/ghost/alerting-rules"), 404)
    conforms("createAlertingRule", call(relay, "POST", L + "/apps/ghost/alerting-rules",
                                        json={"ruleType": "SlowQueue", "ruleMetadata": {}}), 404)
    conforms("deleteAlertingRule", call(relay, "DELETE", L + "/apps/ghost/alerting-rules/x"), 404)


def test_an_alert_reaches_the_receiving_app_and_both_webhooks_once_per_interval_through_a_restart(
        relay: RelayServer) -> None:
    with Receiver([503]) as hook, Receiver() as slack:
        shop = {"app": "shop", "answers": {"list_workflows": failed_rows}}
        ops = {"app": "ops", "answers": {"alert": lambda req: {"success": True}}}
        with executors(relay, shop, ops) as (sx, ox):
            rule = conforms("createAlertingRule", call(relay, "POST", RULES, json={
                "ruleType": "WorkflowFailure", "minIntervalSecs": 3600, "receivingAppName": "ops",
                "ruleMetadata": {"threshold": 2, "windowSecs": 120, "webhooks": [
                    {"url": hook.url + "/relay", "secret": SECRET},
                    {"url": slack.url + "/services/x", "format": "slack"}]}}), 201)
            (alert,) = wait(lambda: sent(ox, "alert"), "the alert at the receiving app's executor")
            asked = sent(sx, "list_workflows")[0]["body"]
            assert asked["limit"] == 2 and asked["completed_after"] and asked["sort_desc"] is True
            assert alert["name"] == "WorkflowFailure" and "2 workflow(s) of shop failed" in alert["message"]
            assert alert["metadata"]["workflowIds"] == "wf-0,wf-1" and alert["metadata"]["ruleId"] == rule["id"]
            assert all(isinstance(v, str) for v in alert["metadata"].values())

            first, second = hook.wait(2)  # a 503, then delivered
            for req in (first, second):
                assert req["path"] == "/relay" and verify(SECRET, req)
            assert [r["headers"]["x-relay-delivery-attempt"] for r in (first, second)] == ["1", "2"]
            assert first["headers"]["x-relay-alert-id"] == second["headers"]["x-relay-alert-id"]
            posted = json.loads(second["body"])
            assert posted["ruleId"] == rule["id"] and posted["ruleType"] == "WorkflowFailure"
            assert posted["receivingApp"] == "ops" and posted["message"] == alert["message"]
            (s,) = slack.wait(1)
            assert "x-relay-signature" not in s["headers"] and "WorkflowFailure" in json.loads(s["body"])["text"]

            fired_at = wait(lambda: call(relay, "GET", RULES).json()[0]["lastFiredAt"], "lastFiredAt")
            conforms("listAlertingRules", call(relay, "GET", RULES), 200)
            events = wait(lambda: [e for e in feed(relay) if e["action"] == "alert.delivery"]
                          if len([e for e in feed(relay) if e["action"] == "alert.delivery"]) >= 4 else None,
                          "four delivery attempts in the feed")
            assert sorted((e["detail"]["channel"], e["detail"]["attempt"], e["detail"]["ok"]) for e in events) == [
                ("app", 1, True), ("webhook:0", 1, False), ("webhook:0", 2, True), ("webhook:1", 1, True)]
            (fired,) = [e for e in feed(relay) if e["action"] == "alert.fired"]
            assert fired["detail"]["ruleId"] == rule["id"] and fired["detail"]["channels"] == ["app", "webhook:0",
                                                                                                "webhook:1"]
            checks = len(sent(sx, "list_workflows"))
            wait(lambda: len(sent(sx, "list_workflows")) >= checks + 3, "three more checks")
            assert len(sent(ox, "alert")) == 1  # the condition holds at every check; the interval holds it back

        relay.stop()
        relay.start()
        with executors(relay, shop, ops) as (sx, ox):
            wait(lambda: len(sent(sx, "list_workflows")) >= 3, "three checks by the new Relay")
            assert sent(ox, "alert") == []
            assert call(relay, "GET", RULES).json()[0]["lastFiredAt"] == fired_at
        assert len(hook.requests) == 2 and len(slack.requests) == 1
