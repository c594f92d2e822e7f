"""The autoscaling policy's bounds (``relay_es/domain/autoscaling.py``)."""

from __future__ import annotations

import pytest

from relay_es.domain.autoscaling import MAX_COUNT, AutoscalingPolicy, Rollout
from relay_es.domain.errors import InvalidSetting


def test_a_policy_holds_a_queue_and_an_optional_rollout() -> None:
    p = AutoscalingPolicy("orders", Rollout(max_old_versions=2, max_old_executors=0))
    assert p.queue == "orders" and p.rollout == Rollout(2, 0)
    assert AutoscalingPolicy("orders").rollout is None
    assert AutoscalingPolicy("q" * 256, Rollout(MAX_COUNT, MAX_COUNT)).check().queue == "q" * 256


@pytest.mark.parametrize("queue", ["", "a\x00b", "a\nb", "x" * 257, "\u202eevil", 7, None])
def test_a_queue_name_is_a_short_plain_identifier(queue: object) -> None:
    with pytest.raises(InvalidSetting) as e:
        AutoscalingPolicy(queue).check()  # type: ignore[arg-type]
    assert e.value.field == "queue"


@pytest.mark.parametrize("rollout, field", [
    (Rollout(max_old_versions=-1), "rollout.maxOldApplicationVersions"),
    (Rollout(max_old_versions=MAX_COUNT + 1), "rollout.maxOldApplicationVersions"),
    (Rollout(max_old_versions=True), "rollout.maxOldApplicationVersions"),  # type: ignore[arg-type]
    (Rollout(max_old_executors=1.5), "rollout.maxExecutorsForOldApplicationVersions"),  # type: ignore[arg-type]
])
def test_rollout_counts_are_bounded_whole_numbers(rollout: Rollout, field: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        AutoscalingPolicy("orders", rollout).check()
    assert e.value.field == field


def test_a_policy_round_trips_through_primitives_unchecked() -> None:
    for p in (AutoscalingPolicy("orders"), AutoscalingPolicy("orders", Rollout()),
              AutoscalingPolicy("orders", Rollout(3, 0))):
        assert AutoscalingPolicy.from_dict(p.as_dict()) == p
    # a stored policy a later, stricter rule would refuse still loads: only new ones are checked
    assert AutoscalingPolicy.from_dict({"queue": "x" * 9999, "rollout": None}).queue == "x" * 9999
