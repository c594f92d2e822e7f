"""The settle window after a restart: how long the process manager enforces nothing.

A Relay that starts finds executors that were HEALTHY on the Relay that stopped (orphans),
and deadlines that passed while it was down. For ``settle`` seconds after start it lets
them reconnect and enforces nothing. Past its planned end the window stays open, a second at
a time, while executors are still being let back in: at least ``busy_per_s`` a second over
the last ``span`` seconds (the process manager's ``Timing.settle_span``, 16 s: a storm comes
in waves, as the clients' connection attempts that a full listen queue dropped are retried
by TCP 1, 3, 7 and 15 s later; in a storm of 19,500 on the 2-core machine, 838 sockets were
admitted in the first 13 s and none in the 5 s after). Two measures count, whichever is faster:

- the Connected events of this Relay the process manager has followed (:meth:`readmitted`);
- the executor sockets this Relay's hub admitted (:meth:`admitted`), which run ahead of the
  log, and of the executors' registration, when the process is the slower part: in a storm of
  19,500 on the 2-core machine the first registration came 16 s after the kill, and the log
  showed none for some 50 s.

While there are orphans and not one executor has come back yet, it stays open too: they
were HEALTHY when Relay stopped, so it is Relay's restart they are waiting for (their
reconnect backoff, a listen queue that overflowed), not their own death; when everything
looks dead at once, the observer is the likelier fault (Kubernetes' node controller stops
evicting in a zone that is wholly NotReady for the same reason). In a storm of 19,500 on the
2-core machine the first socket was admitted more than 5 s after start. When the orphans are
a storm (at least ``busy_per_s`` x ``span`` of them: enough to hold a pace), it stays open for
a whole ``span`` after the first came back: the pace is measured over a span, and the first of a
storm may come back a moment before the planned end (on a loaded run of 19,500 one socket was
admitted by then; the window, closing on a pace of 1 in 16 s, recorded every orphan
Disconnected, and 19,464 were declared dead). A few orphans come back within a second or two
or not at all: for them the window keeps its plan.

A Relay that found nothing at start the window could protect -- no orphan, no deadline that
could come due while the window may be open, no recovery still to be sent or answered (a
dispatch outstanding is one) -- closes it at once (:meth:`set_held`): the
executors it admits then are a fleet arriving, not coming back, and any deadline it would hold
is one this Relay observed itself, which the window is not for (on 2026-12-04 a Relay whose store
held only executors DISCONNECTED a week from their deadline held every death of the fleet
connecting in its window to the cap, 20 s after start; until 2026-12-07 it kept to its plan, so an
application whose grace was shorter than the window had a death that came due in it held to its
end: 11 s late with a 1 s grace and a 12 s window).

It closes at the latest when every orphan would have been back at ``busy_per_s`` a second
or 1 % of them a second, if more: ``settle + orphans / rate`` after start, at most
``settle`` + 100 s, and never before ``max_factor`` x ``settle`` (with 19,500 orphans:
105 s). A Relay working through a reconnect storm must not count against the executors the
time it takes to let them back in; an orphan that does not come back is recorded
Disconnected when the window closes, its grace counted from start plus the window's
extension.

Pure bookkeeping on monotonic seconds given by the caller: no clock, no I/O.
"""

from __future__ import annotations

import logging
from collections import deque

log = logging.getLogger(__name__)

STEP = 1.0  # seconds the window is kept open at a time
ORPHAN_SHARE = 0.01  # of the orphans, a second: the rate the cap assumes, when above busy_per_s


