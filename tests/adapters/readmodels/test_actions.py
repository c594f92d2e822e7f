"""The audit log's table: rows stored, completed and read back; the log's filters, order and pages."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from relay_es.adapters.readmodels import TABLES
from relay_es.projections.actions import ActionRow

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=timezone.utc)


def row(n: int, **kw: Any) -> ActionRow:
    base = ActionRow(action_id=f"a{n}", seq=n * 10, version=1, org="acme", app="orders",
                     at=T0 + timedelta(seconds=n), operation="cancelWorkflow", actor_kind="token", actor="ci",
                     source="10.0.0.1", target_type="workflow", target_ids=[f"wf-{n}"], target_count=1,
                     parameters={"n": n})
    return replace(base, **kw)


def test_rows_round_trip_and_a_completion_replaces_its_request(db: Any) -> None:
    table = TABLES["actions"]
    asked = row(1)
    done = replace(asked, version=2, outcome="succeeded", message=None, executor_id="A", result={"count": 1},
                   completed_at=T0 + timedelta(seconds=2))
    with db.transaction() as cur:
        table.write(cur, [asked])
    with db.read() as cur:
        assert table.read(cur, ["a1", "nope"]) == {"a1": asked}
    with db.transaction() as cur:
        table.write(cur, [done])
        table.write(cur, [asked])  # an older version never overwrites a newer one
    with db.read() as cur:
        assert table.read(cur, ["a1"]) == {"a1": done}
    assert db.action_rows(org="acme") == [done]


def test_the_log_is_newest_first_filtered_and_paged(db: Any) -> None:
    rows = [row(1), row(2, operation="updateApp", target_type="application", target_ids=["orders"]),
            row(3, actor_kind="user", actor="development"),
            row(4, target_ids=["w1", "w2"], target_count=2),  # several: Conductor's target is the application
            row(5, org="other"),
            row(6, app=None, operation="createToken", target_type="token", target_ids=["ci"])]
    with db.transaction() as cur:
        TABLES["actions"].write(cur, rows)

    def ids(**kw: Any) -> list[str]:
        return [r.action_id for r in db.action_rows(org="acme", **kw)]

    assert ids() == ["a6", "a4", "a3", "a2", "a1"]
    assert ids(limit=2) == ["a6", "a4"] and ids(limit=2, offset=2) == ["a3", "a2"] and ids(offset=5) == []
    assert ids(operation="updateApp") == ["a2"]
    assert ids(subject="development") == ["a3"] and ids(subject="ci") == ["a6", "a4", "a2", "a1"]
    assert ids(target="orders") == ["a4", "a2"]  # the application as named, and the several workflows' app
    assert ids(target="wf-1") == ["a1"] and ids(target="w1") == []
    assert ids(target="ci") == ["a6"]
    assert ids(start=T0 + timedelta(seconds=2), end=T0 + timedelta(seconds=4)) == ["a3", "a2"]  # [start, end)
    assert ids(start=T0 + timedelta(seconds=2, microseconds=1)) == ["a6", "a4", "a3"]
    assert [r.action_id for r in db.action_rows(org="other")] == ["a5"]
    assert db.action_rows(org="nobody") == []
