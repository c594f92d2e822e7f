"""FakeClock, the clock every unit test moves by hand."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from relay_es.domain.clock import Clock, FakeClock, Timeline


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


T = 1_800_000_000  # epoch seconds


def test_the_timeline_follows_the_wall_clock_back_but_not_ahead_of_the_monotonic_one() -> None:
    line = Timeline(T, 1000.0)
    assert line.now(T + 60, 1060.0) == T + 60 and line.ahead == 0  # both clocks moved on a minute
    assert line.now(T + 60 + 86_400, 1120.0) == T + 120  # the wall clock stepped a day ahead: not followed
    assert line.ahead == 86_340
    assert line.now(T + 180 + 86_400, 1180.0) == T + 180  # the monotonic clock moves it on meanwhile
    assert line.now(T + 240, 1240.0) == T + 240 and line.ahead == 0  # corrected: the two agree again
    assert line.now(T - 3600, 1300.0) == T - 3600  # a step back is followed at once...
    assert line.now(T - 3540, 1360.0) == T - 3540  # ...and the wall clock from there
    assert line.now(T + 86_400, 1420.0) == T - 3480  # not a step forward, even back to where it stood
    assert Timeline(T + 86_400, 1420.0).now(T + 86_400, 1420.0) == T + 86_400  # until a restart
