"""The applications and tokens tables: rows stored and read back, the queries the REST API uses."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from relay_es.adapters.readmodels import TABLES
from relay_es.projections.apps import AppRow, TokenRow

T0 = datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=timezone.utc)


def test_apps_and_tokens_round_trip_and_list(db: Any) -> None:
    orders = AppRow("a1", "acme", "orders", 2, True, timedelta(seconds=90), None, 1000, None, T0, T0, False)
    gone = AppRow("a2", "acme", "gone", 3, False, None, None, None, None, T0, T0, True)
    ci = TokenRow("t1", "acme", "ci", 1, "hash-ci", ["orders"], T0, False)
    old = TokenRow("t2", "acme", "old", 2, "hash-old", None, T0, True)
    table = TABLES["apps"]
    with db.transaction() as cur:
        table.write(cur, ([orders, gone], [ci, old]))
    with db.read() as cur:
        assert table.read(cur, ["a1", "t1", "nope"]) == {"a1": orders, "t1": ci}
    assert db.list_apps("acme") == [orders]
    assert db.list_apps("acme", include_deleted=True) == [gone, orders]
    assert db.list_tokens("acme") == [ci]
    assert db.token_by_hash("hash-old") == old and db.token_by_hash("nope") is None


def test_a_tokens_table_from_before_permissions_gains_the_column_in_place(db: Any) -> None:
    """Made by a Relay from before tokens carried permissions: its rows stay (NULL: the scope's),
    nothing is rebuilt, and every key keeps working through the upgrade."""
    table = TABLES["apps"]
    with db.transaction() as cur:
        cur.execute("DROP TABLE relay_tokens")
        cur.execute("""CREATE TABLE relay_tokens (stream_id TEXT PRIMARY KEY, org TEXT NOT NULL, name TEXT NOT NULL,
                       version BIGINT NOT NULL, secret_hash TEXT NOT NULL, app_names TEXT, created_at BIGINT NOT NULL,
                       revoked INTEGER NOT NULL)""")
        cur.execute("INSERT INTO relay_tokens VALUES ('t1', 'acme', 'ci', 1, 'hash-ci', NULL, 1, 0)")
    with db.transaction() as cur:
        table.create(cur)
        table.create(cur)  # and again: nothing to add
    row = db.token_by_hash("hash-ci")
    assert row is not None and row.name == "ci" and row.permissions is None
    chosen = TokenRow("t2", "acme", "reader", 1, "hash-r", None, T0, False, ["metric.read"])
    with db.transaction() as cur:
        table.write(cur, ([], [chosen]))
    assert db.token_by_hash("hash-r") == chosen
