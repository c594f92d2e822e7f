"""The executors table: rows stored and read back as folded; where the process manager starts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from relay_es.adapters.readmodels import TABLES
from relay_es.adapters.readmodels.executors import all_rows, get_row, load_all
from relay_es.projections.executors import ExecutorRow

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=timezone.utc)


def row(executor_id: str, version: int, **kw: Any) -> ExecutorRow:
    return ExecutorRow(stream_id=f"sid-{executor_id}", org="acme", app="orders", executor_id=executor_id,
                       version=version, updated_at=T0, **kw)


def test_rows_read_back_exactly_and_never_move_backwards(db: Any) -> None:
    table = TABLES["executors"]
    a = row("A", 3, status="DISCONNECTED", deadline=T0 + timedelta(microseconds=7), executor_metadata={"k": [1]})
    with db.transaction() as cur:
        table.write(cur, [a, row("B", 2, status="HEALTHY")])
        table.write(cur, [row("A", 2, status="HEALTHY")])  # older: ignored
        assert db.move(cur, "executors", 0, 42)
    with db.read() as cur:
        found = table.read(cur, ["sid-A", "sid-B", "sid-none"])
    assert found["sid-A"] == a and set(found) == {"sid-A", "sid-B"}
    assert get_row(db, "sid-A") == a and get_row(db, "sid-none") is None
    assert [r.executor_id for r in all_rows(db, org="acme", app="orders")] == ["A", "B"]
    assert all_rows(db, org="other") == [] and db.executor_rows(org="acme") == all_rows(db, org="acme")
    rows, position = load_all(db)
    assert position == 42 and sorted(r.executor_id for r in rows) == ["A", "B"]
