"""FakeClock, the clock every unit test moves by hand."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from relay_es.domain.clock import Clock, FakeClock


def test_it_starts_aware_utc_and_still() -> None:
    c = FakeClock()
    assert c.now().tzinfo is timezone.utc
    assert c.now().microsecond % 1000 != 0  # odd microseconds: a rounding to milliseconds shows
    first = (c.now(), c.monotonic())
    assert (c.now(), c.monotonic()) == first  # nothing moves unless told


def test_it_starts_where_it_is_told() -> None:
    start = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert FakeClock(start).now() == start


def test_advance_moves_both_clocks_by_the_same_amount() -> None:
    c = FakeClock()
    wall, mono = c.now(), c.monotonic()
    c.advance(2.5)
    assert c.now() - wall == timedelta(seconds=2.5)
    assert c.monotonic() - mono == 2.5
    c.advance(0)
    assert c.now() - wall == timedelta(seconds=2.5) and c.monotonic() - mono == 2.5


def test_step_wall_moves_only_the_wall_clock_either_way() -> None:
    c = FakeClock()
    wall, mono = c.now(), c.monotonic()
    c.step_wall(-3600)
    assert c.now() == wall - timedelta(hours=1)
    assert c.monotonic() == mono
    c.step_wall(7200)
    assert c.now() == wall + timedelta(hours=1)
    assert c.monotonic() == mono


def test_time_does_not_run_backwards() -> None:
    c = FakeClock()
    wall, mono = c.now(), c.monotonic()
    with pytest.raises(ValueError):
        c.advance(-0.001)
    assert (c.now(), c.monotonic()) == (wall, mono)


def test_it_is_a_clock() -> None:
    def read(clock: Clock) -> tuple[datetime, float]:
        return clock.now(), clock.monotonic()

    c = FakeClock()
    assert read(c) == (c.now(), c.monotonic())
