"""Which metrics windows are due, and when (relay_es.engine.metric_windows): pure, plain numbers, no clock."""

from __future__ import annotations

import pytest

from relay_es.engine.metric_windows import BACKFILL, Window, due, lag_of, seconds_until_next

P = 300  # five minutes
T = 1_800_000_000  # a boundary of P (and of 60, 600, 3600)
assert T % 3600 == 0


def starts(ws: list[Window]) -> list[int]:
    return [w.start for w in ws]


def assert_contiguous(ws: list[Window]) -> None:
    for a, b in zip(ws, ws[1:], strict=False):
        assert a.end == b.start, (a, b)
    for w in ws:
        assert w.granularity == w.end - w.start > 0


def test_the_lag_is_five_seconds_or_a_fifth_of_a_short_period_and_at_least_one() -> None:
    assert lag_of(300) == 5 and lag_of(60) == 5 and lag_of(25) == 5
    assert lag_of(20) == 4 and lag_of(10) == 2 and lag_of(5) == 1
    assert lag_of(4) == 1 and lag_of(1) == 1


def test_a_window_granularity_is_its_length() -> None:
    assert Window(T, T + P).granularity == P
    assert Window(T + 7, T + P).granularity == P - 7


@pytest.mark.parametrize("period", [0, -1, -300])
def test_a_period_under_one_second_is_refused(period: int) -> None:
    with pytest.raises(ValueError):
        due(None, T, period)
    with pytest.raises(ValueError):
        due(T, T, period)


def test_buckets_are_aligned_on_the_epoch() -> None:
    # whatever the cursor's phase of the clock, buckets are [k*p, (k+1)*p)
    ws = due(T - 3 * P, T + P + 123.4, P)
    assert ws == [Window(T - 3 * P, T - 2 * P), Window(T - 2 * P, T - P), Window(T - P, T), Window(T, T + P)]
    assert all(w.start % P == 0 and w.end % P == 0 for w in ws)
    assert_contiguous(ws)


def test_nothing_is_due_before_a_bucket_end_plus_the_lag() -> None:
    lag = lag_of(P)
    cursor = T  # everything up to T stored; the bucket [T, T+P) ends at T+P
    assert due(cursor, T, P) == []
    assert due(cursor, T + P - 0.001, P) == []
    assert due(cursor, T + P, P) == []  # complete, but the lag has not passed
    assert due(cursor, T + P + lag - 0.001, P) == []
    assert due(cursor, T + P + lag, P) == [Window(T, T + P)]
    assert due(cursor, T + 2 * P + lag - 1, P) == [Window(T, T + P)]  # the next one not yet
    assert due(cursor, T + 2 * P + lag, P) == [Window(T, T + P), Window(T + P, T + 2 * P)]


def test_a_one_second_period_waits_one_second_after_the_bucket() -> None:
    assert due(T, T + 2, 1) == [Window(T, T + 1)]
    assert due(T, T + 1.999, 1) == []


def test_a_cursor_at_or_beyond_the_newest_complete_bucket_has_nothing_due() -> None:
    assert due(T + P, T + P + 5, P) == []
    assert due(T + 10 * P, T + P + 5, P) == []  # the wall clock went back


def test_a_new_application_starts_backfill_buckets_back() -> None:
    now = T + 5 + 17  # the bucket ending at T is complete and past its lag
    ws = due(None, now, P)
    assert len(ws) == BACKFILL == 12
    assert ws[0] == Window(T - BACKFILL * P, T - (BACKFILL - 1) * P)
    assert ws[-1] == Window(T - P, T)
    assert_contiguous(ws)
    assert due(None, now, P, backfill=3) == [Window(T - 3 * P, T - 2 * P), Window(T - 2 * P, T - P), Window(T - P, T)]
    assert due(None, now, P, backfill=0) == []


def test_a_new_application_starts_no_earlier_than_its_registration() -> None:
    now = T + 5
    assert due(None, now, P, floor=T - 2 * P - 7) == [Window(T - 2 * P - 7, T - 2 * P), Window(T - 2 * P, T - P),
                                                      Window(T - P, T)]
    assert due(None, now, P, floor=T - 2 * P) == [Window(T - 2 * P, T - P), Window(T - P, T)]
    assert due(None, now, P, floor=T - 100 * P) == due(None, now, P)  # earlier than the backfill: the backfill
    assert due(None, now, P, floor=T + 3) == []  # registered in the bucket not complete yet
    assert due(T - P, now, P, floor=T - 5 * P) == [Window(T - P, T)]  # a cursor: the floor is not asked


def test_a_new_application_backfill_is_capped_by_the_catchup() -> None:
    ws = due(None, T + 5, P, backfill=10, catchup=4)
    assert ws == [Window(T - 4 * P, T - 3 * P), Window(T - 3 * P, T - 2 * P), Window(T - 2 * P, T - P),
                  Window(T - P, T)]


