"""The applications and tokens read models (listing apps, resolving keys): pure folds.

The tables are stored by :mod:`relay_es.adapters.readmodels.apps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from eventsourcing.utils import get_topic

from relay_es.aggregates.application import Application
from relay_es.aggregates.token import Token
from relay_es.projections.storable import check_event


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
    permissions: list[str] | None = None  # chosen when it was made; None: those of its scope


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
        return replace(base, secret_hash=e.secret_hash, app_names=e.app_names, created_at=e.timestamp, revoked=False,
                       permissions=None)
    if isinstance(e, Token.PermissionsSet):
        return replace(base, permissions=list(e.permissions))
    if isinstance(e, Token.Revoked):
        return replace(base, revoked=True)
    return base


APP_EVENTS = (Application.Registered, Application.Restored, Application.SettingsChanged, Application.Deleted)
TOKEN_EVENTS = (Token.Created, Token.Reissued, Token.PermissionsSet, Token.Revoked)


class AppsProjection:
    """The apps and tokens read models between batches: the rows read or made stay cached, up to
    :attr:`cache_limit` of each (deleted applications and revoked tokens are rows too: a Relay
    making and revoking tokens all day would hold them all), then the cache starts again empty."""

    NAME = "apps"
    name = NAME
    kept_from = get_topic(Application.Registered)  # an application's row is never deleted (ADR 8)
    event_types = APP_EVENTS + TOKEN_EVENTS
    cache_limit = 20_000

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.apps: dict[str, AppRow | None] = {}
        self.tokens: dict[str, TokenRow | None] = {}
        self.dirty: set[str] = set()
        self._asked: dict[str, bool] = {}  # stream id -> is an application's (asked by missing)

    def missing(self, items: list[tuple[int, str, Any]]) -> list[str]:
        asked = self._asked = {}
        for _, sid, event in items:
            is_app = isinstance(event, APP_EVENTS)
            if sid not in (self.apps if is_app else self.tokens):
                asked[sid] = is_app
        return list(asked)

    def loaded(self, asked: Sequence[str], found: dict[str, AppRow | TokenRow]) -> None:
        for sid in asked:
            (self.apps if self._asked[sid] else self.tokens)[sid] = found.get(sid)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        is_app = isinstance(event, APP_EVENTS)
        rows, red = (self.apps, reduce_app) if is_app else (self.tokens, reduce_token)
        cur_row = rows[sid]
        if cur_row is not None and cur_row.version >= event.originator_version:
            return
        check_event(event)  # Unstorable: the runner skips this event (ADR 16)
        rows[sid] = red(cur_row, event)
        self.dirty.add(sid)

    def changes(self) -> tuple[list[AppRow], list[TokenRow]]:
        """The app rows and token rows changed since the last call."""
        apps = [r for sid in self.dirty if (r := self.apps.get(sid)) is not None]
        tokens = [r for sid in self.dirty if (r := self.tokens.get(sid)) is not None]
        self.dirty = set()
        return apps, tokens

    def committed(self) -> None:
        if len(self.apps) > self.cache_limit:
            self.apps = {}
        if len(self.tokens) > self.cache_limit:
            self.tokens = {}


class AppsAndTokens(Protocol):
    """Where the tables are read (the read models' database)."""

    def list_apps(self, org: str, *, include_deleted: bool = False) -> list[AppRow]: ...

    def list_tokens(self, org: str) -> list[TokenRow]: ...

    def token_by_hash(self, secret_hash: str) -> TokenRow | None: ...


def list_apps(db: AppsAndTokens, org: str, *, include_deleted: bool = False) -> list[AppRow]:
    return db.list_apps(org, include_deleted=include_deleted)


def app_named(db: AppsAndTokens, org: str, name: str) -> AppRow | None:
    """The application ``org``/``name`` as the read model has it; None: not registered there (deleted,
    or not folded yet)."""
    return next((r for r in db.list_apps(org) if r.name == name), None)


def list_tokens(db: AppsAndTokens, org: str) -> list[TokenRow]:
    return db.list_tokens(org)


def token_by_hash(db: AppsAndTokens, secret_hash: str) -> TokenRow | None:
    return db.token_by_hash(secret_hash)
