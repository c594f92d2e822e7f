"""The garbage-collection policy (ADR 13): a fake clock and a fake ``gc`` drive
the decision; two tests run it on the real collector (the ``real`` fixture)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from relay_es.adapters.collector import OLD_THRESHOLD, PER_SOCKET_GUESS, STORM_OPENS, YOUNG_THRESHOLD, Collector
from relay_es.domain.clock import FakeClock


class FakeGC:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.threshold = (700, 10, 10)
        self.frozen = 0
        self.callbacks: list[Any] = []

    def run(self, generation: int, took: float = 0.0, clock: FakeClock | None = None, collected: int = 0) -> None:
        """A collection, with the hooks called around it as CPython calls them: ``took`` long on
        ``clock``."""
        for cb in list(self.callbacks):
            cb("start", {"generation": generation})
        if clock is not None:
            clock.advance(took)
        for cb in list(self.callbacks):
            cb("stop", {"generation": generation, "collected": collected, "uncollectable": 0})

    def collect(self, generation: int = 2) -> int:
        self.calls.append(("collect", generation))
        self.run(generation, collected=7)
        return 7

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen = 1234

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0

    def get_freeze_count(self) -> int:
        return self.frozen

    def set_threshold(self, *t: int) -> None:
        self.threshold = t

    def get_threshold(self) -> tuple[int, ...]:
        return self.threshold

    def full(self) -> int:
        return sum(1 for c in self.calls if c == ("collect", 2))


class Node:
    """A reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def real() -> Iterator[tuple[FakeClock, Collector]]:
    """A collector started on the real ``gc`` (on a fake clock); the process's collector is put
    back as it was afterwards."""
    before = gc.get_threshold()
    clock = FakeClock()
    c = Collector(clock.monotonic)
    try:
        c.start()
        yield clock, c
    finally:
        c.stop()
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.fixture
def world() -> tuple[FakeClock, FakeGC, list[float | None], Collector]:
    clock = FakeClock()
    fake = FakeGC()
    deadline: list[float | None] = [None]
    c = Collector(clock.monotonic, next_deadline=lambda: deadline[0], quiet=2.0, margin=1.0, max_wait=60.0,
                  interval=600.0, gc_module=fake)
    c.start()
    fake.calls.clear()
    return clock, fake, deadline, c


def test_start_freezes_what_exists_and_raises_the_thresholds() -> None:
    fake = FakeGC()
    Collector(FakeClock().monotonic, gc_module=fake).start()
    assert fake.calls == [("collect", 2), "freeze"]  # garbage first: only live objects are frozen
    assert fake.threshold == (YOUNG_THRESHOLD, 20, OLD_THRESHOLD)
    assert YOUNG_THRESHOLD > 700


def test_nothing_closed_nothing_collected_until_the_interval(world: Any) -> None:
    clock, fake, _, c = world
    for n in (10, 20, 30):  # sockets only open
        c.connections(n)
    for _ in range(100):
        clock.advance(5)
        assert not c.tick()
    clock.advance(101)  # 601 s since start: the periodic collection
    assert c.tick()
    assert fake.full() == 1
    clock.advance(1)
    assert not c.tick()


def test_a_storm_of_closes_is_collected_once_it_has_been_quiet(world: Any) -> None:
    clock, fake, _, c = world
    c.connections(5000)
    for n in range(4900, -1, -100):  # sockets closing for 5 s
        c.connections(n)
        clock.advance(0.1)
        assert not c.tick()
    clock.advance(1.8)
    assert not c.tick()  # 1.9 s of quiet
    clock.advance(0.2)
    assert c.tick()
    assert fake.full() == 1
    clock.advance(10)
    assert not c.tick()  # nothing closed since


def test_never_just_before_a_deadline(world: Any) -> None:
    clock, fake, deadline, c = world
    c.connections(10)
    c.connections(0)
    clock.advance(2.5)
    deadline[0] = clock.monotonic() + 0.5  # a death is due in 0.5 s
    assert not c.tick()
    clock.advance(0.6)
    deadline[0] = clock.monotonic() + 30  # fired; the next one is far
    assert c.tick()
    assert fake.full() == 1


