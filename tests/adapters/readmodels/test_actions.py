"""The audit log's table: rows stored, completed and read back; the log's filters, order and pages."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from relay_es.adapters.readmodels import TABLES, actions
from relay_es.aggregates.action import MAX_TARGET_IDS
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


def _doc(db: Any, sid: str) -> str:
    with db.read() as cur:
        cur.execute("SELECT doc FROM relay_actions WHERE stream_id = %s", (sid,))
        return cur.fetchone()[0]


def test_a_row_s_text_is_stored_as_it_is_not_escaped(db: Any) -> None:
    """One emoji was 12 bytes of ``\\ud83d\\ude00`` in the document (a hunter's rows were 300 KB of 100 KB
    of ids): now its 4 bytes, and a row written escaped before reads the same."""
    smile = "\U0001F600" * 255 + "…"
    wide = row(1, target_ids=[smile, "é" * 100], target_count=2, parameters={"note": "日本語"})
    with db.transaction() as cur:
        TABLES["actions"].write(cur, [wide])
    doc = _doc(db, "a1")
    assert smile in doc and "日本語" in doc and "\\u" not in doc
    assert len(doc.encode()) < 2 * len(smile.encode())
    with db.read() as cur:
        assert TABLES["actions"].read(cur, ["a1"]) == {"a1": wide}

    before = actions.to_db(replace(wide, action_id="a2"))[:-1] + (json.dumps(json.loads(doc)),)  # ASCII escapes
    assert "\\ud83d\\ude00" in before[-1]
    with db.transaction() as cur:
        cur.execute(f"INSERT INTO relay_actions ({', '.join(actions.COLUMNS)}) VALUES "
                    f"({', '.join(['%s'] * len(actions.COLUMNS))})", before)
    with db.read() as cur:
        assert TABLES["actions"].read(cur, ["a2"]) == {"a2": replace(wide, action_id="a2")}


def test_a_row_stored_before_the_ids_budget_is_read_within_it(db: Any) -> None:
    """A table filled before the budget holds 100 ids of 255 emoji a row: the log answers the first that fit."""
    wide = ["\U0001F600" * 255] * MAX_TARGET_IDS
    with db.transaction() as cur:
        TABLES["actions"].write(cur, [row(1, target_ids=wide, target_count=100)])
    (got,) = db.action_rows(org="acme")
    assert got.target_ids == wide[:4] and got.target_count == 100
    assert actions.encode_doc({"s": "\ud800"}) == '{"s":"\\ud800"}'  # what UTF-8 cannot hold: escaped, still written
