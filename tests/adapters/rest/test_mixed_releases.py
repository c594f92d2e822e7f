"""An application whose executors run mixed SDK releases (``relay_es/adapters/rest/releases.py``,
which ``calling.ask`` applies to every request): a queue or schedule request goes to an executor whose
``executor_info`` names a release that has it, on a real ``relay serve`` with fake executors over
real WebSockets.

Round-robin alone sent every other ``list_queues`` to a dbos 2.19 executor, which answered
"Unknown message type": the route alternated 200 and 501. An executor Relay cannot read (no
language or version, or an SDK whose first release of the message is not known here) still
answers for itself; only an application whose every executor is known too old is a 501 without
anything sent, naming the release needed. Wire only: the store has no part in it.
"""

from __future__ import annotations

import pytest

from relay_es.adapters.rest import releases
from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, PY_QUEUE, actions, conforms, executors, sent
from tests.adapters.rest.test_schedules import PY_TICK, scheduler
from tests.conftest import WIRE_ONLY
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

NEW = ("python", "3.2.0")
BEFORE_QUEUES = ("python", "2.19.0")  # list_queues and get_queue came with 2.20
BEFORE_SCHEDULES = ("python", "2.12.1")  # the schedules' messages came with 2.13 (its wheel)
ROUNDS = 6  # requests of each kind: round-robin alone would send half of them to the old executor

QUEUE_ANSWERS = {"list_queues": lambda req: {"output": [PY_QUEUE]},
                 "get_queue": lambda req: {"output": PY_QUEUE if req["name"] == PY_QUEUE["name"] else None}}
SCHEDULE_TYPES = ("list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "trigger_schedule",
                  "backfill_schedule")
WINDOW = {"startTime": "2026-12-01T10:00:00Z", "endTime": "2026-12-01T10:00:06Z"}


@WIRE_ONLY
def test_queue_reads_pass_over_an_executor_whose_release_predates_them(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "sdk": NEW, "answers": QUEUE_ANSWERS},
                   {"app": "shop", "sdk": BEFORE_QUEUES}) as (new, old):
        for _ in range(ROUNDS):
            conforms("listQueues", call(relay, "GET", L + "/apps/shop/queues"), 200)
            conforms("getQueue", call(relay, "GET", L + "/apps/shop/queues/orders_queue"), 200)
        assert sent(old, "list_queues") == [] and sent(old, "get_queue") == []
        assert len(sent(new, "list_queues")) == ROUNDS and len(sent(new, "get_queue")) == ROUNDS


@WIRE_ONLY
def test_schedule_routes_pass_over_an_executor_whose_release_predates_them(relay: RelayServer) -> None:
    S = L + "/apps/shop/schedules"
    with executors(relay, {"app": "shop", "sdk": NEW, "answers": scheduler(PY_TICK)},
                   {"app": "shop", "sdk": BEFORE_SCHEDULES}) as (new, old):
        for _ in range(ROUNDS):
            conforms("listSchedules", call(relay, "GET", S), 200)
            conforms("getSchedule", call(relay, "GET", S + "/tick"), 200)
            conforms("pauseSchedule", call(relay, "POST", S + "/tick/pause"), 204)
            conforms("resumeSchedule", call(relay, "POST", S + "/tick/resume"), 204)
            conforms("triggerSchedule", call(relay, "POST", S + "/tick/trigger"), 201)
            conforms("backfillSchedule", call(relay, "POST", S + "/tick/backfill", json=WINDOW), 200)
        assert [t for t in SCHEDULE_TYPES if sent(old, t)] == []
        assert all(len(sent(new, t)) >= ROUNDS for t in SCHEDULE_TYPES)


@WIRE_ONLY
def test_an_executor_relay_cannot_read_answers_for_itself(relay: RelayServer) -> None:
    """No language or version (an old Python SDK sends neither), an SDK whose first release of the
    message Relay does not know, or a version it cannot read: asked, and its own "unknown message
    type" is the 501 as before."""
    for app, sdk, style in (("vague", None, "python"), ("go", ("go", "v0.9.0"), "python"),
                            ("ts", ("typescript", "(devel)"), "typescript")):
        with executors(relay, {"app": app, "sdk": sdk, "style": style}) as (ex,):
            body = conforms("listQueues", call(relay, "GET", L + f"/apps/{app}/queues"), 501)
            assert "Unknown message type" in body["detail"], body
            body = conforms("getSchedule", call(relay, "GET", L + f"/apps/{app}/schedules/tick"), 501)
            assert "Unknown message type" in body["detail"], body
            assert len(sent(ex, "list_queues")) == 1 and len(sent(ex, "get_schedule")) == 1


@WIRE_ONLY
def test_executors_all_known_too_old_are_a_501_naming_the_release_and_nothing_is_sent(relay: RelayServer) -> None:
    with executors(relay, {"app": "old", "sdk": BEFORE_QUEUES}, {"app": "old", "sdk": ("Python", "2.10.0")},
                   {"app": "older", "sdk": BEFORE_SCHEDULES}) as (a, b, c):
        for path in ("/queues", "/queues/orders_queue"):
            body = conforms("listQueues" if path == "/queues" else "getQueue",
                            call(relay, "GET", L + "/apps/old" + path), 501)
            assert body["title"] == "not supported by the executor"
            assert "Python dbos 2.20" in body["detail"] and "2.19.0" in body["detail"], body
        S = L + "/apps/older/schedules"
        for op, method, path, kw in (
                ("listSchedules", "GET", "", {}), ("getSchedule", "GET", "/tick", {}),
                ("pauseSchedule", "POST", "/tick/pause", {}), ("resumeSchedule", "POST", "/tick/resume", {}),
                ("triggerSchedule", "POST", "/tick/trigger", {}),
                ("backfillSchedule", "POST", "/tick/backfill", {"json": WINDOW})):
            body = conforms(op, call(relay, method, S + path, **kw), 501)
            assert "Python dbos 2.13" in body["detail"] and "2.12.1" in body["detail"], (op, body)
        assert [r for ex in (a, b, c) for r in ex.requests if r["type"] != "executor_info"] == []
        # an action no executor can take is on record as failed, as a bulk one is
        for op in ("triggerSchedule", "backfillSchedule"):
            [(_, done)] = actions(relay, "older", op)
            assert done["outcome"] == "failed" and "Python dbos 2.13" in done["message"], done


@pytest.mark.parametrize("kind", sorted(releases.MESSAGES))
def test_what_each_newer_request_needs(kind: str) -> None:
    """Only an executor naming a release before the message's is passed over."""
    for lang, (major, minor) in releases.MESSAGES[kind].items():
        assert releases.answers(kind, lang, f"{major}.{minor}.0") and releases.answers(kind, lang.upper(),
                                                                                       f"{major}.{minor + 1}")
        assert not releases.answers(kind, lang, f"{major}.{minor - 1}.9") if minor else True
        assert not releases.answers(kind, lang, f"{major - 1}.99.0")
    for lang, version in ((None, None), ("python", None), ("python", "unknown"), ("go", "v0.1.0"),
                          ("java", "0.5.0"), (None, "1.0.0")):
        assert releases.answers(kind, lang, version), (lang, version)
