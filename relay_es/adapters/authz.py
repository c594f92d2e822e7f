"""Who may call what: the authorization table, the caller's credentials, and
the checks that keep development mode on this machine (ADR 14).

Everything here is decided from the **route** a request matched (its method
and path template) and the path's own parameters, never from the query string.
The REST API enforces it in one guard (``rest/guard.py``); executor admission
(``hub/admission.py``) uses the same :class:`Credentials` and :class:`Principal`
and the table's :data:`WEBSOCKET` row. A new REST route needs a row here
(``tests/adapters/test_authz.py`` checks every route has one).

Permissions are Conductor's eight (``organization.read`` ... ``websocket.connect``,
:mod:`relay_es.domain.roles`). A token is either **org-wide** (every application of its org) or
**limited to applications**, and carries the permissions it was made with; one made without a
choice has those of its scope (every permission org-wide; reading and connecting executors when
limited to applications: it is the key that sits on every executor host, so it changes nothing).
:func:`permissions_for` says which.
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from relay_es.domain.roles import (  # Conductor's eight, defined once
    APPLICATION_READ,
    APPLICATION_WRITE,
    METRIC_READ,
    ORGANIZATION_READ,
    ORGANIZATION_WRITE,
    PERMISSIONS,
    TOKEN_READ,
    TOKEN_WRITE,
    WEBSOCKET_CONNECT,
)
from relay_es.protocol.limits import OutOfBounds, check_identifier

log = logging.getLogger(__name__)

# What a token limited to applications may do by default, on those applications only. It
# is the conductor key copied to every executor host of those applications, so
# it writes nothing: with application.write it could set globalTimeoutMs and
# gcTimeThresholdMs to 1 ms and have the executors cancel every pending
# workflow and delete their history at the next retention round. (Its maker may
# choose otherwise, explicitly.)
APP_TOKEN_PERMISSIONS = frozenset({APPLICATION_READ, WEBSOCKET_CONNECT})


class Scope(enum.Enum):
    PUBLIC = "public"  # no token, in any mode
    ORG = "org"        # an org-wide token (of the path's org, where the path has one)
    APP = "app"        # a token of the path's org that covers the path's {app}
    SELF = "self"      # any caller with valid credentials, about themselves


@dataclass(frozen=True)
class Rule:
    operation: str
    scope: Scope
    permission: str | None  # None only for PUBLIC and SELF
    oauth: bool = False  # served only with OIDC configured (Conductor serves it only with OAuth); else a 404


# The table. Keys are (method, path template) exactly as the router matched them.
# A route that is not here is refused (fail closed); a test checks every
# registered route has a row.
TABLE: Mapping[tuple[str, str], Rule] = {
    ("GET", "/v2/orgs/{org}/apps"): Rule("apps.list", Scope.ORG, APPLICATION_READ),
    ("PUT", "/v2/orgs/{org}/apps/{app}"): Rule("apps.register", Scope.ORG, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}"): Rule("apps.get", Scope.APP, APPLICATION_READ),
    ("PATCH", "/v2/orgs/{org}/apps/{app}"): Rule("apps.update", Scope.ORG, APPLICATION_WRITE),
    ("DELETE", "/v2/orgs/{org}/apps/{app}"): Rule("apps.delete", Scope.ORG, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/executors"): Rule("executors.list", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/executors/{executor_id}/history"):
        Rule("executors.history", Scope.APP, APPLICATION_READ),
    # Issue 13: workflows, queues, schedules and versions, each carried to an executor of {app}.
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows"): Rule("workflows.list", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/search"): Rule("workflows.search", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}"): Rule("workflows.get", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/steps"):
        Rule("workflows.steps", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/events"):
        Rule("workflows.events", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/notifications"):
        Rule("workflows.notifications", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/streams"):
        Rule("workflows.streams", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/aggregates"):
        Rule("workflows.aggregates", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/steps/aggregates"): Rule("steps.aggregates", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/cancel"):
        Rule("workflows.cancel", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/resume"):
        Rule("workflows.resume", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/fork"):
        Rule("workflows.fork", Scope.APP, APPLICATION_WRITE),
    ("DELETE", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}"):
        Rule("workflows.delete", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/bulk-cancel"):
        Rule("workflows.bulk_cancel", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/bulk-resume"):
        Rule("workflows.bulk_resume", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/bulk-delete"):
        Rule("workflows.bulk_delete", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/bulk-fork-from-failure"):
        Rule("workflows.bulk_fork_from_failure", Scope.APP, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}/export"):
        Rule("workflows.export", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/workflows/import"): Rule("workflows.import", Scope.APP, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/queues"): Rule("queues.list", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/queues/{queue_name}"): Rule("queues.get", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/schedules"): Rule("schedules.list", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/schedules/{schedule_name}"): Rule("schedules.get", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/schedules/{schedule_name}/pause"):
        Rule("schedules.pause", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/schedules/{schedule_name}/resume"):
        Rule("schedules.resume", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/schedules/{schedule_name}/trigger"):
        Rule("schedules.trigger", Scope.APP, APPLICATION_WRITE),
    ("POST", "/v2/orgs/{org}/apps/{app}/schedules/{schedule_name}/backfill"):
        Rule("schedules.backfill", Scope.APP, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/metrics"): Rule("metrics.list", Scope.ORG, METRIC_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/autoscaling-policy"): Rule("autoscaling.get_policy", Scope.APP,
                                                                  APPLICATION_READ),
    ("PUT", "/v2/orgs/{org}/apps/{app}/autoscaling-policy"): Rule("autoscaling.set_policy", Scope.APP,
                                                                  APPLICATION_WRITE),
    ("DELETE", "/v2/orgs/{org}/apps/{app}/autoscaling-policy"): Rule("autoscaling.delete_policy", Scope.APP,
                                                                     APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/autoscale"): Rule("autoscaling.recommend", Scope.APP, APPLICATION_READ),
    ("GET", "/v2/orgs/{org}/apps/{app}/alerting-rules"): Rule("alerting.list", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/alerting-rules"): Rule("alerting.create", Scope.APP, APPLICATION_WRITE),
    ("DELETE", "/v2/orgs/{org}/apps/{app}/alerting-rules/{rule_id}"): Rule("alerting.delete", Scope.APP,
                                                                          APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/apps/{app}/versions"): Rule("versions.list", Scope.APP, APPLICATION_READ),
    ("PATCH", "/v2/orgs/{org}/apps/{app}/versions/latest"): Rule("versions.set_latest", Scope.APP, APPLICATION_WRITE),
    # Relay's own: stranded work (PENDING workflows whose executor is not alive) and its fixes.
    ("GET", "/v2/orgs/{org}/apps/{app}/stranded-workflows"): Rule("stranded.list", Scope.APP, APPLICATION_READ),
    ("POST", "/v2/orgs/{org}/apps/{app}/stranded-workflows/fix"): Rule("stranded.fix", Scope.APP, APPLICATION_WRITE),
    ("GET", "/v2/orgs/{org}/tokens"): Rule("tokens.list", Scope.ORG, TOKEN_READ),
    ("POST", "/v2/orgs/{org}/tokens/{token_name}"): Rule("tokens.create", Scope.ORG, TOKEN_WRITE),
    ("DELETE", "/v2/orgs/{org}/tokens/{token_name}"): Rule("tokens.revoke", Scope.ORG, TOKEN_WRITE),
    ("GET", "/v2/orgs/{org}/permissions"): Rule("permissions.list", Scope.ORG, ORGANIZATION_READ),
    # Conductor's OAuth-only operations: with --oidc-issuer only (docs/identity.md); a 404 otherwise.
    # Roles among them: they are what an OIDC user is given, and do nothing for a token (ADR 24).
    ("GET", "/v2/orgs/{org}/roles"): Rule("roles.list", Scope.ORG, ORGANIZATION_READ, oauth=True),
    ("POST", "/v2/orgs/{org}/roles"): Rule("roles.create", Scope.ORG, ORGANIZATION_WRITE, oauth=True),
    ("DELETE", "/v2/orgs/{org}/roles/{role_name}"): Rule("roles.delete", Scope.ORG, ORGANIZATION_WRITE,
                                                         oauth=True),
    ("GET", "/v2/orgs/{org}"): Rule("org.get", Scope.ORG, ORGANIZATION_READ, oauth=True),
    ("PATCH", "/v2/orgs/{org}"): Rule("org.update", Scope.ORG, ORGANIZATION_WRITE, oauth=True),
    ("GET", "/v2/orgs/{org}/members"): Rule("members.list", Scope.ORG, ORGANIZATION_READ, oauth=True),
    ("PUT", "/v2/orgs/{org}/members/{username}/roles/{role_name}"): Rule("members.grant_role", Scope.ORG,
                                                                         ORGANIZATION_WRITE, oauth=True),
    ("DELETE", "/v2/orgs/{org}/members/{username}"): Rule("members.remove", Scope.ORG, ORGANIZATION_WRITE,
                                                          oauth=True),
    ("POST", "/v2/orgs/{org}/secrets"): Rule("secrets.generate", Scope.ORG, TOKEN_WRITE, oauth=True),
    ("GET", "/v2/users/me"): Rule("users.me", Scope.SELF, None, oauth=True),
    ("GET", "/v2/orgs/{org}/audit-logs"): Rule("audit.list", Scope.ORG, ORGANIZATION_READ),
    # The executors' lifecycle: application data. Its token entries need token.read too (the route's own filter).
    ("GET", "/v2/orgs/{org}/executor-events"): Rule("executor_events.list", Scope.ORG, APPLICATION_READ),
    ("GET", "/metrics"): Rule("metrics", Scope.ORG, METRIC_READ),
    ("GET", "/healthz"): Rule("healthz", Scope.PUBLIC, None),
    ("GET", "/readyz"): Rule("readyz", Scope.PUBLIC, None),
    ("GET", "/openapi.json"): Rule("openapi", Scope.PUBLIC, None),
}

# The executors' WebSocket is not a REST route; admission applies this row.
WEBSOCKET = Rule("websocket.connect", Scope.APP, WEBSOCKET_CONNECT)
# Litestar's automatic OPTIONS answers (which methods a path allows) touch no data.
OPTIONS = Rule("options", Scope.PUBLIC, None)
# Litestar's OpenAPI router serves the document at /openapi.json (and again at
# /openapi.json/openapi.json) and a plain 404 page for any other path under it.
# There are no rendered pages: Swagger, Redoc, ... load unpinned scripts from
# public CDNs, which would run on Relay's origin with its API at hand.
OPENAPI_ROUTER = Rule("openapi", Scope.PUBLIC, None)


def rule_for(method: str, template: str) -> Rule | None:
    rule = TABLE.get((method, template))
    if rule is not None:
        return rule
    if method == "OPTIONS":
        return OPTIONS
    if method in ("GET", "HEAD") and template.startswith("/openapi.json/"):
        return OPENAPI_ROUTER
    return None


def table_markdown() -> str:
    """The table as Markdown, for the README (and a test that keeps them equal)."""
    lines = ["| method | path | operation | token needed | permission |", "| --- | --- | --- | --- | --- |"]
    need = {Scope.PUBLIC: "none", Scope.ORG: "org-wide", Scope.APP: "org-wide, or limited to apps including `{app}`",
            Scope.SELF: "any (an OIDC user)"}
    for (method, path), r in TABLE.items():
        oauth = " (OIDC only)" if r.oauth else ""
        lines.append(f"| {method} | `{path}` | {r.operation}{oauth} | {need[r.scope]} | {r.permission or '-'} |")
    lines.append(f"| WebSocket | `/websocket/{{app}}/{{key}}` | {WEBSOCKET.operation} | {need[WEBSOCKET.scope]} "
                 f"| {WEBSOCKET.permission} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ callers


@dataclass(frozen=True)
class Principal:
    """Who a request or a handshake acts as."""

    org: str
    token: str | None  # None: development mode, or a user signed in with OIDC
    app_names: tuple[str, ...] | None  # None: org-wide
    permissions: frozenset[str]
    user: str | None = None  # a user signed in with OIDC (relay_es.adapters.oidc): their username
    role: str | None = None  # and the role their permissions are
    # and the member record they were let in on, as read then: its ``since`` and the role granted them (None:
    # their groups'); None when none was read. A key made for them is refused when it is no longer the one
    # on record (:class:`~relay_es.domain.errors.MembershipChanged`): removed or demoted meanwhile, they make none.
    membership: tuple[str, str | None] | None = None

    def covers(self, app: str) -> bool:
        return self.app_names is None or app in self.app_names


def permissions_for(app_names: Iterable[str] | None, chosen: Iterable[str] | None = None) -> frozenset[str]:
    """A token's permissions: those it was made with (``chosen``), else those of its scope (every
    one for an org-wide token; reading and connecting for one limited to applications)."""
    if chosen is not None:
        return frozenset(chosen) & frozenset(PERMISSIONS)
    return frozenset(PERMISSIONS) if app_names is None else APP_TOKEN_PERMISSIONS


def development_principal() -> Principal:
    return Principal(org="local", token=None, app_names=None, permissions=frozenset(PERMISSIONS))


class Denied(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def decide(rule: Rule, who: Principal, org: str | None, app: str | None) -> None:
    """Raises :class:`Denied` (403) unless ``who`` may apply ``rule`` to the
    path's ``org`` and ``app``. Pure: the table, the caller and the path only."""
    if rule.scope is Scope.PUBLIC or rule.scope is Scope.SELF:
        return
    if org is not None and org != who.org:
        raise Denied(403, f"this token belongs to another org, not {org!r}")
    if rule.permission not in who.permissions:
        raise Denied(403, f"this token lacks the {rule.permission} permission")
    if rule.scope is Scope.ORG:
        if who.app_names is not None:
            raise Denied(403, f"{rule.operation} needs an org-wide token; this one is limited to applications "
                              + ", ".join(who.app_names))
    elif app is None or not who.covers(app):
        raise Denied(403, f"this token does not cover application {app!r}")


