"""How much of the work that can wait fits before the next deadline (relay_es.engine.pace)."""

from __future__ import annotations

import pytest

from relay_es.engine.pace import FLOOR_SHARE, Pace


def test_with_nothing_measured_or_no_deadline_armed_a_chunk_is_whole() -> None:
    pace = Pace()
    assert pace.fitting(0.0, 250) == 250  # nothing measured: nothing to go by
    pace.took(10, 0.1)
    assert pace.fitting(None, 250) == 250  # no deadline armed


def test_a_chunk_is_as_many_items_as_fit_in_the_slack_at_the_measured_pace() -> None:
    pace = Pace()
    pace.took(100, 0.5)  # 5 ms an item
    assert pace.fitting(0.1, 250) == 20
    assert pace.fitting(10.0, 250) == 250  # never more than the cap


def test_with_no_time_to_spare_a_chunk_is_a_share_of_the_cap_never_none() -> None:
    pace = Pace()
    pace.took(1, 1.0)
    assert pace.fitting(0.0, 250) == 250 // FLOOR_SHARE
    assert pace.fitting(-3.0, 250) == 250 // FLOOR_SHARE  # a deadline already due
    assert pace.fitting(0.001, 250) == 250 // FLOOR_SHARE
    assert pace.fitting(0.0, 5) == 1


def test_the_pace_follows_the_measurements_weighted_towards_the_last() -> None:
    pace = Pace()
    pace.took(10, 0.1)
    assert pace.per_item == pytest.approx(0.01)
    for _ in range(30):
        pace.took(10, 0.01)
    assert pace.per_item == pytest.approx(0.001, rel=0.01)
    pace.took(0, 5.0)  # nothing done: nothing learnt
    pace.took(3, -1.0)  # a clock stepped back: ignored
    assert pace.per_item == pytest.approx(0.001, rel=0.01)


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        Pace().fitting(1.0, 0)


def test_a_pace_measured_as_nothing_again_and_again_never_overflows_the_count() -> None:
    # A clock that does not move (a coarse one, a fake one) measures 0 s: the mean decays towards
    # zero, and slack / per_item must not become an infinity that int() cannot take.
    pace = Pace()
    pace.took(1, 0.01)
    for _ in range(3000):
        pace.took(250, 0.0)
    assert pace.fitting(1.0, 250) == 250
    assert pace.fitting(0.0, 250) == 250  # as good as unmeasured
    pace.took(1, float("nan"))  # not a number: ignored
    assert pace.fitting(1.0, 250) == 250


def test_a_huge_slack_gives_the_cap_without_an_overflow() -> None:
    pace = Pace()
    pace.took(1, 1e-6)
    assert pace.fitting(1e300, 250) == 250
