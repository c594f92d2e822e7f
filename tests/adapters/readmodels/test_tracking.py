"""The tracking table: a position per read model, moved only from where it was."""

from __future__ import annotations

from typing import Any

from relay_es.adapters.readmodels import tracking


def test_positions_start_at_zero_and_move_only_from_where_they_are(db: Any) -> None:
    with db.read() as cur:
        assert db.positions(cur) == {"executors": 0, "audit": 0, "apps": 0, "actions": 0}
    with db.transaction() as cur:
        assert db.lock_positions(cur)["audit"] == 0
        assert db.move(cur, "audit", 0, 7)
        assert not db.move(cur, "audit", 0, 9)  # it is at 7 now
    with db.read() as cur:
        assert tracking.position_of(cur, "audit") == 7
    with db.transaction() as cur:
        db.create_tracking(cur, ["audit", "new"])  # an existing position is kept
        db.reset_position(cur, "executors")
    with db.read() as cur:
        assert db.positions(cur) == {"executors": 0, "audit": 7, "apps": 0, "actions": 0, "new": 0}


def test_a_read_model_tracked_past_zero_whose_table_is_missing_is_outdated(db: Any) -> None:
    """Dropped by hand: created again empty, it would be taken for one holding every event up to its
    position. One at position 0 has folded nothing yet: its tables are simply made."""
    versions = {"executors": 1, "audit": 3, "apps": 2, "actions": 1}
    with db.transaction() as cur:
        db.record_versions(cur, versions)
        assert db.move(cur, "apps", 0, 5) and db.move(cur, "audit", 0, 5)
        cur.execute("DROP TABLE relay_tokens")  # one of the apps read model's two tables
        cur.execute("DROP TABLE relay_actions")  # at position 0
    with db.transaction() as cur:
        assert db.outdated(cur, versions) == ["apps"]
