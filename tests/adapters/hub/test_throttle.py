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
    assert t.hit("k") == Hit(True, 1, 0)  # the strikes forgotten; the hit held back is reported


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


def test_what_a_key_held_back_before_a_quiet_window_is_reported_by_its_next_hit() -> None:
    """A burst, a quiet window, one more: the burst's held-back hits were dropped with the key's
    entry (the audit showed two entries, both ``suppressed: 0``, for 51 violations)."""
    c = Clock()
    t = Throttle(60, clock=c)
    assert t.hit("k") == Hit(True, 0, 0)
    for _ in range(49):
        assert not t.hit("k").passed
    c.t += 62
    assert t.hit("k") == Hit(True, 49, 0)  # strikes start again; the count does not
    c.t += 1
    assert t.hit("k") == Hit(False, 0, 1)


def test_the_count_survives_the_key_being_pruned_by_another_key_s_hit() -> None:
    c = Clock()
    t = Throttle(60, clock=c)
    for _ in range(5):
        t.hit("k")
    c.t += 61
    t.hit("other")  # prunes k's entry
    c.t += 600
    assert t.hit("k") == Hit(True, 4, 0)
    c.t += 61
    assert t.hit("k") == Hit(True, 0, 0)  # reported once


def test_held_counts_stay_within_the_bound_and_go_first() -> None:
    c = Clock()
    t = Throttle(60, clock=c, max_keys=10)
    for i in range(10):
        t.hit(f"burst-{i}")
        t.hit(f"burst-{i}")  # one held back each
    c.t += 61
    for i in range(8):
        t.hit(f"new-{i}")
    assert len(t) <= 10
    assert t.hit("burst-9").suppressed == 1  # the newest counts are kept
    assert t.hit("burst-0").suppressed == 0  # the oldest made room
    c.t += 61
    t.forget("burst-0")
    for i in range(1000):
        t.hit(f"flood-{i}")
        t.hit(f"flood-{i}")
    assert len(t) <= 10