# ------------------------------------------------------------ credentials


class StoreUnavailable(Exception):
    """A key could not be checked: the store is away and the key was not seen live before, or the
    server is starting and its read models do not hold the key yet."""


@dataclass(frozen=True)
class Checked:
    """What a key is: the live token (``principal``), or not live; ``org`` is the
    org whose token the key is or was, None for a key no token ever had."""

    principal: Principal | None
    org: str | None


UNKNOWN = Checked(None, None)


@dataclass(frozen=True)
class _Seen:
    principal: Principal
    secret_hash: str


class Credentials:
    """The one credential checker, used by the REST API and by admission.

    A key is looked up in the ``tokens`` read model only to learn *which* token
    it names (org, name); whether that token is live is then read from the
    Token aggregate in the event store, so a projection that lags can never
    make a revoked (or re-issued) key live again. Revocations recorded by this
    process are known at once (:meth:`forget`). Keys confirmed live are
    remembered only for when the store is away: then a key seen live before,
    and not revoked here since, is still accepted; any other key is refused
    with :class:`StoreUnavailable`.

    A key the read model does not know may be a token made an instant ago, by
    another process or before this one started, that the read model has not
    folded yet: ``catch_up()`` then waits (briefly) for the read models to hold
    every event recorded so far and says whether they were behind, and the key
    is looked up once more. A key that is unknown while they are current costs
    no wait.
    """

    def __init__(self, relay: Any, db: Any, *, catch_up: Callable[[], bool] = lambda: False) -> None:
        self.relay = relay
        self.db = db
        self.catch_up = catch_up
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}  # secret hash -> last confirmed live
        self._epoch = 0  # bumped by every forget(): a check that overlapped one does not remember

    def forget(self, org: str, name: str) -> None:
        """The token ``org``/``name`` was revoked in this process."""
        with self._lock:
            self._epoch += 1
            for digest, seen in list(self._seen.items()):
                if seen.principal.org == org and seen.principal.token == name:
                    del self._seen[digest]

    def check(self, secret: str) -> Principal | None:
        """The live token ``secret`` is, or ``None``. Blocking (store reads): call it off the event loop."""
        return self.identify(secret).principal

    def identify(self, secret: str) -> Checked:
        """:meth:`check`, and for a key that is not live, the org it named if it
        was ever a token's secret (revoked, or re-issued since): a refusal of it
        is that org's business. An unknown key names no org. Blocking."""
        from relay_es.aggregates.token import hash_secret, token_stream_id
        from relay_es.projections.apps import token_by_hash
        from relay_es.adapters.failures import is_store_error

        if not 0 < len(secret) <= 512 or not secret.isprintable():
            return UNKNOWN  # no token looks like this: nothing to look up
        digest = hash_secret(secret)
        with self._lock:
            epoch = self._epoch
            seen = self._seen.get(digest)
        try:
            if seen is not None:
                org, name = seen.principal.org, seen.principal.token
            else:
                row = token_by_hash(self.db, digest)
                if row is None and self.catch_up():
                    row = token_by_hash(self.db, digest)
                if row is None:
                    return UNKNOWN
                org, name = row.org, row.name
            token = self.relay._maybe(token_stream_id(org, name))
        except Exception as e:
            if not is_store_error(e):
                raise
            with self._lock:
                seen = self._seen.get(digest)
            if seen is not None:
                log.warning("store unavailable while checking a key; accepted as last confirmed live")
                return Checked(seen.principal, seen.principal.org)
            raise StoreUnavailable("the store is unavailable; the key cannot be checked now") from None
        if token is None or token.revoked or token.secret_hash != digest:
            with self._lock:
                self._seen.pop(digest, None)
            return UNKNOWN if token is None else Checked(None, org)
        apps = tuple(token.app_names) if token.app_names else None
        who = Principal(org=token.org, token=token.name, app_names=apps,
                        permissions=permissions_for(apps, token.permissions))
        with self._lock:
            if self._epoch == epoch:
                self._seen[digest] = _Seen(who, digest)
        return Checked(who, who.org)

    def org_exists(self, org: str) -> bool:
        """Whether ``org`` is an org of this Relay: the read models hold a live token of it or an
        application (a deleted one too). Blocking (store reads): call it off the event loop."""
        from relay_es.projections.apps import list_apps, list_tokens

        return bool(list_tokens(self.db, org)) or bool(list_apps(self.db, org, include_deleted=True))


