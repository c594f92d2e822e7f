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
