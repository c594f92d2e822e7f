"""End to end: the queue, schedule, version and autoscaling operations of the Conductor API through a real
``relay serve`` to real ``dbos==3.2.0`` and ``@dbos-inc/dbos-sdk@5.2.11`` executors (the workflow
ground, ``tests/e2e/ground.py``), Relay's store on SQLite and on Postgres.

Every answer validates against the reference and matches the executor's own system database;
every action really happens there: a paused schedule stops firing, a resumed one fires again, a
trigger enqueues a workflow, a backfill enqueues the window's workflows, setting the latest version
retimes it; an autoscaling policy on the ground's queue gives the system database's backlog over
its worker concurrency. Each action is in Relay's audit log. One test function: the ground is
expensive.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import pytest

from tests.conductor_schema import check_response
from tests.e2e.ground import QUEUE, Ground
from tests.e2e.sysdb import SystemDb
from tests.rest_client import as_records
from tests.webhook_receiver import Receiver, verify

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

TICK_SECS = 2  # the ground's schedule fires every 2 s
QUIET_SECS = 3 * TICK_SECS  # no new tick for this long: the schedule does not fire
# The SDKs poll their schedules every second for a minute after startup, then every 30 s: a pause
# or resume takes effect within that.
TAKES_EFFECT_SECS = 45
HOOK_SECRET = "an-end-to-end-webhook-secret"
BACKFILL = {"startTime": "2020-01-01T00:00:00Z", "endTime": "2020-01-01T00:00:06Z"}  # before any tick


def answer(g: Ground, operation: str, method: str, path: str, status: int, **kw: Any) -> Any:
    """The REST answer of ``operation`` on ``g``'s app: ``status``, valid against the reference."""
    r = g.scene.api(method, f"/v2/orgs/local/apps/{g.app}{path}", **kw)
    assert r.status_code == status, f"{g.sdk} {operation}: {r.status_code} {r.text}"
    body = r.json() if r.content else None
    check_response(operation, status, body)
    return body, r


def ticks(db: SystemDb) -> set[str]:
    return {w["workflow_uuid"] for w in db.workflows(name="tick_workflow")}


def wait_quiet(g: Ground, what: str) -> None:
    """Waits (bounded) until no tick workflow has appeared for QUIET_SECS."""
    deadline = time.monotonic() + TAKES_EFFECT_SECS + QUIET_SECS
    seen, since = ticks(g.db), time.monotonic()
    while time.monotonic() - since < QUIET_SECS:
        assert time.monotonic() < deadline, f"{g.sdk}: {what}: ticks kept coming"
        time.sleep(0.2)
        now = ticks(g.db)
        if now != seen:
            seen, since = now, time.monotonic()


