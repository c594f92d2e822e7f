"""The clock interface.

Relay reads time in exactly two ways, both through a :class:`Clock`:

* ``now()`` -- the wall clock, an aware UTC ``datetime``. Every timestamp in
  every event comes from here, and so does every persisted deadline.
* ``monotonic()`` -- seconds on a clock that never steps. Every *wait* is
  measured on it, so a wall-clock step cannot make a timer fire early.

The system implementation lives in :mod:`relay_es.adapters.clock`; tests use
:class:`FakeClock`, which only moves when told to.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class FakeClock:
    """A clock that moves only when a test says so.

    ``advance`` moves both clocks together; ``step_wall`` jumps only the wall
    clock, as an NTP correction or an operator would.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._wall = start or datetime(2026, 11, 30, 12, 0, 0, 123457, tzinfo=timezone.utc)  # odd microseconds: precision bugs show
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not run backwards; use step_wall")
        self._wall += timedelta(seconds=seconds)
        self._mono += seconds

    def step_wall(self, seconds: float) -> None:
        self._wall += timedelta(seconds=seconds)
