"""The one throttle of refusals and violations, on a fake clock."""

from __future__ import annotations

from relay_es.adapters.hub.throttle import Hit, Throttle


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_one_hit_per_window_passes_and_reports_what_it_held_back() -> None:
    c = Clock()
    t = Throttle(60, clock=c)
    assert t.hit("k") == Hit(True, 0, 0)
    for i in range(5):
        c.t += 10
        assert t.hit("k") == Hit(False, 0, i + 1)
    c.t += 10  # 60 s after the first
    assert t.hit("k") == Hit(True, 5, 6)
    assert t.hit("other") == Hit(True, 0, 0)


def test_a_quiet_window_forgets_the_key_and_its_strikes() -> None:
    c = Clock()
    t = Throttle(60, clock=c)
    t.hit("k")
    c.t += 1
    assert t.hit("k").strikes == 1
    c.t += 61
    assert t.hit("k") == Hit(True, 0, 0)


def test_keys_are_pruned_once_quiet_and_bounded_in_number() -> None:
    c = Clock()
    t = Throttle(60, clock=c, max_keys=100)
    for i in range(1000):  # a flood of addresses or kinds
        t.hit(f"addr-{i}")
    assert len(t) <= 100
    c.t += 61
    t.hit("late")
    assert len(t) == 1


def test_the_least_recently_seen_go_first() -> None:
    c = Clock()
    t = Throttle(60, clock=c, max_keys=3)
    for k in ("a", "b", "c"):
        t.hit(k)
        c.t += 1
    t.hit("a")  # seen again: now the most recent
    t.hit("d")  # evicts b
    assert t.hit("a").strikes == 2 and t.hit("b").strikes == 0


def test_forget() -> None:
    t = Throttle(60, clock=Clock())
    t.hit("k")
    t.forget("k")
    assert t.hit("k") == Hit(True, 0, 0)
