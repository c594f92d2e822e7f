"""How much work that can wait fits before the next deadline is due.

The process manager goes round in rounds (:meth:`~relay_es.engine.process_manager.ProcessManager.step`):
every deadline due is recorded first, then a chunk of the work that can wait (recovery
dispatches, answers to record). A chunk is one transaction, and a death that comes due while
one is being recorded waits for it: measured on 2026-12-04 (10,000 deadlines within a second, the
benchmark's section 3), a chunk of 250 dispatches took 60-70 ms and a batch of 500 answers
75-145 ms, and a third of the death storm's time went to them between the rounds of deaths.

So the work that can wait has two :class:`Pace` s, one for the chunks of timers (whatever their
kinds: dispatches, response timeouts, schedules) and one for the batches of answers: the seconds
an item took, a weighted mean of the last measurements, and from that how many items fit in the
time left until the next deadline. With no
deadline near (or nothing measured yet: a clock that does not move, as the tests' own) a chunk
is as large as ever; with deadlines due back to back it is a small share of that
(:data:`FLOOR_SHARE`), never none, so the work that can wait still goes on through the longest
storm of deaths.

Pure: the caller measures with its own clock.
"""

from __future__ import annotations

FLOOR_SHARE = 25  # with no time to spare, a chunk is 1/FLOOR_SHARE of its full size (at least one item)
WEIGHT = 0.3  # how far one measurement moves the estimate (an exponentially weighted mean)
# Below this many seconds an item, the pace is as good as unmeasured (a clock that did not move: a coarse
# monotonic clock, the tests' fake one): a mean decaying towards zero must not make the count overflow.
RESOLUTION = 1e-9


class Pace:
    """Seconds per item of one kind of work, and how many items fit in some seconds."""

    __slots__ = ("per_item",)

    def __init__(self) -> None:
        self.per_item: float | None = None

    def took(self, items: int, seconds: float) -> None:
        """``items`` were done in ``seconds``."""
        if items < 1 or not seconds >= 0:  # nothing done, a clock stepped back, or not a number
            return
        per = seconds / items
        self.per_item = per if self.per_item is None else self.per_item + WEIGHT * (per - self.per_item)

    def fitting(self, slack: float | None, cap: int) -> int:
        """How many items to take with ``slack`` seconds left before a deadline (None: none is
        armed): as many as fit at the measured pace, at most ``cap`` and at least
        ``cap // FLOOR_SHARE`` (one, if that is less)."""
        if cap < 1:
            raise ValueError("cap must be at least 1")
        if slack is None or self.per_item is None or self.per_item < RESOLUTION:
            return cap
        floor = max(1, cap // FLOOR_SHARE)
        if not slack > 0:
            return floor
        fit = slack / self.per_item  # a float: compared with the cap before it is made an int
        return cap if fit >= cap else max(floor, int(fit))
