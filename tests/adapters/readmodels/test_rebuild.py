"""``relay projections rebuild``: every read model rebuilt from the log, one process per share of the streams."""

from __future__ import annotations

import pytest

from relay_es.adapters.readmodels.rebuild import MAX_PROCESSES, processes, rebuild_in_processes
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
    assert rebuild_in_processes(parse_database_url(world.store_url), ["audit", "executors"], count=3) >= \
        len(live["relay_audit"])
    assert tables(world) == live
