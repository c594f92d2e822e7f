"""Schedules (``relay_es/adapters/rest/schedules.py``) on a real ``relay serve``, both stores, with
fake executors answering like each SDK over real WebSockets.

Reads send ``list_schedules`` / ``get_schedule`` (protocol section 5.19) with their filters and
answer Conductor's ``Schedule``; actions (pause, resume, trigger, backfill) send their message,
answer Conductor's status and body, and are in the audit log, requested and completed, failures
included. An unknown schedule is 404 (for pause and resume without anything sent or recorded), a
bad backfill body 422 with nothing sent or recorded, an SDK without the message 501. In auth mode
an application-limited token reads but may not act.
"""

from __future__ import annotations

from typing import Any

from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

S = L + "/apps/shop/schedules"
T = L + "/apps/tshop/schedules"

PY_TICK = {"schedule_id": "5b0c6d4e-1", "schedule_name": "tick", "workflow_name": "tick_workflow",
           "workflow_class_name": None, "schedule": "*/2 * * * * *", "status": "ACTIVE", "context": "null",
           "last_fired_at": "2026-12-01T10:00:02+00:00", "automatic_backfill": False, "cron_timezone": None,
           "queue_name": None, "application_name": "shop"}
TS_TICK = {"schedule_id": "9f1e", "schedule_name": "tick", "workflow_name": "tickWorkflow", "schedule": "0 * * * *",
           "status": "PAUSED", "last_fired_at": "2026-12-01T10:00:00.000Z", "automatic_backfill": True,
           "cron_timezone": "Europe/Paris"}  # TypeScript omits what is undefined


def scheduler(tick: dict[str, Any]) -> dict[str, Any]:
    """Handlers of a fake executor holding one schedule, ``tick``, that pause and resume change."""
    state = dict(tick)

    def get(req: dict[str, Any]) -> dict[str, Any]:
        return {"output": dict(state) if req["schedule_name"] == state["schedule_name"] else None}

    def set_status(status: str) -> Any:
        def handle(req: dict[str, Any]) -> dict[str, Any]:
            state["status"] = status
            return {"success": True}
        return handle

    def trigger(req: dict[str, Any]) -> dict[str, Any]:
        if req["schedule_name"] == "silent":  # no workflow, and no error said
            return {"workflow_id": None, "error_message": None}
        if req["schedule_name"] != state["schedule_name"]:
            return {"workflow_id": None, "error_message": f"Schedule '{req['schedule_name']}' does not exist"}
        return {"workflow_id": f"sched-{req['schedule_name']}-trigger-2026-12-01T10:00:05.123456+00:00"}

    return {"list_schedules": lambda req: {"output": [dict(state)]}, "get_schedule": get,
            "pause_schedule": set_status("PAUSED"), "resume_schedule": set_status("ACTIVE"),
            "trigger_schedule": trigger,
            "backfill_schedule": lambda req: {"workflow_ids": [f"sched-tick-{i}" for i in range(3)]}}


