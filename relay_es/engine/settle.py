"""The settle window after a restart: how long the process manager enforces nothing.

A Relay that starts finds executors that were HEALTHY on the Relay that stopped, and
deadlines that passed while it was down. For ``settle`` seconds after start it lets them
reconnect and enforces nothing. Past its planned end the window stays open, a second at a
time, while executors are still being re-admitted fast (at least ``busy_per_s`` a second,
or 1 % of the executors that were HEALTHY on the stopped Relay, if more), up to
``max_factor`` x ``settle``: a Relay working through a reconnect storm must not count
against the executors the time it takes to let them back in.

Pure bookkeeping on monotonic seconds given by the caller: no clock, no I/O.
"""

from __future__ import annotations

import logging
from collections import deque

log = logging.getLogger(__name__)


class SettleWindow:
    """Open from :meth:`start` until :meth:`is_open` first answers False; then closed for good."""

    def __init__(self, settle: float, *, busy_per_s: float, max_factor: float) -> None:
        self.settle = settle
        self.busy_per_s = busy_per_s
        self.max_factor = max_factor
        self.until = 0.0  # monotonic end of the window as it stands (moves while kept open)
        self._planned = 0.0
        self._cap = 0.0
        self._orphans = 0
        self._readmitted: deque[float] = deque()
        self.closed = False
        self.extension = 0.0  # how long past its planned end the window was kept open, once closed

    def start(self, now: float, orphans: int = 0) -> None:
        """Opens the window at ``now``. ``orphans``: executors HEALTHY on the stopped Relay."""
        self.until = self._planned = now + self.settle
        self._cap = now + self.max_factor * self.settle
        self._orphans = orphans

    def set_orphans(self, orphans: int) -> None:
        self._orphans = orphans

    def readmitted(self, now: float) -> None:
        """An executor was let back in at ``now`` (counted while the window is open)."""
        if not self.closed:
            self._readmitted.append(now)

    def is_open(self, now: float) -> bool:
        """Whether nothing may be enforced yet at ``now``; closes the window for good when it ends."""
        if self.closed:
            return False
        if now < self.until:
            return True
        readmitted = self._readmitted
        while readmitted and readmitted[0] < now - 1.0:
            readmitted.popleft()
        busy = max(self.busy_per_s, 0.01 * self._orphans)
        if len(readmitted) >= busy and now < self._cap:
            self.until = min(now + 1.0, self._cap)
            return True
        self.closed = True
        self._readmitted.clear()
        self.extension = max(0.0, self.until - self._planned)
        if self.extension:
            log.info("settle window kept open %.1fs longer while executors reconnected", self.extension)
        return False

    def not_before(self, at: float) -> float:
        """``at``, or the window's end if later (nothing is enforced before it)."""
        return max(at, self.until)