def audited(g: Ground, operation: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """``operation``'s actions on the ground's application, once each has its completion (the
    log is a read model, brought up to date in the background; at most 15 s)."""
    deadline = time.monotonic() + 15
    while True:
        r = g.scene.api("GET", "/v2/orgs/local/audit-logs", params={"operation": operation, "limit": 1000})
        assert r.status_code == 200, r.text
        pairs = as_records(r.json(), g.app)
        if (pairs and all(d is not None for _, d in pairs)) or time.monotonic() > deadline:
            return pairs
        time.sleep(0.05)


def check_reads(g: Ground) -> None:
    db = g.db
    # queues: as registered in the system database
    [row] = db._rows("SELECT * FROM {s}.queues WHERE name = %s", (QUEUE,))
    listed, _ = answer(g, "listQueues", "GET", "/queues", 200)
    by_name = {q["name"]: q for q in listed}
    assert QUEUE in by_name, listed
    one, _ = answer(g, "getQueue", "GET", f"/queues/{QUEUE}", 200)
    assert one == by_name[QUEUE]
    assert (one["concurrency"], one["workerConcurrency"], one["rateLimitMax"], one["rateLimitPeriodSecs"]) == \
        (row["concurrency"], row["worker_concurrency"], row["rate_limit_max"], row["rate_limit_period_sec"]) == \
        (1, 1, None, None), (one, row)
    assert one["pollingIntervalSecs"] == row["polling_interval_sec"]
    answer(g, "getQueue", "GET", "/queues/no_such_queue", 404)

    # schedules: as in workflow_schedules
    row = db.schedule(g.schedule)
    listed, _ = answer(g, "listSchedules", "GET", "/schedules", 200)
    [mine] = [s for s in listed if s["scheduleName"] == g.schedule]
    one, _ = answer(g, "getSchedule", "GET", f"/schedules/{g.schedule}", 200)
    assert {k: v for k, v in one.items() if k != "lastFiredAt"} == {k: v for k, v in mine.items() if k != "lastFiredAt"}
    assert (one["scheduleId"], one["workflowName"], one["cronExpression"], one["status"]) == \
        (row["schedule_id"], row["workflow_name"], row["schedule"], "ACTIVE"), (one, row)
    assert one["workflowName"] == "tick_workflow" and one["lastFiredAt"] is not None
    paused, _ = answer(g, "listSchedules", "GET", "/schedules", 200, params={"status": "PAUSED"})
    assert g.schedule not in {s["scheduleName"] for s in paused}
    prefixed, _ = answer(g, "listSchedules", "GET", "/schedules", 200,
                         params={"scheduleNamePrefix": g.schedule[:3], "loadContext": "false"})
    assert [s["scheduleName"] for s in prefixed] == [g.schedule]
    answer(g, "getSchedule", "GET", "/schedules/no-such-schedule", 404)


def versions(g: Ground) -> dict[str, dict[str, Any]]:
    listed, _ = answer(g, "listAppVersions", "GET", "/versions", 200)
    return {v["versionName"]: v for v in listed}


def check_autoscale(g: Ground) -> None:
    """A policy on ``ground_queue`` (worker concurrency 1; one workflow PENDING and two ENQUEUED) is
    accepted, one on an unknown queue refused; the recommendation's backlog is what the system
    database holds for the latest version, and the executors needed that backlog over the
    worker concurrency."""
    refused = answer(g, "setAutoscalingPolicy", "PUT", "/autoscaling-policy", 422,
                        json={"queue": "no_such_queue"})[0]
    assert "no_such_queue" in refused["detail"]
    policy = {"queue": QUEUE, "rollout": {"maxOldApplicationVersions": 0}}
    assert answer(g, "setAutoscalingPolicy", "PUT", "/autoscaling-policy", 200, json=policy)[0] == {"policy": policy}

    rows = g.db._rows("SELECT application_version, count(*) AS n FROM {s}.workflow_status WHERE queue_name = %s "
                      "AND status IN ('ENQUEUED', 'PENDING') GROUP BY application_version", (QUEUE,))
    backlog = {r["application_version"]: int(r["n"]) for r in rows}
    versions = g.db._rows("SELECT version_name FROM {s}.application_versions ORDER BY version_timestamp DESC")
    latest = versions[0]["version_name"]
    assert backlog.get(latest) == 3, (backlog, latest)  # the ground: one PENDING, two ENQUEUED
    before = int(time.time() * 1000)
    [rec] = answer(g, "getAutoscale", "GET", "/autoscale", 200)[0]
    assert rec == {"applicationVersion": latest, "isLatest": True, "desiredExecutors": 3, "queueDepth": 3,
                   "observedAt": rec["observedAt"], "queueName": QUEUE}
    assert before <= rec["observedAt"] <= int(time.time() * 1000)

    answer(g, "deleteAutoscalingPolicy", "DELETE", "/autoscaling-policy", 204)
    answer(g, "getAutoscale", "GET", "/autoscale", 404)


def check_alerts(gs: list[Ground]) -> None:
    """Each ground's failed workflow fires a ``WorkflowFailure`` rule of its application whose
    receiving application is the other ground's: the real executor answers the check, and the
    other SDK's real alert handler gets the alert (Python's from TypeScript's and back), as does
    a signed webhook, once."""
    with Receiver() as hook:
        rules = {}
        for g, other in ((gs[0], gs[1]), (gs[1], gs[0])):
            made, _ = answer(g, "createAlertingRule", "POST", "/alerting-rules", 201, json={
                "ruleType": "WorkflowFailure", "receivingAppName": other.app, "minIntervalSecs": 3600,
                "ruleMetadata": {"threshold": 1, "windowSecs": 3600,
                                 "webhooks": [{"url": f"{hook.url}/{g.sdk}", "secret": HOOK_SECRET}]}})
            rules[g.sdk] = made
        for g, other in ((gs[0], gs[1]), (gs[1], gs[0])):
            [alert] = g.scene.wait(lambda o=other: o.executor.alerts, f"{other.sdk}'s alert handler called",
                                   timeout=30)  # the executor of the *receiving* application
            assert alert["name"] == "WorkflowFailure", alert
            failed = g.ids["failed"]
            assert failed in alert["metadata"]["workflowIds"].split(","), (alert, failed)
            assert alert["metadata"]["ruleId"] == rules[g.sdk]["id"] and alert["metadata"]["app"] == g.app
            assert g.app in alert["message"], alert
        posts = {r["path"]: r for r in hook.wait(2)}
        assert sorted(posts) == sorted(f"/{g.sdk}" for g in gs)
        assert all(verify(HOOK_SECRET, r) for r in posts.values())
        for g in gs:
            [listed], _ = answer(g, "listAlertingRules", "GET", "/alerting-rules", 200)
            assert listed["lastFiredAt"] is not None and listed["id"] == rules[g.sdk]["id"]
            answer(g, "deleteAlertingRule", "DELETE", f"/alerting-rules/{listed['id']}", 204)
        assert all(len(g.executor.alerts) == 1 for g in gs)  # once: the interval is an hour


def check_secret_never_kept(store_url: str, server_log: Any) -> None:
    """The webhooks' secret reached the receiver, signed; no event, snapshot or log line of Relay's
    holds it (sealed under each rule's key, erased with the rule: ADR 23)."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.engine.service import Relay

    relay = Relay({**event_store_env(parse_database_url(store_url)), "CREATE_TABLE": "false"}, clock=SystemClock())
    try:
        log = relay.recorder.select_notifications(start=1, limit=1_000_000)
        states = [n.state for n in log]
        if relay.snapshots is not None:
            for stream in {n.originator_id for n in log}:
                states += [e.state for e in relay.snapshots.recorder.select_events(stream)]
        assert sum(b'"sealed"' in s for s in states) >= 2, "the rules' sealed webhooks are in the store"
        assert not [s for s in states if HOOK_SECRET.encode() in s]
    finally:
        relay.close()
    assert HOOK_SECRET not in server_log.read_text(errors="replace")


def test_queues_schedules_and_versions_through_relay(grounds: dict[str, Ground], store_url: str) -> None:
    gs = list(grounds.values())
    for g in gs:
        check_reads(g)
        check_autoscale(g)
    check_alerts(gs)
    check_secret_never_kept(store_url, gs[0].scene.server.log_path)

    # pause: the row says PAUSED, and once the SDK has noticed, no tick comes for a while
    for g in gs:
        answer(g, "pauseSchedule", "POST", f"/schedules/{g.schedule}/pause", 204)
        assert g.db.schedule(g.schedule)["status"] == "PAUSED"
        got, _ = answer(g, "getSchedule", "GET", f"/schedules/{g.schedule}", 200)
        assert got["status"] == "PAUSED"
    for g in gs:
        wait_quiet(g, "after pause")
    paused_ticks = {g.sdk: ticks(g.db) for g in gs}

    # resume: it fires again
    for g in gs:
        answer(g, "resumeSchedule", "POST", f"/schedules/{g.schedule}/resume", 204)
        assert g.db.schedule(g.schedule)["status"] == "ACTIVE"
    for g in gs:
        g.scene.wait(lambda g=g: ticks(g.db) - paused_ticks[g.sdk], f"{g.sdk}: a tick after resume",
                     timeout=TAKES_EFFECT_SECS + 2 * TICK_SECS)

    # trigger: a new tick workflow, now
    for g in gs:
        made, r = answer(g, "triggerSchedule", "POST", f"/schedules/{g.schedule}/trigger", 201)
        wf = made["workflowId"]
        assert r.headers["location"] == f"/v2/orgs/local/apps/{g.app}/workflows/{quote(wf, safe='')}"
        row = g.db.workflow(wf)
        assert row is not None and row["name"] == "tick_workflow", (g.sdk, wf, row)
        [(req, done)] = audited(g, "triggerSchedule")
        assert done["outcome"] == "succeeded" and done["result"] == {"workflowId": wf}

    # backfill: the window's workflows (long before the ground), each in the system database
    for g in gs:
        filled, _ = answer(g, "backfillSchedule", "POST", f"/schedules/{g.schedule}/backfill", 200, json=BACKFILL)
        ids = filled["workflowIds"]
        assert 2 <= len(ids) <= 3, (g.sdk, ids)
        assert all(g.db.workflow(wf) is not None and g.db.workflow(wf)["name"] == "tick_workflow" for wf in ids), ids
        [(req, done)] = audited(g, "backfillSchedule")
        assert req["parameters"] == {"scheduleName": g.schedule, **BACKFILL}
        assert done["outcome"] == "succeeded" and done["result"] == {"count": len(ids)}
        again, _ = answer(g, "backfillSchedule", "POST", f"/schedules/{g.schedule}/backfill", 200, json=BACKFILL)
        assert set(again["workflowIds"]) <= set(ids), (g.sdk, again)  # the same times: nothing new

    # versions: as in application_versions; setting the latest retimes it
    for g in gs:
        rows = {r["version_name"]: r for r in g.db._rows("SELECT * FROM {s}.application_versions")}
        before = versions(g)
        assert set(before) == set(rows) and "v1" in before, (g.sdk, before, rows)
        assert all(v["versionId"] == rows[n]["version_id"] for n, v in before.items())
        time.sleep(0.01)
        answer(g, "setLatestAppVersion", "PATCH", "/versions/latest", 204, json={"versionName": "v1"})
        after = versions(g)
        assert after["v1"]["versionTimestamp"] > before["v1"]["versionTimestamp"], (before, after)
        assert g.db._rows("SELECT * FROM {s}.application_versions WHERE version_name = 'v1'")[0][
            "version_timestamp"] > rows["v1"]["version_timestamp"]
        answer(g, "setLatestAppVersion", "PATCH", "/versions/latest", 404, json={"versionName": "no-such-version"})

    # every action on record, requested and succeeded
    for g in gs:
        for op in ("pauseSchedule", "resumeSchedule", "setLatestAppVersion"):
            [(req, done)] = audited(g, op)
            assert req["actor"]["kind"] == "user" and done is not None and done["outcome"] == "succeeded", (op, done)
