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


def test_a_page_to_follow_from_holds_only_what_the_read_model_has_folded_as_a_whole(db: Any) -> None:
    """A fill in processes commits each share's rows out of order and moves the tracked position once
    at its end: a follower paging with ``after`` over rows 1 and 3 (2 not yet committed) stepped over 2
    for good. Its page (``folded``) holds nothing past the position."""
    from relay_es.adapters.readmodels import tracking

    table = TABLES["audit"]
    rows = [AuditEntry(seq, T0, "acme", "orders", "A", "x.happened", {}) for seq in (1, 2, 3)]
    with db.transaction() as cur:
        table.write(cur, ({}, [rows[0], rows[2]]))  # one share's rows; the other's row 2 to come
    assert [e.seq for e in db.audit_entries(org="acme")] == [1, 3]
    assert db.audit_entries(org="acme", folded=True) == []
    with db.transaction() as cur:
        table.write(cur, ({}, [rows[1]]))
        assert tracking.move(cur, "audit", 0, 3)  # the fill is done
    assert db.audit_entries(org="acme", folded=True) == rows
    assert db.audit_entries(org="acme", after=1, limit=1, folded=True) == [rows[1]]


def test_the_tokens_entries_are_left_out_by_the_query_so_a_page_is_full_past_them(db: Any) -> None:
    """A caller without token.read is served no ``token.*`` entry. Left out by the statement: a page
    of 2 after the first entry is the two after the 50 token entries, not an empty page (which a
    follower would take for the end of the feed), folded or not, filtered by application or not."""
    from relay_es.adapters.readmodels import tracking

    def entry(seq: int, action: str, app: str | None = None) -> AuditEntry:
        return AuditEntry(seq, T0, "acme", app, None, action, {"n": seq})

    entries = ([entry(1, "app.registered", "orders")]
               + [entry(seq, "token.created" if seq % 2 else "token.revoked") for seq in range(2, 52)]
               + [entry(52, "app.updated", "orders"), entry(53, "tokens.x"), entry(54, "TOKEN.created")])
    with db.transaction() as cur:
        TABLES["audit"].write(cur, ({}, entries))
        assert tracking.move(cur, "audit", 0, 54)
    others = [entries[0], *entries[51:]]  # only a prefix of "token." (as it is spelled) is a token's entry
    assert db.audit_entries(org="acme", limit=100, tokens=False) == others
    assert db.audit_entries(org="acme", after=1, limit=2, tokens=False) == others[1:3]
    assert db.audit_entries(org="acme", after=1, limit=2, tokens=False, folded=True) == others[1:3]
    assert db.audit_entries(org="acme", app="orders", after=1, limit=1, tokens=False) == [entries[51]]
    assert db.audit_entries(org="acme", after=1, limit=2) == entries[1:3]  # with token.read: every entry
    assert db.audit_entries(org="acme", limit=100, tokens=True) == entries


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


def _entries_at(app: str, action: str, us: list[int], first_seq: int) -> list[AuditEntry]:
    from relay_es.domain.units import from_epoch_us

    return [AuditEntry(first_seq + i, from_epoch_us(t), "acme", app, "A", action, {}) for i, t in enumerate(us)]


def test_recoveries_are_counted_per_bucket_of_one_application_and_no_other_action(db: Any) -> None:
    s = 1_000_000
    entries = (_entries_at("orders", "recovery.confirmed", [0, 1, 9 * s, 10 * s, 25 * s, 31 * s], 1)
               + _entries_at("orders", "recovery.dispatched", [2, 3, 11 * s], 20)
               + _entries_at("billing", "recovery.confirmed", [4, 12 * s], 30))
    with db.transaction() as cur:
        TABLES["audit"].write(cur, ({}, entries))
    assert db.recoveries(org="acme", app="orders", start_us=0, end_us=30 * s, width_us=10 * s) == [
        (0, 3), (10 * s, 1), (20 * s, 1)]  # 31 s is past the end
    assert db.recoveries(org="acme", app="billing", start_us=10 * s, end_us=30 * s, width_us=10 * s) == [(10 * s, 1)]
    assert db.recoveries(org="other", app="orders", start_us=0, end_us=30 * s, width_us=10 * s) == []


def _plan(db: Any, sql: str, params: dict[str, Any]) -> str:
    from relay_es.adapters.readmodels.bulk import is_sqlite

    with db.read() as cur:
        if not is_sqlite(cur):
            cur.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise,
            cur.execute("SET LOCAL enable_bitmapscan = off")  # or through a bitmap, then sorted
        cur.execute(("EXPLAIN QUERY PLAN " if is_sqlite(cur) else "EXPLAIN ") + sql, params)
        return " ".join(str(c) for row in cur.fetchall() for c in row)


def _indexes(db: Any) -> set[str]:
    from relay_es.adapters.readmodels.bulk import is_sqlite

    with db.read() as cur:
        cur.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'relay_audit'" if is_sqlite(cur)
                    else "SELECT indexname FROM pg_indexes WHERE tablename = 'relay_audit'")
        return {r[0] for r in cur.fetchall()}


def test_recoveries_are_read_through_the_partial_index_of_recoveries_alone(db: Any) -> None:
    """The query names the action as the index does, so both stores can use it (with a bound
    parameter, a generic plan of Postgres could not: psycopg prepares a statement run five times);
    the index of every entry's action that it replaced is dropped from a store made before."""
    from relay_es.adapters.readmodels.audit import RECOVERIES_SQL

    with db.transaction() as cur:  # a store made before: the old index of every entry's action
        cur.execute("CREATE INDEX relay_audit_action ON relay_audit (org, app, action, at)")
    with db.transaction() as cur:
        TABLES["audit"].create(cur)
    plan = _plan(db, RECOVERIES_SQL, {"w": 10, "org": "acme", "app": "orders", "s": 0, "e": 100})
    assert "relay_audit_recoveries" in plan, plan
    assert "relay_audit_action" not in _indexes(db)


def test_pages_of_entries_are_read_in_an_index_s_order_without_a_sort(db: Any) -> None:
    """A page by org, and by org, app and executor, comes from the index's own order (seq within
    the key): on SQLite the rowid that ends every index entry, where seq is not named again."""
    from relay_es.adapters.readmodels.audit import query_sql

    with db.transaction() as cur:
        TABLES["audit"].write(cur, ({}, [AuditEntry(seq, T0, "acme", "orders", "A", "x.happened", {})
                                         for seq in range(1, 50)]))
    for index, keys in [("relay_audit_org", {}), ("relay_audit_app", {"app": "orders", "executor_id": "A"})]:
        for after, folded, tokens in ((None, False, True), (5, False, True), (5, True, True), (5, True, False)):
            plan = _plan(db, *query_sql(org="acme", **{"app": None, "executor_id": None, **keys}, after=after,
                                        limit=100, folded=folded, tokens=tokens))
            assert index in plan, plan
            assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan
