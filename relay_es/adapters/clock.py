"""The system clock: wall time from ``datetime.now(UTC)``, waits on ``time.monotonic``."""

from __future__ import annotations

import time
from datetime import datetime, timezone


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()