def test_a_collection_expected_to_outlast_the_time_to_the_next_deadline_waits(world: Any) -> None:
    """At 20,000 sockets a full collection takes seconds: it must not start 1.5 s before a deadline.
    The time per socket is guessed until a collection with sockets has been measured."""
    clock, fake, deadline, _ = world
    c = Collector(clock.monotonic, next_deadline=lambda: deadline[0], quiet=2.0, margin=1.0, gc_module=fake,
                  timer=clock.monotonic)
    c.start()
    c.connections(20_000)
    c.connections(10_000)  # a storm of drops: 10,000 closed, 10,000 open
    assert c.expected_took() == pytest.approx(20_000 * PER_SOCKET_GUESS)  # 2 s
    clock.advance(2.5)
    deadline[0] = clock.monotonic() + 1.5  # beyond the 1 s margin, within the collection
    assert not c.tick()
    deadline[0] = clock.monotonic() + 3.1  # beyond 1.5 x 2 s
    took = 0.5
    real_collect = fake.collect

    def collect(generation: int = 2) -> int:
        clock.advance(took)  # the collection's own time, on the collector's clock
        return real_collect(generation)

    fake.collect = collect
    assert c.tick() and c.last_took == pytest.approx(0.5)
    # measured: 0.5 s for 20,000 sockets, 25 us each; 10,000 open now
    assert c.expected_took() == pytest.approx(10_000 * 0.5 / 20_000)
    c.connections(0)
    clock.advance(2.1)
    deadline[0] = clock.monotonic() + 1.01  # the 1 s margin, not the (shorter) expected time, applies
    assert c.tick()


def test_a_storm_that_never_goes_quiet_is_collected_after_max_wait(world: Any) -> None:
    clock, fake, _, c = world
    n = 10_000
    c.connections(n)
    for _ in range(599):  # churn every 0.1 s for 59.9 s
        n -= 1
        c.connections(n)
        clock.advance(0.1)
        assert not c.tick()
    clock.advance(0.2)
    c.connections(n - 1)
    assert c.tick()
    assert fake.full() == 1


def test_deadlines_always_near_cannot_hold_memory_back_for_ever(world: Any) -> None:
    clock, fake, deadline, c = world
    c.connections(1)
    c.connections(0)
    for _ in range(69):
        clock.advance(1)
        deadline[0] = clock.monotonic() + 0.1
        assert not c.tick()
    clock.advance(1.5)
    deadline[0] = clock.monotonic() + 0.1
    assert c.tick()


def test_what_exists_is_frozen_at_every_tick_until_freeze_for_after_a_storm_of_opens(world: Any) -> None:
    """A connection's objects, and those its registration makes in the seconds after, outlive
    young collections; frozen, no automatic collection walks them (the middle ones took
    389-505 ms at 19,500 sockets). Freezing costs nothing, so a deadline does not hold it back."""
    assert STORM_OPENS == 500
    clock, fake, deadline, c = world
    deadline[0] = clock.monotonic() + 0.5  # always near: only full collections wait for it
    clock.advance(30)
    assert not c.tick() and fake.calls == []  # nothing opened yet
    for n in range(100, 1001, 100):  # opening for 1 s, a tick every 0.1 s: a storm from the 500th
        c.connections(n)
        clock.advance(0.1)
        deadline[0] = clock.monotonic() + 0.5
        assert not c.tick()
    assert fake.calls == ["freeze"] * 6 and c.freezes == 6
    for _ in range(20):  # 0.5 s ticks: the last two 9.6 s and 10.1 s after the last open
        clock.advance(0.5)
        deadline[0] = clock.monotonic() + 0.5
        assert not c.tick()
    assert fake.calls == ["freeze"] * 25 and fake.full() == 0  # until 10 s after the storm's last open
    c.connections(1001)
    assert not c.tick()
    assert fake.calls == ["freeze"] * 25  # one socket: no storm


def test_a_storm_is_500_opens_within_freeze_for_seconds_wherever_they_fall(world: Any) -> None:
    clock, fake, _, c = world
    c.connections(499)
    clock.advance(9.9)
    c.connections(500)  # the 500th within 10 s of the first
    assert not c.tick() and fake.calls == ["freeze"]
    clock.advance(20)
    assert not c.tick() and fake.calls == ["freeze"]
    c.connections(999)
    clock.advance(10.1)
    c.connections(1000)  # the 500th 10.1 s after the 1st of the 500
    assert not c.tick() and fake.calls == ["freeze"]
    clock.advance(0.1)
    c.connections(1001)  # the last 500 span 10.2 s
    assert not c.tick() and fake.calls == ["freeze"]


def test_a_trickle_of_opens_is_left_to_cpython(world: Any) -> None:
    """Ten sockets a second (reconnects of a large fleet, a rolling restart) is not a storm:
    freezing at every tick would hold a busy server's passing cycles (a request under way) until
    a full collection."""
    clock, fake, _, c = world
    for n in range(1, 1200):
        c.connections(n)
        clock.advance(0.1)
        assert not c.tick()
    assert fake.calls == []


