"""The audit tables: entries in order, paged, filtered; stream places kept once."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from relay_es.adapters.readmodels import TABLES
from relay_es.projections.audit import AuditEntry

T0 = datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=timezone.utc)


def test_entries_are_stored_in_order_and_paged(db: Any) -> None:
    table = TABLES["audit"]
    entries = [AuditEntry(seq, T0, "acme", "orders" if seq % 2 else None, "A" if seq % 4 == 1 else None,
                          "x.happened", {"n": seq, "b": [1]}) for seq in range(1, 11)]
    with db.transaction() as cur:
        table.write(cur, ({"s1": ("acme", "orders", "A")}, entries[:6]))
    with db.transaction() as cur:
        table.write(cur, ({"s1": ("other", None, None)}, entries[4:]), bulk=False)  # replayed: kept once
    with db.read() as cur:
        assert table.read(cur, ["s1", "s2"]) == {"s1": ("acme", "orders", "A")}
    assert db.audit_entries(org="acme", limit=100) == entries
    assert db.audit_entries(org="acme", after=3, limit=2) == entries[3:5]
    assert [e.seq for e in db.audit_entries(org="acme", app="orders", executor_id="A")] == [1, 5, 9]


def test_an_action_s_nested_detail_is_stored_with_sorted_keys_and_read_back_equal(db: Any) -> None:
    """Actions' entries (issue 13) nest their actor, target and summaries; escaped text and "…" survive."""
    from relay_es.adapters.readmodels.audit import encode_detail

    detail = {"target": {"type": "workflow", "ids": ["wf\\x00\\n…", "é"], "count": 5000},
              "actor": {"kind": "user", "id": "development"}, "parameters": {"b": True, "n": -(2**63), "s": None},
              "actionId": "a", "operation": "bulkCancelWorkflows"}
    entry = AuditEntry(1, T0, "acme", "orders", None, "action.requested", detail)
    with db.transaction() as cur:
        TABLES["audit"].write(cur, ({}, [entry]))
    assert db.audit_entries(org="acme", limit=10) == [entry]
    assert encode_detail(detail).startswith('{"actionId":"a","actor":{"id":"development","kind":"user"}')
