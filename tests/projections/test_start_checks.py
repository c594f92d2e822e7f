"""What the projection runner checks of the stored read models when it starts, on both stores: a
table dropped or emptied by hand, a position past the log's newest event, a version other than the
code's. Each such read model is folded again from the log, as one stored in an older version is."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from relay_es.projections import all_projections
from relay_es.projections.executors import all_rows
from relay_es.projections.runner import ProjectionRunner
from tests.projections.history import busy_history, tables
from tests.support import World


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def _sql(world: World, *statements: str) -> None:
    with world.db.transaction() as cur:
        for s in statements:
            cur.execute(s)


def _started(world: World, caplog: Any) -> tuple[ProjectionRunner, list[str]]:
    """A runner started on the store (as a restarted Relay's), and the warnings it logged."""
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        runner = ProjectionRunner(world.relay, world.db, all_projections())
    return runner, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_disconnected_executor_dies_after_a_restart_on_a_dropped_executors_table(world: World) -> None:
    """The process manager starts from the executors table: dropped by hand while Relay was stopped, it
    was created again empty at the old position, and a DISCONNECTED executor was never declared dead."""
    world.connect("A")
    world.drop("A")
    assert world.status("A") == "DISCONNECTED"
    _sql(world, "DROP TABLE relay_executors")
    world.restart(down_for=1)
    assert [r.executor_id for r in all_rows(world.db)] == ["A"]
    world.advance(10)
    assert world.status("A") == "DEAD"
    assert "DeclaredDead" in world.history("A")


def test_a_tokens_table_from_before_permissions_is_completed_before_the_start_checks_read_it(
        world: World, caplog) -> None:
    """A store last served by a Relay from before tokens carried permissions (62ba79f, 2026-12-02), with an
    application registered: the start's check for an emptied table read the apps read model's rows, the
    tokens table's permissions column among them, before the column was added in place, and relay serve
    would not start ("no such column: permissions"; a helper's upgrade hunt, from 2f04f57)."""
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    before = world.runner.positions()
    _sql(world, "ALTER TABLE relay_tokens DROP COLUMN permissions")
    runner, said = _started(world, caplog)
    assert said == [] and runner.positions() == before
    assert tables(world) == live


def test_read_models_whose_tables_were_dropped_are_folded_again_and_the_others_kept(world: World, caplog) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    before = world.runner.positions()
    _sql(world, "DROP TABLE relay_executors", "DROP TABLE relay_audit_streams", "DROP TABLE relay_tokens")
    runner, said = _started(world, caplog)
    assert runner.positions() == {**before, "executors": 0, "audit": 0, "apps": 0}
    assert sorted(m.split()[2] for m in said if "missing" in m) == ["apps", "audit", "executors"]
    runner.catch_up()
    assert tables(world) == live
    assert runner.positions() == before


def test_an_emptied_executors_or_apps_table_is_folded_again(world: World, caplog) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    before = world.runner.positions()
    _sql(world, "DELETE FROM relay_executors", "DELETE FROM relay_apps")
    runner, said = _started(world, caplog)
    assert runner.positions() == {**before, "executors": 0, "apps": 0}
    assert len([m for m in said if "emptied" in m]) == 2
    runner.catch_up()
    assert tables(world) == live
    _, said = _started(world, caplog)  # current: nothing is folded again
    assert world.runner.positions() == before and said == []


def test_an_empty_executors_table_of_a_log_with_no_executor_is_kept(world: World, caplog) -> None:
    world.runner.catch_up()  # the application registered: no executor yet
    before = world.runner.positions()
    assert before["executors"] > 0 and all_rows(world.db) == []
    runner, said = _started(world, caplog)
    assert runner.positions() == before and said == []


def test_a_position_past_the_log_is_reset_with_a_warning(world: World, caplog) -> None:
    """Edited by hand, or a store whose log was restored older than its read models: nothing new was
    folded into the executors table, the process manager (which starts from its position) never saw a
    new executor, and the lag read 0."""
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    before = world.runner.positions()
    head = world.relay.head()
    _sql(world, f"UPDATE relay_tracking SET position = {head + 1_000_000} WHERE name = 'executors'")
    runner, said = _started(world, caplog)
    assert runner.positions() == {**before, "executors": 0}
    assert runner.reached["executors"] == 0
    assert [m for m in said if "past the log's newest event" in m and f"{head + 1_000_000}" in m]
    runner.catch_up()
    assert tables(world) == live and runner.positions() == before


def test_a_read_model_stored_by_a_newer_relay_is_rebuilt_and_the_log_says_so(world: World, caplog) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    _sql(world, "UPDATE relay_versions SET version = version + 1 WHERE name = 'apps'")  # a downgrade
    runner, said = _started(world, caplog)
    assert runner.positions()["apps"] == 0
    assert [m for m in said if "newer" in m and "apps" in m] and not [m for m in said if "older" in m]
    runner.catch_up()
    assert tables(world) == live
