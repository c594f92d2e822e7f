"""The one place REST calls are authorized (ADR 14): :class:`Authorize`, the app-level guard.

For every request it looks up the row of the authorization table
(``relay_es.adapters.authz``) for the route matched -- method and path
template, never the query string -- and refuses a route with no row (fail
closed). Development mode answers only this machine: no reverse-proxy headers,
a loopback (or the configured) ``Host``, no ``Origin`` of another site, and the
only org is ``local``. Auth mode requires ``Authorization: Bearer <token>``, a
live token of the path's org whose scope and permissions the row accepts.
Names in the path are checked before anything echoes them: Relay's own by the names' alphabet (a
404 where they would be found), what the executor's application chose by its rule
(:func:`valid_text`, a 422 naming the parameter). The caller is left
in ``request.state.principal``. A 401 or 403 is put in the audit log, throttled
(:mod:`relay_es.adapters.rest.recording`); an anonymous caller's only under an org that exists.
Once the caller is let through, a query parameter of a number, a boolean or a closed set
given the literal ``null`` is a 422 naming it (:func:`refuse_null_literals`): Litestar would
take it for the parameter left out.
An OIDC sign-in is checked on threads of its own (:data:`OIDC_THREADS`), Relay's tokens on the
default pool: sign-ins waiting on a slow issuer never keep a token's caller waiting.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from litestar.connection import ASGIConnection
from litestar.constants import RESERVED_KWARGS
from litestar.datastructures import Headers
from litestar.enums import ParamType
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.handlers.base import BaseRouteHandler
from litestar.params import ParameterKwarg

from relay_es.adapters import authz
from relay_es.adapters.oidc import OidcError, looks_like_jwt
from relay_es.adapters.rest.conductor.models import TEXT_RULE, text_fault
from relay_es.adapters.rest.context import RestContext
from relay_es.adapters.rest.recording import Refusals, source_of
from relay_es.adapters.rest.slashes import SENT_NUL, SLASH, restore
from relay_es.aggregates.application import APP_NAME, ORG_NAME
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.action_commands import Actor

log = logging.getLogger(__name__)

# The path parameter a route creates, by operation: an invalid name there is a
# 422 naming the body's field; anywhere else it is a 404.
CREATES = {"apps.register": ("app", "appName"), "tokens.create": ("token_name", "tokenName")}

# Path parameters that name what an executor's application chose, not Relay, by their names in
# Conductor's API: taken as the executor has them (valid_text: a scheduled workflow's id holds ':'
# and '+', a queue name a space, a workflow id a tab or a joined emoji -- DBOS takes any of them).
EXECUTOR_TEXT = {"workflow_id": "workflowId", "queue_name": "queueName", "schedule_name": "scheduleName"}
# Those and an OIDC member's name: free text, printable (an issuer's subject or e-mail, which Relay
# keeps). Relay's own names (org, app, token, role, rule) keep the names' alphabet.
FREE_TEXT = frozenset({*EXECUTOR_TEXT, "username"})
# Path parameters whose encoded "/" reaches the handler as "/": the free text, and an executor id
# (which the executor chose too, by the handshake's rule: authz.valid_executor_id).
SLASHED = FREE_TEXT | {"executor_id"}
MAX_PRINTABLE = 4096  # characters of a printable name in the path (a member's)


def valid_text(value: str) -> bool:
    """The rule of an ID or a name the executor's application chose, in the path and in a
    Conductor body (``models.EXECUTOR_TEXT``): not empty, and what can be sent and stored
    (:func:`~relay_es.adapters.rest.conductor.models.text_fault`)."""
    return bool(value) and text_fault(value) is None


def printable_name(value: str) -> bool:
    """A member's name (or a token's, for the audit log's target): printable, bounded."""
    return 0 < len(value) <= MAX_PRINTABLE and value.isprintable()


def sent_nul(raw_path: bytes, value: str) -> bool:
    """Whether a path parameter (before :func:`~relay_es.adapters.rest.slashes.restore`) holds a NUL
    the client sent as ``%00``: :class:`~relay_es.adapters.rest.slashes.EncodedSlashes` made it
    :data:`~relay_es.adapters.rest.slashes.SENT_NUL`; served without it, it is still a NUL, which
    only an encoded slash (``%2F``, then routed apart) could otherwise be."""
    if b"%00" not in raw_path:
        return False
    return SENT_NUL in value or (SLASH in value and b"%2f" not in raw_path.lower())