def test_missed_buckets_are_caught_up_oldest_first() -> None:
    ws = due(T - 5 * P, T + 5, P)
    assert starts(ws) == [T - 5 * P, T - 4 * P, T - 3 * P, T - 2 * P, T - P]
    assert_contiguous(ws)


def test_catch_up_is_capped_and_the_oldest_are_skipped_leaving_a_gap() -> None:
    cursor = T - 100 * P
    ws = due(cursor, T + 5, P, catchup=10)
    assert len(ws) == 10
    assert ws[0] == Window(T - 10 * P, T - 9 * P)  # the 90 oldest are skipped: a gap from the cursor
    assert ws[0].start > cursor
    assert ws[-1] == Window(T - P, T)
    assert_contiguous(ws)
    # exactly catchup missed: nothing skipped
    assert starts(due(T - 10 * P, T + 5, P, catchup=10))[0] == T - 10 * P
    # one more than catchup: the oldest one is skipped
    assert starts(due(T - 11 * P, T + 5, P, catchup=10))[0] == T - 10 * P


def test_after_a_change_of_period_a_first_partial_window_reaches_the_next_boundary() -> None:
    # collected every 60 s up to T + 120; the period is now 300 s
    cursor = T + 120
    assert due(cursor, T + P, P) == []  # [T+120, T+300) is not past its lag yet
    ws = due(cursor, T + 2 * P + 5, P)
    assert ws == [Window(T + 120, T + P), Window(T + P, T + 2 * P)]
    assert ws[0].granularity == 180 and ws[1].granularity == P
    assert_contiguous(ws)
    # the other way: from 300 s to 60 s, the cursor is on a boundary of both
    assert due(T + P, T + P + 3 * 60 + 5, 60) == [Window(T + P, T + P + 60), Window(T + P + 60, T + P + 120),
                                                  Window(T + P + 120, T + P + 180)]
    # from 600 s to 3600 s: the cursor sits inside an hour
    ws = due(T + 600, T + 2 * 3600 + 5, 3600)
    assert ws == [Window(T + 600, T + 3600), Window(T + 3600, T + 7200)]


def test_a_partial_window_older_than_the_catchup_is_skipped_too() -> None:
    cursor = T - 20 * P + 120  # not on a boundary, far behind
    ws = due(cursor, T + 5, P, catchup=5)
    assert ws == [Window(T - 5 * P, T - 4 * P), Window(T - 4 * P, T - 3 * P), Window(T - 3 * P, T - 2 * P),
                  Window(T - 2 * P, T - P), Window(T - P, T)]
    # within the catchup the partial window is kept, and the total stays within it
    ws = due(T - 3 * P + 120, T + 5, P, catchup=5)
    assert ws == [Window(T - 3 * P + 120, T - 2 * P), Window(T - 2 * P, T - P), Window(T - P, T)]
    assert len(due(T - 5 * P + 1, T + 5, P, catchup=5)) == 5


def test_successive_collections_never_overlap_nor_leave_holes() -> None:
    """The cursor moved to each window's end, asked again and again over a day, with a change of period."""
    cursor: int | None = None
    seen: list[Window] = []
    now = float(T + 7)
    for step in range(400):
        period = 60 if step < 150 else 300
        ws = due(cursor, now, period)
        assert_contiguous(ws)
        if ws and cursor is not None:
            assert ws[0].start == cursor
        seen.extend(ws)
        if ws:
            cursor = ws[-1].end
        now += 47.3  # not aligned with anything
    assert_contiguous(seen)
    assert seen[-1].end <= now
    assert any(w.granularity == 300 for w in seen) and any(w.granularity == 60 for w in seen)


@pytest.mark.parametrize("period", [1, 10, 60, 300, 3600])
def test_seconds_until_next_is_a_full_period_exactly_at_a_fire_time(period: int) -> None:
    lag = lag_of(period)
    fire = T + lag  # the bucket ending at T may be asked for now
    assert seconds_until_next(fire, period) == period
    assert seconds_until_next(fire - 0.5, period) == pytest.approx(0.5)
    assert seconds_until_next(fire - 0.25 * period, period) == pytest.approx(0.25 * period)
    assert seconds_until_next(fire + 0.5, period) == pytest.approx(period - 0.5)


def test_seconds_until_next_agrees_with_due() -> None:
    for now in (T + 0.0, T + 4.9, T + 5, T + 123.4, T + 299.99):
        wait = seconds_until_next(now, P)
        assert 0 < wait <= P
        before = due(T - P, now, P)
        after = due(T - P, now + wait, P)
        assert len(after) == len(before) + 1  # exactly one more bucket became due then
        assert due(T - P, now + wait - 0.001, P) == before
