"""The system clock: wall time from ``datetime.now(UTC)``, waits on ``time.monotonic``."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()


class SteppableClock(SystemClock):
    """The system clock plus a wall-clock offset read from a file: how the
    fault suite steps Relay's wall clock without touching the machine's.

    Enabled only by ``RELAY_FAULT_WALL_OFFSET_FILE`` (seconds, may be
    negative). ``monotonic()`` is never offset, exactly as with an NTP step.
    (libfaketime cannot do this for Python: with the monotonic clock left
    unfaked, ``time.sleep`` fails with EINVAL.)
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._checked = 0.0
        self._offset = timedelta(0)

    def now(self) -> datetime:
        mono = time.monotonic()
        if mono - self._checked > 0.05:
            self._checked = mono
            try:
                with open(self.path) as f:
                    self._offset = timedelta(seconds=float(f.read().strip() or 0))
            except (OSError, ValueError):
                pass
        return datetime.now(timezone.utc) + self._offset


def system_clock() -> SystemClock:
    path = os.environ.get("RELAY_FAULT_WALL_OFFSET_FILE")
    return SteppableClock(path) if path else SystemClock()
