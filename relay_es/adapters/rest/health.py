"""The operator's endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus).

``/healthz`` answers 200 while the process serves and 503 once the process
manager has met a bug (anything but a store error: it keeps serving, but a
person must look), telling the instance, the store's kind and the fault only in
development mode or to an org-wide token. ``/readyz`` answers 200 once the
instance should be sent traffic -- its process manager started and its read
models current -- and 503 with the reason before that, after a bug, while the
store has failed for 10 s, nothing succeeding since (the process manager's steps, the
leader lease's checks, the outbox's writes), and from the start of a shutdown (a load balancer holds requests back or drains). ``/metrics``
renders the caller's org's series and the process-wide ones (an org-wide token in auth mode;
in development mode the only org is ``local``). The API's own
OpenAPI document, ``/openapi.json``, is :mod:`relay_es.adapters.rest.openapi`'s.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get

from relay_es.adapters.metrics import CONTENT_TYPE
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.guard import is_operator


@get("/healthz", operation_id="getHealth", summary="Liveness",
     description="`{\"status\": \"ok\"}` while the process serves; 503 `{\"status\": \"unhealthy\"}` once the "
                 "process manager has met a bug. The instance, the store's kind and the faults are added in "
                 "development mode and, in auth mode, for an org-wide token of any org.")
async def healthz(request: Request[Any, Any, Any], ctx: Context) -> Response[dict[str, Any]]:
    faults = ctx.faults()
    body: dict[str, Any] = {"status": "unhealthy" if faults else "ok"}
    if not ctx.auth or await is_operator(ctx, request.headers):
        body |= {"instance": ctx.instance, "store": ctx.store_kind}
        if faults:
            body["faults"] = faults
    return Response(content=body, status_code=503 if faults else 200)


@get("/readyz", operation_id="getReadiness", summary="Readiness",
     description="`{\"status\": \"ready\"}` once the instance should be sent traffic: its process manager has "
                 "started (a fresh start on a large store fills the read models first) and its read models have "
                 "come within a batch (1,000 events) of the newest event it recorded. Otherwise 503 "
                 "`{\"status\": \"not_ready\", \"reason\": ...}`: `starting`, `catching_up`, `unhealthy` (as "
                 "/healthz), `store_unavailable` (for 10 s the process manager's steps have failed on the store, "
                 "or the leader lease could not be confirmed, or the executors' transitions could not be "
                 "recorded, none succeeding since; ready again once they do) or `shutting_down` (on a "
                 "connection kept open; new ones are refused once the server closes its socket). Once ready it "
                 "stays so while it serves: a storm's lag does not turn callers away.")
async def readyz(ctx: Context) -> Response[dict[str, Any]]:
    reason = ctx.readiness()
    if reason is None:
        return Response(content={"status": "ready"}, status_code=200)
    return Response(content={"status": "not_ready", "reason": reason}, status_code=503)


@get("/metrics", operation_id="getRelayMetrics", sync_to_thread=True, media_type="text/plain",
     summary="Prometheus metrics",
     description="The series of the caller's org (those labelled `org`) and the process-wide ones (no `org` "
                 "label: the whole server's). In auth mode an org-wide token (metric.read) is required, and a "
                 "series of another org is left out.")
def metrics(request: Request[Any, Any, Any], ctx: Context) -> Response[bytes]:
    return Response(content=ctx.metrics.render(request.state.principal.org), media_type=CONTENT_TYPE)
