"""``relay projections rebuild``: every read model rebuilt from the log, in one process per group."""

from __future__ import annotations

import pytest

from relay_es.adapters.readmodels.rebuild import rebuild_in_processes
from relay_es.adapters.stores import parse_database_url
from relay_es.projections import NAMES, REBUILD_GROUPS
from tests.projections.history import busy_history, tables
from tests.support import World


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def test_the_groups_cover_every_read_model_once() -> None:
    assert sorted(n for group in REBUILD_GROUPS for n in group) == sorted(NAMES)


def test_a_rebuild_in_processes_gives_the_live_tables(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    assert rebuild_in_processes(parse_database_url(world.store_url)) >= len(live["relay_audit"])
    assert tables(world) == live
    rebuild_in_processes(parse_database_url(world.store_url), ["apps"])
    assert tables(world) == live
