"""Unit discipline at the boundary.

Inside Relay every duration is a :class:`datetime.timedelta` and every row count
an ``int``. The Conductor REST contract is heterogeneous: ``executorTimeoutSecs``
is whole **seconds**, ``gcTimeThresholdMs`` and ``globalTimeoutMs`` are
**milliseconds**, ``gcRowsThreshold`` is a **row count**. The functions here are
the only places where a number on the wire becomes a duration and back; each
refuses bad input with an :class:`InvalidSetting` that names the field and the
unit.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from relay_es.domain.errors import InvalidSetting

# Upper bounds that refuse absurd values while allowing every sane one.
MAX_EXECUTOR_TIMEOUT = timedelta(days=7)
MAX_RETENTION = timedelta(days=3650)
MAX_ROWS = 10**12


def _whole_number(field: str, value: object, unit: str) -> int:
    # bool is an int in Python; JSON true is not a number of seconds.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidSetting(
                field, f"must be a whole number of {unit}, got {value!r}"
            )
    return value


def seconds_to_duration(
    field: str, value: object, *, minimum: int = 1, maximum: timedelta
) -> timedelta:
    n = _whole_number(field, value, "seconds")
    if n < minimum:
        raise InvalidSetting(field, f"must be at least {minimum} second(s), got {n}")
    if n > maximum.total_seconds():
        raise InvalidSetting(
            field, f"must be at most {int(maximum.total_seconds())} seconds, got {n}"
        )
    return timedelta(seconds=n)


def millis_to_duration(
    field: str, value: object, *, minimum: int = 1, maximum: timedelta
) -> timedelta:
    n = _whole_number(field, value, "milliseconds")
    if n < minimum:
        raise InvalidSetting(
            field, f"must be at least {minimum} millisecond(s), got {n}"
        )
    limit = int(maximum.total_seconds() * 1000)
    if n > limit:
        raise InvalidSetting(field, f"must be at most {limit} milliseconds, got {n}")
    return timedelta(milliseconds=n)


def rows(field: str, value: object, *, minimum: int = 1, maximum: int = MAX_ROWS) -> int:
    n = _whole_number(field, value, "rows")
    if n < minimum:
        raise InvalidSetting(field, f"must be at least {minimum} row(s), got {n}")
    if n > maximum:
        raise InvalidSetting(field, f"must be at most {maximum} rows, got {n}")
    return n


def duration_to_seconds(d: timedelta) -> int:
    return int(d.total_seconds())


def duration_to_millis(d: timedelta) -> int:
    return d // timedelta(milliseconds=1)


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)


def to_epoch_ms(t: datetime) -> int:
    return (t - EPOCH) // _MS


def from_epoch_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def to_epoch_us(t: datetime) -> int:
    return (t - EPOCH) // _US


def from_epoch_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def rfc3339(t: datetime | None) -> str | None:
    """RFC 3339, UTC, millisecond precision, ``Z`` suffix: 2026-11-30T12:00:05.123Z."""
    if t is None:
        return None
    if t.tzinfo is not timezone.utc:
        t = t.astimezone(timezone.utc)
    # What isoformat(timespec="milliseconds") gives less its "+00:00", in half the time (no utcoffset
    # call): a rebuild formats a deadline for every Disconnected (5% of its CPU before).
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond // 1000)


# RFC 3339's date-time (section 5.6), nothing looser: ASCII digits, "T", seconds, an optional
# fraction, then "Z" or a numeric offset.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-5][0-9]:[0-9]{2}(\.[0-9]+)?([Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
# The same without its offset (or without its time): told apart only for a clearer error.
_LOCAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?")


def parse_rfc3339(field: str, text: object) -> datetime:
    """The instant a strictly RFC 3339 date-time names, in UTC, to the microsecond (further
    digits dropped); an :class:`InvalidSetting` naming ``field`` for anything else (a space for
    the "T", a missing offset, a week date: what ``datetime.fromisoformat`` alone takes)."""
    if not isinstance(text, str):
        raise InvalidSetting(field, f"must be an RFC 3339 timestamp string, got {str(text)[:64]!r}")
    m = _RFC3339.fullmatch(text)
    if m is None:
        if _LOCAL.fullmatch(text):
            raise InvalidSetting(field, f"must carry a UTC offset, got {text!r}")
        raise InvalidSetting(field, f"must be an RFC 3339 timestamp, got {text[:64]!r}")
    fraction = (m.group(1) or "")[:7]
    offset = m.group(2)
    try:
        t = datetime.fromisoformat(text[:19] + fraction + ("+00:00" if offset in "Zz" else offset))
    except ValueError:
        raise InvalidSetting(field, f"must be an RFC 3339 timestamp, got {text!r}") from None
    try:
        return t.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidSetting(field, f"is out of range: {text!r}") from None


def parse_as_of(field: str, text: object) -> datetime:
    """The last instant a strictly RFC 3339 date-time names, in UTC; an :class:`InvalidSetting`
    naming ``field`` for anything else.

    Relay prints instants to the millisecond (:func:`rfc3339`), so a time given to the
    millisecond or coarser means the end of that millisecond (its last microsecond): the ``at``
    of an event, given back, includes that event. A finer time is the instant itself, to the
    microsecond (further digits dropped)."""
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise InvalidSetting(field, f"must be an RFC 3339 timestamp (2026-11-30T12:00:05.123Z), "
                                    f"got {str(text)[:64]!r}")
    t = parse_rfc3339(field, text)
    return t if len(m.group(1) or "") > 4 else t.replace(microsecond=t.microsecond + 999)  # within its millisecond