def test_schedules_round_trip_in_both_dialects(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)},
                   {"app": "tshop", "style": "typescript", "answers": scheduler(TS_TICK)}) as (py, ts):
        [one] = conforms("listSchedules", call(relay, "GET", S), 200)
        assert one == {"scheduleId": "5b0c6d4e-1", "scheduleName": "tick", "workflowName": "tick_workflow",
                       "workflowClass": None, "cronExpression": "*/2 * * * * *", "status": "ACTIVE",
                       "context": "null", "lastFiredAt": "2026-12-01T10:00:02.000Z", "automaticBackfill": False,
                       "cronTimezone": None, "applicationName": "shop"}
        assert sent(py, "list_schedules")[-1]["body"] == {
            "status": None, "workflow_name": None, "schedule_name_prefix": None, "application_name": None,
            "load_context": True}
        conforms("listSchedules", call(relay, "GET", S, params=[
            ("status", "ACTIVE"), ("workflowName", "a b"), ("scheduleNamePrefix", "ti"),
            ("loadContext", "false")]), 200)
        assert sent(py, "list_schedules")[-1]["body"] == {
            "status": "ACTIVE", "workflow_name": "a b", "schedule_name_prefix": "ti", "application_name": None,
            "load_context": False}
        assert call(relay, "GET", S, params={"loadContext": "maybe"}).status_code in (400, 422)

        got = conforms("getSchedule", call(relay, "GET", T + "/tick"), 200)
        assert got == {"scheduleId": "9f1e", "scheduleName": "tick", "workflowName": "tickWorkflow",
                       "workflowClass": None, "cronExpression": "0 * * * *", "status": "PAUSED", "context": None,
                       "lastFiredAt": "2026-12-01T10:00:00.000Z", "automaticBackfill": True,
                       "cronTimezone": "Europe/Paris", "applicationName": None}
        assert sent(ts, "get_schedule")[-1] == {"type": "get_schedule", "request_id": sent(ts, "get_schedule")[-1][
            "request_id"], "schedule_name": "tick", "load_context": True}
        assert "nope" in conforms("getSchedule", call(relay, "GET", T + "/nope"), 404)["detail"]


