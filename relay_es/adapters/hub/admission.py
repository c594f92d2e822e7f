"""Admission of executor handshakes: who may connect, as which org and token.

The hub asks :meth:`Gate.admit` before it accepts a WebSocket upgrade; a
refusal is a :class:`Refused` with the HTTP status the client gets. Keys are
checked by :class:`relay_es.adapters.authz.Credentials`, the checker the REST
API uses too (ADR 14).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.adapters import authz
from relay_es.adapters.failures import is_store_error
from relay_es.engine.service import Relay

log = logging.getLogger(__name__)

# The longest client address admitted, in characters: an IP address, or at most a DNS name (253), is what a
# reverse proxy forwards. Behind a proxy ``--forwarded-allow-ips`` trusts, the address is whatever its
# X-Forwarded-For says, and it is recorded with each connection.
MAX_ADDRESS = 253


class Refused(Exception):
    """A handshake refused before the upgrade, with an HTTP status."""

    def __init__(self, status: int, title: str, detail: str, *, audit: bool = True, org: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.audit, self.org = status, title, detail, audit, org


class Gate:
    """Admission of an executor handshake. Development mode: org ``local``,
    any key, an unknown application is registered on first connection.
    Returns ``(org, token name or None)`` or raises :class:`Refused`.

    Development mode stays on this machine: a handshake carrying an ``Origin``
    that is not a loopback page (a web page's script, DNS rebinding), or one
    that came through a reverse proxy (``Forwarded``, ``X-Forwarded-*``,
    ``X-Real-IP``), is refused with 403. The SDKs send neither."""

    credentials: authz.Credentials | None = None  # development mode checks no keys

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]]) -> None:
        self.relay = relay
        self.run = run
        # What admission learnt from the store, so that executors are still
        # admitted while the store is briefly away (Postgres restarting):
        self.known_apps: set[tuple[str, str]] = set()
        # One question to the store per application at a time: after a restart the executors come
        # back together, and each handshake asking on its own put thousands of reads of the same
        # application's stream into the command pool before the first answer came.
        self._asking: dict[tuple[str, Any], asyncio.Future[Any]] = {}
        self._forgotten = 0  # bumped by forget: an answer asked for before it is not kept

    async def _shared(self, key: tuple[str, Any], ask: Callable[[], Awaitable[Any]]) -> Any:
        """``ask()``, or the answer of the same question already on its way. Shielded: a handshake
        given up (its socket closed) does not cancel the question for the others."""
        pending = self._asking.get(key)
        if pending is None:
            pending = asyncio.ensure_future(ask())
            self._asking[key] = pending

            def done(f: asyncio.Future[Any], key: tuple[str, Any] = key) -> None:
                if not f.cancelled():
                    f.exception()  # retrieved: a failure nobody awaits any more is not logged as lost
                if self._asking.get(key) is f:  # forget (a REST thread) may have emptied it meanwhile
                    self._asking.pop(key, None)

            pending.add_done_callback(done)
        return await asyncio.shield(pending)

    async def app_registered(self, org: str, app: str) -> bool:
        if (org, app) in self.known_apps:
            return True
        return bool(await self._shared(("exists", (org, app)), lambda: self._ask_exists(org, app)))

    async def _ask_exists(self, org: str, app: str) -> bool:
        forgotten = self._forgotten
        found = await self.run(self.relay.app_exists, org, app)
        if found and forgotten == self._forgotten:
            self.known_apps.add((org, app))
        return found

    def forget(self, org: str, token: str | None = None, app: str | None = None) -> None:
        """A token was revoked or an application deleted: admission asks the store again (a question
        already on its way is not joined, nor its answer kept)."""
        if app is not None:
            self._forgotten += 1
            self.known_apps.discard((org, app))
            self._asking.clear()

    @staticmethod
    def check_name(app: str) -> None:
        from relay_es.aggregates.application import check_app_name
        from relay_es.domain.errors import InvalidSetting

        try:
            check_app_name(app)
        except InvalidSetting as e:
            raise Refused(404, "Unknown application", str(e), audit=False) from None

    @staticmethod
    def check_peer(peer: str) -> None:
        """``peer`` (``host:port``) must be an address: a host of at most :data:`MAX_ADDRESS` printable
        characters. Anything else came from a forwarded header, and is refused with 400 (unaudited: no
        key is checked yet)."""
        host = peer.rsplit(":", 1)[0]
        if len(host) > MAX_ADDRESS or not host.isprintable():
            raise Refused(400, "Bad request", f"the forwarded client address is not an address (at most {MAX_ADDRESS} "
                                              "printable characters)", audit=False)

    async def admit(self, app: str, key: str, peer: str, headers: list[tuple[bytes, bytes]] = ()) -> tuple[str, str | None]:
        if authz.proxy_header(headers) is not None:
            raise Refused(403, "Forbidden", authz.BEHIND_A_PROXY, org="local")
        self.check_peer(peer)
        self.check_name(app)
        origin = authz.header(headers, b"origin")
        if not authz.origin_is_local(origin):
            raise Refused(403, "Forbidden", "development mode accepts executors of this machine only: "
                                            f"a handshake from the page {origin[:200]!r} is refused", org="local")
        try:
            if not await self.app_registered("local", app):
                await self._shared(("register", app), lambda: self._register(app))
        except Exception as e:
            if not is_store_error(e):
                raise
            # The store is away: admit anyway (development mode accepts every
            # application); the registration is retried with the next connection.
            log.warning("store unavailable while admitting an executor of %s; admitted", app)
        return "local", None

    async def _register(self, app: str) -> None:
        forgotten = self._forgotten
        await self.run(self.relay.register_app, "local", app)
        if forgotten == self._forgotten:
            self.known_apps.add(("local", app))


class AuthGate(Gate):
    """Auth mode: the key must be a live token of an org that covers the
    application, and the application must be registered in that org.

    A refusal is audited only into the org the key belongs to (revoked, not
    covering the application, the application not registered there). A key no
    token ever had names no org: it is counted and logged (by the hub, once per
    address per quiet period), never audited -- an anonymous client must not
    be able to write into the audit log of every org that has an application
    of some name."""

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]], db: Any, *,
                 catch_up: Callable[[], bool] = lambda: False) -> None:
        """``catch_up``: passed to :class:`~relay_es.adapters.authz.Credentials` (a key the tokens
        read model does not know waits for the read models to catch up)."""
        super().__init__(relay, run)
        self.db = db
        self.credentials = authz.Credentials(relay, db, catch_up=catch_up)

    def forget(self, org: str, token: str | None = None, app: str | None = None) -> None:
        super().forget(org, token, app)
        if token is not None:
            self.credentials.forget(org, token)

    async def admit(self, app: str, key: str, peer: str, headers: list[tuple[bytes, bytes]] = ()) -> tuple[str, str | None]:
        self.check_peer(peer)
        self.check_name(app)
        try:
            checked = await self.run(self.credentials.identify, key)
        except authz.StoreUnavailable as e:
            raise Refused(503, "Service unavailable", str(e), audit=False) from None
        who = checked.principal
        if who is None:  # the same answer either way: a client learns nothing about the key
            raise Refused(401, "Unauthorized", "unknown or revoked conductor key",
                          audit=checked.org is not None, org=checked.org)
        try:
            authz.decide(authz.WEBSOCKET, who, None, app)
        except authz.Denied as d:
            raise Refused(d.status, "Forbidden", d.detail, org=who.org) from None
        try:
            registered = await self.app_registered(who.org, app)
        except Exception as e:
            if not is_store_error(e):
                raise
            raise Refused(503, "Service unavailable", "the store is unavailable; retry shortly", audit=False) from None
        if not registered:
            raise Refused(403, "Forbidden", f"application {app!r} is not registered in org {who.org!r}", org=who.org)
        return who.org, who.token
