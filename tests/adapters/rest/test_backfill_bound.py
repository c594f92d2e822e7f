"""A backfill's window is bounded (``relay_es/adapters/rest/schedules.py``, ADR 29): Relay reads the
schedule, counts its cron's firings in (startTime, endTime) with croniter as the SDKs walk it, and
refuses more than ``BACKFILL_MAX_FIRINGS`` with a 422 before anything is sent or recorded.

An SDK enqueues a backfill's workflows one by one while its control channel waits: an hour of a
2-second schedule (1,800) held a Python executor's for a minute, and a year's window would have
been millions. The counting itself (``firings``) is checked in process; the route on a real
``relay serve`` with fake executors over real WebSockets (wire only: the store has no part in it).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from relay_es.adapters.rest.schedules import BACKFILL_MAX_FIRINGS, CRON_MAX_CHARS, firings
from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent
from tests.adapters.rest.test_schedules import PY_TICK, TS_TICK, scheduler
from tests.conftest import WIRE_ONLY
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

S = L + "/apps/shop/schedules"
T = L + "/apps/tshop/schedules"
START = datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
EVERY_2S = PY_TICK["schedule"]  # "*/2 * * * * *": seconds first, as both SDKs read six fields


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def window(seconds: float, start: datetime = START) -> dict[str, str]:
    end = start + timedelta(seconds=seconds)
    return {"startTime": start.isoformat().replace("+00:00", "Z"), "endTime": end.isoformat().replace("+00:00", "Z")}


# --- counting ------------------------------------------------------------------------------


def test_a_window_excludes_its_start_and_its_end() -> None:
    """Both SDKs take the next firing after startTime, up to before endTime: (startTime, endTime)."""
    assert firings(EVERY_2S, None, START, at(6), 100) == 2  # 10:00:02 and 10:00:04
    assert firings(EVERY_2S, None, START, at(6.001), 100) == 3
    assert firings(EVERY_2S, None, at(-0.001), at(6), 100) == 3  # 10:00:00 itself
    assert firings(EVERY_2S, None, START, START, 100) == 0
    assert firings("0 * * * *", None, START, at(3 * 3600), 100) == 2  # five fields: minutes first


def test_the_cron_is_read_in_its_time_zone() -> None:
    """Midnight in Paris is 23:00 UTC in December: a window around 00:00 UTC holds it in UTC only."""
    around_midnight = datetime(2026, 12, 1, 23, 30, tzinfo=timezone.utc), datetime(2026, 12, 2, 0, 30, tzinfo=timezone.utc)
    assert firings("0 0 * * *", None, *around_midnight, 10) == 1
    assert firings("0 0 * * *", "UTC", *around_midnight, 10) == 1
    assert firings("0 0 * * *", "Europe/Paris", *around_midnight, 10) == 0
    # a day across the change to summer time in Paris (29 March 2026) has 23 of its hours
    day = datetime(2026, 3, 28, 23, tzinfo=timezone.utc), datetime(2026, 3, 29, 22, tzinfo=timezone.utc)
    assert firings("0 * * * *", "Europe/Paris", *day, 100) == 23 - 1  # the hour at the start is not counted


def test_counting_stops_at_its_bound_however_long_the_window() -> None:
    began = time.process_time()
    assert firings("* * * * * *", None, START, at(86_400 * 365 * 100), 11) == 11  # a century of seconds
    assert firings("* * * * * *", "Europe/Paris", START, at(86_400 * 365 * 100), 11) == 11
    assert time.process_time() - began < 5  # steps, not the window, make its cost (a generous bound)


def test_what_relay_cannot_count_is_none() -> None:
    """The executor's text is hostile like any: Relay does not count it and the executor decides."""
    for cron, zone in ((None, None), ("", None), ("nope", None), ("* * *", None), ("61 * * * *", None),
                       ("* * * * *", "Mars/Olympus_Mons"), ("* * * * *", "../../etc/passwd"),
                       ("* " * (CRON_MAX_CHARS // 2 + 1), None), ("* * * * *", "x" * (CRON_MAX_CHARS + 1))):
        assert firings(cron, zone, START, at(3600), 10) is None, (cron, zone)
    last = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)  # past it croniter cannot walk
    assert firings("0 0 1 1 *", None, datetime(9999, 6, 1, tzinfo=timezone.utc), last, 10) is None


# --- the route -----------------------------------------------------------------------------


@WIRE_ONLY
def test_a_window_of_more_firings_than_the_bound_is_a_422_nothing_sent_or_recorded(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)},
                   {"app": "tshop", "style": "typescript", "answers": scheduler(TS_TICK)}) as (py, ts):
        seconds_at_bound = 2 * BACKFILL_MAX_FIRINGS + 2  # ends at the firing after the last one counted
        conforms("backfillSchedule", call(relay, "POST", S + "/tick/backfill", json=window(seconds_at_bound)), 200)
        body = conforms("backfillSchedule",
                        call(relay, "POST", S + "/tick/backfill", json=window(seconds_at_bound + 2)), 422)
        assert f"at least {BACKFILL_MAX_FIRINGS + 1:,} firings" in body["detail"], body
        assert "split the window" in body["detail"] and EVERY_2S in body["detail"], body
        assert [e["location"] for e in body["errors"]] == ["endTime"], body
        year = conforms("backfillSchedule",
                        call(relay, "POST", S + "/tick/backfill", json=window(86_400 * 366)), 422)
        assert f"at least {BACKFILL_MAX_FIRINGS + 1:,}" in year["detail"], year  # counting stopped there
        assert len(sent(py, "backfill_schedule")) == 1 and len(sent(py, "get_schedule")) == 3

        # TypeScript's hourly schedule in Paris: a year is 8,760 firings, two are 17,520
        conforms("backfillSchedule", call(relay, "POST", T + "/tick/backfill", json=window(86_400 * 365)), 200)
        conforms("backfillSchedule", call(relay, "POST", T + "/tick/backfill", json=window(86_400 * 730)), 422)
        assert len(sent(ts, "backfill_schedule")) == 1

        for app in ("shop", "tshop"):
            [(_, done)] = actions(relay, app, "backfillSchedule")  # the refused ones: not on record
            assert done["outcome"] == "succeeded"


@WIRE_ONLY
def test_an_unknown_schedule_is_a_404_nothing_sent_or_recorded(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": scheduler(PY_TICK)}) as (py,):
        body = conforms("backfillSchedule", call(relay, "POST", S + "/nope/backfill", json=window(60)), 404)
        assert "nope" in body["detail"]
        assert sent(py, "backfill_schedule") == []
        assert actions(relay, "shop", "backfillSchedule", wait=False) == []


@WIRE_ONLY
def test_what_relay_cannot_count_is_sent_as_before_and_the_executor_decides(relay: RelayServer) -> None:
    """A cron Relay cannot read, or a read of the schedule that the executor fails: the backfill is
    sent, and what the executor answered is on record."""
    odd = scheduler({**PY_TICK, "schedule": "every 2 seconds"})
    failing = {**scheduler(PY_TICK), "get_schedule": lambda req: {"output": None, "error_message": "Traceback: db down"}}
    with executors(relay, {"app": "odd", "answers": odd}, {"app": "failing", "answers": failing}) as (o, f):
        for app, ex in (("odd", o), ("failing", f)):
            conforms("backfillSchedule",
                     call(relay, "POST", L + f"/apps/{app}/schedules/tick/backfill", json=window(86_400 * 366)), 200)
            assert len(sent(ex, "backfill_schedule")) == 1, app
            [(_, done)] = actions(relay, app, "backfillSchedule")
            assert done["outcome"] == "succeeded" and done["result"] == {"count": 3}
