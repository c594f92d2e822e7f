"""A schedule action that Relay checks by reading the schedule first goes to the executor that
read it (``relay_es/adapters/rest/schedules.py``): pause and resume, where it was found; a
backfill, to the executor whose cron was counted. On a real ``relay serve`` with fake executors
over real WebSockets (wire only: the store has no part in it).

Two executors of one application on two system databases (misconfigured, as a hunter's were): the
check read the schedule on one and the action went to the next in turn, whose SDK updated no row
and said success: a 204 and an audit "succeeded" while nothing changed.
"""

from __future__ import annotations

from typing import Any

from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent
from tests.adapters.rest.test_schedules import PY_TICK, scheduler
from tests.conftest import WIRE_ONLY
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

S = L + "/apps/shop/schedules"
ROUNDS = 6  # each action: round-robin alone sends every other one to the executor that did not read


def holding_nothing() -> dict[str, Any]:
    """An executor of the application whose system database has no schedule: reads find none,
    pause and resume update no row and answer success (as the SDKs do)."""
    return {"get_schedule": lambda req: {"output": None},
            "pause_schedule": lambda req: {"success": True}, "resume_schedule": lambda req: {"success": True},
            "backfill_schedule": lambda req: {"workflow_ids": ["sched-tick-elsewhere"]}}


@WIRE_ONLY
def test_pause_and_resume_go_to_the_executor_that_found_the_schedule(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)},
                   {"app": "shop", "answers": holding_nothing()}) as (holder, other):
        statuses: dict[str, list[int]] = {"pauseSchedule": [], "resumeSchedule": []}
        for op, path in (("pauseSchedule", "/tick/pause"), ("resumeSchedule", "/tick/resume")):
            for _ in range(ROUNDS):
                r = call(relay, "POST", S + path)
                assert r.status_code in (204, 404), r.text
                statuses[op].append(r.status_code)
        assert sent(other, "pause_schedule") == [] and sent(other, "resume_schedule") == []
        assert statuses["pauseSchedule"].count(204) == len(sent(holder, "pause_schedule")) > 0
        assert statuses["resumeSchedule"].count(204) == len(sent(holder, "resume_schedule")) > 0
        done = [d for _, d in actions(relay, "shop", "pauseSchedule")]
        assert {d["executorId"] for d in done} == {holder.executor_id}, done


@WIRE_ONLY
def test_a_backfill_goes_to_the_executor_whose_cron_was_counted(relay: RelayServer) -> None:
    """One executor holds ``tick`` firing every 2 s, the other once a year: six hours are too many
    firings of the first (a 422) and one of the second (sent), never to the first."""
    yearly = {**PY_TICK, "schedule": "0 0 1 1 *"}
    window = {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T16:00:00Z"}
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)},
                   {"app": "shop", "answers": scheduler(yearly)}) as (often, rarely):
        statuses = [call(relay, "POST", S + "/tick/backfill", json=window).status_code for _ in range(ROUNDS)]
        assert set(statuses) <= {200, 422}, statuses
        assert sent(often, "backfill_schedule") == []
        assert statuses.count(200) == len(sent(rarely, "backfill_schedule")) > 0
        assert statuses.count(422) == len(sent(often, "get_schedule")) > 0
        conforms("backfillSchedule", call(relay, "POST", S + "/nope/backfill", json=window), 404)
