"""The detection benchmark's estimate at the rate alone (``bench.s3_detection.lateness_floor``): the
lateness a run's deadlines would have had if the process manager recorded the deaths at the rate
measured alone, batched as it batches them, with nothing else to do. The report reads goal 3 against
it, so it must follow that policy, and say that it is no bound."""

import pytest

from bench.s3_detection import lateness_floor


def test_deaths_due_together_are_stamped_together():
    assert lateness_floor([0.0] * 10, 100) == [0.0] * 10


def test_a_death_due_during_a_batch_waits_for_its_end():
    # two due at 0 (a batch of 2 x 10 ms), one due at 5 ms: stamped when the batch ends, at 20 ms
    late = lateness_floor([0.005, 0.0, 0.0], 100)  # in the order of the deadlines
    assert late[:2] == [0.0, 0.0] and abs(late[2] - 0.015) < 1e-9


def test_an_idle_recorder_waits_for_the_next_deadline():
    assert lateness_floor([0.0, 1.0], 100) == [0.0, 0.0]


def test_below_recording_one_after_another():
    # Stamped when its own recording ended, one after another (the estimate until 2026-12-06): every death
    # at least one death's cost late, and more when they queue. Batches stamp before they save.
    deadlines = [i * 0.0004 for i in range(1000)]  # 2,500 a second due, recorded at 2,000 a second
    per = 1 / 2000
    free, one_by_one = float("-inf"), []
    for d in deadlines:
        free = max(free, d) + per
        one_by_one.append(free - d)
    batched = lateness_floor(deadlines, 2000)
    assert all(b <= o for b, o in zip(batched, one_by_one))
    assert max(batched) < max(one_by_one)


def test_no_bound_waiting_to_fill_a_batch_stamps_sooner():
    # One death due at 0, 99 at 1 ms, 100 a second: the policy records the first alone (busy until 10 ms)
    # and stamps the 99 at 10 ms; a thread that waited until 1 ms would stamp all 100 within 1 ms.
    late = lateness_floor([0.0] + [0.001] * 99, 100)
    assert max(late) == pytest.approx(0.009)
    waited = [0.001 - d for d in [0.0] + [0.001] * 99]
    assert max(waited) < max(late)


def test_a_rate_must_be_positive():
    with pytest.raises(ValueError):
        lateness_floor([0.0], 0)
