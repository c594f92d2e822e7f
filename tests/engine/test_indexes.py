"""The process manager's row indexes: kept in step one row at a time == derived from scratch."""

from __future__ import annotations

import random

from relay_es.engine.indexes import Indexes, derive_indexes
from relay_es.projections.executors import ExecutorRow

STATUSES = ["HEALTHY", "DISCONNECTED", "DEAD", "DELETED"]


def random_row(rnd: random.Random, sid: str) -> ExecutorRow:
    dispatched = rnd.random() < 0.4
    return ExecutorRow(
        stream_id=sid, org="o", app=rnd.choice(["a", "b"]), executor_id=sid, version=rnd.randrange(1, 9),
        status=rnd.choice(STATUSES), app_version=rnd.choice(["v1", "v2", None]),
        owner=rnd.choice(["me", "gone", None]),
        recovery_phase="dispatched" if dispatched else rnd.choice([None, "pending", "deferred", "confirmed"]),
        recovery_target=rnd.choice(["t1", "t2", None]) if dispatched else None,
    )


def test_incremental_equals_derived_over_random_row_changes() -> None:
    rnd = random.Random(12)
    owners = {"me"}
    indexes = Indexes(owners)
    rows: dict[str, ExecutorRow] = {}
    for _ in range(2000):
        sid = f"s{rnd.randrange(40)}"
        new = random_row(rnd, sid)
        indexes.put(rows.get(sid), new)
        rows[sid] = new
        assert indexes.snapshot() == derive_indexes(rows.values(), owners)
    assert Indexes.from_rows(rows.values(), owners).snapshot() == indexes.snapshot()


def test_what_each_index_holds() -> None:
    rows = [
        ExecutorRow("s1", "o", "a", "e1", 1, status="HEALTHY", app_version="v1", owner="me"),
        ExecutorRow("s2", "o", "a", "e2", 1, status="HEALTHY", app_version="v1", owner="gone"),  # another Relay's
        ExecutorRow("s3", "o", "a", "e3", 1, status="DEAD", recovery_phase="dispatched", recovery_target="e1"),
        ExecutorRow("s4", "o", "a", "e4", 1, status="DELETED"),
    ]
    assert derive_indexes(rows, {"me"}) == {
        "healthy": {("o", "a", "v1"): frozenset({"s1"})},
        "apps_healthy": {("o", "a"): frozenset({"s1"})},
        "outstanding": {("o", "a", "e1"): frozenset({"s3"})},
        "listed": {("o", "a"): 3},
    }