def test_a_storm_of_opens_is_frozen_as_it_goes_and_not_collected(world: Any) -> None:
    """A cycle frozen with the storm's connections while it was alive (a handshake under way)
    waits for the next full collection (sockets closed, or the interval): one run for it alone
    would hold the GIL for over a second at 20,000 sockets."""
    clock, fake, _, c = world
    n = 0
    for _ in range(50):  # 400 sockets every 0.1 s for 5 s: 20,000; a storm from the second tick (800)
        n += 400
        c.connections(n)
        clock.advance(0.1)
        assert not c.tick()
    for _ in range(30):
        clock.advance(0.5)
        assert not c.tick()  # quiet: frozen for 10 s more, nothing collected
    assert set(fake.calls) == {"freeze"} and c.freezes == 49 + 19
    clock.advance(600)
    assert c.tick()  # the interval's full collection
    assert fake.calls[-3:] == ["unfreeze", ("collect", 2), "freeze"] and c.freezes == 68


def test_a_full_collection_unfreezes_first_and_freezes_what_survives(world: Any) -> None:
    clock, fake, _, c = world
    c.connections(STORM_OPENS)
    assert not c.tick()
    assert fake.calls == ["freeze"]
    clock.advance(20)
    c.connections(50)  # closed: their frozen objects are garbage now
    clock.advance(2.1)
    assert c.tick()
    assert fake.calls == ["freeze", "unfreeze", ("collect", 2), "freeze"]
    assert c.freezes == 1  # the full collection's own freeze is not counted there
    clock.advance(10)
    assert not c.tick()  # nothing opened since: nothing new to freeze
    assert len(fake.calls) == 4


def test_on_the_real_collector_frozen_cycles_are_freed_by_the_next_full_collection(real: Any) -> None:
    """A cycle alive when sockets were frozen and garbage afterwards (a closed connection's
    objects) is freed by the full collection; until then, no automatic collection sees it."""
    import weakref

    clock, c = real
    frozen_at_start = gc.get_freeze_count()
    kept = Node()
    gone = weakref.ref(kept)
    c.connections(STORM_OPENS)
    assert not c.tick() and c.freezes == 1
    assert gc.get_freeze_count() > frozen_at_start
    del kept  # garbage now, in the permanent generation
    gc.collect()
    assert gone() is not None  # no automatic (or explicit) collection walks frozen objects
    clock.advance(20)
    c.connections(0)
    clock.advance(2.1)
    assert any(c.tick() for _ in range(50))  # another thread's collection under way defers it a tick
    assert gone() is None
    assert gc.get_freeze_count() > 0  # what survived is frozen again
    gc.collect(0)  # one of CPython's (asked for here: timed the same way)
    assert [g for g, _ in c.pauses()][-1:] == [0]


def test_cpython_s_own_collections_are_timed_and_ours_are_not() -> None:
    clock = FakeClock()
    fake = FakeGC()
    c = Collector(clock.monotonic, gc_module=fake, timer=clock.monotonic, quiet=2.0)
    assert c.pauses() == []
    c.start()
    fake.run(0, 0.02, clock)
    fake.run(1, 0.4, clock)
    assert c.pauses() == [(0, pytest.approx(0.02)), (1, pytest.approx(0.4))]
    assert c.pauses() == []  # handed out once
    real_collect = fake.collect

    def collect(generation: int = 2) -> int:  # ours, through the same hook
        fake.run(generation, 1.0, clock)
        return real_collect(generation)

    fake.collect = collect
    c.connections(5)
    c.connections(0)
    clock.advance(2.1)
    assert c.tick() and c.last_took == pytest.approx(1.0)
    assert c.pauses() == []  # in relay_gc_full_collection_seconds, not among CPython's pauses
    fake.run(2, 0.3, clock)
    assert c.pauses() == [(2, pytest.approx(0.3))]
    c.stop()
    assert fake.callbacks == []
    fake.run(0, 0.1, clock)
    assert c.pauses() == []


def test_a_full_collection_that_did_not_run_freezes_nothing_and_is_tried_again(world: Any) -> None:
    """gc.collect returns at once when another thread's collection is under way (its finalizers
    let this thread in): nothing was walked, so freezing now would keep the garbage."""
    clock, fake, _, c = world
    c.connections(10)
    c.connections(0)
    clock.advance(2.1)
    real_collect = fake.collect
    fake.collect = lambda generation=2: 0  # no callbacks: it did not run
    assert not c.tick()
    assert fake.calls == ["unfreeze"] and c.collections == 0
    fake.collect = real_collect
    assert c.tick()  # the next tick: still wanted
    assert fake.calls[1:] == ["unfreeze", ("collect", 2), "freeze"] and c.collections == 1


