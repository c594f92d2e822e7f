"""Assembles the REST API: :func:`build_app` makes the Litestar application from a :class:`RestContext`.

It registers every resource's routes (:data:`ROUTES`), the authorization guard
on all of them, the problem+json exception handlers, the body cap, the OpenAPI
document, the context as the ``ctx`` dependency, and the server's start and
stop hooks. A new resource is a module beside this one whose controller is
added to :data:`ROUTES` and whose routes have rows in the authorization table
(``relay_es.adapters.authz.TABLE``; a test checks every route has one).
"""

from __future__ import annotations

from litestar import Litestar
from litestar.di import Provide

from relay_es.adapters.rest import (
    alerting,
    app_metrics,
    applications,
    autoscaling,
    audit,
    calling,
    executor_events,
    executors,
    openapi,
    org,
    roles,
    health,
    queues,
    schedules,
    stranded,
    tokens,
    versions,
    workflow_actions,
    workflows,
)
from relay_es.adapters.rest.context import RestContext
from relay_es.adapters.rest.guard import Authorize
from relay_es.adapters.rest.problems import EXCEPTION_HANDLERS

MAX_BODY = 64 * 1024  # bytes; Relay's request bodies are a few hundred bytes

ROUTES = [
    applications.ApplicationsController,
    executors.ExecutorsController,
    workflows.WorkflowsController,
    workflow_actions.WorkflowActionsController,
    # getWorkflow's path is deleteWorkflow's too: a plain handler, and after that controller
    # (Litestar refuses a plain handler before a controller at the same path when the
    # application is built a second time: the controller's OPTIONS handler collides).
    workflows.get_workflow,
    queues.QueuesController,
    schedules.SchedulesController,
    versions.VersionsController,
    app_metrics.MetricsController,
    autoscaling.AutoscalingController,
    alerting.AlertingController,
    stranded.StrandedController,
    tokens.TokensController,
    roles.RolesController,
    org.OrgController,
    org.UsersController,
    audit.AuditController,
    executor_events.ExecutorEventsController,
    health.healthz,
    health.readyz,
    health.metrics,
]


def build_app(ctx: RestContext) -> Litestar:
    if ctx.auth and ctx.credentials is None:
        raise ValueError("auth mode needs a credential checker (RestContext.credentials)")
    return Litestar(
        route_handlers=ROUTES,
        guards=[Authorize(ctx)],
        dependencies={
            "ctx": Provide(lambda: ctx, use_cache=True, sync_to_thread=False),
            "expensive": executors.expensive_reads(),
        },
        request_max_body_size=MAX_BODY,
        exception_handlers={**EXCEPTION_HANDLERS, **calling.EXCEPTION_HANDLERS},
        openapi_config=openapi.config(),
        on_startup=[ctx.on_startup],
        on_shutdown=[ctx.on_shutdown],
        logging_config=None,
        debug=False,
    )
