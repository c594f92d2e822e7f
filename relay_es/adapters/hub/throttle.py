"""One throttle for everything the hub repeats on a hostile peer's behalf.

The hub audits and logs refusals and protocol violations, and answers
repeated refusals more and more slowly. Each of those is keyed (by address,
by org/app/kind...) and a hostile client chooses the keys, so the table must
not grow without end: a key quiet for a whole window is forgotten, but for
the count of hits it held back, which its next hit (it passes) reports; and
the table never holds more than ``max_keys`` keys, counts included (the least
recently seen go first, counts before entries).

Pure but for the clock, which is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    passed: bool  # the first of its window: audit it, log it
    suppressed: int  # when passed: how many hits were held back since the last that passed
    strikes: int  # hits of this key before this one, without a quiet window between them


class _Entry:
    __slots__ = ("passed_at", "seen_at", "suppressed", "strikes")

    def __init__(self, now: float) -> None:
        self.passed_at = now
        self.seen_at = now
        self.suppressed = 0
        self.strikes = 0


class Throttle:
    """Per key: one hit per ``window`` seconds passes, the rest are counted into the next that
    passes. A key not hit for ``window`` seconds is forgotten (its strikes too) but for that count."""

    def __init__(self, window: float, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000) -> None:
        self.window = window
        self.clock = clock
        self.max_keys = max_keys
        self._entries: dict[Hashable, _Entry] = {}  # least recently seen first
        # Keys forgotten with hits held back -> how many, for their next hit to report; oldest first.
        self._held: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._entries) + len(self._held)

    def hit(self, key: Hashable) -> Hit:
        now = self.clock()
        e = self._entries.pop(key, None)
        held = self._held.pop(key, 0)
        self._prune(now)  # leaves room for this key
        if e is None or now - e.seen_at > self.window:
            if e is not None:
                held = e.suppressed  # quiet for a window: what it held back passes now
            self._entries[key] = _Entry(now)
            return Hit(True, held, 0)
        e.strikes += 1
        e.seen_at = now
        self._entries[key] = e  # to the end: most recently seen
        if now - e.passed_at >= self.window:
            suppressed, e.suppressed, e.passed_at = e.suppressed, 0, now
            return Hit(True, suppressed, e.strikes)
        e.suppressed += 1
        return Hit(False, 0, e.strikes)

    def forget(self, key: Hashable) -> None:
        self._entries.pop(key, None)
        self._held.pop(key, None)

    def _prune(self, now: float) -> None:
        """Forgets the keys quiet for a window (keeping the count of the hits each held back) and
        leaves room for one more key under ``max_keys``: counts go first, oldest first, then the
        least recently seen entries."""
        entries, held = self._entries, self._held
        while entries:
            key = next(iter(entries))
            e = entries[key]
            if now - e.seen_at <= self.window:
                break
            del entries[key]
            if e.suppressed:
                held[key] = e.suppressed
        while held and len(entries) + len(held) >= self.max_keys:
            del held[next(iter(held))]
        while entries and len(entries) >= self.max_keys:
            del entries[next(iter(entries))]
