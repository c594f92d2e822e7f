"""The benchmarks' CPU timeline (``bench.common.CpuTimeline``): which process used the cores over a
window of a run, read afterwards from samples of ``/proc``. Section 3's report says from it who was
busy while the deaths were declared, so the window's arithmetic is pinned here on samples made by
hand, and one real sample is read from this process."""

import os
import time

from bench.common import CpuTimeline


def timeline(samples):
    t = CpuTimeline(os.getpid(), {"clients": []})
    t.samples = samples
    return t


def cpu(server, loop, models=0.0, clients=0.0):
    return {"server": server, "server event loop": loop, "read models": models, "clients": clients}


def test_a_window_spans_the_samples_around_it():
    t = timeline([
        (10.0, cpu(1.0, 0.5), (100, 0, 1000)),
        (10.1, cpu(1.05, 0.52), (110, 1, 1020)),
        (10.5, cpu(1.45, 0.62, models=0.2, clients=0.1), (170, 5, 1100)),
        (10.6, cpu(1.5, 0.63, models=0.2, clients=0.1), (180, 5, 1120)),
    ])
    w = t.window(10.15, 10.45)  # from the sample at 10.1 to the one at 10.5
    assert abs(w["seconds"] - 0.4) < 1e-9 and w["from"] == 10.1
    c = w["cores"]
    assert abs(c["server"] - 1.0) < 1e-9  # 0.4 s of CPU in 0.4 s
    assert abs(c["server event loop"] - 0.25) < 1e-9
    assert abs(c["server other threads"] - 0.75) < 1e-9
    assert abs(c["read models"] - 0.5) < 1e-9 and abs(c["clients"] - 0.25) < 1e-9
    assert abs(w["machine_busy"] - 60 / 80) < 1e-9
    assert abs(w["machine_stolen"] - 4 / 80) < 1e-9


def test_a_window_the_samples_do_not_cover_is_none():
    t = timeline([(10.0, cpu(1.0, 0.5), (100, 0, 1000)), (10.1, cpu(1.1, 0.5), (110, 0, 1020))])
    assert t.window(9.9, 10.05) is None  # nothing at or before its start
    assert t.window(10.0, 10.2) is None  # nothing at or after its end


def test_a_gap_in_the_samples_gives_no_window():
    # the sampler stopped for 5 s: averaging across the gap would spread the window over it
    t = timeline([(10.0, cpu(1.0, 0.5), (100, 0, 1000)), (15.0, cpu(2.0, 0.6), (600, 0, 2000))])
    assert t.window(12.0, 12.5) is None
    assert t.window(10.0, 15.0) is not None


def test_a_failed_sample_ends_the_sampling_and_every_window():
    t = CpuTimeline(os.getpid(), {"clients": [os.getpid()]}, every=0.01).start()
    t.others = None  # the next sample fails on it
    time.sleep(0.05)
    t.stop()  # returns: the failure is recorded, not raised into the run
    assert t.error is not None and t.error.startswith("AttributeError")
    assert t.window(t.samples[0][0], t.samples[-1][0]) is None


def test_a_process_gone_within_the_window_counts_nothing_negative():
    # the read models' process restarted: its CPU starts again from zero
    t = timeline([(10.0, cpu(1.0, 0.5, models=3.0), (100, 0, 1000)),
                  (10.2, cpu(1.1, 0.55, models=0.5), (150, 0, 1200))])
    assert t.window(10.0, 10.2)["cores"]["read models"] == 0.0


def test_it_samples_this_process():
    t = CpuTimeline(os.getpid(), {"nobody": []}, every=0.01).start()
    t0 = time.time()
    while time.time() - t0 < 0.2:
        pass  # busy on this process's main thread
    time.sleep(0.03)
    t.stop()
    # from the first sample to the last (the samples' own times: however late a busy machine let the
    # sampler run, the window is theirs)
    w = t.window(t.samples[0][0], t.samples[-1][0])
    assert t.error is None and w is not None and w["seconds"] >= 0.2
    # the main thread spun through the window (how much of a core it got depends on the machine's load)
    assert w["cores"]["server event loop"] > 0.0
    assert w["cores"]["server other threads"] >= 0.0  # the process and its main thread are read apart
    assert w["cores"]["nobody"] == 0.0
    assert 0.0 < w["machine_busy"] <= 1.0 and 0.0 <= w["machine_stolen"] <= 1.0
