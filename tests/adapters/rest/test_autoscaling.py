"""Autoscaling (``relay_es/adapters/rest/autoscaling.py``) on a real ``relay serve``, both stores,
with fake executors answering like each SDK over real WebSockets.

``setAutoscalingPolicy`` checks the queue with a healthy executor (``list_queues``: it must exist,
not be partitioned, have a worker concurrency) and stores the policy as an event of the
application (it survives a restart, goes with a deletion); ``getAutoscalingPolicy`` echoes it,
404 without one; ``deleteAutoscalingPolicy`` is 204 either way; both changes are in the audit log.
``getAutoscale`` asks an executor for the queues, the versions and the backlog per version and
answers Conductor's ``QueueAutoscale`` per version (validated against the reference).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, actions, conforms, executors, sent
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

A = L + "/apps/shop"
SCALED = {"name": "orders_queue", "concurrency": None, "worker_concurrency": 4, "partition_queue": False}
UNSCALED = {"name": "plain_queue", "concurrency": 1, "worker_concurrency": None, "partition_queue": False}
PARTITIONED = {"name": "split_queue", "concurrency": None, "worker_concurrency": 2, "partition_queue": True}


class System:
    """What the application's system database answers: queues, versions, the backlog by version."""

    def __init__(self) -> None:
        self.queues = [SCALED, UNSCALED, PARTITIONED]
        self.versions = {"v1": (1796040000000, 1796040000000), "v2": (1796040100000, 1796040100000),
                         "v3": (1796040200000, 1796040200000)}  # name -> (created_at, timestamp)
        self.backlog: dict[str | None, int] = {"v3": 9, "v2": 12, None: 4}  # None: enqueued without a version

    def answers(self) -> dict[str, Any]:
        def aggregates(req: dict[str, Any]) -> dict[str, Any]:
            b = req["body"]
            assert b["group_by_application_version"] and sorted(b["status"]) == ["ENQUEUED", "PENDING"], b
            assert b["queue_name"] == ["orders_queue"], b
            return {"output": [{"group": {"application_version": v}, "count": n} for v, n in self.backlog.items()]}

        return {
            "list_queues": lambda req: {"output": self.queues},
            "list_application_versions": lambda req: {"output": [
                {"version_id": f"id-{n}", "version_name": n, "version_timestamp": t, "created_at": c}
                for n, (c, t) in sorted(self.versions.items(), key=lambda kv: -kv[1][1])]},
            "get_workflow_aggregates": aggregates,
        }


def test_a_policy_is_checked_stored_echoed_and_drives_the_recommendation(relay: RelayServer) -> None:
    system = System()
    with executors(relay, {"app": "shop", "answers": system.answers()}) as (ex,):
        conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)
        conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 404)

        policy = {"queue": "orders_queue", "rollout": {"maxOldApplicationVersions": 1,
                                                       "maxExecutorsForOldApplicationVersions": 2}}
        stored = conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy", json=policy), 200)
        assert stored == {"policy": policy}
        assert sent(ex, "list_queues")
        assert conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 200) == stored

        before = int(time.time() * 1000)
        recs = conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 200)
        assert [(r["applicationVersion"], r["isLatest"], r["desiredExecutors"], r["queueDepth"], r["queueName"])
                for r in recs] == [("v3", True, 4, 13, "orders_queue"), ("v2", False, 2, 12, "orders_queue")]
        assert all(before <= r["observedAt"] <= int(time.time() * 1000) for r in recs)

        # without a rollout every version is sized to its own backlog
        conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                              json={"queue": "orders_queue"}), 200)
        assert conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"),
                        200) == {"policy": {"queue": "orders_queue"}}
        recs = conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 200)
        assert [(r["applicationVersion"], r["desiredExecutors"]) for r in recs] == [("v3", 4), ("v2", 3), ("v1", 1)]

        # the queue stopped being usable: versions still reported, 1 each, without the queue's name
        system.queues = [UNSCALED]
        recs = conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 200)
        assert [(r["applicationVersion"], r["desiredExecutors"], "queueName" in r) for r in recs] == [
            ("v3", 1, False), ("v2", 1, False), ("v1", 1, False)]

        conforms("deleteAutoscalingPolicy", call(relay, "DELETE", A + "/autoscaling-policy"), 204)
        conforms("deleteAutoscalingPolicy", call(relay, "DELETE", A + "/autoscaling-policy"), 204)  # absent: fine
        conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)

    [(req, done)] = actions(relay, "shop", "deleteAutoscalingPolicy")[:1]
    assert req["target"]["ids"] == ["shop"] and done is not None and done["outcome"] == "succeeded"
    # what each found, as the command noted it: written with the change, or after a change with nothing to do
    assert [d and d["result"] for _, d in actions(relay, "shop", "deleteAutoscalingPolicy")] == [
        {"cleared": True}, {"cleared": False}]
    sets = [req["parameters"] for req, _ in actions(relay, "shop", "setAutoscalingPolicy")]
    assert sorted(sets, key=len) == [{"queue": "orders_queue", "rollout": False}, {
        "queue": "orders_queue", "rollout": True, "maxOldApplicationVersions": 1,
        "maxExecutorsForOldApplicationVersions": 2}]


