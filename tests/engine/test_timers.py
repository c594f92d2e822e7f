"""The keyed timer heap: replace by key, cancel, order, and when the next one is due."""

from __future__ import annotations

from relay_es.domain.clock import FakeClock
from relay_es.engine.timers import TimerHeap


def test_empty_heap_has_nothing_due_and_no_next() -> None:
    heap = TimerHeap()
    assert heap.next_at() is None and heap.pop_due(1e9) == [] and len(heap) == 0


def test_timers_come_due_in_time_order_then_arming_order() -> None:
    heap = TimerHeap()
    heap.arm("c", 3.0, "third")
    heap.arm("a", 1.0, "first")
    heap.arm("b", 1.0, "second")  # same instant: in the order they were armed
    assert heap.next_at() == 1.0
    assert heap.pop_due(0.9) == []
    assert heap.pop_due(1.0) == [("a", "first"), ("b", "second")]
    assert heap.next_at() == 3.0 and len(heap) == 1
    assert heap.pop_due(10.0) == [("c", "third")]
    assert heap.next_at() is None


def test_arming_a_key_again_replaces_its_timer() -> None:
    heap = TimerHeap()
    heap.arm("k", 5.0, "old")
    heap.arm("k", 2.0, "new")  # earlier
    assert len(heap) == 1 and heap.next_at() == 2.0
    assert heap.pop_due(5.0) == [("k", "new")]  # once, with the new payload
    heap.arm("k", 1.0)
    heap.arm("k", 4.0)  # later: the earlier entry is stale and never fires
    assert heap.pop_due(3.0) == [] and heap.next_at() == 4.0
    heap.arm("k", 4.0)  # the same again: still one timer
    assert heap.pop_due(4.0) == [("k", None)] and len(heap) == 0


def test_cancel_disarms_and_says_whether_it_was_armed() -> None:
    heap = TimerHeap()
    heap.arm(("deadline", "s1"), 1.0)
    heap.arm(("deadline", "s2"), 2.0)
    assert ("deadline", "s1") in heap
    assert heap.cancel(("deadline", "s1")) is True
    assert heap.cancel(("deadline", "s1")) is False
    assert ("deadline", "s1") not in heap
    assert heap.next_at() == 2.0  # the cancelled entry is skipped
    assert heap.pop_due(5.0) == [(("deadline", "s2"), None)]


def test_times_are_monotonic_a_wall_clock_step_moves_nothing() -> None:
    clock = FakeClock()
    heap = TimerHeap()
    heap.arm("t", clock.monotonic() + 10)
    clock.step_wall(3600)  # the wall clock jumps an hour
    assert heap.pop_due(clock.monotonic()) == []
    assert heap.next_at() - clock.monotonic() == 10
    clock.advance(10)
    assert heap.pop_due(clock.monotonic()) == [("t", None)]


def test_one_kind_can_be_asked_about_alone_and_every_kind_merges_in_time_order() -> None:
    heap = TimerHeap()
    heap.arm(("dispatch", "a"), 1.0)
    heap.arm(("deadline", "b"), 2.0)
    heap.arm(("dispatch", "c"), 3.0)
    heap.arm("plain", 1.5)  # a key that is no tuple has no kind (None)
    assert heap.next_at("deadline") == 2.0 and heap.next_at("dispatch") == 1.0 and heap.next_at() == 1.0
    assert heap.next_at("response") is None and heap.next_at(None) == 1.5
    assert heap.pop_due(10.0, kind="deadline") == [(("deadline", "b"), None)]
    assert heap.next_at("deadline") is None and len(heap) == 3
    heap.arm(("deadline", "d"), 0.5)
    assert heap.pop_due(10.0, limit=2) == [(("deadline", "d"), None), (("dispatch", "a"), None)]
    assert heap.pop_due(10.0) == [("plain", None), (("dispatch", "c"), None)]
    assert len(heap) == 0 and heap.next_at() is None


def test_a_cancelled_timer_of_a_kind_is_skipped_when_that_kind_is_asked_about() -> None:
    heap = TimerHeap()
    heap.arm(("deadline", "a"), 1.0)
    heap.arm(("deadline", "b"), 2.0)
    heap.cancel(("deadline", "a"))
    assert heap.next_at("deadline") == 2.0
    assert heap.pop_due(1.5, kind="deadline") == [] and heap.pop_due(2.0, kind="deadline", limit=5) == [
        (("deadline", "b"), None)]


def test_cancelled_and_rearmed_timers_do_not_pile_up_in_the_heap() -> None:
    """An executor that drops and comes back every few seconds cancels a deadline a grace away each time
    (up to 7 days): the stale entries are dropped once they outnumber the live ones, not at their time."""
    from relay_es.engine.timers import COMPACT_AT

    h = TimerHeap()
    for i in range(10):
        h.arm(("deadline", i), 1_000_000.0)
    for n in range(20 * COMPACT_AT):
        key = ("deadline", n % 10)
        h.cancel(key)  # a reconnect...
        h.arm(key, 1_000_000.0 + n)  # ...and the next drop
    assert len(h) == 10
    assert sum(len(heap) for heap in h._heaps.values()) <= 2 * COMPACT_AT + 10
    due = h.pop_due(2_000_000.0)  # what is live still fires, once each, earliest first
    assert [k for k, _ in due] == sorted((("deadline", i) for i in range(10)),
                                         key=lambda k: max(n for n in range(20 * COMPACT_AT) if n % 10 == k[1]))
    assert len(h) == 0 and h.next_at() is None