# ------------------------------------------------------------ this machine

_LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}
_WILDCARDS = {"0.0.0.0", "::", ""}


def _split_host(value: str) -> str | None:
    """``host[:port]`` (IPv6 in brackets) -> host, lower case; None if malformed."""
    value = value.strip().lower()
    if not value or any(c in value for c in "/@?#\\ \t") or not value.isascii():
        return None
    try:
        host = urlsplit("//" + value).hostname
        _ = urlsplit("//" + value).port  # raises on a bad port
    except ValueError:
        return None
    return host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _is_loopback_host(host: str) -> bool:
    if host in _LOOPBACK_NAMES or host.endswith(".localhost") and host != ".localhost":
        return True  # *.localhost resolves to loopback in the client itself (RFC 6761), never through DNS
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_is_local(header: str | None, configured_host: str) -> bool:
    """Development mode: may a request with this ``Host`` header be answered?

    A DNS-rebinding page reaches Relay under the attacker's *name*; so only
    loopback names and addresses, and the ``--host`` Relay was started with,
    are accepted (any IP address too when that host is a wildcard: an address
    is never a rebinding). No ``Host`` at all is a non-browser client."""
    if header is None:
        return True
    host = _split_host(header)
    if host is None:
        return False
    configured = configured_host.strip().strip("[]").lower()
    if _is_loopback_host(host) or host == configured:
        return True
    return configured in _WILDCARDS and _is_ip(host)


