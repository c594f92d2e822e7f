"""One throttle for everything the hub repeats on a hostile peer's behalf.

The hub audits and logs refusals and protocol violations, and answers
repeated refusals more and more slowly. Each of those is keyed (by address,
by org/app/kind...) and a hostile client chooses the keys, so the table must
not grow without end: a key quiet for a whole window is forgotten, and the
table never holds more than ``max_keys`` (the least recently seen go first).

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
    """Per key: one hit per ``window`` seconds passes, the rest are counted.
    A key not hit for ``window`` seconds is forgotten (its strikes too)."""

    def __init__(self, window: float, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000) -> None:
        self.window = window
        self.clock = clock
        self.max_keys = max_keys
        self._entries: dict[Hashable, _Entry] = {}  # least recently seen first

    def __len__(self) -> int:
        return len(self._entries)

    def hit(self, key: Hashable) -> Hit:
        now = self.clock()
        e = self._entries.pop(key, None)
        self._prune(now)  # leaves room for this key
        if e is None or now - e.seen_at > self.window:
            e = _Entry(now)
            self._entries[key] = e
            return Hit(True, 0, 0)
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

    def _prune(self, now: float) -> None:
        entries = self._entries
        while entries:
            key = next(iter(entries))
            if now - entries[key].seen_at <= self.window and len(entries) < self.max_keys:
                return
            del entries[key]
