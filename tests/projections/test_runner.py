"""The projection runner on both stores: exactly-once positions, crashes, concurrent runners, rebuilds
(in this process and as the ``relay projections rebuild`` command), bulk writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from relay_es.adapters.lease import Lease
from relay_es.adapters.stores import parse_database_url
from relay_es.projections import audit
from relay_es.projections.executors import all_rows
from relay_es.projections.shares import StreamShare
from tests.projections.history import busy_history, tables
from tests.support import World, at_once, info


@pytest.fixture
def world(clock, store_url):
    w = World(clock, store_url, grace=10)
    yield w
    w.close()


def test_rebuild_matches_the_live_tables_row_for_row(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    assert live["relay_audit"] and live["relay_executors"] and live["relay_apps"] and live["relay_tokens"]
    assert len(live["relay_actions"]) == 3
    n = world.runner.rebuild()
    assert n >= len(live["relay_audit"])
    assert tables(world) == live
    world.runner.rebuild(["audit"])
    assert tables(world) == live


def test_shares_filled_one_by_one_give_the_live_tables_and_the_rebuild_moves_the_positions(world: World) -> None:
    busy_history(world)
    head = world.relay.recorder.max_notification_id()
    world.connect("late")  # arrives after the rebuild took its head: caught up after the shares
    world.runner.catch_up()
    live = tables(world)
    names = world.runner.reset()
    read = [world.runner.fill(names, share=StreamShare.of(i, 3), until=head) for i in range(3)]
    assert sum(read) == len(world.relay.notifications(0, 1_000_000, until=head))  # every event up to the head, once
    with pytest.raises(ValueError):  # a share of some read models only: the others would fold it again
        world.runner.fill({"audit"}, share=StreamShare.of(0, 3), until=head)
    assert set(world.runner.positions().values()) == {0}  # a share moves no position
    assert tables(world) != live
    world.runner.filled(names, head)
    assert world.runner.positions() == dict.fromkeys(names, head)
    assert world.runner.catch_up() > 0
    world.runner.create_schema()
    assert tables(world) == live


class Interrupted(Exception):
    pass


def test_a_rebuild_interrupted_mid_share_is_finished_by_folding_from_the_start(world: World, monkeypatch) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    names = world.runner.reset()
    head = world.relay.recorder.max_notification_id()
    world.runner.fill(names, share=StreamShare.of(0, 2), until=head)  # one process done
    read = world.relay.notifications
    batches: list[int] = []

    def killed_after_one_batch(*args: Any, **kwargs: Any) -> Any:
        if batches:
            raise Interrupted  # the other process, killed after committing its first batch
        batches.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(world.relay, "notifications", killed_after_one_batch)
    with pytest.raises(Interrupted):
        world.runner.fill(names, share=StreamShare.of(1, 2), until=head, batch_size=7)
    monkeypatch.undo()
    assert set(world.runner.positions().values()) == {0}
    world.runner.create_schema()  # what the next start does: the indexes, then the log from the start
    world.runner.catch_up()
    assert tables(world) == live


def test_rebuild_command_a_user_can_run(world: World, tmp_path: Path) -> None:
    """Run as a user runs it: the `relay` script, here from a directory holding another `relay_es`
    (an older checkout). The share processes come from a fork server, which Python starts on its
    own path, the current directory first: that `relay_es` must not be imported there."""
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    world.close()  # the command runs against the store, as a user would
    decoy = tmp_path / "relay_es"
    decoy.mkdir()
    (decoy / "__init__.py").write_text('raise RuntimeError("the decoy relay_es was imported")\n')
    env = {**os.environ, "RELAY_DATABASE_URL": world.store_url}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(Path(sys.executable).with_name("relay")), "projections", "rebuild"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "decoy" not in out.stderr
    assert "rebuilt executors, audit, apps, actions from" in out.stdout
    world._open()
    assert tables(world) == live


def test_rebuild_command_refuses_while_relay_is_running(world: World) -> None:
    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    held = Lease(parse_database_url(world.store_url))
    held.acquire()  # what a running `relay serve` holds
    try:
        env = {**os.environ, "RELAY_DATABASE_URL": world.store_url}
        out = subprocess.run([sys.executable, "-m", "relay_es", "projections", "rebuild"], env=env,
                             capture_output=True, text=True, timeout=120)
    finally:
        held.release()
    assert out.returncode == 1
    assert "cannot rebuild while Relay is running" in out.stderr and "Stop `relay serve` first" in out.stderr
    assert tables(world) == live  # nothing was dropped


def test_each_event_is_applied_once_even_with_crashes_and_concurrent_runners(world: World) -> None:
    busy_history(world)
    world.runner.rebuild()
    expected = tables(world)
    # A crash in the middle of a batch: nothing of it is kept, the position does not move.
    world.runner.rebuild([])  # no-op rebuild leaves everything as is
    with world.db.transaction() as cur:
        for t in ("relay_executors", "relay_audit", "relay_audit_streams", "relay_apps", "relay_tokens"):
            cur.execute(f"DELETE FROM {t}")
        cur.execute("UPDATE relay_tracking SET position = 0")
    projection = world.runner.projections[1]  # handed over inside the write transaction, after the first's rows
    original = projection.changes
    calls = {"n": 0}

    def crash_once() -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("power cut")
        return original()

    projection.changes = crash_once
    with pytest.raises(RuntimeError):
        world.runner.run_batch()
    assert world.runner.position() == 0
    # Runners racing over the same store.
    errors = at_once(3, lambda: None, lambda _: world.runner.catch_up())
    assert not errors
    world.runner.catch_up()
    assert tables(world) == expected


def test_a_storm_s_batch_is_written_in_bulk_and_replaying_it_changes_nothing(world: World) -> None:
    """Batches of many rows take the bulk path (Postgres: COPY into a staging table, one
    INSERT ... SELECT ... ON CONFLICT); a batch replayed over rows already written keeps the
    newer rows (version guard) and adds no audit entry twice."""
    from relay_es.adapters.readmodels.bulk import COPY_MIN_ROWS
    from relay_es.aggregates.executor import executor_stream_id

    n = 3 * COPY_MIN_ROWS
    relay = world.relay
    relay.execute([relay.op_connected("local", "app", info(f"x{i}"), connection_id=f"c{i}", owner=world.owner)
                   for i in range(n)])
    relay.execute([relay.op_disconnected(executor_stream_id("local", "app", f"x{i}"), connection_id=f"c{i}",
                                         reason="socket_closed") for i in range(0, n, 2)])
    world.runner.catch_up()
    live = tables(world)
    assert sum(1 for r in all_rows(world.db) if r.status == "DISCONNECTED") == n // 2
    assert len([e for e in audit.query(world.db, org="local", limit=1000) if (e.executor_id or "").startswith("x")]) \
        == n + n // 2  # one entry per connect, one per disconnect
    # the same events once more, over the rows they produced (and the Connected ones over newer rows)
    with world.db.transaction() as cur:
        cur.execute("UPDATE relay_tracking SET position = 0")
    for p in world.runner.projections:
        p.forget()
    world.runner._cached_at.clear()
    world.runner.catch_up()
    assert tables(world) == live
    world.runner.rebuild()
    assert tables(world) == live


def test_a_read_model_stored_in_an_older_version_is_rebuilt_at_start(world: World) -> None:
    """Timestamps of the apps, tokens and audit tables were epoch milliseconds (version 1, before
    versions were recorded); they are microseconds now (version 2): a store of version 1 has those
    read models rebuilt from the log when the runner starts, and the executors table left as it is."""
    from relay_es.projections import all_projections
    from relay_es.projections.runner import ProjectionRunner

    busy_history(world)
    world.runner.catch_up()
    live = tables(world)
    before = world.runner.positions()
    with world.db.transaction() as cur:  # what version 1 stored
        cur.execute("UPDATE relay_apps SET created_at = created_at / 1000, updated_at = updated_at / 1000")
        cur.execute("UPDATE relay_tokens SET created_at = created_at / 1000")
        cur.execute("UPDATE relay_audit SET at = at / 1000")
        cur.execute("DELETE FROM relay_versions")
    assert tables(world) != live
    runner = ProjectionRunner(world.relay, world.db, all_projections())
    assert runner.positions() == {**before, "apps": 0, "audit": 0}
    runner.catch_up()
    assert tables(world) == live
    ProjectionRunner(world.relay, world.db, all_projections())  # versions recorded: nothing more is rebuilt
    assert runner.positions() == before
