"""A heap of keyed deadlines on a monotonic clock (after psycopg_pool's sched).

A data structure: no clock, no sleeping. The owner asks :meth:`next_at`
how long it may sleep and calls :meth:`pop_due` when it wakes. Other threads
ask too (whether a deadline is due: the read models and expensive reads give way
to the process manager; when the next one is: the garbage collector), and a
read drops the stale entries on top of a heap, so every method holds a lock:
a read racing the owner's ``pop_due`` could drop a live timer, a deadline that
would then never fire. Timers are
keyed: arming a key again replaces its timer, cancelling is O(1) (the stale
heap entry is skipped when it surfaces, or dropped when stale entries outnumber
the live ones, :data:`COMPACT_AT` at least: an executor that drops and comes
back every few seconds would otherwise leave an entry per drop for its whole
grace, up to 7 days). Times are ``monotonic()`` seconds, so
a wall-clock step never moves a timer.

A key that is a tuple has a *kind*, its first element (the process manager's
``("deadline", stream id)``): each kind has a heap of its own, so that
:meth:`next_at` and :meth:`pop_due` can be asked about one kind (are deaths
due?) without walking the others. Asked about every kind, they take the
earliest across them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Hashable
from typing import Any

ANY: Any = object()  # next_at and pop_due over every kind
COMPACT_AT = 1024  # stale entries that, once they outnumber the live ones, make every heap rebuilt without them


class _Entry:
    """A timer. Each heap holds ``(at, seq, entry)`` tuples, ordered by time then arming order
    (``seq`` is unique, so an entry is never compared): tuples compare in C, and a storm of
    10,000 deaths arms 10,000 dispatch timers at once (a dataclass's ``__lt__``, which builds two
    tuples a comparison, was a tenth of the process manager's time recording them)."""

    __slots__ = ("at", "key", "payload", "live")

    def __init__(self, at: float, key: Hashable, payload: Any) -> None:
        self.at = at
        self.key = key
        self.payload = payload
        self.live = True


_Slot = tuple[float, int, _Entry]


def kind_of(key: Hashable) -> Hashable:
    """A tuple key's first element; None for any other key."""
    return key[0] if isinstance(key, tuple) and key else None


class TimerHeap:
    def __init__(self) -> None:
        self._heaps: dict[Hashable, list[_Slot]] = {}  # kind -> its heap
        self._by_key: dict[Hashable, _Entry] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._stale = 0  # entries in the heaps no longer live

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._by_key

    def arm(self, key: Hashable, at: float, payload: Any = None) -> None:
        """Arms ``key`` at ``at``, replacing its timer if it has one."""
        with self._lock:
            self._arm(key, at, payload)

    def _arm(self, key: Hashable, at: float, payload: Any) -> None:
        old = self._by_key.get(key)
        if old is not None:
            if old.at == at and old.payload == payload:
                return
            old.live = False
            self._stale += 1
        entry = _Entry(at, key, payload)
        self._by_key[key] = entry
        kind = kind_of(key)
        heap = self._heaps.get(kind)
        if heap is None:
            heap = self._heaps[kind] = []
        heapq.heappush(heap, (at, next(self._seq), entry))
        self._compact()

    def _compact(self) -> None:
        """Rebuilds every heap without its stale entries, once they outnumber the live ones."""
        if self._stale < COMPACT_AT or self._stale <= len(self._by_key):
            return
        for kind, heap in self._heaps.items():
            live = [slot for slot in heap if slot[2].live]
            heapq.heapify(live)
            self._heaps[kind] = live
        self._stale = 0

    def cancel(self, key: Hashable) -> bool:
        """Disarms ``key``; whether it was armed."""
        with self._lock:
            entry = self._by_key.pop(key, None)
            if entry is None:
                return False
            entry.live = False
            self._stale += 1
            self._compact()
            return True

    def next_at(self, kind: Hashable = ANY) -> float | None:
        """The earliest live timer's time (of ``kind``, if given), or None when none is armed."""
        with self._lock:
            top = self._earliest(kind)
            return top[0].at if top is not None else None

    def pop_due(self, now: float, *, kind: Hashable = ANY, limit: int | None = None) -> list[tuple[Hashable, Any]]:
        """Removes and returns ``(key, payload)`` of every timer due at ``now`` (of ``kind``, if given;
        at most ``limit``), earliest first."""
        due = []
        with self._lock:
            while limit is None or len(due) < limit:
                top = self._earliest(kind)
                if top is None or top[0].at > now:
                    return due
                entry, heap = top
                heapq.heappop(heap)
                del self._by_key[entry.key]
                due.append((entry.key, entry.payload))
        return due

    def _earliest(self, kind: Hashable) -> tuple[_Entry, list[_Slot]] | None:
        """The earliest live entry (of ``kind``) and its heap; stale entries on top are dropped.
        Called with the lock held."""
        heaps = self._heaps.values() if kind is ANY else [self._heaps.get(kind, [])]
        best: tuple[_Slot, list[_Slot]] | None = None
        for heap in heaps:
            while heap and not heap[0][2].live:
                heapq.heappop(heap)
                self._stale -= 1
            if heap and (best is None or heap[0] < best[0]):  # (time, arming order): never the entries
                best = (heap[0], heap)
        return (best[0][2], best[1]) if best is not None else None
