"""The settle window after a restart: how long the process manager enforces nothing.

A Relay that starts finds executors that were HEALTHY on the Relay that stopped (orphans),
and deadlines that passed while it was down. For ``settle`` seconds after start it lets
them reconnect and enforces nothing. Past its planned end the window stays open, a second at
a time, while executors are still being let back in fast: at least ``busy_per_s`` a second,
or 1 % of the orphans, if more. Two measures count, whichever is faster:

- the Connected events of this Relay the process manager has followed (:meth:`readmitted`);
- the registrations at this Relay's hub (:meth:`registered`), which run ahead of the log
  when the store is the slower part: in a storm of 19,500 the log showed none for 50 s
  while the hub was letting them in.

It closes at the latest when, at that minimum pace, every orphan would have been back:
``settle + orphans / pace`` after start, and never before ``max_factor`` x ``settle``
(with 19,500 orphans: 195 a second, 105 s). A Relay working through a reconnect storm
must not count against the executors the time it takes to let them back in; an orphan
that does not come back is recorded Disconnected when the window closes, its grace counted
from start plus the window's extension.

Pure bookkeeping on monotonic seconds given by the caller: no clock, no I/O.
"""

from __future__ import annotations

import logging
from collections import deque

log = logging.getLogger(__name__)

PACE_SPAN = 1.0  # seconds over which the pace is measured
ORPHAN_SHARE = 0.01  # of the orphans, a second: the pace that keeps the window open, when above busy_per_s


class SettleWindow:
    """Open from :meth:`start` until :meth:`is_open` first answers False; then closed for good."""

    def __init__(self, settle: float, *, busy_per_s: float, max_factor: float) -> None:
        self.settle = settle
        self.busy_per_s = busy_per_s
        self.max_factor = max_factor
        self.until = 0.0  # monotonic end of the window as it stands (moves while kept open)
        self._started = 0.0
        self._planned = 0.0
        self.cap = 0.0  # the latest it closes
        self._orphans = 0
        self._readmitted: deque[float] = deque()
        self._registered: deque[tuple[float, int]] = deque()  # (when, registrations so far), oldest first
        self.closed = False
        self.extension = 0.0  # how long past its planned end the window was kept open, once closed

    def start(self, now: float, orphans: int = 0) -> None:
        """Opens the window at ``now``. ``orphans``: executors HEALTHY on the stopped Relay."""
        self._started = now
        self.until = self._planned = now + self.settle
        self.set_orphans(orphans)

    def set_orphans(self, orphans: int) -> None:
        self._orphans = orphans
        self.cap = self._started + max(self.max_factor * self.settle, self.settle + orphans / self.pace())

    def pace(self) -> float:
        """Executors let back in per second that keep the window open."""
        return max(self.busy_per_s, ORPHAN_SHARE * self._orphans)

    def readmitted(self, now: float) -> None:
        """An executor was let back in at ``now``, as the log says (counted while the window is open)."""
        if not self.closed:
            self._readmitted.append(now)

    def registered(self, now: float, total: int) -> None:
        """The hub has registered ``total`` executors since start, as of ``now`` (counted while open)."""
        if self.closed:
            return
        samples = self._registered
        if samples and samples[-1][1] == total:
            return  # no news: the older sample keeps the span
        samples.append((now, total))
        while len(samples) > 1 and samples[1][0] <= now - PACE_SPAN:  # a later one will do as the base
            samples.popleft()

    def _hub_pace(self, now: float) -> float:
        """Registrations a second since the last sample at least :data:`PACE_SPAN` before ``now``
        (or the oldest there is), over at least that span."""
        samples = self._registered
        if not samples:
            return 0.0
        base = samples[0]
        for sample in reversed(samples):
            if sample[0] <= now - PACE_SPAN:
                base = sample
                break
        return (samples[-1][1] - base[1]) / max(now - base[0], PACE_SPAN)

    def is_open(self, now: float) -> bool:
        """Whether nothing may be enforced yet at ``now``; closes the window for good when it ends."""
        if self.closed:
            return False
        if now < self.until:
            return True
        readmitted = self._readmitted
        while readmitted and readmitted[0] < now - PACE_SPAN:
            readmitted.popleft()
        pace = self.pace()
        if (len(readmitted) >= pace or self._hub_pace(now) >= pace) and now < self.cap:
            self.until = min(now + PACE_SPAN, self.cap)
            return True
        self.closed = True
        self._readmitted.clear()
        self._registered.clear()
        self.extension = max(0.0, self.until - self._planned)
        if self.extension:
            log.info("settle window kept open %.1fs longer while executors reconnected", self.extension)
        return False

    def not_before(self, at: float) -> float:
        """``at``, or the window's end if later (nothing is enforced before it)."""
        return max(at, self.until)
