"""The collected metrics series (relay_es.adapters.series), on SQLite and on Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relay_es.adapters.series import MetricSeries, Point
from relay_es.adapters.stores import open_database, parse_database_url
from relay_es.engine.metric_windows import Window
from relay_es.protocol.metrics import MAX_VALUE, Sample

P = 300
T = 1_800_000_000


def w(k: int, period: int = P) -> Window:
    return Window(T + k * period, T + (k + 1) * period)


def wf(name: str, value: int) -> Sample:
    return Sample("workflow_count", name, value)


def st(name: str, value: int) -> Sample:
    return Sample("step_count", name, value)


@pytest.fixture
def db(store_url: str) -> Iterator[Any]:
    database = open_database(parse_database_url(store_url))
    yield database
    database.close()


@pytest.fixture
def series(db: Any) -> MetricSeries:
    s = MetricSeries(db)
    s.create()
    return s


def all_points(series: MetricSeries, org: str = "acme", app: str = "orders") -> list[Point]:
    return series.query(org, app, 0, 2**62, limit=10_000)


def test_create_twice_is_fine(db: Any) -> None:
    s = MetricSeries(db)
    s.create()
    s.create()
    assert s.cursors() == {}
    assert MetricSeries(db).cursor("acme", "orders") is None


def test_a_first_record_stores_the_cursor_and_the_samples(series: MetricSeries) -> None:
    assert series.cursor("acme", "orders") is None
    assert series.record("acme", "orders", None, w(0), [wf("checkout", 7), st("charge", 12), st("big", MAX_VALUE)])
    assert series.cursor("acme", "orders") == T + P
    assert all_points(series) == [Point("step_count", "big", T, P, MAX_VALUE),
                                  Point("step_count", "charge", T, P, 12),
                                  Point("workflow_count", "checkout", T, P, 7)]


def test_a_window_without_samples_still_moves_the_cursor(series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, w(0), [])
    assert series.cursor("acme", "orders") == T + P
    assert series.record("acme", "orders", T + P, w(1), [])
    assert series.cursor("acme", "orders") == T + 2 * P
    assert all_points(series) == []


def test_a_second_first_record_stores_nothing(series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, w(0), [wf("a", 1)])
    assert not series.record("acme", "orders", None, w(1), [wf("b", 2)])  # another collector got there first
    assert series.cursor("acme", "orders") == T + P
    assert all_points(series) == [Point("workflow_count", "a", T, P, 1)]


def test_a_record_from_a_stale_cursor_stores_nothing(series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, w(0), [wf("a", 1)])
    assert not series.record("acme", "orders", T, w(1), [wf("b", 2)])  # not where the cursor is
    assert not series.record("acme", "orders", T + 2 * P, w(1), [wf("b", 2)])
    assert not series.record("acme", "billing", T + P, w(1), [wf("b", 2)])  # no cursor at all
    assert series.cursors() == {("acme", "orders"): T + P}
    assert all_points(series) == [Point("workflow_count", "a", T, P, 1)]
    assert all_points(series, app="billing") == []
    # from the right one it goes on
    assert series.record("acme", "orders", T + P, w(1), [wf("b", 2)])
    assert series.cursor("acme", "orders") == T + 2 * P
    assert [p.bucket for p in all_points(series)] == [T, T + P]


def test_successive_windows_with_a_gap_and_a_partial_window(series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, Window(T + 120, T + P), [wf("a", 1)])  # after a change of period
    assert series.record("acme", "orders", T + P, w(5), [wf("a", 2)])  # a gap: the catch-up skipped some
    assert series.cursor("acme", "orders") == T + 6 * P
    assert all_points(series) == [Point("workflow_count", "a", T + 120, P - 120, 1),
                                  Point("workflow_count", "a", T + 5 * P, P, 2)]


def test_query_returns_windows_starting_in_start_end_ordered_and_limited(series: MetricSeries) -> None:
    cursor = None
    for k in range(4):
        # given in no particular order
        assert series.record("acme", "orders", cursor, w(k), [wf("zeta", k + 1), st("b", 10 + k), wf("alpha", 100 + k),
                                                               st("a", 20 + k)])
        cursor = w(k).end
    q = series.query
    got = q("acme", "orders", T + P, T + 3 * P, limit=100)  # [start, end): buckets 1 and 2
    assert got == [Point("step_count", "a", T + P, P, 21), Point("step_count", "b", T + P, P, 11),
                   Point("workflow_count", "alpha", T + P, P, 101), Point("workflow_count", "zeta", T + P, P, 2),
                   Point("step_count", "a", T + 2 * P, P, 22), Point("step_count", "b", T + 2 * P, P, 12),
                   Point("workflow_count", "alpha", T + 2 * P, P, 102), Point("workflow_count", "zeta", T + 2 * P, P, 3)]
    # a bound inside a window: only windows that start in the range
    assert {p.bucket for p in q("acme", "orders", T + 1, T + P + 1, limit=100)} == {T + P}
    assert q("acme", "orders", T + 4 * P, T + 10 * P, limit=100) == []
    assert q("acme", "orders", T + P, T + P, limit=100) == []
    # the limit keeps the oldest
    assert q("acme", "orders", T, T + 4 * P, limit=5) == [
        Point("step_count", "a", T, P, 20), Point("step_count", "b", T, P, 10),
        Point("workflow_count", "alpha", T, P, 100), Point("workflow_count", "zeta", T, P, 1),
        Point("step_count", "a", T + P, P, 21)]
    assert q("acme", "orders", T, T + 4 * P, limit=0) == []
    assert len(q("acme", "orders", T, T + 4 * P, limit=17)) == 16


def test_prune_deletes_the_older_buckets_and_counts_them(series: MetricSeries) -> None:
    for app in ("orders", "billing"):
        cursor = None
        for k in range(3):
            assert series.record("acme", app, cursor, w(k), [wf("a", 1), st("s", 2)])
            cursor = w(k).end
    assert series.prune(T) == 0
    assert series.prune(T + P + 1) == 8  # buckets T and T+P of both applications (started before)
    assert [p.bucket for p in all_points(series)] == [T + 2 * P, T + 2 * P]
    assert [p.bucket for p in all_points(series, app="billing")] == [T + 2 * P, T + 2 * P]
    assert series.cursors() == {("acme", "orders"): T + 3 * P, ("acme", "billing"): T + 3 * P}  # cursors stay
    assert series.prune(T + P + 1) == 0
    assert series.prune(T + 3 * P) == 4
    assert all_points(series) == []


def test_forget_removes_one_application_only(series: MetricSeries) -> None:
    for org, app in (("acme", "orders"), ("acme", "billing"), ("other", "orders")):
        assert series.record(org, app, None, w(0), [wf(f"{org}-{app}", 1)])
    series.forget("acme", "orders")
    assert series.cursor("acme", "orders") is None
    assert all_points(series) == []
    assert series.cursors() == {("acme", "billing"): T + P, ("other", "orders"): T + P}
    assert all_points(series, app="billing") == [Point("workflow_count", "acme-billing", T, P, 1)]
    assert all_points(series, org="other") == [Point("workflow_count", "other-orders", T, P, 1)]
    series.forget("acme", "orders")  # twice is fine
    series.forget("nobody", "nothing")
    # a new application of that name starts afresh
    assert series.record("acme", "orders", None, w(7), [wf("new", 3)])
    assert all_points(series) == [Point("workflow_count", "new", T + 7 * P, P, 3)]


def test_organisations_and_applications_are_isolated(series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, w(0), [wf("x", 1)])
    assert series.record("other", "orders", None, w(0), [wf("x", 2)])  # same app name, another org
    assert series.record("acme", "billing", None, w(0), [wf("x", 3)])
    assert series.record("acme", "orders", T + P, w(1), [wf("x", 4)])
    assert series.cursors() == {("acme", "orders"): T + 2 * P, ("other", "orders"): T + P,
                                ("acme", "billing"): T + P}
    assert [p.value for p in all_points(series)] == [1, 4]
    assert [p.value for p in all_points(series, org="other")] == [2]
    assert [p.value for p in all_points(series, app="billing")] == [3]
    assert all_points(series, org="other", app="billing") == []
    assert series.cursor("other", "billing") is None


def test_names_as_collected_round_trip(series: MetricSeries) -> None:
    names = ["ünïcødé ✓", "(other)", "a\\u0000b", "x" * 512, "with 'quotes' and \"more\"", ""]
    assert series.record("acme", "orders", None, w(0), [st(n, i + 1) for i, n in enumerate(names)])
    assert sorted((p.metric_name, p.value) for p in all_points(series)) == sorted(
        (n, i + 1) for i, n in enumerate(names))


def test_a_second_series_on_the_same_database_sees_the_same_rows(db: Any, series: MetricSeries) -> None:
    assert series.record("acme", "orders", None, w(0), [wf("a", 1)])
    other = MetricSeries(db)
    other.create()
    assert other.cursor("acme", "orders") == T + P
    assert not other.record("acme", "orders", None, w(0), [wf("a", 9)])
    assert other.record("acme", "orders", T + P, w(1), [wf("a", 2)])
    assert not series.record("acme", "orders", T + P, w(1), [wf("a", 5)])  # the other collector stored it
    assert [p.value for p in all_points(series)] == [1, 2]


def test_a_query_with_a_width_adds_windows_up_into_wider_buckets(series: MetricSeries) -> None:
    cursor = None
    for k in range(6):  # six 300 s windows from T (T is a multiple of 1200)
        assert series.record("acme", "orders", cursor, w(k), [wf("a", k + 1), st("s", 1)])
        cursor = w(k).end
    wide = series.query("acme", "orders", T, T + 6 * P, limit=100, width=4 * P)
    assert [(p.bucket, p.metric_type, p.metric_name, p.granularity, p.value) for p in wide] == [
        (T, "step_count", "s", 4 * P, 4), (T, "workflow_count", "a", 4 * P, 10),
        (T + 4 * P, "step_count", "s", 4 * P, 2), (T + 4 * P, "workflow_count", "a", 4 * P, 11)]
    assert len(series.query("acme", "orders", T, T + 6 * P, limit=3, width=4 * P)) == 3
    begun = series.begin("acme", "billing", T)
    assert begun == T and series.begin("acme", "billing", T + 99) == T  # the first cursor stays


def test_a_sum_past_the_largest_value_is_capped_at_it_on_every_store(series: MetricSeries) -> None:
    # Each stored value may be MAX_VALUE (2**63 - 1, the reference's int64): SQLite's SUM raised "integer
    # overflow" and Postgres' answered a sum beyond it. Below the cap the sum is exact, across 32-bit halves.
    windows = [[wf("big", MAX_VALUE), wf("edge", MAX_VALUE - 1), wf("exact", 2**32 - 1), st("over", 1)],
               [wf("big", MAX_VALUE), wf("edge", 1), wf("exact", 2**32 + 1), st("over", MAX_VALUE)],
               [wf("big", MAX_VALUE), wf("exact", 2**40 + 7)]]
    cursor = None
    for k, samples in enumerate(windows):
        assert series.record("acme", "orders", cursor, w(k), samples)
        cursor = w(k).end
    wide = series.query("acme", "orders", T, T + 3 * P, limit=100, width=3 * P)  # T is a multiple of 900
    assert [(p.bucket, p.metric_type, p.metric_name, p.granularity, p.value) for p in wide] == [
        (T, "step_count", "over", 3 * P, MAX_VALUE),
        (T, "workflow_count", "big", 3 * P, MAX_VALUE),
        (T, "workflow_count", "edge", 3 * P, MAX_VALUE),
        (T, "workflow_count", "exact", 3 * P, 2**33 + 2**40 + 7)]


def test_counts_tell_how_many_points_each_width_answers(series: MetricSeries) -> None:
    cursor = None
    windows = [Window(T + 120, T + P)] + [w(k) for k in (1, 2, 3, 5, 8, 9, 13, 21, 22, 34, 40)]  # partial, gaps
    for k, window in enumerate(windows):
        samples = [wf("always", 1), wf(f"n{k % 5}", k), st("always", 2)] + ([st("odd", 3)] if k % 2 else [])
        assert series.record("acme", "orders", cursor, window, samples)
        cursor = window.end
    assert series.record("acme", "billing", None, w(7), [wf("always", 1), wf("elsewhere", 1)])
    widths = [2 * P, 4 * P, 8 * P, 16 * P, 32 * P, 64 * P]
    for start, end in ((T, T + 41 * P), (T + 2 * P + 1, T + 22 * P), (T + 35 * P, T + 40 * P), (T + 41 * P, T + 99 * P)):
        assert series.counts("acme", "orders", start, end, widths) == [
            len(series.query("acme", "orders", start, end, limit=10_000, width=width)) for width in widths]
    assert series.counts("acme", "orders", T, T + 41 * P, widths)[0] > series.counts("acme", "orders", T, T + 41 * P,
                                                                                      widths)[-1]
    assert series.counts("acme", "orders", T, T + 41 * P, []) == []
