"""Application versions: ``listAppVersions`` and ``setLatestAppVersion`` (Conductor API v2),
answered by an executor.

The versions are the registry in the application's system database (``application_versions``,
protocol section 5.20), so any healthy executor answers and acts. The list is Conductor's
``ApplicationVersion`` each, as the executor orders them (latest first: the highest
``versionTimestamp``). ``PATCH .../versions/latest`` with ``{"versionName"}`` makes that version
the latest (the executor sets its timestamp to now): 204. The SDKs update the row without
looking whether it exists, so Relay first lists the versions and answers 404 for an unknown
name (nothing recorded, nothing changed, like a refused body). The change is recorded before it
is sent and completed however it ends (target ``version``, its name). The version made latest is
where resume and fork go from then on (:func:`~relay_es.adapters.rest.calling.latest_version`:
at once on this instance, within 30 s on another).

An executor whose SDK release is known to predate the registry (Python dbos before 2.14,
@dbos-inc/dbos-sdk before 4.10) is passed over, and with no other a 501, nothing sent
(:mod:`~relay_es.adapters.rest.releases`); one naming no release is asked, and its "Unknown message
type" is a 501 too (:mod:`~relay_es.adapters.rest.calling`).
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, patch
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.queues import failed_status, sent_as
from relay_es.protocol import catalogue as c


async def _versions(ctx: RestContext, org: str, app: str) -> c.ListApplicationVersionsResponse:
    request = mapping.list_versions_request(request_id="")
    answer: c.ListApplicationVersionsResponse = await calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status)
    return answer


class VersionsController(Controller):
    path = APP + "/versions"

    @get("/", operation_id="listAppVersions", summary="List application versions",
         description="The application's registered versions, latest first.")
    async def list_app_versions(self, org: FromPath[str], app: FromPath[str],
                                ctx: Context) -> Response[list[m.ApplicationVersion]]:
        return calling.answer(mapping.versions_out(await _versions(ctx, org, app)))

    @patch("/latest", opt=openapi.body(m.PatchLatestVersionInputBody),
           operation_id="setLatestAppVersion", summary="Set latest application version", status_code=204,
           description="Makes `versionName` the latest version; 404 for a version not registered.")
    async def set_latest_app_version(self, org: FromPath[str], app: FromPath[str],
                                     request: Request[Any, Any, Any], ctx: Context) -> None:
        b: m.PatchLatestVersionInputBody = await calling.body(request)
        wire_request = mapping.set_latest_version_request(b, request_id="")
        known = await _versions(ctx, org, app)
        if not any(v.version_name == b.version_name for v in known.output or ()):
            raise NotFoundException(detail=f"version {b.version_name[:200]!r} is not registered in application {app!r}")
        await calling.act(
            ctx, request, org, app, operation="setLatestAppVersion", target_type="version",
            target_ids=[b.version_name], parameters={"versionName": b.version_name},
            make_request=sent_as(wire_request), failed_status=failed_status)
        calling.latest_changed(ctx, org, app)  # resume and fork ask the registry again
