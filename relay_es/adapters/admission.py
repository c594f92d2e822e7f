"""Admission of executor handshakes: who may connect, as which org and token.

The hub asks :meth:`Gate.admit` before it accepts a WebSocket upgrade; a
refusal is a :class:`Refused` with the HTTP status the client gets.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.service import Relay, is_store_error

log = logging.getLogger(__name__)


class Refused(Exception):
    """A handshake refused before the upgrade, with an HTTP status."""

    def __init__(self, status: int, title: str, detail: str, *, audit: bool = True, org: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.audit, self.org = status, title, detail, audit, org


class Gate:
    """Admission of an executor handshake. Development mode: org ``local``,
    any key, an unknown application is registered on first connection.
    Returns ``(org, token name or None)`` or raises :class:`Refused`."""

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]]) -> None:
        self.relay = relay
        self.run = run
        # What admission learnt from the store, so that executors are still
        # admitted while the store is briefly away (Postgres restarting):
        self.known_apps: set[tuple[str, str]] = set()

    async def app_registered(self, org: str, app: str) -> bool:
        if (org, app) in self.known_apps:
            return True
        found = await self.run(self.relay.app_exists, org, app)
        if found:
            self.known_apps.add((org, app))
        return found

    def forget(self, org: str, token: str | None = None, app: str | None = None) -> None:
        """A token was revoked or an application deleted: admission asks the store again."""
        if app is not None:
            self.known_apps.discard((org, app))

    @staticmethod
    def check_name(app: str) -> None:
        from relay_es.aggregates.application import check_app_name
        from relay_es.errors import InvalidSetting

        try:
            check_app_name(app)
        except InvalidSetting as e:
            raise Refused(404, "Unknown application", str(e), audit=False) from None

    async def admit(self, app: str, key: str, peer: str, headers: list[tuple[bytes, bytes]] = ()) -> tuple[str, str | None]:
        self.check_name(app)
        try:
            if not await self.app_registered("local", app):
                await self.run(self.relay.register_app, "local", app)
                self.known_apps.add(("local", app))
        except Exception as e:
            if not is_store_error(e):
                raise
            # The store is away: admit anyway (development mode accepts every
            # application); the registration is retried with the next connection.
            log.warning("store unavailable while admitting an executor of %s; admitted", app)
        return "local", None

    async def orgs_for(self, app: str) -> list[str]:
        """Where a refusal for ``app`` is audited."""
        return ["local"]


class AuthGate(Gate):
    """Auth mode: the key must be a live token of an org that covers the
    application, and the application must be registered in that org."""

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]], db: Any) -> None:
        super().__init__(relay, run)
        self.db = db
        self.known_tokens: dict[str, Any] = {}  # secret hash -> live token row

    def forget(self, org: str, token: str | None = None, app: str | None = None) -> None:
        super().forget(org, token, app)
        if token is not None:
            for h, row in list(self.known_tokens.items()):
                if row.org == org and row.name == token:
                    del self.known_tokens[h]

    async def admit(self, app: str, key: str, peer: str, headers: list[tuple[bytes, bytes]] = ()) -> tuple[str, str | None]:
        from relay_es.aggregates.token import hash_secret
        from relay_es.projections.apps import token_by_hash

        self.check_name(app)
        digest = hash_secret(key)
        row = self.known_tokens.get(digest)
        if row is None:
            row = await self.run(token_by_hash, self.db, digest)
            if row is not None and not row.revoked:
                self.known_tokens[digest] = row
        if row is None or row.revoked:
            raise Refused(401, "Unauthorized", "unknown or revoked conductor key")
        if row.app_names and app not in row.app_names:
            raise Refused(403, "Forbidden", f"this key does not cover application {app!r}", org=row.org)
        if not await self.app_registered(row.org, app):
            raise Refused(403, "Forbidden", f"application {app!r} is not registered in org {row.org!r}", org=row.org)
        return row.org, row.name

    async def orgs_for(self, app: str) -> list[str]:
        from relay_es.projections.apps import orgs_with_app

        return await self.run(orgs_with_app, self.db, app)
