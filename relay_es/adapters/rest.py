"""The REST API: a subset of Conductor API v2, plus Relay's own queries.

Bodies are msgspec Structs with camelCase names; errors are RFC 7807
``application/problem+json`` documents naming the field and what was wrong.
Every mutating call waits until the read models have caught up with it, so a
following read sees the change.

Who may call what is decided in one guard, :func:`build_app.authorize`, from
the table in ``authz.py`` (ADR 14): the route matched, the path's org and
application, and the caller's token -- never the query string.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import msgspec
from litestar import Controller, Litestar, MediaType, Request, Response, delete, get, patch, post, put
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.params import Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET, UnsetType

from relay_es.domain import units
from relay_es.adapters import authz
from relay_es.aggregates.application import SettingsPatch, check_app_name
from relay_es.aggregates.executor import ExecutorStatus
from relay_es.domain.errors import DomainError, IllegalTransition, InvalidSetting, UnknownApplication, UnknownExecutor, UnknownToken
from relay_es.projections import apps as apps_view
from relay_es.projections import audit as audit_view
from relay_es.projections.executors import ExecutorRow, all_rows
from relay_es.engine.queries import AS_OF_LIMIT, HISTORY_LIMIT, executor_history, executors_as_of_page

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"

MAX_BODY = 64 * 1024  # bytes; Relay's request bodies are a few hundred bytes
MAX_APP_NAMES = 100  # applications one token may be limited to
EXPENSIVE_READS = 2  # as-of and history calls running at once; the rest wait their turn


# ------------------------------------------------------------------ schemas


class Application(msgspec.Struct, rename="camel"):
    id: str
    name: str
    org_id: str
    status: str
    language: str | None
    executor_timeout_secs: int
    gc_time_threshold_ms: int | None
    gc_rows_threshold: int | None
    global_timeout_ms: int | None
    private_mode: bool
    dbos_cloud: bool = False


class Executor(msgspec.Struct, rename="camel"):
    executor_id: str
    app_id: str
    app_version: str | None
    status: str
    host_id: str | None
    hostname: str | None
    language: str | None
    dbos_version: str | None
    executor_metadata: Any
    created_at: str | None
    updated_at: str | None
    deadline: str | None = None


class PutAppBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    private_mode: bool | UnsetType = UNSET


class PatchAppBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Only the fields sent change; ``null`` clears a setting."""

    executor_timeout_secs: int | None | UnsetType = UNSET
    gc_time_threshold_ms: int | None | UnsetType = UNSET
    gc_rows_threshold: int | None | UnsetType = UNSET
    global_timeout_ms: int | None | UnsetType = UNSET
    private_mode: bool | UnsetType = UNSET


class Token(msgspec.Struct, rename="camel"):
    token_name: str
    created_at: str
    permissions: list[str]
    app_ids: list[str]
    app_names: list[str] | None


class CreateTokenBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``appNames`` omitted or null: an org-wide token; otherwise 1 to 100 application names."""

    app_names: list[str] | None | UnsetType = UNSET


class TokenCreated(msgspec.Struct, rename="camel"):
    token: str
    token_name: str


class HistoryEntry(msgspec.Struct):
    version: int
    type: str
    at: str
    data: dict[str, Any]


class AuditEntry(msgspec.Struct, rename="camel"):
    seq: int
    at: str
    org: str
    app: str | None
    executor_id: str | None
    action: str
    detail: dict[str, Any]


# ------------------------------------------------------------------- errors


def problem(status: int, title: str, detail: str, errors: list[dict[str, Any]] | None = None) -> Response[Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return Response(content=body, status_code=status, media_type=PROBLEM)


def _validation_problem(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    errors = []
    for item in exc.extra or []:
        if isinstance(item, dict):
            errors.append({"location": item.get("key") or item.get("source") or "body", "message": item.get("message", "")})
    detail = "; ".join(f"{e['location']}: {e['message']}" for e in errors) or str(exc.detail)
    return problem(422, "Unprocessable entity", detail, errors)


def _invalid_setting(_: Request[Any, Any, Any], exc: InvalidSetting) -> Response[Any]:
    return problem(422, "Unprocessable entity", str(exc), [{"location": exc.field, "message": exc.message}])


def _not_found(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    return problem(404, "Not found", str(exc) if not isinstance(exc, HTTPException) else exc.detail)


def _conflict(_: Request[Any, Any, Any], exc: DomainError) -> Response[Any]:
    return problem(409, "Conflict", str(exc))


def _http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    title = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
             405: "Method not allowed", 413: "Request entity too large", 503: "Service unavailable"}.get(
        exc.status_code, "Error")
    resp = problem(exc.status_code, title, exc.detail)
    if exc.headers:
        resp.headers.update(exc.headers)
    return resp


def _too_deep(_: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    return problem(422, "Unprocessable entity", "body: JSON is nested too deeply",
                   [{"location": "body", "message": "JSON is nested too deeply"}])


def _internal(_: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "Internal server error", "Relay failed to handle this request; see its log")


# --------------------------------------------------------------- conversion


def _app_out(row: apps_view.AppRow, executors: list[ExecutorRow], default_grace: timedelta) -> Application:
    live = [e for e in executors if e.status == ExecutorStatus.HEALTHY]
    latest = max(executors, key=lambda e: e.updated_at or e.created_at or 0, default=None) if executors else None
    return Application(
        id=row.stream_id,
        name=row.name,
        org_id=row.org,
        status="AVAILABLE" if live else "UNAVAILABLE",
        language=latest.language if latest else None,
        executor_timeout_secs=units.duration_to_seconds(row.executor_timeout or default_grace),
        gc_time_threshold_ms=None if row.gc_time_threshold is None else units.duration_to_millis(row.gc_time_threshold),
        gc_rows_threshold=row.gc_rows_threshold,
        global_timeout_ms=None if row.global_timeout is None else units.duration_to_millis(row.global_timeout),
        private_mode=row.private_mode,
    )


def _executor_out(r: ExecutorRow, app_id: str) -> Executor:
    return Executor(
        executor_id=r.executor_id,
        app_id=app_id,
        app_version=r.app_version,
        status=r.status or "",
        host_id=None,
        hostname=r.hostname,
        language=r.language,
        dbos_version=r.dbos_version,
        executor_metadata=r.executor_metadata,
        created_at=units.rfc3339(r.created_at),
        updated_at=units.rfc3339(r.updated_at),
        deadline=units.rfc3339(r.deadline),
    )


async def strict(request: Request[Any, Any, Any], cls: type[Any]) -> Any:
    """Decodes the body again, strictly: Litestar's own decoding converts
    "60" to 60, and a string is not a number of seconds."""
    try:
        return msgspec.json.decode(await request.body(), type=cls, strict=True)
    except RecursionError:
        raise ValidationException(detail="body: JSON is nested too deeply",
                                  extra=[{"key": "body", "message": "JSON is nested too deeply"}]) from None
    except msgspec.ValidationError as e:
        text = str(e)
        where = text.rsplit("at `$.", 1)[-1].rstrip("`") if "at `$." in text else "body"
        raise ValidationException(detail=text, extra=[{"key": where, "message": text}]) from None


def patch_from_body(body: PatchAppBody) -> SettingsPatch:
    given: dict[str, Any] = {}
    if body.executor_timeout_secs is not UNSET:
        given["executor_timeout"] = None if body.executor_timeout_secs is None else units.seconds_to_duration(
            "executorTimeoutSecs", body.executor_timeout_secs, maximum=units.MAX_EXECUTOR_TIMEOUT)
    if body.gc_time_threshold_ms is not UNSET:
        given["gc_time_threshold"] = None if body.gc_time_threshold_ms is None else units.millis_to_duration(
            "gcTimeThresholdMs", body.gc_time_threshold_ms, maximum=units.MAX_RETENTION)
    if body.global_timeout_ms is not UNSET:
        given["global_timeout"] = None if body.global_timeout_ms is None else units.millis_to_duration(
            "globalTimeoutMs", body.global_timeout_ms, maximum=units.MAX_RETENTION)
    if body.gc_rows_threshold is not UNSET:
        given["gc_rows_threshold"] = None if body.gc_rows_threshold is None else units.rows(
            "gcRowsThreshold", body.gc_rows_threshold)
    if body.private_mode is not UNSET:
        given["private_mode"] = body.private_mode
    return SettingsPatch(**given)


# -------------------------------------------------------------------- auth


def _bearer(header: str) -> str:
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret or " " in secret or len(secret) > 512:
        raise HTTPException(status_code=401, detail="malformed Authorization header: expected 'Bearer <token>'",
                            headers={"WWW-Authenticate": "Bearer"})
    return secret


def _check_path_names(rule: authz.Rule, params: dict[str, Any]) -> None:
    """Names in the path are bounded and of the names' alphabet before any
    handler sees them: an invalid one is a 422 where it would be created, a 404 elsewhere."""
    creates = {"apps.register": "app", "tokens.create": "token_name"}.get(rule.operation)
    for key, value in params.items():
        if not isinstance(value, str):
            continue
        ok = authz.valid_executor_id(value) if key == "executor_id" else authz.valid_name(value)
        if ok:
            continue
        if key == creates:
            field = "appName" if key == "app" else "tokenName"
            raise InvalidSetting(field, "must be 1-256 URL-safe characters (letters, digits, . _ ~ -), "
                                        "starting with a letter or digit")
        raise NotFoundException(f"no such {key.replace('_', ' ')}: it is not a valid name")


def build_app(runtime: Any) -> Litestar:
    relay = runtime.relay
    db = runtime.db
    settings = runtime.settings
    expensive = asyncio.Semaphore(EXPENSIVE_READS)

    def settle() -> None:
        """Read-your-writes: wait until the read models have every event so far."""
        top = relay.recorder.max_notification_id() or 0
        if not runtime.runner.wait_for(top, timeout=10):
            log.warning("read models are lagging behind the event store")

    def refused(status: int, detail: str, **kw: Any) -> HTTPException:
        runtime.metrics.auth_refused.labels("rest").inc()
        return HTTPException(status_code=status, detail=detail, **kw)

    async def authenticate(connection: ASGIConnection[Any, Any, Any, Any]) -> authz.Principal:
        header = connection.headers.get("authorization")
        if not header:
            raise refused(401, "an Authorization: Bearer <token> header is required",
                          headers={"WWW-Authenticate": "Bearer"})
        secret = _bearer(header)
        credentials = runtime.hub.gate.credentials
        try:
            who = await asyncio.to_thread(credentials.check, secret)
        except authz.StoreUnavailable as e:
            raise HTTPException(status_code=503, detail=str(e)) from None
        if who is None:
            raise refused(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
        return who

    async def authorize(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        """The one place REST calls are authorized (every route, by the app-level guard)."""
        scope = connection.scope
        rule = authz.rule_for(scope["method"], scope.get("path_template", ""))
        if rule is None:  # fail closed: a route nobody wrote a row for
            log.error("route %s %s is not in the authorization table; refused", scope["method"],
                      scope.get("path_template"))
            raise HTTPException(status_code=403, detail="this operation is not in Relay's authorization table")
        if not settings.auth:
            if authz.proxy_header(scope.get("headers") or []) is not None:
                raise HTTPException(status_code=403, detail=authz.BEHIND_A_PROXY)
            if not authz.host_is_local(connection.headers.get("host"), settings.host):
                raise HTTPException(status_code=403, detail="development mode answers only requests addressed to "
                                                            "this machine (a loopback name or address in Host)")
            if not authz.origin_is_local(connection.headers.get("origin")):
                raise HTTPException(status_code=403, detail="development mode answers no web page of another site")
        repeated = authz.repeated_query_parameter(scope.get("query_string", b""))
        if repeated is not None:
            raise HTTPException(status_code=400, detail=f"query parameter {repeated[:64]!r} is given more than once")
        params = connection.path_params
        org, app = params.get("org"), params.get("app")
        if rule.scope is authz.Scope.PUBLIC:
            return
        if not settings.auth:
            if org is not None and org != "local":
                raise NotFoundException(f"org {org[:128]!r} does not exist: in development mode the only org is 'local'")
            _check_path_names(rule, params)
            who = authz.development_principal()
        else:
            who = await authenticate(connection)
            _check_path_names(rule, params)  # before any name is echoed in a refusal
            try:
                authz.decide(rule, who, org, app)
            except authz.Denied as d:
                raise refused(d.status, d.detail) from None
        connection.state.principal = who

    def app_row(org: str, app: str) -> apps_view.AppRow:
        for row in apps_view.list_apps(db, org):
            if row.name == app:
                return row
        raise UnknownApplication(org, app)

    class Apps(Controller):
        path = "/v2/orgs/{org:str}/apps"

        @get("/", sync_to_thread=True, summary="List applications")
        def list_apps(self, org: str) -> list[Application]:
            rows = apps_view.list_apps(db, org)
            execs = all_rows(db, org=org)
            return [_app_out(r, [e for e in execs if e.app == r.name and e.visible], runtime.relay.default_grace)
                    for r in rows]

        @put("/{app:str}", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT, summary="Register an application")
        def register(self, org: str, app: str, data: PutAppBody | None = None) -> None:
            check_app_name(app)
            pm = None if data is None or data.private_mode is UNSET else data.private_mode
            relay.register_app(org, app, private_mode=pm)
            settle()

        @get("/{app:str}", sync_to_thread=True, summary="Read an application")
        def get_app(self, org: str, app: str) -> Application:
            row = app_row(org, app)
            execs = [e for e in all_rows(db, org=org, app=app) if e.visible]
            return _app_out(row, execs, runtime.relay.default_grace)

        @patch("/{app:str}", status_code=HTTP_204_NO_CONTENT, summary="Change settings")
        async def update(self, org: str, app: str, data: PatchAppBody, request: Request[Any, Any, Any]) -> None:
            body = await strict(request, PatchAppBody)
            await asyncio.to_thread(relay.update_app, org, app, patch_from_body(body))
            await asyncio.to_thread(settle)

        @delete("/{app:str}", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT, summary="Delete an application")
        def delete_app(self, org: str, app: str) -> None:
            relay.delete_app(org, app)
            runtime.app_deleted(org, app)
            settle()

        @get("/{app:str}/executors", summary="List executors (optionally as of a past instant)",
             description="With `asOf`, the table as it stood then, rebuilt from the event streams, one page of at "
                         f"most `limit` (1-{AS_OF_LIMIT}, default {AS_OF_LIMIT}) executors in id order; a next page "
                         "is linked in the `Link` header (rel=\"next\", `after` = the last executor id examined).")
        async def executors(
            self, org: str, app: str, request: Request[Any, Any, Any],
            as_of: str | None = Parameter(query="asOf", default=None, required=False, max_length=64,
                                          description="RFC 3339 instant"),
            after: str | None = Parameter(query="after", default=None, required=False, max_length=authz.MAX_EXECUTOR_ID,
                                          description="with asOf: the page after this executor id"),
            limit: int = Parameter(query="limit", default=AS_OF_LIMIT, ge=1, le=AS_OF_LIMIT,
                                   description="with asOf: executors examined per page"),
        ) -> Response[list[Executor]]:
            if as_of is None:
                def current() -> list[Executor]:
                    row = app_row(org, app)
                    return [_executor_out(r, row.stream_id) for r in all_rows(db, org=org, app=app) if r.visible]

                return Response(await asyncio.to_thread(current))
            at = units.parse_rfc3339("asOf", as_of)

            def past() -> tuple[list[Executor], str | None]:
                rows, cursor = executors_as_of_page(relay, db, org, app, at, after=after, limit=limit, pause=yield_to_pm)
                app_id = str(relay.get_app(org, app).id) if relay.app_exists(org, app) else ""
                return [_executor_out(r, app_id) for r in rows], cursor

            async with expensive:
                out, cursor = await asyncio.to_thread(past)
            headers = {}
            if cursor is not None:
                nxt = request.url.path + "?" + urlencode({"asOf": as_of, "after": cursor, "limit": limit})
                headers["Link"] = f'<{nxt}>; rel="next"'
            return Response(out, headers=headers)

        @get("/{app:str}/executors/{executor_id:str}/history", summary="An executor's events",
             description=f"Events with a version above `after`, in order, at most `limit` (1-{HISTORY_LIMIT}, default "
                         f"{HISTORY_LIMIT}); the next page is `after` = the last version returned, until a short page.")
        async def history(
            self, org: str, app: str, executor_id: str,
            after: int = Parameter(query="after", default=0, ge=0, le=2**63 - 1, description="a version"),
            limit: int = Parameter(query="limit", default=HISTORY_LIMIT, ge=1, le=HISTORY_LIMIT),
        ) -> list[HistoryEntry]:
            async with expensive:
                events = await asyncio.to_thread(executor_history, relay, org, app, executor_id, after=after,
                                                 limit=limit)
            return [HistoryEntry(**h) for h in events]

    class Tokens(Controller):
        path = "/v2/orgs/{org:str}/tokens"

        @get("/", sync_to_thread=True, summary="List live tokens (never the secret)")
        def list_tokens(self, org: str) -> list[Token]:
            return [Token(token_name=t.name, created_at=units.rfc3339(t.created_at) or "",
                          permissions=sorted(authz.permissions_for(t.app_names)),
                          app_ids=[str(relay.get_app(org, a).id) for a in (t.app_names or []) if relay.app_exists(org, a)],
                          app_names=t.app_names)
                    for t in apps_view.list_tokens(db, org)]

        @post("/{token_name:str}", sync_to_thread=True, status_code=HTTP_201_CREATED,
              summary="Create a token; the secret is shown once")
        def create(self, org: str, token_name: str, data: CreateTokenBody | None = None) -> TokenCreated:
            names = None if data is None or data.app_names is UNSET else data.app_names
            if names is not None:
                if not 1 <= len(names) <= MAX_APP_NAMES:
                    raise InvalidSetting("appNames", f"must name 1 to {MAX_APP_NAMES} applications; omit it (or "
                                                     "null) for an org-wide token")
                for name in names:
                    if not authz.valid_name(name):
                        raise InvalidSetting("appNames", "each must be 1-256 URL-safe characters (letters, digits, "
                                                         ". _ ~ -), starting with a letter or digit")
            secret = relay.create_token(org, token_name, app_names=names)
            settle()
            return TokenCreated(token=secret, token_name=token_name)

        @delete("/{token_name:str}", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT,
                summary="Revoke a token; executors using it are disconnected")
        def revoke(self, org: str, token_name: str) -> None:
            relay.revoke_token(org, token_name)
            runtime.token_revoked(org, token_name)  # refused and disconnected now, not once the read models follow
            settle()

    @get("/v2/orgs/{org:str}/audit-logs", sync_to_thread=True, summary="Audit entries in order")
    def audit_logs(
        org: str,
        app: str | None = Parameter(query="app", default=None, required=False, max_length=256),
        executor_id: str | None = Parameter(query="executorId", default=None, required=False,
                                            max_length=authz.MAX_EXECUTOR_ID),
        after: int | None = Parameter(query="after", default=None, required=False, ge=0, le=2**63 - 1),
        limit: int = Parameter(query="limit", default=100, ge=1, le=1000),
    ) -> list[AuditEntry]:
        for name, value in (("app", app), ("executorId", executor_id)):
            if value is not None and "\x00" in value:
                raise InvalidSetting(name, "must not contain NUL characters")
        return [AuditEntry(seq=a.seq, at=units.rfc3339(a.at) or "", org=a.org, app=a.app, executor_id=a.executor_id,
                           action=a.action, detail=a.detail)
                for a in audit_view.query(db, org=org, app=app, executor_id=executor_id, after=after, limit=limit)]

    @get("/healthz", summary="Liveness",
         description="`{\"status\": \"ok\"}` while the process serves. The instance and the store's kind are "
                     "added in development mode and, in auth mode, for an org-wide token of any org.")
    async def healthz(request: Request[Any, Any, Any]) -> dict[str, Any]:
        if settings.auth and not await operator(request):
            return {"status": "ok"}
        return {"status": "ok", "instance": settings.instance, "store": runtime.store.kind}

    async def operator(request: Request[Any, Any, Any]) -> bool:
        """Auth mode: does the request carry a live org-wide token? Never refuses
        (liveness answers whatever the caller sends, and while the store is away)."""
        header = request.headers.get("authorization")
        if not header:
            return False
        try:
            who = await asyncio.to_thread(runtime.hub.gate.credentials.check, _bearer(header))
        except (HTTPException, authz.StoreUnavailable):
            return False
        return who is not None and who.app_names is None

    @get("/metrics", sync_to_thread=False, media_type="text/plain", summary="Prometheus metrics",
         description="Every org's series. In auth mode an org-wide token (metric.read) is required.")
    def metrics() -> Response[bytes]:
        from relay_es.adapters.metrics import CONTENT_TYPE

        return Response(content=runtime.metrics.render(), media_type=CONTENT_TYPE)

    async def on_startup(app: Litestar) -> None:
        import asyncio

        runtime.start(asyncio.get_running_loop())

    async def on_shutdown(app: Litestar) -> None:
        await runtime.stop()

    def yield_to_pm() -> None:
        """Between two streams of an expensive read: while the process manager has
        urgent work (deadlines due or firing), it goes first, at most 0.25 s."""
        pm = runtime.pm
        end = time.monotonic() + 0.25
        while pm.urgent() and time.monotonic() < end:
            time.sleep(0.002)

    return Litestar(
        route_handlers=[Apps, Tokens, audit_logs, healthz, metrics],
        guards=[authorize],
        request_max_body_size=MAX_BODY,
        exception_handlers={
            ValidationException: _validation_problem,
            InvalidSetting: _invalid_setting,
            UnknownApplication: _not_found,
            UnknownExecutor: _not_found,
            UnknownToken: _not_found,
            NotFoundException: _not_found,
            IllegalTransition: _conflict,
            DomainError: _conflict,
            HTTPException: _http,
            RecursionError: _too_deep,
            Exception: _internal,
        },
        openapi_config=OpenAPIConfig(
            title="Relay",
            version="0.1.0",
            description="Self-hosted control plane for DBOS executors (a subset of Conductor API v2, plus Relay's own)",
            # The document only, at /openapi.json: no rendered pages (Swagger UI, Redoc,
            # Elements, RapiDoc, Scalar load unpinned scripts from public CDNs, which would
            # run on Relay's origin with its API at hand). Litestar answers 404 under it.
            path="/openapi.json",
            render_plugins=[JsonRenderPlugin(path="/", media_type=MediaType.JSON)],
            components=Components(security_schemes={"BearerAuth": SecurityScheme(type="http", scheme="bearer")}),
        ),
        on_startup=[on_startup],
        on_shutdown=[on_shutdown],
        logging_config=None,
        debug=False,
    )
