"""The settle window after a restart, on monotonic seconds."""

from __future__ import annotations

from relay_es.engine.settle import SettleWindow


def window(**kw: float) -> SettleWindow:
    w = SettleWindow(5.0, busy_per_s=kw.pop("busy_per_s", 10), max_factor=kw.pop("max_factor", 4.0))
    w.start(1000.0, orphans=int(kw.pop("orphans", 0)))
    return w


def test_open_for_the_settle_time_then_closed_for_good() -> None:
    w = window()
    assert w.is_open(1000.0) and w.is_open(1004.99)
    assert not w.closed
    assert not w.is_open(1005.0)
    assert w.closed and w.extension == 0.0
    for _ in range(50):
        w.readmitted(1005.5)  # after it closed: nothing reopens it
    assert not w.is_open(1005.6)


def test_kept_open_a_second_at_a_time_while_executors_are_readmitted_fast() -> None:
    w = window()
    for _ in range(10):
        w.readmitted(1004.5)
    assert w.is_open(1005.0) and w.until == 1006.0  # ten in the last second: one more second
    for _ in range(5):
        w.readmitted(1005.5)
    assert w.is_open(1005.9)
    assert not w.is_open(1006.0)  # only five in the last second
    assert w.extension == 1.0


def test_never_open_past_max_factor_times_the_settle_time() -> None:
    w = window()
    t = 1004.0
    while w.is_open(t):
        for _ in range(11):
            w.readmitted(t)
        t += 0.5
    assert t <= 1020.0 + 0.5 and w.extension == 15.0  # closed at 4 x 5 s


def test_not_before_the_end_of_the_window() -> None:
    w = window()
    assert w.not_before(1001.0) == 1005.0 and w.not_before(1009.0) == 1009.0


def test_kept_open_while_the_hub_admits_executors_fast_though_the_log_shows_none() -> None:
    w = window(orphans=3000)  # 10 a second needed
    w.admitted(1000.0, 0)
    w.admitted(1004.0, 100)
    w.admitted(1004.9, 140)  # 40 in the last second
    assert w.is_open(1005.0) and w.until == 1006.0
    w.admitted(1005.5, 142)
    w.admitted(1005.8, 145)  # about 5 in the last second: too slow
    assert not w.is_open(1006.0)
    assert w.extension == 1.0


def test_between_samples_the_count_is_read_as_a_straight_line() -> None:
    w = window(orphans=3000)
    w.admitted(1000.0, 0)
    w.admitted(1002.0, 1)  # the first back (a span after it has passed by 1005)
    w.admitted(1004.95, 26)  # 25 in the 2.95 s since the last sample: some 17 of them before 1004.0
    w.admitted(1004.99, 27)
    assert not w.is_open(1005.0)  # about 9 in the last second, not 26


def test_with_no_news_from_the_hub_its_last_pace_fades() -> None:
    w = window(orphans=1000)  # 10 a second
    w.admitted(1000.0, 0)
    w.admitted(1004.0, 0)
    w.admitted(1004.5, 60)  # 60 in the last second
    assert w.is_open(1005.0)
    w.admitted(1005.5, 60)  # nothing new
    assert not w.is_open(1006.0)  # 60 in 6 s


def test_the_cap_is_when_every_orphan_would_be_back_at_the_pace_that_holds_it_open() -> None:
    assert window().cap == 1020.0  # no orphans: 4 x 5 s
    assert window(orphans=100).cap == 1020.0  # 10 a second: 10 s, less than 4 x 5 s
    assert window(orphans=500).cap == 1055.0  # 10 a second: 50 s after the planned 5
    assert window(orphans=19_500).cap == 1105.0  # 195 a second: 100 s
    w = window(orphans=19_500)
    total, t = 0, 1000.0
    while w.is_open(t):
        total += 200
        t += 0.5
        w.admitted(t, total)
    assert t == 1105.0 and w.extension == 100.0


def test_with_orphans_and_nobody_back_it_waits_for_the_first_up_to_its_cap() -> None:
    w = window(orphans=500)  # cap: 5 + 500 / 10 = 55 s
    w.admitted(1000.0, 0)
    for t in range(1001, 1031):
        w.admitted(float(t), 0)  # the process manager samples the hub at least once a second
        assert w.is_open(float(t))
    assert not w.anyone_back
    w.admitted(1031.0, 40)  # the first are back, 40 in the last second: from now on the pace decides
    assert w.anyone_back
    assert w.is_open(1031.0)
    w.admitted(1032.0, 45)
    assert not w.is_open(1032.0)
    assert w.extension == 27.0


def test_nobody_back_and_no_orphans_closes_on_time() -> None:
    w = window()  # deadlines that passed while Relay was down, no orphan: nothing to wait for
    assert not w.is_open(1005.0)


def test_waiting_for_the_first_ends_at_the_cap() -> None:
    w = window(orphans=500)
    t = 1005.0
    while w.is_open(t):
        t += 0.5
    assert t == 1055.0 and w.extension == 50.0


def test_once_a_storms_first_is_back_it_stays_open_a_whole_span() -> None:
    # A loaded restart: one socket admitted just before the planned end. A pace measured over the
    # span from so few closed the window on every orphan (19,464 false deaths in one bench run).
    w = SettleWindow(5.0, busy_per_s=10, max_factor=4.0, span=16.0)
    w.start(1000.0, orphans=19_500)
    w.admitted(1000.0, 0)
    w.admitted(1004.9, 1)
    for t in range(1005, 1021):
        w.admitted(float(t), 1 + 5 * (t - 1004))  # 5 a second: half the pace that holds it open
        assert w.is_open(float(t)), t  # still within 16 s of the first
    assert not w.is_open(1021.0)  # a span after the first, the pace decides: 80 in 16 s is too slow
    assert w.extension == 16.0


def test_a_few_orphans_keep_the_plan_when_the_first_comes_back_late() -> None:
    w = SettleWindow(5.0, busy_per_s=10, max_factor=1.0, span=16.0)
    w.start(1000.0, orphans=159)  # fewer than 10 a second over 16 s: no pace to measure
    w.admitted(1000.0, 0)
    w.admitted(1004.9, 1)
    assert not w.is_open(1005.0)
    w = SettleWindow(5.0, busy_per_s=10, max_factor=1.0, span=16.0)
    w.start(1000.0, orphans=160)
    w.admitted(1000.0, 0)
    w.admitted(1004.9, 1)
    assert w.is_open(1005.0)  # a storm: a span from its first


def test_with_nothing_found_at_start_to_protect_it_closes_at_once_however_fast_executors_come() -> None:
    """It is for deadlines that passed while Relay was down: kept to its plan, it held the deaths that
    came due in it of executors this Relay saw go (11 s late with a 1 s grace and a 12 s window)."""
    w = window()  # no orphan
    w.set_held(0)  # and no deadline or recovery found at start
    w.admitted(1000.0, 0)
    for _ in range(100):
        w.readmitted(1000.5)
    w.admitted(1000.9, 500)
    assert not w.is_open(1000.9) and w.closed and w.extension == 0.0
    assert w.not_before(1001.0) == 1001.0  # nothing waits for its planned end


def test_a_deadline_or_a_recovery_found_at_start_keeps_it_open_while_executors_come_fast() -> None:
    w = window()
    w.set_held(1)
    w.admitted(1000.0, 0)
    w.admitted(1004.9, 500)
    assert w.is_open(1005.0) and w.until == 1006.0
