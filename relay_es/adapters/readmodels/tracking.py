"""``relay_tracking``: the position each read model has reached in the notification log.

A read model's rows and its position change in one transaction (the projection
runner's), so a table is always exactly as of its position.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from relay_es.adapters.readmodels.bulk import is_sqlite

DDL = """
CREATE TABLE IF NOT EXISTS relay_tracking (
    name TEXT PRIMARY KEY,
    position BIGINT NOT NULL
)
"""


def create(cur: Any, names: Iterable[str]) -> None:
    """The table, and a position 0 for each name that has none."""
    cur.execute(DDL)
    for name in names:
        cur.execute("INSERT INTO relay_tracking (name, position) VALUES (%s, 0) ON CONFLICT (name) DO NOTHING",
                    (name,))


def positions(cur: Any) -> dict[str, int]:
    cur.execute("SELECT name, position FROM relay_tracking")
    return {n: int(p) for n, p in cur.fetchall()}


def lock_positions(cur: Any) -> dict[str, int]:
    """The positions, locked for the rest of the write transaction (Postgres; SQLite's
    write transaction is exclusive already)."""
    if is_sqlite(cur):
        return positions(cur)
    cur.execute("SELECT name, position FROM relay_tracking ORDER BY name FOR UPDATE")
    return {n: int(p) for n, p in cur.fetchall()}


def position_of(cur: Any, name: str) -> int:
    cur.execute("SELECT position FROM relay_tracking WHERE name = %s", (name,))
    return int(cur.fetchone()[0])


def move(cur: Any, name: str, pos: int, last: int) -> bool:
    """Moves ``name`` from ``pos`` to ``last``; False if it was not at ``pos``."""
    cur.execute("UPDATE relay_tracking SET position = %s WHERE name = %s AND position = %s", (last, name, pos))
    return cur.rowcount == 1


def reset(cur: Any, name: str) -> None:
    cur.execute("UPDATE relay_tracking SET position = 0 WHERE name = %s", (name,))