def test_a_stop_whose_start_was_not_seen_is_not_a_pause(world: Any) -> None:
    clock, fake, _, c = world
    c._on_gc("stop", {"generation": 0, "collected": 0, "uncollectable": 0})  # started before the hook
    fake.run(0, 0.01, clock)
    c._on_gc("stop", {"generation": 0, "collected": 0, "uncollectable": 0})  # a second stop: unpaired
    assert [generation for generation, _ in c.pauses()] == [0]  # the one paired


def test_on_the_real_collector_new_cycles_go(real: Any) -> None:
    clock, c = real
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    for _ in range(1000):
        Node()  # unreachable cycles, too few for a young collection
    c.connections(3)
    c.connections(0)
    clock.advance(2.1)
    assert any(c.tick() for _ in range(50))  # another thread's collection under way defers it a tick
    assert c.collected >= 1000
    assert c.last_took > 0


# -- sockets lost, watched until freed ----------------------------------------------------------


class Sock:
    """A socket's protocol object (weakly referenceable, as uvicorn's are)."""


def test_sockets_freed_by_reference_counting_leave_nothing_to_collect(world: Any) -> None:
    clock, fake, _, c = world
    socks = [Sock() for _ in range(5000)]
    c.connections(5000)
    for s in socks:
        c.lost(s)
    assert c.tracking and c.unfreed() == 5000
    c.connections(0)
    del socks, s  # the application let go of them: freed at once, no cycle
    assert c.unfreed() == 0
    clock.advance(2.1)
    assert not c.tick()  # quiet, no deadline: before, a full collection ran here
    assert fake.full() == 0 and c.expected_took() == 0  # the closed sockets are not counted either
    clock.advance(100)
    assert not c.tick()
    clock.advance(500)  # the periodic collection still runs
    assert c.tick() and fake.full() == 1


def test_a_socket_still_alive_when_the_collection_would_run_is_collected(world: Any) -> None:
    clock, fake, _, c = world
    kept = Sock()
    freed = Sock()
    c.connections(2)
    c.lost(kept)
    c.lost(freed)
    c.connections(0)
    del freed
    assert c.unfreed() == 1
    clock.advance(2.1)
    assert c.tick()  # what keeps it may be a cycle: the collection runs, as without tracking
    assert fake.full() == 1
    assert c.unfreed() == 0  # alive through a full collection: held, not watched any more
    clock.advance(10)
    assert not c.tick()
    del kept


def test_a_socket_lost_after_the_hub_counted_its_close_is_still_watched(world: Any) -> None:
    """The hub counts a close it starts before the connection is lost: a decision taken in between
    finds nothing alive, and the loss that follows asks again."""
    clock, fake, _, c = world
    first = Sock()
    c.connections(2)
    c.lost(first)
    del first
    c.connections(0)  # the second socket's close counted; its connection not lost yet
    clock.advance(2.1)
    assert not c.tick()
    second = Sock()
    c.lost(second)  # ... and never freed (a cycle, say)
    clock.advance(1.9)
    assert not c.tick()  # a loss is activity: the quiet is counted from it
    clock.advance(0.2)
    assert c.tick() and fake.full() == 1
    del second


def test_without_tracking_closes_are_collected_as_before(world: Any) -> None:
    """A process whose protocol does not report lost sockets (no ``lost`` hook) keeps the rule
    that a close calls for a full collection."""
    clock, fake, _, c = world
    c.connections(10)
    c.connections(0)
    clock.advance(2.1)
    assert not c.tracking and c.tick() and fake.full() == 1


def test_a_cycle_left_by_a_lost_socket_is_freed_by_the_collection_it_calls_for(real: Any) -> None:
    """On the real collector: a protocol object in a reference cycle is still alive when the
    decision is taken, so the full collection runs and frees it."""
    clock, c = real
    obj = Node()
    gone = weakref.ref(obj)
    c.connections(1)
    c.lost(obj)
    c.connections(0)
    del obj
    assert gone() is not None and c.unfreed() == 1
    clock.advance(2.1)
    assert any(c.tick() for _ in range(50))  # another thread's collection under way defers it a tick
    assert gone() is None and c.unfreed() == 0


def test_a_socket_lost_during_a_full_collection_stays_watched(world: Any) -> None:
    """Only what was watched before the collection and survived it is let go of."""
    clock, fake, _, c = world
    before = Sock()
    c.connections(1)
    c.lost(before)
    c.connections(0)
    during = Sock()
    real_collect = fake.collect

    def collect(generation: int = 2) -> int:
        c.lost(during)  # another thread's loss, as the collection ends
        return real_collect(generation)

    fake.collect = collect
    clock.advance(2.1)
    assert c.tick()
    assert c.unfreed() == 1  # during's, still watched; before's let go of (held)
    fake.collect = real_collect
    clock.advance(2.1)
    assert c.tick() and fake.full() == 2  # it is still alive: a collection for it
    del before, during
