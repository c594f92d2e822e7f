"""Which windows of an application's metrics to ask its executors for, and when (pure).

Relay collects the executors' ``get_metrics`` in buckets aligned on the epoch: with a
period ``p`` (seconds), bucket ``k`` is ``[k*p, (k+1)*p)``. A bucket is asked for once it
is complete and ``lag`` more seconds have passed (a workflow created just before the
boundary is committed by then). Each application has a cursor, the end of the last window
stored (kept with the series, ``adapters/series.py``); the next collection asks every
complete bucket from the cursor on, oldest first (a bucket is asked for once: a row an
executor commits later than the lag after the bucket's end, or stamps with a clock running
more than the lag behind Relay's, is not counted), so a restart or an executor that did
not answer loses nothing: the missed buckets are asked for later, up to ``catchup`` of
them (older ones are skipped: a gap). An application seen for the first time starts
``backfill`` buckets back, or at its registration if that is later (``floor``: what its
executors' system database holds from before may be a deleted application's of that name),
its first window then running to the next boundary. After a change of period the first
window runs from the cursor to the next boundary of the new period, so windows never
overlap and each one's length is its ``granularity``.

The time the windows are cut from, and the samples pruned by, is a
:class:`~relay_es.domain.clock.Timeline`'s: the
wall clock, but never ahead of where it stood moved on by the monotonic clock. A wall clock
stepped ahead for one collection would otherwise ask for buckets the executors (on their own,
right, clocks) have not reached, move the cursor past the real ones for good, and prune the
history of that much time.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

BACKFILL = 12  # buckets asked for an application seen for the first time
CATCHUP = 288  # at most this many missed buckets are asked for in one collection (a day at 5 min)


@dataclass(frozen=True)
class Window:
    """``[start, end)`` in whole epoch seconds."""

    start: int
    end: int

    @property
    def granularity(self) -> int:
        return self.end - self.start


def lag_of(period: int) -> int:
    """Seconds a complete bucket waits before it is asked for: a fifth of the period, from 1 to 5."""
    return min(5, max(1, period // 5))


def spread(app: tuple[str, str], period: int) -> float:
    """How much later than the others an application's collection runs (a fixed fraction of
    the period, at most 60 s, from its name), so that a store serving many applications is not
    asked for all of them at the same instant."""
    return zlib.crc32("/".join(app).encode()) / 2**32 * min(period / 2, 60.0)


def due(cursor: int | None, now: float, period: int, *, backfill: int = BACKFILL,
        catchup: int = CATCHUP, floor: int | None = None) -> list[Window]:
    """The windows to ask for at ``now`` (epoch seconds), oldest first. ``floor``: with no cursor,
    where the first window starts at the earliest (the application's registration)."""
    if period < 1:
        raise ValueError("period must be at least 1 second")
    last_end = int((now - lag_of(period)) // period) * period  # the end of the newest complete bucket
    if cursor is None:
        cursor = last_end - backfill * period if floor is None else max(last_end - backfill * period, floor)
    if cursor >= last_end:
        return []
    first = -(-cursor // period) * period  # the first boundary at or after the cursor
    oldest = last_end - catchup * period
    out: list[Window] = []
    if first > cursor and cursor >= oldest:
        out.append(Window(cursor, first))  # the rest of a bucket of an older period
    start = max(first, oldest)
    out.extend(Window(s, s + period) for s in range(start, last_end, period))
    return out


def seconds_until_next(now: float, period: int) -> float:
    """How long from ``now`` until the next bucket may be asked for (its end plus the lag)."""
    lag = lag_of(period)
    nxt = (int((now - lag) // period) + 1) * period + lag
    return max(0.0, nxt - now)