MAX_BEARER = 16 * 1024  # an OIDC JWT can be a few kilobytes; Relay's own tokens are 49 characters

# At most this many OIDC sign-ins checked at once (the issuer's keys, the member's row); more wait their turn
# here, not in the default pool that checks Relay's own tokens (asyncio.to_thread). Threads start when needed.
OIDC_THREADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="relay-oidc")


def bearer(header: str) -> str:
    """The secret of an ``Authorization: Bearer <secret>`` header, or a 401."""
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or " " in secret or len(secret) > MAX_BEARER:
        raise HTTPException(status_code=401, detail="malformed Authorization header: expected 'Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    return secret


def check_path_names(rule: authz.Rule, params: dict[str, Any], *, nul_sent: frozenset[str] = frozenset()) -> None:
    """Names in the path are bounded and of their alphabet before any handler sees them. An ID or
    name of the executor's application outside its rule (:func:`valid_text`; ``nul_sent``: the
    parameters that held a ``%00``) is a 422 naming the parameter and the rule: it cannot name
    anything the executor has. Relay's own names: an invalid one is a 422 where it would be
    created, a 404 elsewhere."""
    creates, field = CREATES.get(rule.operation, (None, None))
    for key, value in params.items():
        if not isinstance(value, str):
            continue
        if key in EXECUTOR_TEXT:
            fault = ("holds a NUL; an ID or name is " + TEXT_RULE if key in nul_sent
                     else "must not be empty" if not value else text_fault(value))
            if fault is not None:
                raise InvalidSetting(EXECUTOR_TEXT[key], fault)
            continue
        if key == "executor_id":
            ok = authz.valid_executor_id(value)
        elif key in FREE_TEXT:
            ok = printable_name(value)
        else:
            ok = authz.valid_name(value)
        if ok:
            continue
        if key == creates:
            raise InvalidSetting(field, "must be 1-256 URL-safe characters (letters, digits, . _ ~ -), "
                                        "starting with a letter or digit")
        raise NotFoundException(f"no such {key.replace('_', ' ')}: it is not a valid name")


def null_takers(handler: BaseRouteHandler) -> frozenset[str]:
    """The query parameters (by the name in the URL) of ``handler`` whose type is optional and
    takes no text: ``int | None``, ``bool | None``, ``Literal[...] | None``. Litestar converts
    the query's strings laxly (msgspec, ``strict=False``), which reads ``null`` (any case) there
    as None: the parameter left out."""
    skipped = set(handler.resolve_dependencies()) | RESERVED_KWARGS
    names = set()
    for name, field in handler.parsed_fn_signature.parameters.items():
        kwarg = field.kwarg_definition
        if name in skipped or (kwarg is not None and not isinstance(kwarg, ParameterKwarg)):
            continue  # a dependency, the request, its body
        if isinstance(kwarg, ParameterKwarg) and kwarg.param_type is not ParamType.QUERY:
            continue  # a header, a cookie, the path
        if field.is_optional and not any(isinstance(a, type) and issubclass(a, str) for a in field.args):
            names.add(kwarg.name if isinstance(kwarg, ParameterKwarg) and kwarg.name else name)
    return frozenset(names)


def refuse_null_literals(connection: ASGIConnection[Any, Any, Any, Any], takers: frozenset[str]) -> None:
    """A 422 naming the first of ``takers`` the query gives as ``null``: the reference's
    integers and booleans have no null, and a parameter left out is left out."""
    if not takers:
        return  # most routes: the query string not even parsed here
    query = connection.query_params
    for name in sorted(takers):
        value = query.get(name)
        if isinstance(value, str) and value.lower() == "null":
            message = "`null` is not a value of this parameter: leave the parameter out for none"
            raise ValidationException(detail=f"{name}: {message}",
                                      extra=[{"key": name, "message": message, "source": "query"}])


async def is_operator(ctx: RestContext, headers: Headers) -> bool:
    """Auth mode: does the request carry a live org-wide token? Never refuses
    (liveness answers whatever the caller sends, and while the store is away)."""
    header = headers.get("authorization")
    if not header or ctx.credentials is None:
        return False
    try:
        who = await asyncio.to_thread(ctx.credentials.check, bearer(header))
    except (HTTPException, authz.StoreUnavailable):
        return False
    return who is not None and who.app_names is None


# Path parameters that name what a refused call aimed at: its target in the audit log (which
# escapes and cuts it, as every target id: relay_es.engine.action_commands).
TARGETS = {"workflow_id": "workflow", "schedule_name": "schedule", "token_name": "token"}


class Authorize:
    """The guard every route passes (``Litestar(guards=[Authorize(ctx)])``)."""

    def __init__(self, ctx: RestContext, *, refusals: Refusals | None = None) -> None:
        self.ctx = ctx
        self.refusals = Refusals(ctx) if refusals is None else refusals
        self._null_takers: dict[Any, frozenset[str]] = {}  # one entry per route handler's function

    def null_takers(self, handler: BaseRouteHandler) -> frozenset[str]:
        """:func:`null_takers` of ``handler``, worked out on its route's first request. Kept by the
        handler's function: Litestar gives each guard call a copy of the handler (``copy(self)``),
        which hashes by its identity, so a cache kept by the handler gained an entry a request (a
        copy and a frozenset, about 0.7 KB: 20,000 requests, 20,003 entries and 25 MB)."""
        key = handler.fn
        takers = self._null_takers.get(key)
        if takers is None:
            takers = self._null_takers[key] = null_takers(handler)
        return takers

    def refused(self, status: int, detail: str, **kw: Any) -> HTTPException:
        """A refusal of the caller's credentials, counted in ``relay_auth_refused{where="rest"}``."""
        self.ctx.metrics.auth_refused.labels("rest").inc()
        return HTTPException(status_code=status, detail=detail, **kw)

    async def on_record(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler,
                        refusal: HTTPException, who: authz.Principal | None, why: str) -> None:
        """Puts a refusal in the audit log (throttled: :class:`~relay_es.adapters.rest.recording.Refusals`),
        under the caller's org when its token is known, in development mode ``local``, else the
        path's org when it exists (an anonymous caller chooses the name: it writes into no org
        Relay does not have, and its refusals have their own budget)."""
        params = connection.path_params
        org, app = params.get("org"), params.get("app")
        anonymous = who is None and self.ctx.auth
        if who is not None:
            if org != who.org:
                app = None
            org = who.org
        elif not self.ctx.auth:
            if org != "local":
                app = None
            org = "local"  # development mode's only org
        if not isinstance(org, str) or not ORG_NAME.fullmatch(org):
            return  # nowhere to file it (/metrics, or a name no org can have)
        operation = handler.operation_id if isinstance(handler.operation_id, str) else "unknownOperation"
        source = source_of(connection)
        suppressed = self.refusals.should_record(source, refusal.status_code, operation, org, anonymous=anonymous)
        if suppressed is None:
            return
        if anonymous and not await asyncio.to_thread(self.org_exists, org):
            return  # after the budget: at most that many look-ups a minute, whatever the names
        if not (isinstance(app, str) and APP_NAME.fullmatch(app)):
            app = None
        target = next(((kind, params[key]) for key, kind in TARGETS.items()
                       if isinstance(params.get(key), str)
                       and (valid_text if key in EXECUTOR_TEXT else printable_name)(params[key])), None)
        actor = (Actor("user", who.user) if who is not None and who.user is not None
                 else Actor.of(who.token) if who is not None else Actor.anonymous(why))
        await asyncio.to_thread(self.refusals.record, org=org, app=app, operation=operation, actor=actor,
                                source=source, status=refusal.status_code,
                                detail=str(refusal.detail), target=target, suppressed=suppressed)

    def org_exists(self, org: str) -> bool:
        """Blocking. Never raises: an org that cannot be looked up now is taken for none."""
        assert self.ctx.credentials is not None  # auth mode has a checker (build_app requires it)
        try:
            return self.ctx.credentials.org_exists(org)
        except Exception:  # noqa: BLE001  # the store away: the refusal stands, unrecorded
            log.warning("could not tell whether org %r exists; a refusal under it is not recorded", org,
                        exc_info=True)
            return False

    async def authenticate(self, connection: ASGIConnection[Any, Any, Any, Any]) -> authz.Principal:
        header = connection.headers.get("authorization")
        if not header:
            raise self.refused(401, "an Authorization: Bearer <token> header is required",
                               headers={"WWW-Authenticate": "Bearer"})
        try:
            secret = bearer(header)
        except HTTPException as e:  # a malformed header is a refused credential too: counted
            raise self.refused(e.status_code, e.detail, headers=e.headers) from None
        assert self.ctx.credentials is not None  # auth mode has a checker (build_app requires it)
        if self.ctx.oidc is not None and looks_like_jwt(secret):
            try:
                call = functools.partial(contextvars.copy_context().run, self.ctx.oidc.principal, secret)
                return await asyncio.get_running_loop().run_in_executor(OIDC_THREADS, call)
            except OidcError as e:
                raise self.refused(401, f"the OIDC token is refused: {e}",
                                   headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}) from None
            except authz.StoreUnavailable as e:
                raise HTTPException(status_code=503, detail=str(e)) from None
        try:
            who = await asyncio.to_thread(self.ctx.credentials.check, secret)
        except authz.StoreUnavailable as e:
            raise HTTPException(status_code=503, detail=str(e)) from None
        if who is None:
            raise self.refused(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
        return who

    def development_only_here(self, connection: ASGIConnection[Any, Any, Any, Any]) -> None:
        """Development mode serves this machine: a proxy, another Host, another site's page are refused."""
        scope = connection.scope
        if authz.proxy_header(scope.get("headers") or []) is not None:
            raise HTTPException(status_code=403, detail=authz.BEHIND_A_PROXY)
        if not authz.host_is_local(connection.headers.get("host"), self.ctx.host):
            raise HTTPException(status_code=403, detail="development mode answers only requests addressed to "
                                                        "this machine (a loopback name or address in Host)")
        if not authz.origin_is_local(connection.headers.get("origin")):
            raise HTTPException(status_code=403, detail="development mode answers no web page of another site")

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        try:
            await self.check(connection, handler)
        except HTTPException as e:
            if e.status_code in (401, 403) and not isinstance(e, NotFoundException):
                who = getattr(connection.state, "refused_principal", None)
                why = getattr(connection.state, "refused_why", "no valid token")
                await self.on_record(connection, handler, e, who, why)
            raise
        refuse_null_literals(connection, self.null_takers(handler))

    async def check(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        scope = connection.scope
        raw_path = scope.get("raw_path") or b""
        nul_sent = frozenset(k for k in EXECUTOR_TEXT
                             if isinstance(v := connection.path_params.get(k), str) and sent_nul(raw_path, v))
        restore(connection.path_params, SLASHED)  # an encoded "/" in an id (relay_es.adapters.rest.slashes)
        rule = authz.rule_for(scope["method"], scope.get("path_template", ""))
        if rule is None:  # fail closed: a route nobody wrote a row for
            log.error("route %s %s is not in the authorization table; refused", scope["method"],
                      scope.get("path_template"))
            raise HTTPException(status_code=403, detail="this operation is not in Relay's authorization table")
        if rule.oauth and self.ctx.oidc is None:  # as Conductor without OAuth: the operation is not there
            raise NotFoundException("this operation needs OIDC sign-in, which this Relay is not configured for "
                                    "(--oidc-issuer)")
        org_in_path = connection.path_params.get("org")
        if rule.oauth and org_in_path is not None and org_in_path != self.ctx.oidc.settings.org:  # type: ignore[union-attr]
            raise NotFoundException(f"org {str(org_in_path)[:128]!r} has no OIDC members: only the OIDC org does")
        if not self.ctx.auth:
            connection.state.refused_why = "not this machine"
            self.development_only_here(connection)
        repeated = authz.repeated_query_parameter(scope.get("query_string", b""))
        if repeated is not None:
            raise HTTPException(status_code=400, detail=f"query parameter {repeated[:64]!r} is given more than once")
        params = connection.path_params
        org, app = params.get("org"), params.get("app")
        if rule.scope is authz.Scope.PUBLIC:
            return
        if not self.ctx.auth:
            if org is not None and org != "local":
                raise NotFoundException(f"org {org[:128]!r} does not exist: in development mode the only org is 'local'")
            check_path_names(rule, params, nul_sent=nul_sent)
            who = authz.development_principal()
        else:
            who = await self.authenticate(connection)
            check_path_names(rule, params, nul_sent=nul_sent)  # before any name is echoed in a refusal
            try:
                authz.decide(rule, who, org, app)
            except authz.Denied as d:
                connection.state.refused_principal = who
                raise self.refused(d.status, d.detail) from None
        connection.state.principal = who
