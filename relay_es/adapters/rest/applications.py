"""Applications: ``/v2/orgs/{org}/apps`` and ``/v2/orgs/{org}/apps/{app}`` (Conductor API v2).

List an org's applications, register one (``PUT``, idempotent), read one,
change its settings (``PATCH``: only the fields sent change, ``null`` clears
one; numbers are decoded strictly and bounded, each in its named unit) and
delete one (its executors' sockets are closed with 4007). Every write returns
once the read models hold it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import msgspec
from litestar import Controller, Request, delete, get, patch, put
from litestar.params import FromPath
from litestar.status_codes import HTTP_204_NO_CONTENT
from msgspec import UNSET, UnsetType

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.adapters.rest.recording import recorded
from relay_es.aggregates.application import SettingsPatch, check_app_name
from relay_es.aggregates.executor import ExecutorStatus
from relay_es.domain import units
from relay_es.domain.errors import UnknownApplication
from relay_es.projections import apps as apps_view
from relay_es.projections.executors import ExecutorRow, all_rows


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


class PutAppBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Conductor's ``PutAppInputBody``; ``$schema`` (a link Conductor's answers carry) is ignored."""

    private_mode: bool | UnsetType = UNSET
    schema: str | UnsetType = msgspec.field(default=UNSET, name="$schema")


class PatchAppBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Conductor's ``PatchAppInputBody``: only the fields sent change; ``null``
    clears a setting; ``$schema`` is ignored."""

    executor_timeout_secs: int | None | UnsetType = UNSET
    gc_time_threshold_ms: int | None | UnsetType = UNSET
    gc_rows_threshold: int | None | UnsetType = UNSET
    global_timeout_ms: int | None | UnsetType = UNSET
    private_mode: bool | UnsetType = UNSET
    schema: str | UnsetType = msgspec.field(default=UNSET, name="$schema")


def find_app(db: Any, org: str, app: str) -> apps_view.AppRow:
    """The application's read-model row, or :class:`UnknownApplication` (404)."""
    row = apps_view.app_named(db, org, app)
    if row is None:
        raise UnknownApplication(org, app)
    return row


def app_out(row: apps_view.AppRow, executors: list[ExecutorRow], default_timeout: timedelta) -> Application:
    """Available while one of its executors is HEALTHY; its language is its latest executor's."""
    live = [e for e in executors if e.status == ExecutorStatus.HEALTHY]
    latest = max(executors, key=lambda e: e.updated_at or e.created_at or 0, default=None) if executors else None
    return Application(
        id=row.stream_id,
        name=row.name,
        org_id=row.org,
        status="AVAILABLE" if live else "UNAVAILABLE",
        language=latest.language if latest else None,
        executor_timeout_secs=units.duration_to_seconds(row.executor_timeout or default_timeout),
        gc_time_threshold_ms=None if row.gc_time_threshold is None else units.duration_to_millis(row.gc_time_threshold),
        gc_rows_threshold=row.gc_rows_threshold,
        global_timeout_ms=None if row.global_timeout is None else units.duration_to_millis(row.global_timeout),
        private_mode=row.private_mode,
    )


def patch_from_body(body: PatchAppBody) -> SettingsPatch:
    """The settings a PATCH body changes, each converted from its REST unit and bounded."""
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


def given(body: PatchAppBody) -> dict[str, Any]:
    """The settings a patch gave, by their Conductor names (its record's parameters: scalars)."""
    out = msgspec.to_builtins(body)
    out.pop("$schema", None)
    return out  # type: ignore[no-any-return]


class ApplicationsController(Controller):
    path = ORG + "/apps"

    @get("/", operation_id="listApps", sync_to_thread=True, summary="List applications")
    def list_apps(self, org: FromPath[str], ctx: Context) -> list[Application]:
        rows = apps_view.list_apps(ctx.db, org)
        execs = all_rows(ctx.db, org=org)
        return [app_out(r, [e for e in execs if e.app == r.name and e.visible], ctx.default_executor_timeout)
                for r in rows]

    @put("/{app:str}", opt=openapi.body(PutAppBody, required=False), operation_id="registerApp",
         status_code=HTTP_204_NO_CONTENT, summary="Register an application")
    async def register(self, org: FromPath[str], app: FromPath[str], ctx: Context,
                       request: Request[Any, Any, Any]) -> None:
        data: PutAppBody | None = await calling.body(request)

        def register() -> None:
            check_app_name(app)
            private_mode = None if data is None or data.private_mode is UNSET else data.private_mode
            with recorded(ctx, request, org, app, operation="registerApp", target_type="application",
                          target_ids=[app], parameters={"privateMode": private_mode}):
                ctx.relay.register_app(org, app, private_mode=private_mode)
            ctx.read_your_writes()

        await asyncio.to_thread(register)

    @get("/{app:str}", operation_id="getApp", sync_to_thread=True, summary="Read an application")
    def get_app(self, org: FromPath[str], app: FromPath[str], ctx: Context) -> Application:
        row = find_app(ctx.db, org, app)
        execs = [e for e in all_rows(ctx.db, org=org, app=app) if e.visible]
        return app_out(row, execs, ctx.default_executor_timeout)

    @patch("/{app:str}", opt=openapi.body(PatchAppBody), operation_id="updateApp", status_code=HTTP_204_NO_CONTENT,
           summary="Change settings")
    async def update(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                     ctx: Context) -> None:
        body: PatchAppBody = await calling.body(request)

        def update() -> None:
            with recorded(ctx, request, org, app, operation="updateApp", target_type="application", target_ids=[app],
                          parameters=given(body)):
                ctx.relay.update_app(org, app, patch_from_body(body))
            ctx.read_your_writes()

        await asyncio.to_thread(update)

    @delete("/{app:str}", operation_id="deleteApp", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT, summary="Delete an application")
    def delete_app(self, org: FromPath[str], app: FromPath[str], ctx: Context,
                   request: Request[Any, Any, Any]) -> None:
        with recorded(ctx, request, org, app, operation="deleteApp", target_type="application", target_ids=[app]):
            ctx.relay.delete_app(org, app)
        ctx.app_deleted(org, app)
        calling.app_gone(ctx, org, app)
        ctx.read_your_writes()
