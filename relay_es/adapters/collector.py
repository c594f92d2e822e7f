"""When the cyclic garbage collector runs, in a server holding many sockets (ADR 13).

CPython's collector runs a *full* collection whenever the objects that
survived young collections since the last one exceed a quarter of the heap.
A server taking in thousands of sockets grows its heap by that much again and
again, so a storm of connects paid for a full collection every few hundred
milliseconds, each walking every object of every open connection while holding
the GIL: measured, 10 to 20 of them in one 5,000-executor storm, up to 390 ms
each at 5,000 connections -- about half of the process's time, and the bound on
the storm throughput of the benchmarks (goal 2).

So :class:`Collector`:

* at start, collects once and **freezes** what exists (modules, classes, the
  application: never garbage), so no later collection walks it;
* raises the young generation's threshold (700 -> 50,000 net new container
  objects) so the automatic collector runs young collections rarely and full
  ones practically never;
* **freezes what exists** (``gc.freeze`` moves every tracked object to the
  permanent generation at no cost) at every tick during a storm of opens
  (:data:`STORM_OPENS` sockets within ``freeze_for`` seconds) and ``freeze_for``
  seconds after it: a connection's objects, and those its registration makes in
  the seconds after, outlive young collections, so without it the next *middle*
  collections walk all of them. Measured in bench section 3 on 2026-12-04 (19,500
  sockets, ``gc.callbacks``): middle collections of 389-505 ms, collecting
  nothing, holding the GIL while 10,000 deaths were due. What a freeze takes
  with it and is garbage (a cycle not collected yet, or one alive then and dead
  later, such as a handshake under way) waits for the next full collection, and
  a freeze resets CPython's counters, so while a storm lasts its young
  collections rarely run: the storm's cyclic garbage is kept until the full
  collection that follows closes (``quiet`` seconds after them, ``max_wait`` at
  most), or ``interval``. A full collection is not run for it alone, since at
  20,000 sockets one holds the GIL for over a second (one that did, 2 s after a
  storm of opens, made 10,000 deaths due in its wake late by 0.4-0.5 s). A
  trickle of reconnects is no storm: a busy server is not frozen at every tick;
* watches each **lost socket's objects** (:meth:`Collector.lost`, called by the
  WebSocket protocol, ``adapters/uvicorn_ws.py``): the protocol makes no reference
  cycle, so reference counting frees them as soon as the hub lets go of the
  socket, and a close leaves nothing for a full collection to find. Until 2026-12-05
  every closed socket held cycles (websockets' parser generator, a closure, the
  scope's extension bound to the protocol), and a storm of drops called for a full
  collection at the next quiet moment (2 s with no socket opened or closed and no
  timer near, or 70 s at most): in bench section 2 that fell in the reconnect storm
  that followed, and held the GIL for some 0.6 s at 5,000 sockets;
* runs the **full collection itself**, when there is something for it to find
  (an object of a lost socket is still alive -- a cycle, or, without the hook,
  sockets have closed since the last one; or ``interval`` has passed)
  and the moment is right: no connection opened or
  closed for ``quiet`` seconds and no timer of the process manager due before the
  collection would be over: within ``margin`` seconds, or 1.5 x the time it is
  expected to take (:meth:`Collector.expected_took`: the seconds per socket the
  last collection took, over the sockets open or closed since), if longer. At
  20,000 sockets a full collection took 2 s on the 2-core benchmark machine, and
  one started a second before 10,000 deadlines made every death late.
  A storm that never goes quiet is collected after
  ``max_wait`` seconds anyway, so memory cannot grow without bound.

A full collection unfreezes everything first and freezes what survives after,
so objects frozen while alive are freed once they are garbage (a closed socket's
cycles); the start-up's objects are walked by it too (a few tens of
milliseconds). If it did not run (another thread's collection was under way,
its finalizers having let this thread in: ``gc.collect`` then returns at once),
nothing is frozen and it is tried again at the next tick.

Every other collection (CPython's automatic ones, and ``gc.collect`` called by
other code) is timed by a ``gc.callbacks`` hook and handed out by
:meth:`Collector.pauses` (``relay_gc_pause_seconds`` on ``/metrics``): it holds
the GIL for that long, less any finalizer that let go of it.

The decisions (:meth:`Collector.due`, :meth:`Collector.freeze_due`) are pure, driven by a clock the tests own;
:meth:`Collector.tick` does it.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 50_000  # net new container objects between young collections (CPython's default: 700)
MIDDLE_THRESHOLD = 20     # young collections per middle one (default: 10)
OLD_THRESHOLD = 10        # middle collections before a full one is considered (default: 10)
STORM_OPENS = 500          # sockets opened within freeze_for seconds that make a storm worth freezing
# Seconds a full collection takes per socket open or closed since the last, until one with sockets
# was measured: about 2 s at 19,500 sockets on the 2-core benchmark machine (docs/benchmarks.md, 3).
PER_SOCKET_GUESS = 100e-6


class Collector:
    def __init__(
        self,
        monotonic: Callable[[], float],
        *,
        next_deadline: Callable[[], float | None] = lambda: None,
        quiet: float = 2.0,
        freeze_for: float = 10.0,
        margin: float = 1.0,
        max_wait: float = 60.0,
        interval: float = 600.0,
        gc_module: Any = gc,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``timer``: times a collection (its seconds are a metric, and what the next is expected to take)."""
        self.monotonic = monotonic
        self.next_deadline = next_deadline
        self.quiet = quiet
        self.freeze_for = freeze_for
        self.margin = margin
        self.max_wait = max_wait
        self.interval = interval
        self.gc: ModuleType = gc_module
        self.timer = timer
        self._lock = threading.Lock()
        self._open = 0
        self._opens: deque[float] = deque(maxlen=STORM_OPENS)  # when the last STORM_OPENS sockets opened
        self._freeze_until = float("-inf")
        self._closed = 0                     # sockets closed since the last full collection
        self._wanted_since: float | None = None
        self._last_activity = float("-inf")
        self._last_full = monotonic()
        self.collections = 0
        self.freezes = 0                     # freezes after sockets opened (not those of full collections)
        self.collected = 0
        self.seconds = 0.0                   # spent in full collections run here
        self.last_took = 0.0
        self._per_socket: float | None = None  # seconds per socket the last collection with sockets took
        # CPython's own collections, timed by the gc.callbacks hook: (generation, seconds). Appended
        # in whatever thread allocated, so no lock: a collection can start while that thread holds one.
        self._pauses: deque[tuple[int, float]] = deque(maxlen=10_000)
        self._pause_started: float | None = None
        self._managed: int | None = None     # the thread running a full collection of ours (not a pause)
        self._ours_ran = False               # that collection did run (its "start" was seen)
        # Sockets whose connection was lost (:meth:`lost`) and whose objects are still alive: weak
        # references, each taken out by its own callback when its object is freed (in whatever thread
        # drops the last reference, so without the lock: a set's add and discard are atomic).
        self.losses = 0                      # sockets reported lost
        self._unfreed: set[weakref.ref[Any]] = set()

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Once the process is set up: what exists now is frozen, the thresholds raised."""
        self.gc.collect()
        self.gc.freeze()
        self.gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
        self.gc.callbacks.append(self._on_gc)
        self._last_full = self.monotonic()
        log.debug("garbage collector: %d objects frozen, thresholds %s", self.gc.get_freeze_count(),
                  self.gc.get_threshold())

    def stop(self) -> None:
        """The timing hook removed (the thresholds and frozen objects stay)."""
        if self._on_gc in self.gc.callbacks:
            self.gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        # One collection runs at a time, so "start" and "stop" pair up; a "stop" whose "start" was
        # ours, or came before the hook, is dropped.
        if phase == "start":
            if self._managed == threading.get_ident():
                self._ours_ran = True
                self._pause_started = None
            else:
                self._pause_started = self.timer()
            return
        started, self._pause_started = self._pause_started, None
        if started is not None:
            self._pauses.append((info["generation"], self.timer() - started))

    def pauses(self) -> list[tuple[int, float]]:
        """The collections not run by :meth:`tick` since the last call: (generation, seconds),
        oldest first (at most the last 10,000)."""
        out = []
        while True:
            try:
                out.append(self._pauses.popleft())
            except IndexError:
                return out

    # ------------------------------------------------------------- signals
    def connections(self, n: int) -> None:
        """The hub's count of open sockets changed (to ``n``)."""
        now = self.monotonic()
        with self._lock:
            if n < self._open:
                self._closed += self._open - n
                if self._wanted_since is None:
                    self._wanted_since = now
            elif n > self._open:
                self._opens.extend([now] * min(n - self._open, STORM_OPENS))
                if len(self._opens) == STORM_OPENS and now - self._opens[0] <= self.freeze_for:
                    self._freeze_until = now + self.freeze_for
            self._open = n
            self._last_activity = now

    def lost(self, *objs: Any) -> None:
        """A socket's connection was lost: ``objs`` are its objects that should be freed once the
        application lets go of it (its protocol objects; called from the event loop). Once this
        has been called, sockets closed call for a full collection only while such an object is
        still alive when the collection would run: one freed by reference counting left nothing
        for it to find."""
        refs = [weakref.ref(obj, self._unfreed.discard) for obj in objs]
        now = self.monotonic()
        with self._lock:
            self.losses += 1
            self._unfreed.update(refs)
            if self._wanted_since is None:
                self._wanted_since = now
            self._last_activity = now  # a loss is a close: the quiet is counted from it too

    @property
    def tracking(self) -> bool:
        """Whether :meth:`lost` has been called: closes are then judged by what they left alive."""
        return self.losses > 0

    def unfreed(self) -> int:
        """Objects of sockets lost that are still alive (none have been since the last full
        collection, which lets go of those it found alive)."""
        return len(self._unfreed)

    # ------------------------------------------------------------- decision
    def due(self, now: float) -> bool:
        """Whether a full collection should run now."""
        with self._lock:
            if self.tracking and self._wanted_since is not None and not self._unfreed:
                # every socket lost since the last was freed by reference counting: nothing to find
                self._wanted_since = None
                self._closed = 0
            wanted_since = self._wanted_since
            last_activity = self._last_activity
        if wanted_since is None:
            if now - self._last_full < self.interval:
                return False
            wanted_since = self._last_full + self.interval
        waited = now - wanted_since
        if waited >= self.max_wait + 10 * self.margin:
            return True  # a deadline that is always near must not hold memory back for ever
        nxt = self.next_deadline()
        if nxt is not None and nxt - now < max(self.margin, 1.5 * self.expected_took()):
            return False  # a collection holds the GIL: never just before a death is due
        if waited >= self.max_wait:
            return True
        return now - last_activity >= self.quiet

    def freeze_due(self, now: float) -> bool:
        """Whether what exists should be frozen now: a storm of opens is under way or ended less
        than ``freeze_for`` seconds ago. A freeze costs nothing, so deadlines do not hold it back."""
        with self._lock:
            return now <= self._freeze_until

    def expected_took(self) -> float:
        """Seconds a full collection would hold the GIL now: the last one's seconds per socket
        (:data:`PER_SOCKET_GUESS` until one was measured) times the sockets open or closed since."""
        with self._lock:
            sockets = self._open + self._closed
        per = self._per_socket if self._per_socket is not None else PER_SOCKET_GUESS
        return per * sockets

    def tick(self) -> bool:
        """Runs a full collection if :meth:`due`, or else freezes if :meth:`freeze_due`.
        Returns whether it collected."""
        now = self.monotonic()
        if not self.due(now):
            if self.freeze_due(now):
                self.gc.freeze()
                self.freezes += 1
            return False
        with self._lock:
            closed, self._closed = self._closed, 0
            sockets = self._open + closed
            wanted, self._wanted_since = self._wanted_since, None
            watched = list(self._unfreed)  # one lost after this (it asks again) stays watched
        t0 = self.timer()
        self._ours_ran = False
        self._managed = threading.get_ident()
        try:
            self.gc.unfreeze()  # what was frozen alive may be garbage now
            found = self.gc.collect()
        finally:
            self._managed = None
            ran = self._ours_ran or self._on_gc not in self.gc.callbacks  # unhooked (never started): assumed
            if ran:
                self.gc.freeze()
        if not ran:  # another collection was under way: gc.collect returned at once
            with self._lock:
                self._closed += closed
                if self._wanted_since is None:
                    self._wanted_since = wanted
            log.debug("full garbage collection skipped: another was under way; tried again at the next tick")
            return False  # nothing frozen: the garbage waits unfrozen for the next tick
        took = self.timer() - t0
        # Alive through a full collection: held, not garbage. Should such an object become garbage in a
        # cycle later, the interval's collection frees it.
        self._unfreed.difference_update(watched)
        self._last_full = self.monotonic()
        if sockets >= 100:  # fewer: the heap's other objects, not the sockets, make the time
            self._per_socket = took / sockets
        self.collections += 1
        self.collected += found
        self.seconds += took
        self.last_took = took
        log.debug("full garbage collection after %d socket(s) closed: %d objects freed in %.0f ms",
                  closed, found, took * 1000)
        return True
