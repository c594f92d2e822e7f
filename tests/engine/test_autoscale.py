"""Autoscaling recommendations (``relay_es/engine/autoscale.py``): which versions, how many executors."""

from __future__ import annotations

import pytest

from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout
from relay_es.engine.autoscale import Queue, Recommendation, Version, recommend, reported, unusable

Q = Queue("orders", worker_concurrency=4, partitioned=False)
V1, V2, V3 = Version("v1", 100, 100), Version("v2", 200, 200), Version("v3", 300, 300)


def names(rs: list[Recommendation]) -> list[tuple[str, bool, int, int]]:
    return [(r.version, r.is_latest, r.desired, r.backlog) for r in rs]


def test_the_latest_needs_the_backlog_over_the_worker_concurrency_and_at_least_one() -> None:
    p = AutoscalingPolicy("orders", Rollout())
    assert names(recommend(p, [V1, V2], Q, {"v2": 9})) == [("v2", True, 3, 9)]
    assert names(recommend(p, [V1, V2], Q, {"v2": 8})) == [("v2", True, 2, 8)]
    assert names(recommend(p, [V1, V2], Q, {})) == [("v2", True, 1, 0)]
    assert recommend(p, [V1, V2], Q, {})[0].queue == "orders"
    assert recommend(p, [], Q, {"v1": 3}) == []


def test_the_latest_is_the_version_made_latest_last_not_the_newest_registered() -> None:
    made_latest = Version("v1", 100, 500)  # setLatestAppVersion gave v1 the highest timestamp
    p = AutoscalingPolicy("orders")
    assert [r.version for r in recommend(p, [made_latest, V2, V3], Q, {})] == ["v1", "v3", "v2"]


def test_without_a_rollout_every_version_is_sized_to_its_own_backlog() -> None:
    p = AutoscalingPolicy("orders")
    assert names(recommend(p, [V1, V2, V3], Q, {"v3": 1, "v2": 12, "v1": 0})) == [
        ("v3", True, 1, 1), ("v2", False, 3, 12), ("v1", False, 1, 0)]


@pytest.mark.parametrize("rollout, expected", [
    (Rollout(), [("v3", True, 1, 1)]),  # max_old_versions defaults to 0: the latest alone
    (Rollout(max_old_versions=1), [("v3", True, 1, 1), ("v2", False, 3, 12)]),
    (Rollout(max_old_versions=5, max_old_executors=2), [("v3", True, 1, 1), ("v2", False, 2, 12), ("v1", False, 1, 0)]),
    (Rollout(max_old_versions=2, max_old_executors=0), [("v3", True, 1, 1), ("v2", False, 0, 12), ("v1", False, 0, 0)]),
])
def test_a_rollout_chooses_and_caps_the_old_versions(rollout: Rollout, expected: list) -> None:
    p = AutoscalingPolicy("orders", rollout)
    assert names(recommend(p, [V1, V2, V3], Q, {"v3": 1, "v2": 12, "v1": 0})) == expected


def test_the_latest_is_never_capped() -> None:
    p = AutoscalingPolicy("orders", Rollout(max_old_versions=1, max_old_executors=0))
    assert names(recommend(p, [V1], Q, {"v1": 40})) == [("v1", True, 10, 40)]


@pytest.mark.parametrize("queue, why", [
    (None, "is not registered by the application"),
    (Queue("orders", 4, True), "is partitioned"),
    (Queue("orders", None, False), "has no worker concurrency"),
    (Queue("orders", 0, False), "has no worker concurrency"),
])
def test_a_queue_that_cannot_drive_a_policy_says_why_and_recommends_one_without_a_queue(queue, why) -> None:
    assert unusable(queue) == why
    [r] = recommend(AutoscalingPolicy("orders"), [V1], queue, {"v1": 50})
    assert (r.desired, r.backlog, r.queue) == (1, 50, None)


def test_a_usable_queue() -> None:
    assert unusable(Q) is None


def test_reported_orders_old_versions_newest_registered_first() -> None:
    old_but_bumped = Version("v0", 50, 250)  # registered first, made latest once, then superseded
    got = reported(AutoscalingPolicy("orders"), [old_but_bumped, V1, V2, V3])
    assert [v.name for v in got] == ["v3", "v2", "v1", "v0"]


def test_work_enqueued_without_a_version_counts_for_the_latest() -> None:
    p = AutoscalingPolicy("orders")
    assert names(recommend(p, [V1, V2], Q, {None: 40, "v2": 2, "v1": 4})) == [("v2", True, 11, 42), ("v1", False, 1, 4)]


def test_a_version_listed_twice_is_reported_once() -> None:
    again = Version("v2", 200, 100)  # an older entry of the same name
    assert [r.version for r in recommend(AutoscalingPolicy("orders"), [V1, V2, again], Q, {})] == ["v2", "v1"]


def test_at_most_max_versions_are_looked_at(monkeypatch) -> None:
    from relay_es.engine import autoscale

    monkeypatch.setattr(autoscale, "MAX_VERSIONS", 2)
    assert [v.name for v in reported(AutoscalingPolicy("orders"), [V1, V2, V3])] == ["v3", "v2"]
