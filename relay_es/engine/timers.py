"""A heap of keyed deadlines on a monotonic clock (after psycopg_pool's sched).

Pure data structure: no threads, no sleeping. The owner asks :meth:`next_at`
how long it may sleep and calls :meth:`pop_due` when it wakes. Timers are
keyed: arming a key again replaces its timer, cancelling is O(1) (the stale
heap entry is skipped when it surfaces). Times are ``monotonic()`` seconds, so
a wall-clock step never moves a timer.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True)
class _Entry:
    at: float
    seq: int
    key: Hashable = field(compare=False)
    payload: Any = field(compare=False)
    live: bool = field(default=True, compare=False)


class TimerHeap:
    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._by_key: dict[Hashable, _Entry] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._by_key

    def arm(self, key: Hashable, at: float, payload: Any = None) -> None:
        """Arms ``key`` at ``at``, replacing its timer if it has one."""
        old = self._by_key.get(key)
        if old is not None:
            if old.at == at and old.payload == payload:
                return
            old.live = False
        entry = _Entry(at, next(self._seq), key, payload)
        self._by_key[key] = entry
        heapq.heappush(self._heap, entry)

    def cancel(self, key: Hashable) -> bool:
        """Disarms ``key``; whether it was armed."""
        entry = self._by_key.pop(key, None)
        if entry is None:
            return False
        entry.live = False
        return True

    def next_at(self) -> float | None:
        """The earliest live timer's time, or None when none is armed."""
        while self._heap and not self._heap[0].live:
            heapq.heappop(self._heap)
        return self._heap[0].at if self._heap else None

    def pop_due(self, now: float) -> list[tuple[Hashable, Any]]:
        """Removes and returns ``(key, payload)`` of every timer due at ``now``, earliest first."""
        due = []
        while self._heap and (not self._heap[0].live or self._heap[0].at <= now):
            e = heapq.heappop(self._heap)
            if e.live:
                del self._by_key[e.key]
                due.append((e.key, e.payload))
        return due