def origin_is_local(origin: str | None) -> bool:
    """Development mode: is this ``Origin`` a page of this machine? No Origin
    (the SDKs, curl, the CLI) is fine; ``null`` and any other site are not."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and _is_loopback_host(host)


# Headers a reverse proxy adds. Development mode is for this machine only, and
# a proxy on this machine makes it reachable from anywhere while every request
# still arrives from 127.0.0.1 with a loopback Host (nginx sends
# ``Host: $proxy_host``, i.e. 127.0.0.1:8090). uvicorn may already have moved
# X-Forwarded-For into the connection's client address; the headers stay in
# the ASGI scope, which is what is checked. Every ``X-Forwarded-*`` counts
# (-Port, -Server, -Prefix...). A forwarder that adds none (a bare
# ``proxy_pass``, socat, ssh -L) cannot be told from a local client: the docs
# say never to put development mode behind one.
PROXY_HEADERS = (b"forwarded", b"x-real-ip")
PROXY_HEADER_PREFIX = b"x-forwarded-"
BEHIND_A_PROXY = "development mode serves this machine only; run with --auth behind a proxy"


def proxy_header(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The name of the first reverse-proxy header among raw ASGI headers, if any."""
    for k, _ in headers:
        k = k.lower()
        if k in PROXY_HEADERS or k.startswith(PROXY_HEADER_PREFIX):
            return k.decode("latin-1")
    return None


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of a raw ASGI header, decoded as latin-1 (as HTTP is)."""
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1")
    return None


def repeated_query_parameter(query_string: bytes) -> str | None:
    """The name of a query parameter given more than once, if any."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if name in seen:
            return name
        seen.add(name)
    return None


# ------------------------------------------------------------ path names

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,255}")
MAX_EXECUTOR_ID = 512  # characters of an executor id in a query filter (the ids themselves: valid_executor_id)


def valid_name(value: str) -> bool:
    return NAME.fullmatch(value) is not None


def valid_executor_id(value: str) -> bool:
    """The rule the handshake registers an executor id by (:func:`relay_es.protocol.limits.check_identifier`):
    an id an executor can have is one the path can name."""
    try:
        check_identifier("executor_id", value, required=True)
    except OutOfBounds:
        return False
    return True
