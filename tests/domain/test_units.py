"""Unit discipline at the boundary: seconds, milliseconds, rows, RFC 3339."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay_es.domain.errors import InvalidSetting, RelayError
from relay_es.domain.units import (
    EPOCH,
    MAX_EXECUTOR_TIMEOUT,
    MAX_RETENTION,
    MAX_ROWS,
    duration_to_millis,
    duration_to_seconds,
    from_epoch_ms,
    millis_to_duration,
    parse_as_of,
    parse_rfc3339,
    rfc3339,
    rows,
    seconds_to_duration,
    to_epoch_ms,
)

MAX_MS = int(MAX_RETENTION.total_seconds()) * 1000
MAX_S = int(MAX_EXECUTOR_TIMEOUT.total_seconds())

NOT_NUMBERS = ["5", "", None, [5], {"v": 5}, Decimal(5), Fraction(5, 1), complex(5, 0), b"5"]


def refused(fn: Any, field: str, value: object, unit: str, **kw: Any) -> InvalidSetting:
    with pytest.raises(InvalidSetting) as info:
        fn(field, value, **kw)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, RelayError)
    assert err.field == field
    msg = str(err)
    assert msg.startswith(f"{field}: "), msg
    assert unit in msg, msg
    return err


# ------------------------------------------------------------ conversions


def test_seconds_are_seconds_and_milliseconds_are_milliseconds() -> None:
    assert seconds_to_duration("executorTimeoutSecs", 30, maximum=MAX_EXECUTOR_TIMEOUT) == timedelta(seconds=30)
    assert millis_to_duration("gcTimeThresholdMs", 30, maximum=MAX_RETENTION) == timedelta(milliseconds=30)
    assert millis_to_duration("globalTimeoutMs", 30_000, maximum=MAX_RETENTION) == timedelta(seconds=30)
    assert rows("gcRowsThreshold", 30) == 30


def test_durations_back_to_wire_numbers() -> None:
    assert duration_to_seconds(timedelta(minutes=2)) == 120
    assert duration_to_millis(timedelta(minutes=2)) == 120_000
    assert duration_to_millis(timedelta(microseconds=1500)) == 1
    assert duration_to_seconds(timedelta(milliseconds=1999)) == 1
    assert type(duration_to_seconds(timedelta(seconds=3))) is int
    assert type(duration_to_millis(timedelta(seconds=3))) is int


@given(st.integers(min_value=1, max_value=MAX_S))
def test_seconds_round_trip(n: int) -> None:
    d = seconds_to_duration("executorTimeoutSecs", n, maximum=MAX_EXECUTOR_TIMEOUT)
    assert duration_to_seconds(d) == n
    assert duration_to_millis(d) == n * 1000


@given(st.integers(min_value=1, max_value=MAX_MS))
def test_millis_round_trip(n: int) -> None:
    d = millis_to_duration("gcTimeThresholdMs", n, maximum=MAX_RETENTION)
    assert duration_to_millis(d) == n


def test_whole_floats_are_accepted_as_integers() -> None:
    d = seconds_to_duration("executorTimeoutSecs", 30.0, maximum=MAX_EXECUTOR_TIMEOUT)
    assert d == timedelta(seconds=30)
    assert rows("gcRowsThreshold", 7.0) == 7 and type(rows("gcRowsThreshold", 7.0)) is int


def test_bounds_are_inclusive() -> None:
    assert seconds_to_duration("s", MAX_S, maximum=MAX_EXECUTOR_TIMEOUT) == MAX_EXECUTOR_TIMEOUT
    assert seconds_to_duration("s", 1, maximum=MAX_EXECUTOR_TIMEOUT) == timedelta(seconds=1)
    assert millis_to_duration("m", MAX_MS, maximum=MAX_RETENTION) == MAX_RETENTION
    assert rows("r", MAX_ROWS) == MAX_ROWS
    assert rows("r", 1) == 1


def test_minimum_zero_allows_zero() -> None:
    assert seconds_to_duration("s", 0, minimum=0, maximum=MAX_EXECUTOR_TIMEOUT) == timedelta(0)
    assert millis_to_duration("m", 0, minimum=0, maximum=MAX_RETENTION) == timedelta(0)
    assert rows("r", 0, minimum=0) == 0


# ---------------------------------------------------------------- refusals

CONVERTERS = [
    pytest.param(lambda f, v: seconds_to_duration(f, v, maximum=MAX_EXECUTOR_TIMEOUT), "executorTimeoutSecs",
                 "second", id="seconds"),
    pytest.param(lambda f, v: millis_to_duration(f, v, maximum=MAX_RETENTION), "gcTimeThresholdMs",
                 "millisecond", id="millis"),
    pytest.param(lambda f, v: rows(f, v), "gcRowsThreshold", "row", id="rows"),
]


@pytest.mark.parametrize(("fn", "field", "unit"), CONVERTERS)
@pytest.mark.parametrize("value", [True, False])
def test_bools_are_refused(fn: Any, field: str, unit: str, value: bool) -> None:
    err = refused(fn, field, value, unit)
    assert "whole number" in str(err) and repr(value) in str(err)


@pytest.mark.parametrize(("fn", "field", "unit"), CONVERTERS)
@pytest.mark.parametrize("value", [1.5, 0.1, 30.000001, math.nan, math.inf, -math.inf])
def test_floats_with_fractions_and_non_finite_floats_are_refused(fn: Any, field: str, unit: str,
                                                                  value: float) -> None:
    err = refused(fn, field, value, unit)
    assert "whole number" in str(err)


@pytest.mark.parametrize(("fn", "field", "unit"), CONVERTERS)
@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
def test_non_numbers_are_refused(fn: Any, field: str, unit: str, value: object) -> None:
    err = refused(fn, field, value, unit)
    assert "whole number" in str(err)


@pytest.mark.parametrize(("fn", "field", "unit"), CONVERTERS)
@pytest.mark.parametrize("value", [0, -1, -30, -1.0, -(10**20)])
def test_zero_and_negatives_are_refused(fn: Any, field: str, unit: str, value: object) -> None:
    err = refused(fn, field, value, unit)
    assert "at least 1" in str(err)


@pytest.mark.parametrize(("fn", "field", "unit", "limit"), [
    pytest.param(lambda f, v: seconds_to_duration(f, v, maximum=MAX_EXECUTOR_TIMEOUT), "executorTimeoutSecs",
                 "seconds", MAX_S, id="seconds"),
    pytest.param(lambda f, v: millis_to_duration(f, v, maximum=MAX_RETENTION), "globalTimeoutMs",
                 "milliseconds", MAX_MS, id="millis"),
    pytest.param(lambda f, v: rows(f, v), "gcRowsThreshold", "rows", MAX_ROWS, id="rows"),
])
@pytest.mark.parametrize("excess", [1, 10**6, 10**30, 10**400])
def test_absurd_sizes_are_refused(fn: Any, field: str, unit: str, limit: int, excess: int) -> None:
    err = refused(fn, field, limit + excess, unit)
    assert f"at most {limit} {unit}" in str(err)


@pytest.mark.parametrize(("fn", "field", "unit"), CONVERTERS)
def test_huge_whole_floats_are_refused_as_too_large(fn: Any, field: str, unit: str) -> None:
    err = refused(fn, field, 1e300, unit)
    assert "at most" in str(err)


def test_seconds_and_millis_messages_name_their_own_unit() -> None:
    s = refused(lambda f, v: seconds_to_duration(f, v, maximum=MAX_EXECUTOR_TIMEOUT), "executorTimeoutSecs",
                MAX_S + 1, "seconds")
    assert "millisecond" not in str(s)
    m = refused(lambda f, v: millis_to_duration(f, v, maximum=MAX_RETENTION), "gcTimeThresholdMs", 0,
                "millisecond")
    assert "millisecond(s)" in str(m)
    assert str(refused(lambda f, v: seconds_to_duration(f, v, maximum=MAX_EXECUTOR_TIMEOUT),
                       "executorTimeoutSecs", 0, "second")) == "executorTimeoutSecs: must be at least 1 second(s), got 0"


def test_a_value_of_one_too_many_seconds_is_not_confused_with_milliseconds() -> None:
    # 604800 s is the cap; the same number as milliseconds is about ten minutes.
    assert millis_to_duration("m", MAX_S, maximum=MAX_RETENTION) == timedelta(milliseconds=MAX_S)
    with pytest.raises(InvalidSetting):
        seconds_to_duration("s", MAX_S * 1000, maximum=MAX_EXECUTOR_TIMEOUT)


# ------------------------------------------------------------- epoch ms


def test_epoch_ms() -> None:
    assert to_epoch_ms(EPOCH) == 0
    assert from_epoch_ms(0) == EPOCH
    t = datetime(2026, 11, 30, 12, 0, 5, 123456, tzinfo=timezone.utc)
    assert to_epoch_ms(t) == 1796040005123
    assert from_epoch_ms(to_epoch_ms(t)) == t.replace(microsecond=123000)
    assert to_epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=timezone.utc)) == -1


@given(st.integers(min_value=-(10**13), max_value=10**13))
def test_epoch_ms_round_trip(ms: int) -> None:
    assert to_epoch_ms(from_epoch_ms(ms)) == ms


# -------------------------------------------------------------- RFC 3339


def test_rfc3339_formats_utc_millis_with_z() -> None:
    t = datetime(2026, 11, 30, 12, 0, 5, 123456, tzinfo=timezone.utc)
    assert rfc3339(t) == "2026-11-30T12:00:05.123Z"
    assert rfc3339(t.replace(microsecond=0)) == "2026-11-30T12:00:05.000Z"
    assert rfc3339(t.replace(microsecond=999999)) == "2026-11-30T12:00:05.999Z"  # truncated, never rounded up
    assert rfc3339(t.replace(microsecond=1000)) == "2026-11-30T12:00:05.001Z"
    assert rfc3339(None) is None


def test_rfc3339_is_isoformat_in_milliseconds_with_z_for_any_instant() -> None:
    import random

    rng = random.Random(15)
    lo, hi = datetime(1, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    span = int((hi - lo) / timedelta(microseconds=1))
    for _ in range(20_000):
        t = lo + timedelta(microseconds=rng.randrange(span))
        assert rfc3339(t) == t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_rfc3339_converts_other_offsets_to_utc() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 1, 1, 1, 30, tzinfo=plus2)) == "2025-12-31T23:30:00.000Z"
    minus = timezone(-timedelta(hours=5, minutes=30))
    assert rfc3339(datetime(2026, 1, 1, 20, 0, 0, 7000, tzinfo=minus)) == "2026-01-02T01:30:00.007Z"


def test_rfc3339_pads_the_year_to_four_digits() -> None:
    # RFC 3339 date-fullyear is exactly 4 digits; the output must parse again.
    t = datetime(999, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert rfc3339(t) == "0999-01-02T03:04:05.000Z"
    assert parse_rfc3339("t", rfc3339(t)) == t


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 30),
                    timezones=st.just(timezone.utc)))
def test_rfc3339_round_trip(t: datetime) -> None:
    text = rfc3339(t)
    assert text is not None and text.endswith("Z") and len(text) == 24
    back = parse_rfc3339("at", text)
    assert back == t.replace(microsecond=t.microsecond // 1000 * 1000)
    assert back.tzinfo == timezone.utc
    assert rfc3339(back) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-30T12:00:05.123Z", datetime(2026, 11, 30, 12, 0, 5, 123000, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05z", datetime(2026, 11, 30, 12, 0, 5, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05+00:00", datetime(2026, 11, 30, 12, 0, 5, tzinfo=timezone.utc)),
    ("2026-11-30T14:00:05.5+02:00", datetime(2026, 11, 30, 12, 0, 5, 500000, tzinfo=timezone.utc)),
    ("2026-11-30T07:00:05-05:00", datetime(2026, 11, 30, 12, 0, 5, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05.123456789Z", datetime(2026, 11, 30, 12, 0, 5, 123456, tzinfo=timezone.utc)),
])
def test_parse_rfc3339_accepts_and_normalises_to_utc(text: str, expected: datetime) -> None:
    t = parse_rfc3339("asOf", text)
    assert t == expected
    assert t.utcoffset() == timedelta(0) and t.tzinfo == timezone.utc


@pytest.mark.parametrize("text", ["2026-11-30T12:00:05", "2026-11-30T12:00:05.123", "2026-11-30",
                                  "2026-11-30 12:00:05"])
def test_parse_rfc3339_refuses_a_missing_offset(text: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        parse_rfc3339("asOf", text)
    assert info.value.field == "asOf"
    assert "UTC offset" in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-11-31T00:00:00Z",
                                  "2026-11-30T25:00:00Z", "1796040005123", "2026-11-30T12:00:05ZZ",
                                  # what datetime.fromisoformat takes and RFC 3339 does not
                                  "2026-11-30 12:00:05Z", "2026-11-30T12:00Z", "20261130T120005Z",
                                  "2026-W48-1T12:00:05Z", "2026-11-30T12:00:05+0000", "2026-11-30T12:00:05,5Z",
                                  "2026-11-30T12:00:05+00:00:00", "\uff12026-11-30T12:00:05Z"])
def test_parse_rfc3339_refuses_garbage(text: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        parse_rfc3339("asOf", text)
    assert info.value.field == "asOf"
    assert str(info.value).startswith("asOf: must be an RFC 3339 timestamp")
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-30T12:00:05.123Z", datetime(2026, 11, 30, 12, 0, 5, 123999, tzinfo=timezone.utc)),
    ("2026-11-30t12:00:05.1z", datetime(2026, 11, 30, 12, 0, 5, 100999, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05Z", datetime(2026, 11, 30, 12, 0, 5, 999, tzinfo=timezone.utc)),
    ("2026-11-30T14:00:05.123+02:00", datetime(2026, 11, 30, 12, 0, 5, 123999, tzinfo=timezone.utc)),
    ("9999-12-31T23:59:59.999Z", datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)),
])
def test_an_as_of_to_the_millisecond_or_coarser_means_the_end_of_that_millisecond(text: str,
                                                                                   expected: datetime) -> None:
    t = parse_as_of("asOf", text)
    assert t == expected and t.tzinfo == timezone.utc
    assert rfc3339(t) == rfc3339(parse_rfc3339("asOf", text))  # the millisecond Relay prints


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-30T12:00:05.1234Z", datetime(2026, 11, 30, 12, 0, 5, 123400, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05.123000Z", datetime(2026, 11, 30, 12, 0, 5, 123000, tzinfo=timezone.utc)),
    ("2026-11-30T12:00:05.123456789-01:00", datetime(2026, 11, 30, 13, 0, 5, 123456, tzinfo=timezone.utc)),
])
def test_a_finer_as_of_is_taken_as_is(text: str, expected: datetime) -> None:
    assert parse_as_of("asOf", text) == expected


def test_every_at_relay_prints_as_of_itself_includes_the_instant() -> None:
    import random

    rng = random.Random(7)
    for _ in range(2000):
        t = EPOCH + timedelta(microseconds=rng.randrange(2**52))
        assert parse_as_of("asOf", rfc3339(t)) >= t > parse_as_of("asOf", rfc3339(t - timedelta(milliseconds=1)))


@pytest.mark.parametrize("text", [
    "2026-12-06 14:00:00Z", "20261206T140000Z", "2026-12-06T14Z", "2026-12-06T14:00Z", "2026-12-06T14:00:00\x00Z",
    "2026-12-06T14:00:00Z\n", " 2026-12-06T14:00:00Z", "2026-W49-7T14:00:00Z", "2026-12-06T14:00:00.Z",
    "2026-12-06T14:00:00+0000", "2026-12-06T14:00:00+00", "\u0662026-12-06T14:00:00Z", "2026-12-06T14:00:00",
    "2026-12-06", "yesterday", "", "2026-13-01T00:00:00Z", "2026-12-06T14:00:60Z", None, 1796040005123,
    "2026-12-06T14:00:00+00:60", "2026-12-06T14:00:00+00:99", "2026-12-06T14:00:00+24:00", "2026-12-06T14:60:00Z",
])
def test_an_as_of_is_strictly_rfc_3339(text: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        parse_as_of("asOf", text)
    assert info.value.field == "asOf"
    assert str(info.value).startswith("asOf: must be an RFC 3339 timestamp") and repr(str(text)) in str(info.value)
