"""``relay projections rebuild``: every read model rebuilt from the log, one process per share of the streams."""

from __future__ import annotations

import pytest

from relay_es.adapters.readmodels.rebuild import MAX_PROCESSES, fill_at_start, processes, rebuild_in_processes
from relay_es.adapters.stores import parse_database_url
from tests.projections.history import busy_history, tables
from tests.support import World


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def test_a_rebuild_runs_a_process_per_core_up_to_its_cap(monkeypatch) -> None:
    for cores, expected in ((None, 1), (1, 1), (2, 2), (64, MAX_PROCESSES)):
        monkeypatch.setattr("os.cpu_count", lambda: cores)
        assert processes() == expected


def test_a_rebuild_in_processes_gives_the_live_tables(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    assert rebuild_in_processes(parse_database_url(world.store_url)) >= len(live["relay_audit"])
    assert tables(world) == live
    rebuild_in_processes(parse_database_url(world.store_url), ["apps"])
    assert tables(world) == live
    events = len(world.relay.notifications(0, 1_000_000))
    assert rebuild_in_processes(parse_database_url(world.store_url), ["audit", "executors"], count=3) == events
    assert tables(world) == live


def test_a_start_fills_the_read_models_that_have_folded_nothing_in_processes(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    folded = world.runner.positions()
    head = world.relay.recorder.max_notification_id()
    world.runner.reset(["audit", "executors"])  # as a read model stored in an older version is emptied
    store = parse_database_url(world.store_url)
    assert fill_at_start(world.relay, world.runner, store, least=head + 1) == 0  # a short log: the server folds it
    assert world.runner.positions() == {**folded, "audit": 0, "executors": 0}
    events = len(world.relay.notifications(0, 1_000_000))
    assert fill_at_start(world.relay, world.runner, store, least=1, count=2) == events  # every event, once
    assert world.runner.positions() == dict.fromkeys(folded, head)
    assert tables(world) == live
    assert fill_at_start(world.relay, world.runner, store, least=1, count=2) == 0  # none is behind now


CALLER = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from relay_es.adapters.readmodels import rebuild

ctx = multiprocessing.get_context(sys.argv[1])
if sys.argv[1] == "forkserver":
    ctx = rebuild._fork_server()
with ProcessPoolExecutor(1, mp_context=ctx, initializer=rebuild._share_started, initargs=(os.getpid(), "INFO")) as pool:
    print(pool.submit(os.getpid).result(), flush=True)  # a share, started and working for this process
    pool.submit(time.sleep, 120).result()  # busy, as a share filling its part of a million events
"""


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_share_process_ends_with_the_process_it_works_for(start: str) -> None:
    """A share outliving a killed rebuild or server (SIGKILL) went on filling the read models beside
    the next server's fill of the same tables. It is killed with its parent: the caller, or the
    fork server, which ends with the caller."""
    import os
    import signal
    import subprocess
    import sys
    import time

    caller = subprocess.Popen([sys.executable, "-c", CALLER, start], stdout=subprocess.PIPE, text=True)
    try:
        share = int(caller.stdout.readline())  # type: ignore[union-attr]
        os.kill(share, 0)  # alive
        caller.send_signal(signal.SIGKILL)
        caller.wait(10)
        deadline = time.monotonic() + 10
        while True:
            try:
                with open(f"/proc/{share}/stat") as f:
                    gone = f.read().split(") ")[1].startswith("Z")  # a zombie is dead
            except FileNotFoundError:
                gone = True
            if gone:
                break
            assert time.monotonic() < deadline, f"the share process {share} outlived its caller"
            time.sleep(0.05)
    finally:
        caller.kill()

