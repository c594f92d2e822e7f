"""The clock interface.

Relay reads time in exactly two ways, both through a :class:`Clock`:

* ``now()`` -- the wall clock, an aware UTC ``datetime``. Every timestamp in
  every event comes from here, and so does every persisted deadline.
* ``monotonic()`` -- seconds on a clock that never steps. Every *wait* is
  measured on it, so a wall-clock step cannot make a timer fire early.

The system implementation lives in :mod:`relay_es.adapters.clock`; tests use
:class:`FakeClock`, which only moves when told to. A :class:`Timeline` reads the two together
where a wall clock stepped ahead must not be followed (metric windows, retention plans).
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


class Timeline:
    """The wall clock, but never ahead of the lowest reading of it seen, moved on by the monotonic
    clock since (the rule of the process manager's retention plans). A wall clock stepped back is
    followed; one stepped forward is not, until a restart (:attr:`ahead` says by how much)."""

    def __init__(self, wall: float, monotonic: float) -> None:
        """``wall``: epoch seconds; ``monotonic``: the monotonic clock's reading at the same instant."""
        self._wall = wall
        self._monotonic = monotonic
        self.ahead = 0.0  # how far the last wall reading was ahead of now(), seconds

    def now(self, wall: float, monotonic: float) -> float:
        """The time at a reading of both clocks, epoch seconds."""
        now = min(wall, self._wall + (monotonic - self._monotonic))
        self._wall, self._monotonic = now, monotonic
        self.ahead = wall - now
        return now
