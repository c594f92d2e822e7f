"""Which executor a call goes to (``relay_es.engine.routing``): one candidate, the latest
version first where asked, spread over equals, and an error when there is none."""

from __future__ import annotations

import pytest

from relay_es.engine.calls import NoHealthyExecutor
from relay_es.engine.routing import Candidate, choose, latest


def c(id: str, version: str | None = "v1", first_seen: float | None = 1.0, in_flight: int = 0) -> Candidate:
    return Candidate(id=id, executor_id=f"E-{id}", version=version, first_seen=first_seen, in_flight=in_flight)


def test_no_candidate_is_503_no_healthy_executor() -> None:
    with pytest.raises(NoHealthyExecutor) as e:
        choose("local", "app", [])
    assert e.value.status == 503 and e.value.title == "no healthy executor" and "'app'" in e.value.detail


def test_equally_good_executors_share_the_calls_in_turn() -> None:
    pool = [c("b"), c("a"), c("c")]
    assert [choose("o", "a", pool, turn=t).id for t in range(6)] == ["a", "b", "c", "a", "b", "c"]


def test_the_executor_with_fewer_calls_in_flight_comes_first() -> None:
    pool = [c("a", in_flight=2), c("b", in_flight=0), c("c", in_flight=1)]
    assert {choose("o", "a", pool, turn=t).id for t in range(5)} == {"b"}


def test_without_a_version_preference_every_version_is_a_candidate() -> None:
    pool = [c("a", "v1", 1.0), c("b", "v2", 5.0)]
    assert {choose("o", "a", pool, turn=t).id for t in range(4)} == {"a", "b"}


def test_the_newest_registered_version_is_the_one_whose_oldest_executor_came_last() -> None:
    """An old-version executor that (re)registered recently does not make its version newest."""
    pool = [c("a", "v1", 1.0), c("b", "v2", 5.0), c("c", "v1", 9.0)]
    assert latest(pool) == "v2"
    assert {choose("o", "a", pool, turn=t, prefer_latest=True).id for t in range(4)} == {"b"}


def test_an_executor_not_yet_recorded_counts_as_just_registered() -> None:
    assert latest([c("a", "v1", 1.0), c("b", "v2", None)]) == "v2"
    assert latest([c("a", "v1", None), c("b", "v2", None)]) == "v2"  # a tie goes to the greater string, stably


def test_a_version_made_latest_wins_when_an_executor_runs_it() -> None:
    pool = [c("a", "v1", 1.0), c("b", "v2", 5.0)]
    assert choose("o", "a", pool, prefer_latest=True, latest_version="v1").id == "a"
    # nobody runs the version made latest: the newest registered one among those connected
    assert choose("o", "a", pool, prefer_latest=True, latest_version="v9").id == "b"


def test_the_latest_version_is_spread_over_its_executors_by_calls_in_flight() -> None:
    pool = [c("a", "v2", 5.0, in_flight=3), c("b", "v2", 6.0, in_flight=1), c("c", "v1", 1.0, in_flight=0)]
    assert choose("o", "a", pool, prefer_latest=True).id == "b"