class SettleWindow:
    """Open from :meth:`start` until :meth:`is_open` first answers False; then closed for good."""

    def __init__(self, settle: float, *, busy_per_s: float, max_factor: float, span: float = 1.0) -> None:
        """``span``: the seconds over which the pace is measured (a reconnect storm comes in waves)."""
        self.settle = settle
        self.span = max(span, STEP)
        self.busy_per_s = busy_per_s
        self.max_factor = max_factor
        self.until = 0.0  # monotonic end of the window as it stands (moves while kept open)
        self._started = 0.0
        self._planned = 0.0
        self.cap = 0.0  # the latest it closes
        self._orphans = 0
        self._held: int | None = None  # what the window protects besides orphans (None: not told, assume some)
        self._readmitted: deque[float] = deque()
        self._admitted: deque[tuple[float, int]] = deque()  # (when, sockets admitted so far), oldest first
        self._first_admitted: int | None = None  # the hub's count at the first sample
        self.anyone_back = False  # an executor was admitted or readmitted since start
        self._back_at: float | None = None  # when the first was
        self.closed = False
        self.extension = 0.0  # how long past its planned end the window was kept open, once closed

    def start(self, now: float, orphans: int = 0) -> None:
        """Opens the window at ``now``. ``orphans``: executors HEALTHY on the stopped Relay."""
        self._started = now
        self.until = self._planned = now + self.settle
        self.set_orphans(orphans)

    def set_orphans(self, orphans: int) -> None:
        self._orphans = orphans
        rate = max(self.busy_per_s, ORPHAN_SHARE * orphans)
        self.cap = self._started + max(self.max_factor * self.settle, self.settle + orphans / rate)

    def set_held(self, held: int) -> None:
        """``held``: timers found at start, besides the orphans, that could come due while the window
        may be open (deadlines before :attr:`cap`, recoveries not yet confirmed). With none of those and no orphan, the window closes at once (at
        :meth:`is_open`'s next call)."""
        self._held = held

    def readmitted(self, now: float) -> None:
        """An executor was let back in at ``now``, as the log says (counted while the window is open)."""
        if not self.closed:
            self._readmitted.append(now)
            self._came_back(now)

    def _came_back(self, now: float) -> None:
        if not self.anyone_back:
            self.anyone_back = True
            self._back_at = now

    def admitted(self, now: float, total: int) -> None:
        """The hub has admitted ``total`` executor sockets since start, as of ``now`` (counted while open)."""
        if self.closed:
            return
        samples = self._admitted
        if self._first_admitted is None:
            self._first_admitted = total
        elif total > self._first_admitted:
            self._came_back(now)
        if len(samples) >= 2 and samples[-1][1] == samples[-2][1] == total:
            samples[-1] = (now, total)  # still no news: the quiet span ends later
        else:
            samples.append((now, total))
        while len(samples) > 1 and samples[1][0] <= now - self.span:  # a later one will do as the base
            samples.popleft()

    def _hub_pace(self, now: float) -> float:
        """Admissions a second over the last :attr:`span` seconds; the count at its start read
        between the samples around it (a straight line: the process manager samples at least
        once a second), or from the oldest sample over at least the span if none is that old."""
        samples = list(self._admitted)
        if not samples:
            return 0.0
        t = now - self.span
        t0, n0 = samples[0]
        if t0 >= t:
            return (samples[-1][1] - n0) / max(now - t0, self.span)
        base = float(n0)
        for (ta, na), (tb, nb) in zip(samples, samples[1:]):
            if tb <= t:
                base = nb
                continue
            base = na + (nb - na) * (t - ta) / (tb - ta)
            break
        return (samples[-1][1] - base) / self.span

    def is_open(self, now: float) -> bool:
        """Whether nothing may be enforced yet at ``now``; closes the window for good when it ends."""
        if self.closed:
            return False
        if self._orphans == 0 and self._held == 0:  # nothing found at start to protect
            self.closed = True
            log.info("settle window closed %.1fs after start: nothing found at start that it could protect",
                     now - self._started)
            self._readmitted.clear()
            self._admitted.clear()
            return False
        if now < self.until:
            return True
        readmitted = self._readmitted
        while readmitted and readmitted[0] < now - self.span:
            readmitted.popleft()
        pace = self.busy_per_s
        # Nobody back yet though orphans were HEALTHY when Relay stopped: Relay's restart, not the executors,
        # is what they wait for (their reconnect backoff, a slow start); wait for the first, up to the cap.
        waiting_for_first = self._orphans > 0 and not self.anyone_back
        # A storm's first are back: a whole span from them before a pace may close it.
        first_span = (self._orphans >= pace * self.span and self._back_at is not None
                      and now < self._back_at + self.span)
        hub_pace = self._hub_pace(now)
        if (waiting_for_first or first_span or len(readmitted) >= pace * self.span or hub_pace >= pace) \
                and now < self.cap:
            self.until = min(now + STEP, self.cap)
            return True
        self.closed = True
        self.extension = max(0.0, self.until - self._planned)
        log.info("settle window closed %.1fs after start (%.1fs past its plan): %d orphans, %d readmissions "
                 "followed and %.0f sockets a second admitted over the last %gs (%d since start); %g a second "
                 "would have kept it open", now - self._started, self.extension, self._orphans, len(readmitted),
                 hub_pace, self.span, self._admitted[-1][1] if self._admitted else 0, pace)
        self._readmitted.clear()
        self._admitted.clear()
        return False

    def not_before(self, at: float) -> float:
        """``at``, or the window's end if later while it is open (nothing is enforced before it)."""
        return at if self.closed else max(at, self.until)
