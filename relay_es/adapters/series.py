"""The executors' metrics, as Relay collected them: ``relay_metric_samples`` and
``relay_metric_cursors``, in the read models' database.

Metrics are measurements, not transitions: they never go into the event store, and
nothing rebuilds them. A sample is one ``(type, name)`` of one window of one application;
``bucket`` is the window's start and ``granularity`` its length (epoch seconds, seconds).
Each application's cursor is the end of the last window stored; a window is stored in one
transaction with its cursor moved, and only if the cursor was where the collector read it
(compare and set), so two collectors on one store never store a window twice.
Samples older than the retention are pruned (:meth:`MetricSeries.prune`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relay_es.engine.metric_windows import Window
from relay_es.protocol.metrics import MAX_VALUE, Sample

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_metric_samples (
        org TEXT NOT NULL,
        app TEXT NOT NULL,
        bucket BIGINT NOT NULL,        -- the window's start, epoch seconds
        granularity INTEGER NOT NULL,  -- the window's length, seconds
        metric_type TEXT NOT NULL,
        metric_name TEXT NOT NULL,
        value BIGINT NOT NULL,
        PRIMARY KEY (org, app, bucket, metric_type, metric_name)
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_metric_samples_bucket ON relay_metric_samples (bucket)",
    """
    CREATE TABLE IF NOT EXISTS relay_metric_cursors (
        org TEXT NOT NULL,
        app TEXT NOT NULL,
        collected_until BIGINT NOT NULL,  -- the end of the last window stored, epoch seconds
        PRIMARY KEY (org, app)
    )
    """,
]


@dataclass(frozen=True)
class Point:
    """One stored sample: Conductor's ``Metric`` without the application's id."""

    metric_type: str
    metric_name: str
    bucket: int
    granularity: int
    value: int


class MetricSeries:
    """The collected series of every application, on ``db`` (a
    :class:`~relay_es.adapters.stores.Database`)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def create(self) -> None:
        with self.db.schema() as cur:
            for stmt in DDL:
                cur.execute(stmt)

    def cursor(self, org: str, app: str) -> int | None:
        """The end of the application's last stored window, or None: never collected."""
        with self.db.read() as cur:
            cur.execute("SELECT collected_until FROM relay_metric_cursors WHERE org = %s AND app = %s", (org, app))
            row = cur.fetchone()
        return None if row is None else int(row[0])

    def cursors(self) -> dict[tuple[str, str], int]:
        """Every application's cursor, by ``(org, app)``."""
        with self.db.read() as cur:
            cur.execute("SELECT org, app, collected_until FROM relay_metric_cursors")
            return {(r[0], r[1]): int(r[2]) for r in cur.fetchall()}

    def begin(self, org: str, app: str, at: int) -> int:
        """Sets the application's cursor to ``at`` if it has none (its first collection starts
        there, however long its executors take to answer); returns the cursor."""
        with self.db.transaction() as cur:
            cur.execute("INSERT INTO relay_metric_cursors (org, app, collected_until) VALUES (%s, %s, %s) "
                        "ON CONFLICT (org, app) DO NOTHING", (org, app, at))
            cur.execute("SELECT collected_until FROM relay_metric_cursors WHERE org = %s AND app = %s", (org, app))
            return int(cur.fetchone()[0])

    def record(self, org: str, app: str, expected: int | None, window: Window, samples: Sequence[Sample]) -> bool:
        """Stores ``window``'s samples and moves the cursor to its end, if the cursor is still
        ``expected``; otherwise stores nothing and returns False."""
        with self.db.transaction() as cur:
            if expected is None:
                cur.execute("INSERT INTO relay_metric_cursors (org, app, collected_until) VALUES (%s, %s, %s) "
                            "ON CONFLICT (org, app) DO NOTHING", (org, app, window.end))
            else:
                cur.execute("UPDATE relay_metric_cursors SET collected_until = %s "
                            "WHERE org = %s AND app = %s AND collected_until = %s",
                            (window.end, org, app, expected))
            if cur.rowcount != 1:
                return False
            if samples:
                cur.executemany(
                    "INSERT INTO relay_metric_samples (org, app, bucket, granularity, metric_type, metric_name, value) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (org, app, bucket, metric_type, metric_name) "
                    "DO UPDATE SET granularity = excluded.granularity, value = excluded.value",
                    [(org, app, window.start, window.granularity, s.metric_type, s.metric_name, s.value)
                     for s in samples])
        return True

    def query(self, org: str, app: str, start: int, end: int, *, limit: int, width: int | None = None) -> list[Point]:
        """The samples of windows starting in ``[start, end)``, oldest first, then by type and
        name (names in the store's collation: callers that need one order sort again); at most
        ``limit`` (ask one more to know there are more). With ``width`` (seconds), the windows
        are added up into buckets of that width aligned on the epoch, each of that granularity (a sum
        above ``MAX_VALUE``, 2**63 - 1, is ``MAX_VALUE``, as the collector caps one window's)."""
        with self.db.read() as cur:
            if width is None:
                cur.execute(
                    "SELECT metric_type, metric_name, bucket, granularity, value FROM relay_metric_samples "
                    "WHERE org = %s AND app = %s AND bucket >= %s AND bucket < %s "
                    "ORDER BY bucket, metric_type, metric_name LIMIT %s", (org, app, start, end, limit))
            else:
                # Each value may be up to MAX_VALUE: their sum is taken in two halves (high and low 32 bits)
                # that cannot overflow a 64-bit SUM (SQLite's raises), and capped at MAX_VALUE here, the
                # same on both stores (Postgres' SUM would pass the reference's int64 Metric.value).
                cur.execute(
                    "SELECT metric_type, metric_name, (bucket / CAST(%(w)s AS BIGINT)) * CAST(%(w)s AS BIGINT) AS b, "
                    "%(w)s, SUM(value >> 32), SUM(value & 4294967295) FROM relay_metric_samples "
                    "WHERE org = %(org)s AND app = %(app)s AND bucket >= %(s)s AND bucket < %(e)s "
                    "GROUP BY b, metric_type, metric_name ORDER BY b, metric_type, metric_name LIMIT %(n)s",
                    {"w": width, "org": org, "app": app, "s": start, "e": end, "n": limit})
                return [Point(r[0], r[1], int(r[2]), int(r[3]), min(MAX_VALUE, (int(r[4]) << 32) + int(r[5])))
                        for r in cur.fetchall()]
            return [Point(r[0], r[1], int(r[2]), int(r[3]), int(r[4])) for r in cur.fetchall()]

    def sizes(self, org: str, app: str, start: int, end: int) -> list[tuple[int, int]]:
        """``(bucket, how many samples)`` of each window starting in ``[start, end)``, oldest first."""
        with self.db.read() as cur:
            cur.execute("SELECT bucket, COUNT(*) FROM relay_metric_samples "
                        "WHERE org = %s AND app = %s AND bucket >= %s AND bucket < %s GROUP BY bucket ORDER BY bucket",
                        (org, app, start, end))
            return [(int(r[0]), int(r[1])) for r in cur.fetchall()]

    def counts(self, org: str, app: str, start: int, end: int, widths: Sequence[int]) -> list[int]:
        """How many points :meth:`query` (without a limit) answers for the windows starting in
        ``[start, end)`` with each of ``widths``, in one pass over them: each series' windows in order,
        a window starts a point of a width where its bucket of that width is not its previous window's."""
        if not widths:
            return []
        params: dict[str, Any] = {"org": org, "app": app, "s": start, "e": end}
        sums = []
        for i, width in enumerate(widths):
            params[f"w{i}"] = width
            w = f"CAST(%(w{i})s AS BIGINT)"
            sums.append(f"SUM(CASE WHEN prev IS NULL OR prev / {w} <> bucket / {w} THEN 1 ELSE 0 END)")
        with self.db.read() as cur:
            cur.execute(
                f"SELECT {', '.join(sums)} FROM (SELECT bucket, LAG(bucket) OVER "
                "(PARTITION BY metric_type, metric_name ORDER BY bucket) AS prev FROM relay_metric_samples "
                "WHERE org = %(org)s AND app = %(app)s AND bucket >= %(s)s AND bucket < %(e)s) AS t", params)
            row = cur.fetchone()
        return [0 if n is None else int(n) for n in row]

    def prune(self, before: int) -> int:
        """Deletes the samples of windows that started before ``before``; returns how many."""
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM relay_metric_samples WHERE bucket < %s", (before,))
            return max(0, cur.rowcount)

    def forget(self, org: str, app: str) -> None:
        """An application was deleted: its series and cursor go (a new one of that name starts afresh)."""
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM relay_metric_samples WHERE org = %s AND app = %s", (org, app))
            cur.execute("DELETE FROM relay_metric_cursors WHERE org = %s AND app = %s", (org, app))
