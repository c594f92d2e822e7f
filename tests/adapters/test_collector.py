"""The garbage-collection policy (ADR 13): a fake clock and a fake ``gc`` drive
the decision; one test runs it on the real collector."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from relay_es.adapters.collector import OLD_THRESHOLD, PER_SOCKET_GUESS, YOUNG_THRESHOLD, Collector
from relay_es.domain.clock import FakeClock


class FakeGC:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.threshold = (700, 10, 10)
        self.frozen = 0

    def collect(self, generation: int = 2) -> int:
        self.calls.append(("collect", generation))
        return 7

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen = 1234

    def get_freeze_count(self) -> int:
        return self.frozen

    def set_threshold(self, *t: int) -> None:
        self.threshold = t

    def get_threshold(self) -> tuple[int, ...]:
        return self.threshold

    def full(self) -> int:
        return sum(1 for c in self.calls if c == ("collect", 2))


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


def test_on_the_real_collector_cycles_of_frozen_objects_stay_and_new_ones_go() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    before = gc.get_threshold()
    clock = FakeClock()
    c = Collector(clock.monotonic)
    try:
        c.start()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        for _ in range(1000):
            Node()  # unreachable cycles, too few for a young collection
        c.connections(3)
        c.connections(0)
        clock.advance(2.1)
        assert c.tick()
        assert c.collected >= 1000
        assert c.last_took > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
