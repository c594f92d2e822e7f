"""The applications and tokens tables, ``relay_apps`` and ``relay_tokens``.

Rows are folded by :mod:`relay_es.projections.apps`; this module stores and
reads them. Durations are whole microseconds, timestamps epoch microseconds
(version 2; version 1 stored timestamps in milliseconds); a token's chosen permissions are a JSON
list, a column added in place to a table made before them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from relay_es.adapters.readmodels.bulk import chunks, is_sqlite, marks, upsert_sql
from relay_es.domain.units import from_epoch_us, to_epoch_us
from relay_es.projections.apps import AppRow, AppsProjection, TokenRow

NAME = AppsProjection.NAME

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_apps (
        stream_id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        name TEXT NOT NULL,
        version BIGINT NOT NULL,
        private_mode INTEGER NOT NULL,
        executor_timeout_us BIGINT,
        gc_time_threshold_us BIGINT,
        gc_rows_threshold BIGINT,
        global_timeout_us BIGINT,
        created_at BIGINT NOT NULL,  -- timestamps: epoch microseconds, exactly as in the events
        updated_at BIGINT NOT NULL,
        deleted INTEGER NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_apps_org ON relay_apps (org, name)",
    """
    CREATE TABLE IF NOT EXISTS relay_tokens (
        stream_id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        name TEXT NOT NULL,
        version BIGINT NOT NULL,
        secret_hash TEXT NOT NULL,
        app_names TEXT,
        created_at BIGINT NOT NULL,
        revoked INTEGER NOT NULL,
        permissions TEXT  -- a JSON list; NULL: those of its scope
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_tokens_hash ON relay_tokens (secret_hash)",
]

APP_COLUMNS = ("stream_id", "org", "name", "version", "private_mode", "executor_timeout_us", "gc_time_threshold_us",
               "gc_rows_threshold", "global_timeout_us", "created_at", "updated_at", "deleted")
TOKEN_COLUMNS = ("stream_id", "org", "name", "version", "secret_hash", "app_names", "created_at", "revoked",
                 "permissions")
_APP_COLS = ", ".join(APP_COLUMNS)
_TOKEN_COLS = ", ".join(TOKEN_COLUMNS)
_UPSERT_APP = upsert_sql("relay_apps", APP_COLUMNS)
_UPSERT_TOKEN = upsert_sql("relay_tokens", TOKEN_COLUMNS)


def _us(d: timedelta | None) -> int | None:
    return None if d is None else d // timedelta(microseconds=1)


def _td(v: int | None) -> timedelta | None:
    return None if v is None else timedelta(microseconds=v)


def app_to_db(r: AppRow) -> tuple[Any, ...]:
    return (r.stream_id, r.org, r.name, r.version, int(r.private_mode), _us(r.executor_timeout),
            _us(r.gc_time_threshold), r.gc_rows_threshold, _us(r.global_timeout),
            to_epoch_us(r.created_at), to_epoch_us(r.updated_at), int(r.deleted))


def app_from_db(v: Any) -> AppRow:
    return AppRow(v[0], v[1], v[2], v[3], bool(v[4]), _td(v[5]), _td(v[6]), v[7], _td(v[8]),
                  from_epoch_us(v[9]), from_epoch_us(v[10]), bool(v[11]))


def token_to_db(r: TokenRow) -> tuple[Any, ...]:
    return (r.stream_id, r.org, r.name, r.version, r.secret_hash,
            json.dumps(r.app_names) if r.app_names is not None else None, to_epoch_us(r.created_at), int(r.revoked),
            json.dumps(r.permissions) if r.permissions is not None else None)


def token_from_db(v: Any) -> TokenRow:
    return TokenRow(v[0], v[1], v[2], v[3], v[4], json.loads(v[5]) if v[5] is not None else None,
                    from_epoch_us(v[6]), bool(v[7]), json.loads(v[8]) if v[8] is not None else None)


class AppsTable:
    """Stores :class:`~relay_es.projections.apps.AppsProjection`'s rows."""

    name = NAME
    tables = ("relay_apps", "relay_tokens")
    version = 2

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        for stmt in DDL if indexes else [s for s in DDL if "CREATE INDEX" not in s]:
            cur.execute(stmt)
        self._add_permissions(cur)

    @staticmethod
    def _add_permissions(cur: Any) -> None:
        """A table from before tokens carried permissions gains the column, in place: NULL is right
        for every row it holds (no token had chosen any), and a rebuild would leave every key
        unknown until the log was read again."""
        if is_sqlite(cur):
            cur.execute("SELECT name FROM pragma_table_info('relay_tokens')")
            if "permissions" not in {r[0] for r in cur.fetchall()}:
                cur.execute("ALTER TABLE relay_tokens ADD COLUMN permissions TEXT")
        else:
            cur.execute("ALTER TABLE relay_tokens ADD COLUMN IF NOT EXISTS permissions TEXT")

    def drop(self, cur: Any) -> None:
        for t in self.tables:
            cur.execute(f"DROP TABLE IF EXISTS {t}")

    def read(self, cur: Any, sids: Sequence[str]) -> dict[str, AppRow | TokenRow]:
        out: dict[str, AppRow | TokenRow] = {}
        for chunk in chunks(sids):
            cur.execute(f"SELECT {_APP_COLS} FROM relay_apps WHERE stream_id IN ({marks(len(chunk))})", list(chunk))
            out.update((v[0], app_from_db(v)) for v in cur.fetchall())
            cur.execute(f"SELECT {_TOKEN_COLS} FROM relay_tokens WHERE stream_id IN ({marks(len(chunk))})",
                        list(chunk))
            out.update((v[0], token_from_db(v)) for v in cur.fetchall())
        return out

    def write(self, cur: Any, changes: tuple[list[AppRow], list[TokenRow]], *, bulk: bool = False) -> None:
        apps, tokens = changes
        if apps:
            cur.executemany(_UPSERT_APP, [app_to_db(r) for r in apps])
        if tokens:
            cur.executemany(_UPSERT_TOKEN, [token_to_db(r) for r in tokens])


# ------------------------------------------------------------------ queries


def list_apps(db: Any, org: str, *, include_deleted: bool = False) -> list[AppRow]:
    sql = f"SELECT {_APP_COLS} FROM relay_apps WHERE org = %s"
    if not include_deleted:
        sql += " AND deleted = 0"
    with db.read() as cur:
        cur.execute(sql, (org,))
        return sorted((app_from_db(v) for v in cur.fetchall()), key=lambda a: a.name)  # code points: see all_rows


def deleted_apps(db: Any) -> set[tuple[str, str]]:
    """Every deleted application, as ``(org, name)``."""
    with db.read() as cur:
        cur.execute("SELECT org, name FROM relay_apps WHERE deleted = 1")
        return {(org, name) for org, name in cur.fetchall()}


def list_tokens(db: Any, org: str) -> list[TokenRow]:
    with db.read() as cur:
        cur.execute(f"SELECT {_TOKEN_COLS} FROM relay_tokens WHERE org = %s AND revoked = 0", (org,))
        return sorted((token_from_db(v) for v in cur.fetchall()), key=lambda t: t.name)  # code points: see all_rows


def token_by_hash(db: Any, secret_hash: str) -> TokenRow | None:
    with db.read() as cur:
        cur.execute(f"SELECT {_TOKEN_COLS} FROM relay_tokens WHERE secret_hash = %s", (secret_hash,))
        v = cur.fetchone()
    return token_from_db(v) if v else None
