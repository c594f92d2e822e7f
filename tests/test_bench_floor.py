"""The detection benchmark's floor (``bench.s3_detection.lateness_floor``): the lateness a run's
deadlines would have had if one thread recorded the deaths as the process manager does, in
batches, at the rate measured alone. The report reads the goal against it, so it must be what its
name says: never above what a thread recording at that rate can do."""

from bench.s3_detection import lateness_floor


def test_deaths_due_together_are_stamped_together():
    assert lateness_floor([0.0] * 10, 100) == [0.0] * 10


def test_a_death_due_during_a_batch_waits_for_its_end():
    # two due at 0 (a batch of 2 x 10 ms), one due at 5 ms: stamped when the batch ends, at 20 ms
    late = lateness_floor([0.005, 0.0, 0.0], 100)
    assert late[:2] == [0.0, 0.0] and abs(late[2] - 0.015) < 1e-9


def test_an_idle_recorder_waits_for_the_next_deadline():
    assert lateness_floor([0.0, 1.0], 100) == [0.0, 0.0]


def test_below_recording_one_after_another():
    # Stamped when its own recording ended, one after another (the floor until 2026-12-06): every death
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