def test_schedule_actions_are_sent_answered_and_recorded(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)}) as (py,):
        conforms("pauseSchedule", call(relay, "POST", S + "/tick/pause"), 204)
        assert [r["schedule_name"] for r in sent(py, "pause_schedule")] == ["tick"]
        assert conforms("getSchedule", call(relay, "GET", S + "/tick"), 200)["status"] == "PAUSED"
        conforms("resumeSchedule", call(relay, "POST", S + "/tick/resume"), 204)
        assert [r["schedule_name"] for r in sent(py, "resume_schedule")] == ["tick"]

        r = call(relay, "POST", S + "/tick/trigger")
        made = conforms("triggerSchedule", r, 201)
        assert made == {"workflowId": "sched-tick-trigger-2026-12-01T10:00:05.123456+00:00"}
        assert r.headers["location"] == \
            L + "/apps/shop/workflows/sched-tick-trigger-2026-12-01T10%3A00%3A05.123456%2B00%3A00"

        window = {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T11:00:06.5+01:00"}
        filled = conforms("backfillSchedule", call(relay, "POST", S + "/tick/backfill", json=window), 200)
        assert filled == {"workflowIds": ["sched-tick-0", "sched-tick-1", "sched-tick-2"]}
        [b] = sent(py, "backfill_schedule")
        assert (b["schedule_name"], b["start"], b["end"]) == \
            ("tick", "2026-12-01T10:00:00+00:00", "2026-12-01T10:00:06.500000+00:00")

        # unknown: pause and resume look first (the SDKs would update nothing and say success)
        conforms("pauseSchedule", call(relay, "POST", S + "/nope/pause"), 404)
        conforms("resumeSchedule", call(relay, "POST", S + "/nope/resume"), 404)
        assert len(sent(py, "pause_schedule")) == 1 and len(sent(py, "resume_schedule")) == 1
        conforms("triggerSchedule", call(relay, "POST", S + "/nope/trigger"), 404)  # the executor says so
        conforms("triggerSchedule", call(relay, "POST", S + "/silent/trigger"), 500)  # no workflow: not triggered

        # bad backfill bodies: 422 (400 for what is not JSON), nothing sent, nothing recorded
        for body, status in (({"startTime": "2026-12-01T10:00:00Z"}, 422),
                             ({**window, "extra": 1}, 422),
                             ({**window, "startTime": "yesterday"}, 422),
                             ({**window, "startTime": 5}, 422),
                             ({"startTime": window["endTime"], "endTime": window["startTime"]}, 422),
                             (None, 422)):
            r = call(relay, "POST", S + "/tick/backfill", json=body) if body is not None else \
                call(relay, "POST", S + "/tick/backfill")
            conforms("backfillSchedule", r, status)
        conforms("backfillSchedule", call(relay, "POST", S + "/tick/backfill", content=b"{nope",
                                          headers={"content-type": "application/json"}), 400)
        assert len(sent(py, "backfill_schedule")) == 1

        recorded = {op: actions(relay, "shop", op) for op in
                    ("pauseSchedule", "resumeSchedule", "triggerSchedule", "backfillSchedule")}
        [(req, done)] = recorded["pauseSchedule"]
        assert req["target"] == {"type": "schedule", "ids": ["tick"], "count": 1}
        assert req["parameters"] == {"scheduleName": "tick"} and req["actor"]["kind"] == "user"
        assert done["outcome"] == "succeeded"
        assert [d["outcome"] for _, d in recorded["resumeSchedule"]] == ["succeeded"]
        (_, ok_done), (bad, bad_done), (_, silent_done) = recorded["triggerSchedule"]
        assert ok_done["result"] == {"workflowId": made["workflowId"]}
        assert bad["target"]["ids"] == ["nope"] and bad_done["outcome"] == "failed"
        assert "does not exist" in bad_done["message"]
        assert silent_done["outcome"] == "failed"  # it was audited as succeeded, and answered 502
        [(req, done)] = recorded["backfillSchedule"]
        assert req["parameters"] == {"scheduleName": "tick", **window} and done["result"] == {"count": 3}


def test_failed_schedule_actions_are_their_problems_and_recorded(relay: RelayServer) -> None:
    assert call(relay, "PUT", L + "/apps/idle").status_code == 204
    r = call(relay, "POST", L + "/apps/idle/schedules/tick/trigger")
    conforms("triggerSchedule", r, 503)
    assert r.headers["retry-after"] == "5"
    [(_, done)] = actions(relay, "idle", "triggerSchedule")
    assert done["outcome"] == "no_healthy_executor"
    conforms("pauseSchedule", call(relay, "POST", L + "/apps/idle/schedules/tick/pause"), 503)

    handlers = scheduler(PY_TICK)
    with executors(relay, {"app": "mute", "answers": {**handlers, "trigger_schedule": lambda req: None}},
                   {"app": "old"}):
        conforms("triggerSchedule", call(relay, "POST", L + "/apps/mute/schedules/tick/trigger"), 504)
        [(_, done)] = actions(relay, "mute", "triggerSchedule")
        assert done["outcome"] == "timed_out"

        for op, method, path, kw in (
                ("listSchedules", "GET", "", {}), ("getSchedule", "GET", "/tick", {}),
                ("pauseSchedule", "POST", "/tick/pause", {}), ("triggerSchedule", "POST", "/tick/trigger", {}),
                ("backfillSchedule", "POST", "/tick/backfill",
                 {"json": {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T11:00:00Z"}})):
            body = conforms(op, call(relay, method, L + "/apps/old/schedules" + path, **kw), 501)
            assert "Unknown message type" in body["detail"] and "Python dbos 2.13" in body["detail"], body
        for op in ("triggerSchedule", "backfillSchedule"):
            [(_, done)] = actions(relay, "old", op)
            assert done["outcome"] == "failed" and done["message"].endswith("it answered: Unknown message type")


def test_the_executor_s_database_failing_is_a_500_and_only_the_sdk_s_own_words_a_404(relay: RelayServer) -> None:
    """A relation or database that "does not exist" is the executor's failure, on the list and on one
    schedule alike; "no such schedule" is a 404 in each SDK's words, naming the schedule asked for."""
    down = 'connection to server at "db", port 5432 failed: FATAL:  database "shop_dbos_sys" does not exist'
    no_table = 'psycopg.errors.UndefinedTable: relation "dbos.workflow_schedules" does not exist'

    def failing(text: str, **empty: Any) -> Any:
        return lambda req: {**empty, "error_message": text}

    ts_handlers = {**scheduler(TS_TICK), "trigger_schedule": lambda req: {
        "error_message": f'Error: Schedule "{req["schedule_name"]}" not found'}}
    with executors(relay, {"app": "shop", "answers": {
            "list_schedules": failing(down, output=[]), "get_schedule": failing(no_table),
            "trigger_schedule": failing(f"Exception encountered when triggering schedule tick: {no_table}"),
            "backfill_schedule": failing("Exception: Schedule 'other' does not exist", workflow_ids=[])}},
                   {"app": "tshop", "style": "typescript", "answers": ts_handlers}):
        for op, method, path, kw in (
                ("listSchedules", "GET", "", {}), ("getSchedule", "GET", "/tick", {}),
                ("pauseSchedule", "POST", "/tick/pause", {}), ("triggerSchedule", "POST", "/tick/trigger", {}),
                ("backfillSchedule", "POST", "/tick/backfill",  # another schedule's absence: not this one's
                 {"json": {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T11:00:00Z"}})):
            body = conforms(op, call(relay, method, S + path, **kw), 500)
            assert body["title"] == "executor reported an error", (op, body)
        [(_, done)] = actions(relay, "shop", "triggerSchedule")
        assert done["outcome"] == "failed" and "workflow_schedules" in done["message"]
        conforms("triggerSchedule", call(relay, "POST", T + "/nope/trigger"), 404)  # TypeScript's words
        conforms("triggerSchedule", call(relay, "POST", T + "/tick/trigger"), 404)


def test_a_refused_load_context_is_named_as_sent(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)}) as (py,):
        for value in ("maybe", "", "yes"):
            body = conforms("listSchedules", call(relay, "GET", S, params={"loadContext": value}), 422)
            assert [e["location"] for e in body["errors"]] == ["loadContext"], body
        assert sent(py, "list_schedules") == []
        for value, sent_as in (("F", False), ("1", True), (None, True)):
            conforms("listSchedules", call(relay, "GET", S, params={} if value is None else {"loadContext": value}),
                     200)
            assert sent(py, "list_schedules")[-1]["body"]["load_context"] is sent_as


def test_an_application_limited_token_reads_schedules_but_does_not_act(
        auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, tokens = auth_server
    admin, scoped = tokens["acme"], tokens["scoped"]
    B = "/v2/orgs/acme/apps/billing/schedules"
    with executors(s, {"app": "billing", "key": scoped, "answers": scheduler(PY_TICK)},
                   org="acme", token=admin) as (ex,):
        conforms("listSchedules", call(s, "GET", B, scoped), 200)
        conforms("getSchedule", call(s, "GET", B + "/tick", scoped), 200)
        for op, path, kw in (("pauseSchedule", "/tick/pause", {}), ("resumeSchedule", "/tick/resume", {}),
                             ("triggerSchedule", "/tick/trigger", {}),
                             ("backfillSchedule", "/tick/backfill",
                              {"json": {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T11:00:00Z"}})):
            conforms(op, call(s, "POST", B + path, scoped, **kw), 403)
        assert not any(sent(ex, t) for t in ("pause_schedule", "resume_schedule", "trigger_schedule",
                                               "backfill_schedule"))
        [(req, done)] = actions(s, "billing", "pauseSchedule", org="acme", token=admin, refused=True)
        assert req["actor"] == {"kind": "token", "id": "billing-only"} and done["result"]["status"] == 403
        conforms("pauseSchedule", call(s, "POST", B + "/tick/pause", admin), 204)
        [(req, done)] = actions(s, "billing", "pauseSchedule", org="acme", token=admin)
        assert req["actor"] == {"kind": "token", "id": "admin"} and done["outcome"] == "succeeded"
        assert actions(s, "billing", "triggerSchedule", org="acme", token=admin, wait=False) == []