def test_each_poll_reads_from_one_executor_and_a_silent_one_fails_only_its_own_polls(relay: RelayServer) -> None:
    reads = ("list_queues", "list_application_versions", "get_workflow_aggregates")
    system = System()
    with executors(relay, *({"app": "shop", "answers": system.answers()} for _ in range(3))) as exs:
        conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                              json={"queue": "orders_queue"}), 200)
        silent = exs[2]
        silent.answer = False  # connected and HEALTHY, answers nothing

        def asked() -> list[list[str]]:
            return [[r["type"] for r in ex.requests if r["type"] in reads] for ex in exs]

        polls: list[tuple[int, int]] = []  # (the executor asked, the status)
        for _ in range(6):
            before = asked()
            r = call(relay, "GET", A + "/autoscale")
            new = [now[len(was):] for was, now in zip(before, asked())]
            had = [i for i, got in enumerate(new) if got]
            assert len(had) == 1 and sorted(new[had[0]]) == sorted(reads), new  # one executor had all three
            chosen = had[0]
            conforms("getAutoscale", r, 504 if exs[chosen] is silent else 200)
            polls.append((chosen, r.status_code))
        assert any(status == 200 for _, status in polls), polls


@pytest.mark.parametrize("queue, why", [("no_such_queue", "is not registered"), ("plain_queue", "worker concurrency"),
                                        ("split_queue", "is partitioned")])
def test_a_queue_that_cannot_drive_a_policy_is_refused_and_nothing_is_stored(relay: RelayServer, queue: str,
                                                                            why: str) -> None:
    with executors(relay, {"app": "shop", "answers": System().answers()}):
        body = conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy", json={"queue": queue}),
                        422)
        assert why in body["detail"] and queue in body["detail"], body
        conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)


def test_bad_bodies_no_executor_and_unknown_applications(relay: RelayServer) -> None:
    assert call(relay, "PUT", A).status_code == 204
    for body in ({}, {"queue": ""}, {"queue": 3}, {"queue": "q", "x": 1}, {"queue": "q\nq"}, {"queue": "q" * 300},
                 {"queue": "q", "rollout": {"maxOldApplicationVersions": -1}},
                 {"queue": "q", "rollout": {"maxExecutorsForOldApplicationVersions": 1.5}},
                 {"queue": "q", "rollout": {"other": 1}}, []):
        conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy", json=body), 422)
    conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy", json={"queue": "q"}), 503)
    conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)
    for method, path, op in (("GET", "/autoscaling-policy", "getAutoscalingPolicy"),
                             ("PUT", "/autoscaling-policy", "setAutoscalingPolicy"),
                             ("DELETE", "/autoscaling-policy", "deleteAutoscalingPolicy"),
                             ("GET", "/autoscale", "getAutoscale")):
        conforms(op, call(relay, method, L + "/apps/nope" + path, json={"queue": "q"} if method == "PUT" else None),
                 404)


def test_a_policy_survives_a_restart_and_goes_with_the_application(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop", "answers": System().answers()}):
        conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                              json={"queue": "orders_queue"}), 200)
    relay.stop()
    relay.start()
    assert call(relay, "GET", A + "/autoscaling-policy").json() == {"policy": {"queue": "orders_queue"}}
    assert call(relay, "DELETE", A).status_code == 204
    conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)
    assert call(relay, "PUT", A).status_code == 204  # registered again: no policy of the old one
    conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)


def test_a_backlog_out_of_int64_is_a_502_and_sums_stop_at_int64_max(relay: RelayServer) -> None:
    system = System()
    system.queues = [SCALED | {"worker_concurrency": 1}]
    rows: list[dict[str, Any]] = []
    with executors(relay, {"app": "shop", "answers": system.answers()}) as (ex,):
        conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                              json={"queue": "orders_queue"}), 200)
        ex.answers["get_workflow_aggregates"] = lambda req: {"output": rows}
        for bad in (10**25, 2**63, -1):
            rows[:] = [{"group": {"application_version": "v3"}, "count": bad}] * 2
            body = conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 502)
            assert "count" in body["detail"] and body["title"] == "executor reply refused", body

        top = 2**63 - 1  # valid counts whose sums pass it
        rows[:] = [{"group": {"application_version": "v3"}, "count": top}] * 2 + [
            {"group": {"application_version": None}, "count": top}, {"group": {"application_version": "v2"}, "count": 5}]
        recs = conforms("getAutoscale", call(relay, "GET", A + "/autoscale"), 200)
        assert [(r["applicationVersion"], r["queueDepth"], r["desiredExecutors"]) for r in recs] == [
            ("v3", top, top), ("v2", 5, 5), ("v1", 0, 1)]


def test_a_policy_queue_with_numbers_out_of_bounds_is_a_502(relay: RelayServer) -> None:
    system = System()
    system.queues = [SCALED | {"worker_concurrency": 2**35}]
    with executors(relay, {"app": "shop", "answers": system.answers()}):
        body = conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                                     json={"queue": "orders_queue"}), 502)
        assert "worker_concurrency" in body["detail"], body
        conforms("getAutoscalingPolicy", call(relay, "GET", A + "/autoscaling-policy"), 404)


def test_an_sdk_without_the_messages_is_501(relay: RelayServer) -> None:
    with executors(relay, {"app": "shop"}):  # answers every type it was given no handler for as unknown
        body = conforms("setAutoscalingPolicy", call(relay, "PUT", A + "/autoscaling-policy",
                                                     json={"queue": "orders_queue"}), 501)
        assert "list_queues" in body["detail"]
