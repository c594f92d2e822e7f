"""The system clock, and the steppable one the fault suite moves through a file."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from relay_es.adapters.clock import SteppableClock, SystemClock, system_clock


def test_the_system_clock_reads_aware_utc_and_a_monotonic_clock() -> None:
    c = SystemClock()
    before = datetime.now(timezone.utc)
    now = c.now()
    after = datetime.now(timezone.utc)
    assert now.tzinfo is timezone.utc
    assert before <= now <= after
    m1 = c.monotonic()
    m2 = c.monotonic()
    assert m2 >= m1
    assert abs(m1 - time.monotonic()) < 5


def test_the_steppable_clock_adds_the_offset_in_the_file_to_the_wall_clock_only(tmp_path) -> None:
    f = tmp_path / "offset"
    f.write_text("-3600\n")
    c = SteppableClock(str(f))
    now = c.now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert abs((datetime.now(timezone.utc) - timedelta(hours=1) - now).total_seconds()) < 5
    assert abs(c.monotonic() - time.monotonic()) < 5  # never offset, as with an NTP step


def test_the_steppable_clock_follows_the_file_as_it_changes(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "offset"
    f.write_text("0")
    mono = [100.0]
    monkeypatch.setattr("relay_es.adapters.clock.time.monotonic", lambda: mono[0])
    c = SteppableClock(str(f))
    assert abs((c.now() - datetime.now(timezone.utc)).total_seconds()) < 5
    f.write_text("86400")
    mono[0] += 0.01  # read again at most every 50 ms
    assert abs((c.now() - datetime.now(timezone.utc)).total_seconds()) < 5
    mono[0] += 0.1
    assert abs((c.now() - datetime.now(timezone.utc) - timedelta(days=1)).total_seconds()) < 5
    assert c.monotonic() == mono[0]  # the monotonic clock is the system's, offset never applied


def test_a_missing_or_unreadable_file_keeps_the_last_offset(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "offset"
    mono = [100.0]
    monkeypatch.setattr("relay_es.adapters.clock.time.monotonic", lambda: mono[0])
    c = SteppableClock(str(f))

    def offset() -> float:
        mono[0] += 1  # past the 50 ms between reads
        return (c.now() - datetime.now(timezone.utc)).total_seconds()

    assert abs(offset()) < 5  # no file: no offset
    f.write_text("60")
    assert abs(offset() - 60) < 5
    f.write_text("not a number")
    assert abs(offset() - 60) < 5
    f.unlink()
    assert abs(offset() - 60) < 5


def test_the_process_clock_is_steppable_only_when_the_fault_suite_asks(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("RELAY_FAULT_WALL_OFFSET_FILE", raising=False)
    assert type(system_clock()) is SystemClock
    monkeypatch.setenv("RELAY_FAULT_WALL_OFFSET_FILE", str(tmp_path / "offset"))
    c = system_clock()
    assert isinstance(c, SteppableClock) and c.path == str(tmp_path / "offset")
