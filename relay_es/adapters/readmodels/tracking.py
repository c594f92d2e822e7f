"""``relay_tracking``: the position each read model has reached in the notification log;
``relay_versions``: the version of the stored form each read model's tables have.

A read model's rows and its position change in one transaction (the projection
runner's), so a table is always exactly as of its position. A read model whose
stored form changed (a column, a unit) has a new version: tables of an older
version are dropped and rebuilt from the log (read models are rebuildable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from relay_es.adapters.readmodels.bulk import is_sqlite

DDL = """
CREATE TABLE IF NOT EXISTS relay_tracking (
    name TEXT PRIMARY KEY,
    position BIGINT NOT NULL
)
"""


VERSIONS_DDL = """
CREATE TABLE IF NOT EXISTS relay_versions (
    name TEXT PRIMARY KEY,
    version BIGINT NOT NULL
)
"""


def create(cur: Any, names: Iterable[str]) -> None:
    """The tables, and a position 0 for each name that has none."""
    cur.execute(DDL)
    cur.execute(VERSIONS_DDL)
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


def outdated(cur: Any, versions: Mapping[str, int]) -> list[str]:
    """The names whose tables are stored in another version than ``versions`` says.
    A read model tracked before versions were recorded (a position, no version) is at
    version 1; one never filled (position 0) is at whatever version it is created in."""
    cur.execute("SELECT name, version FROM relay_versions")
    stored = {n: int(v) for n, v in cur.fetchall()}
    tracked = positions(cur)
    return [name for name, version in versions.items()
            if stored.get(name, 1 if tracked.get(name, 0) > 0 else version) != version]


def record_versions(cur: Any, versions: Mapping[str, int]) -> None:
    for name, version in versions.items():
        cur.execute("INSERT INTO relay_versions (name, version) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET version = excluded.version", (name, version))
