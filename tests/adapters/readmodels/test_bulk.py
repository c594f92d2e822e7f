"""Many rows at once: the prepared-statement path and the COPY path give the same rows."""

from __future__ import annotations

from typing import Any

import pytest

from relay_es.adapters.readmodels.bulk import COPY_MIN_ROWS, chunks, copy_rows, insert_rows, is_sqlite, on_conflict_newer


@pytest.mark.parametrize("n", [3, 2 * COPY_MIN_ROWS])
def test_insert_rows_upserts_newer_versions_only(db: Any, n: int) -> None:
    with db.transaction() as cur:
        assert is_sqlite(cur) == (db.dialect == "sqlite")
        cur.execute("CREATE TABLE t (stream_id TEXT PRIMARY KEY, version BIGINT NOT NULL, v TEXT)")
        on_conflict = on_conflict_newer("t", ["stream_id", "version", "v"])
        insert_rows(cur, "t", ["stream_id", "version", "v"], [(f"s{i}", 2, "new") for i in range(n)], on_conflict)
    with db.transaction() as cur:
        insert_rows(cur, "t", ["stream_id", "version", "v"], [(f"s{i}", 1 + i % 3, "other") for i in range(n)],
                    on_conflict)
    with db.read() as cur:
        cur.execute("SELECT stream_id, version, v FROM t ORDER BY stream_id")
        rows = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
    assert rows == {f"s{i}": (3, "other") if i % 3 == 2 else (2, "new") for i in range(n)}


def test_copy_rows_appends(db: Any) -> None:
    with db.transaction() as cur:
        cur.execute("CREATE TABLE c (seq BIGINT PRIMARY KEY, detail TEXT)")
        copy_rows(cur, "c", ("seq", "detail"), [(i, f"d{i}") for i in range(100)])
        copy_rows(cur, "c", ("seq", "detail"), [])
    with db.read() as cur:
        cur.execute("SELECT COUNT(*), MAX(seq) FROM c")
        assert tuple(cur.fetchone()) == (100, 99)


def test_chunks() -> None:
    assert [list(c) for c in chunks(list(range(5)), 2)] == [[0, 1], [2, 3], [4]]
    assert chunks([], 2) == []


class _Counting:
    """A cursor that counts the statements sent through it."""

    def __init__(self, cur: Any) -> None:
        self.cur, self.statements = cur, 0

    def execute(self, sql: str, params: Any = None) -> Any:
        self.statements += 1
        return self.cur.execute(sql, params)


@pytest.mark.parametrize(("n", "statements"), [(2, 1), (333, 1), (334, 2), (1000, 4)])
def test_sqlite_writes_rows_in_multi_row_statements_applied_in_order(tmp_path: Any, n: int, statements: int) -> None:
    """333 rows of 3 columns fill one statement (999 parameters); the rest go in one more. Each
    row meets the conflict clause in turn, as ``executemany`` has it: a later row of the same key
    in the same call (the last of the ``n``) updates the earlier one."""
    from relay_es.adapters.readmodels.bulk import sqlite_insert
    from relay_es.adapters.stores import SQLiteDatabase

    db = SQLiteDatabase(str(tmp_path / "b.db"))
    try:
        with db.transaction() as cur:
            cur.execute("CREATE TABLE t (stream_id TEXT PRIMARY KEY, version BIGINT NOT NULL, v TEXT)")
            counting = _Counting(cur)
            rows = [(f"s{i}", i, f"v{i}") for i in range(n - 1)] + [("s0", n, "last")]  # s0 again, newer
            sqlite_insert(counting, "t", ["stream_id", "version", "v"], rows,
                          on_conflict_newer("t", ["stream_id", "version", "v"]))
        assert counting.statements == statements
        with db.read() as cur:
            cur.execute("SELECT stream_id, version, v FROM t")
            got = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
        assert got == {**{f"s{i}": (i, f"v{i}") for i in range(n - 1)}, "s0": (n, "last")}
    finally:
        db.close()
