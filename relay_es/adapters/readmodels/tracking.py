"""``relay_tracking``: the position each read model has reached in the notification log;
``relay_versions``: the version of the stored form each read model's tables have.

A read model's rows and its position change in one transaction (the projection
runner's), so a table is always exactly as of its position. A read model whose
stored form changed (a column, a unit) has a new version: tables of another
version are dropped and rebuilt from the log (read models are rebuildable), and so
are those of a read model tracked past 0 with a table gone (dropped by hand).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from relay_es.adapters.readmodels.bulk import is_sqlite, marks

log = logging.getLogger(__name__)

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


def outdated(cur: Any, versions: Mapping[str, int], tables: Mapping[str, Sequence[str]]) -> list[str]:
    """The names whose tables are to be rebuilt, each logged with why: stored in another version than
    ``versions`` says, or tracked past 0 with one of its tables missing (dropped by hand: created again
    empty, it would be taken for one holding every event up to its position). A read model tracked
    before versions were recorded (a position, no version) is at version 1; one never filled
    (position 0) is at whatever version it is created in. ``tables``: each read model's tables."""
    cur.execute("SELECT name, version FROM relay_versions")
    stored = {n: int(v) for n, v in cur.fetchall()}
    tracked = positions(cur)
    out = []
    for name, version in versions.items():
        was = stored.get(name, 1 if tracked.get(name, 0) > 0 else version)
        if was != version:
            log.warning("read model %s is stored in version %d, %s than this Relay's %d: rebuilding it", name, was,
                        "older" if was < version else "newer (a downgrade)", version)
            out.append(name)
    folded = [name for name in versions if name not in out and tracked.get(name, 0) > 0]
    gone = missing(cur, {name: tables.get(name, ()) for name in folded})
    for name, tables in gone.items():
        log.warning("read model %s is tracked at position %d but its table %s is missing (dropped by hand?): "
                    "rebuilding it", name, tracked[name], ", ".join(tables))
    return out + list(gone)


def missing(cur: Any, tables: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Of ``tables`` (a read model's name -> its tables' names), those not in the store, by read model
    (only those missing one). One catalog query: on Postgres, the schema ``CREATE TABLE`` puts an
    unqualified table in (``search_path``'s first that exists); on SQLite, the main database."""
    wanted = sorted({t for names in tables.values() for t in names})
    if not wanted:
        return {}
    if is_sqlite(cur):
        cur.execute(f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({marks(len(wanted))})", wanted)
    else:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = ANY(%s)",
                    (wanted,))
    present = {r[0] for r in cur.fetchall()}
    gone = {name: [t for t in names if t not in present] for name, names in tables.items()}
    return {name: ts for name, ts in gone.items() if ts}


def record_versions(cur: Any, versions: Mapping[str, int]) -> None:
    for name, version in versions.items():
        cur.execute("INSERT INTO relay_versions (name, version) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET version = excluded.version", (name, version))
