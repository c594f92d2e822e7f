"""The applications and tokens read models (listing apps, resolving keys)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from relay_es.aggregates.application import Application
from relay_es.aggregates.token import Token
from relay_es.adapters.stores import Database
from relay_es.projections.storable import check_event
from relay_es.domain.units import from_epoch_ms, to_epoch_ms


@dataclass(frozen=True)
class AppRow:
    stream_id: str
    org: str
    name: str
    version: int
    private_mode: bool
    executor_timeout: timedelta | None
    gc_time_threshold: timedelta | None
    gc_rows_threshold: int | None
    global_timeout: timedelta | None
    created_at: datetime
    updated_at: datetime
    deleted: bool


@dataclass(frozen=True)
class TokenRow:
    stream_id: str
    org: str
    name: str
    version: int
    secret_hash: str
    app_names: list[str] | None
    created_at: datetime
    revoked: bool


def reduce_app(row: AppRow | None, e: Any) -> AppRow:
    if isinstance(e, Application.Registered):
        return AppRow(str(e.originator_id), e.org, e.name, e.originator_version, e.private_mode,
                      None, None, None, None, e.timestamp, e.timestamp, False)
    assert row is not None
    base = replace(row, version=e.originator_version, updated_at=e.timestamp)
    if isinstance(e, Application.Restored):
        return replace(base, private_mode=e.private_mode, executor_timeout=None, gc_time_threshold=None,
                       gc_rows_threshold=None, global_timeout=None, deleted=False, created_at=e.timestamp)
    if isinstance(e, Application.SettingsChanged):
        return replace(base, private_mode=e.private_mode, executor_timeout=e.executor_timeout,
                       gc_time_threshold=e.gc_time_threshold, gc_rows_threshold=e.gc_rows_threshold,
                       global_timeout=e.global_timeout)
    if isinstance(e, Application.Deleted):
        return replace(base, deleted=True)
    return base


def reduce_token(row: TokenRow | None, e: Any) -> TokenRow:
    if isinstance(e, Token.Created):
        return TokenRow(str(e.originator_id), e.org, e.name, e.originator_version, e.secret_hash,
                        e.app_names, e.timestamp, False)
    assert row is not None
    base = replace(row, version=e.originator_version)
    if isinstance(e, Token.Reissued):
        return replace(base, secret_hash=e.secret_hash, app_names=e.app_names, created_at=e.timestamp, revoked=False)
    if isinstance(e, Token.Revoked):
        return replace(base, revoked=True)
    return base


def _us(d: timedelta | None) -> int | None:
    return None if d is None else d // timedelta(microseconds=1)


def _td(v: int | None) -> timedelta | None:
    return None if v is None else timedelta(microseconds=v)


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
        created_at BIGINT NOT NULL,
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
        revoked INTEGER NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_tokens_hash ON relay_tokens (secret_hash)",
]

_APP_COLS = ("stream_id, org, name, version, private_mode, executor_timeout_us, gc_time_threshold_us, "
             "gc_rows_threshold, global_timeout_us, created_at, updated_at, deleted")
_TOKEN_COLS = "stream_id, org, name, version, secret_hash, app_names, created_at, revoked"


def _app_to_db(r: AppRow) -> tuple[Any, ...]:
    return (r.stream_id, r.org, r.name, r.version, int(r.private_mode), _us(r.executor_timeout),
            _us(r.gc_time_threshold), r.gc_rows_threshold, _us(r.global_timeout),
            to_epoch_ms(r.created_at), to_epoch_ms(r.updated_at), int(r.deleted))


def _app_from_db(v: Any) -> AppRow:
    return AppRow(v[0], v[1], v[2], v[3], bool(v[4]), _td(v[5]), _td(v[6]), v[7], _td(v[8]),
                  from_epoch_ms(v[9]), from_epoch_ms(v[10]), bool(v[11]))


def _token_to_db(r: TokenRow) -> tuple[Any, ...]:
    return (r.stream_id, r.org, r.name, r.version, r.secret_hash,
            json.dumps(r.app_names) if r.app_names is not None else None, to_epoch_ms(r.created_at), int(r.revoked))


def _token_from_db(v: Any) -> TokenRow:
    return TokenRow(v[0], v[1], v[2], v[3], v[4], json.loads(v[5]) if v[5] is not None else None,
                    from_epoch_ms(v[6]), bool(v[7]))


def _upsert(table: str, cols: str) -> str:
    names = [c.strip() for c in cols.split(",")]
    return (f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(names))}) "
            f"ON CONFLICT (stream_id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in names if c != "stream_id")
            + f" WHERE {table}.version < excluded.version")


_APP_EVENTS = (Application.Registered, Application.Restored, Application.SettingsChanged, Application.Deleted)
_TOKEN_EVENTS = (Token.Created, Token.Reissued, Token.Revoked)


class AppsProjection:
    """Keeps ``relay_apps`` and ``relay_tokens`` (few rows: all stay cached)."""

    name = "apps"
    tables = ("relay_apps", "relay_tokens")
    event_types = _APP_EVENTS + _TOKEN_EVENTS

    def __init__(self) -> None:
        self.forget()

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        for stmt in DDL if indexes else [s for s in DDL if "CREATE INDEX" not in s]:
            cur.execute(stmt)

    def drop(self, cur: Any) -> None:
        for t in self.tables:
            cur.execute(f"DROP TABLE IF EXISTS {t}")

    def forget(self) -> None:
        self.apps: dict[str, AppRow | None] = {}
        self.tokens: dict[str, TokenRow | None] = {}
        self.dirty: set[str] = set()

    def load(self, cur: Any, items: list[tuple[int, str, Any]]) -> None:
        for _, sid, event in items:
            is_app = isinstance(event, _APP_EVENTS)
            rows, table, cols, conv = ((self.apps, "relay_apps", _APP_COLS, _app_from_db) if is_app
                                       else (self.tokens, "relay_tokens", _TOKEN_COLS, _token_from_db))
            if sid not in rows:
                cur.execute(f"SELECT {cols} FROM {table} WHERE stream_id = %s", (sid,))
                found = cur.fetchone()
                rows[sid] = conv(found) if found else None

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        is_app = isinstance(event, _APP_EVENTS)
        rows, red = (self.apps, reduce_app) if is_app else (self.tokens, reduce_token)
        cur_row = rows[sid]
        if cur_row is not None and cur_row.version >= event.originator_version:
            return
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        rows[sid] = red(cur_row, event)
        self.dirty.add(sid)

    def write(self, cur: Any, *, bulk: bool = False) -> None:
        apps = [_app_to_db(r) for sid in self.dirty if (r := self.apps.get(sid)) is not None]
        tokens = [_token_to_db(r) for sid in self.dirty if (r := self.tokens.get(sid)) is not None]
        self.dirty = set()
        if apps:
            cur.executemany(_upsert("relay_apps", _APP_COLS), apps)
        if tokens:
            cur.executemany(_upsert("relay_tokens", _TOKEN_COLS), tokens)

    def committed(self) -> None:
        pass


def list_apps(db: Database, org: str, *, include_deleted: bool = False) -> list[AppRow]:
    sql = f"SELECT {_APP_COLS} FROM relay_apps WHERE org = %s"
    if not include_deleted:
        sql += " AND deleted = 0"
    with db.read() as cur:
        cur.execute(sql + " ORDER BY name", (org,))
        return [_app_from_db(v) for v in cur.fetchall()]


def list_tokens(db: Database, org: str) -> list[TokenRow]:
    with db.read() as cur:
        cur.execute(f"SELECT {_TOKEN_COLS} FROM relay_tokens WHERE org = %s AND revoked = 0 ORDER BY name", (org,))
        return [_token_from_db(v) for v in cur.fetchall()]


def token_by_hash(db: Database, secret_hash: str) -> TokenRow | None:
    with db.read() as cur:
        cur.execute(f"SELECT {_TOKEN_COLS} FROM relay_tokens WHERE secret_hash = %s", (secret_hash,))
        v = cur.fetchone()
    return _token_from_db(v) if v else None
