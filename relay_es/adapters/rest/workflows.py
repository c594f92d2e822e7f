"""Workflows, read: Conductor API 2.0.0's ``listWorkflows``, ``searchWorkflows``, ``getWorkflow``,
``listWorkflowSteps``, ``listWorkflowEvents``, ``listWorkflowNotifications``,
``listWorkflowStreams``, ``getWorkflowAggregates`` and ``getStepAggregates``.

Relay keeps no copy of an application's workflows: each operation is one request to one
HEALTHY executor of the application (:func:`~relay_es.adapters.rest.calling.ask`; 503 when
there is none, 504 when it does not answer in time, 502 when its socket drops or its reply does
not map), whose answer is mapped (:mod:`~relay_es.adapters.rest.conductor.mapping`) to the
reference's bodies and encoded once (:func:`~relay_es.adapters.rest.calling.answer`).

* Query parameters are the reference's, each a single value (``status`` and ``workflowName``
  are plain strings there, sent ``explode: false``; a parameter given twice is refused by the
  guard, as on every route). ``limit`` and ``offset`` are whole numbers from 0; without
  ``limit`` (or with 0, as both SDKs read it) the executor answers every workflow that matches. ``loadInput`` and
  ``loadOutput`` default to false (the executor then sends neither); ``getWorkflow`` loads both.
* Bodies (``WorkflowSearchBody``, ``WorkflowAggregatesBody``, ``StepAggregatesBody``) are
  decoded strictly (:func:`~relay_es.adapters.rest.calling.body`): an unknown field or a value
  of the wrong type is a 422 naming it, at most :data:`MAX_SEARCH_BODY` bytes. Each may be left
  out, as the reference has it: no body is ``{}``, every workflow (or step) the executor has.
  ``queuesOnly`` lists the enqueued workflows only (``list_queued_workflows``). An aggregate
  without a group (a ``groupBy*`` flag or ``timeBucketSizeMs``) is a 422, nothing sent: every SDK
  refuses it (:func:`grouped`).
* A filter an executor's SDK release would silently ignore goes only to an executor known to read
  it, a message type to one not known too old for it (:mod:`~relay_es.adapters.rest.releases`,
  applied by :func:`~relay_es.adapters.rest.calling.ask`): a 501 naming the filters and the
  releases that have them when none connected does. None of ``listWorkflows``' query parameters
  needs one: Python dbos 0.27.2 and @dbos-inc/dbos-sdk 4.0.2 read them all.
* A workflow the executor does not know is a 404 for ``getWorkflow`` (the executor answers
  ``null`` without an error), one of another id than asked for a 502; for its steps, events, notifications and streams it is what the
  executor answers (an empty list, or its error: 404 when the message is the SDK's own "no such
  workflow" naming it, else 500 with the executor's text -- its database's "relation ... does not
  exist" too). A list's error is a 500 whatever it says.
* Boolean query parameters are read as Conductor's server reads them (``true``, ``1``, ``t`` ...;
  :func:`~relay_es.adapters.rest.workflow_actions.query_bool`): any other value is a 422 naming the
  parameter, as is a ``workflowName`` over its bound.
* ``getStepAggregates`` is at ``.../steps/aggregates``, beside ``.../workflows``: one controller,
  rooted at the application, serves eight of the nine; ``getWorkflow`` is the plain handler
  :func:`get_workflow` (its path is shared with ``deleteWorkflow``'s controller, whose ``OPTIONS``
  there lists ``GET`` too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, QueryParameter

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import mapping, models
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.workflow_actions import AS_BOOLEAN, query_bool
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol import catalogue as c
from relay_es.protocol import messages as wire

MAX_SEARCH_BODY = 2 * 1024 * 1024  # bytes: 10,000 workflow IDs of a UUID's length fit five times over


Status = Annotated[str | None, QueryParameter(
    name="status", required=False, max_length=models.MAX_TEXT,
    description="one status: ENQUEUED, DELAYED, PENDING, SUCCESS, ERROR, MAX_RECOVERY_ATTEMPTS_EXCEEDED, CANCELLED")]
# Bounded by mapping.query_values, whose 422 names the parameter (Litestar's would name the argument).
WorkflowName = Annotated[str | None, QueryParameter(name="workflowName", required=False,
                                                    schema_extra={"maxLength": models.MAX_TEXT},
                                                    description="one workflow function name")]
Limit = Annotated[int | None, QueryParameter(name="limit", required=False, ge=0, le=models.INT64_MAX,
                                             description="at most this many (none: every match)")]
Offset = Annotated[int | None, QueryParameter(name="offset", required=False, ge=0, le=models.INT64_MAX,
                                              description="skip this many first")]
# Booleans as sent, read by query_bool: a refusal names the parameter.
SortDesc = Annotated[str | None, QueryParameter(name="sortDesc", required=False, schema_extra=AS_BOOLEAN,
                                                description="newest first (by creation time); default oldest first")]
LoadInput = Annotated[str | None, QueryParameter(name="loadInput", required=False, schema_extra=AS_BOOLEAN,
                                                 description="include each workflow's input (default false)")]
LoadOutput = Annotated[str | None, QueryParameter(
    name="loadOutput", required=False, schema_extra=AS_BOOLEAN,
    description="include each workflow's output and error (default false)")]


def sent_as(request: wire.Request) -> Callable[[str], wire.Request]:
    """A request built -- its values checked, a 422 naming what cannot be sent -- before any
    executor is chosen, sent under the request id the hub gives it."""
    return lambda request_id: msgspec.structs.replace(request, request_id=request_id)


# What a client calls the groups of each aggregate (the wire's group_by flags, then time_bucket_size_ms).
GROUPS = {"get_workflow_aggregates": ("groupByStatus", "groupByWorkflowName", "groupByQueueName", "groupByExecutorId",
                                      "groupByAppVersion", "groupByApplicationName", "timeBucketSizeMs"),
          "get_step_aggregates": ("groupByFunctionName", "groupByStatus", "timeBucketSizeMs")}


def grouped(request: c.GetWorkflowAggregatesRequest | c.GetStepAggregatesRequest) -> None:
    """An aggregate names a group, or it is a 422 naming them, nothing sent: every SDK refuses one
    without, with a 500 ("At least one group_by flag must be set to True": Python dbos from 2.16 to
    3.2.0, ``SystemDatabase.get_workflow_aggregates`` and ``get_step_aggregates``; @dbos-inc/dbos-sdk
    5.2.11, ``getWorkflowAggregates`` and ``getStepAggregates``). A ``time_bucket_size_ms`` is a group
    in both (the SDK adds ``time_bucket``); at least one ``select_*`` flag is not needed: both count
    when none is set."""
    flags = msgspec.structs.asdict(request.body)
    if flags["time_bucket_size_ms"] is not None or any(v is True for k, v in flags.items()
                                                        if k.startswith("group_by_")):
        return
    names = GROUPS[request.type]
    raise InvalidSetting("body", f"an aggregate needs a group: set one of {', '.join(names[:-1])} to true, or "
                                 f"{names[-1]} (every DBOS SDK refuses an aggregate without one)")


def no_such_workflow(workflow_id: str) -> NotFoundException:
    return NotFoundException(f"workflow {workflow_id[:256]!r} does not exist")


def one_workflow(workflow_id: str) -> Callable[[str], int]:
    """The status of an executor's error about one workflow: 404 for its SDK's own "no such
    workflow" naming it (:func:`calling.no_such_workflow`), 403 for the metadata-only refusal,
    else 500 (its database's "relation ... does not exist" included)."""
    return calling.not_found_or(500, [workflow_id])


class WorkflowsController(Controller):
    path = APP

    @get("/workflows", operation_id="listWorkflows", summary="List workflows")
    async def list_workflows(self, org: FromPath[str], app: FromPath[str], ctx: Context, status: Status = None,
                             workflow_name: WorkflowName = None, limit: Limit = None, offset: Offset = None,
                             sort_desc: SortDesc = None, load_input: LoadInput = None,
                             load_output: LoadOutput = None) -> Response[list[models.Workflow]]:
        request = mapping.list_workflows_request(
            request_id="", status=status, workflow_name=workflow_name, limit=limit, offset=offset,
            sort_desc=query_bool("sortDesc", sort_desc), load_input=query_bool("loadInput", load_input),
            load_output=query_bool("loadOutput", load_output))
        reply: c.ListWorkflowsResponse = await calling.ask(ctx, org, app, sent_as(request))
        return calling.answer(mapping.workflows_out(reply))

    @post("/workflows/search", opt=openapi.body(models.WorkflowSearchBody, required=False),
          operation_id="searchWorkflows", summary="Search workflows (every filter of WorkflowSearchBody)",
          status_code=200, request_max_body_size=MAX_SEARCH_BODY)
    async def search_workflows(self, org: FromPath[str], app: FromPath[str], ctx: Context,
                               request: Request[Any, Any, Any]) -> Response[list[models.Workflow]]:
        b: models.WorkflowSearchBody = await calling.body(request) or models.WorkflowSearchBody()
        reply: c.ListWorkflowsResponse = await calling.ask(
            ctx, org, app, sent_as(mapping.search_request(b, request_id="")))
        return calling.answer(mapping.workflows_out(reply))

    @post("/workflows/aggregates", opt=openapi.body(models.WorkflowAggregatesBody, required=False),
          operation_id="getWorkflowAggregates", summary="Count and time workflows, grouped",
          status_code=200, request_max_body_size=MAX_SEARCH_BODY)
    async def workflow_aggregates(self, org: FromPath[str], app: FromPath[str], ctx: Context,
                                  request: Request[Any, Any, Any]) -> Response[list[models.WorkflowAggregate]]:
        b: models.WorkflowAggregatesBody = await calling.body(request) or models.WorkflowAggregatesBody()
        asked = mapping.workflow_aggregates_request(b, request_id="")
        grouped(asked)
        reply: c.GetWorkflowAggregatesResponse = await calling.ask(ctx, org, app, sent_as(asked))
        return calling.answer(mapping.workflow_aggregates_out(reply))

    @get("/workflows/{workflow_id:str}/steps", operation_id="listWorkflowSteps", summary="A workflow's steps, in order")
    async def list_steps(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str], ctx: Context,
                         limit: Limit = None, offset: Offset = None) -> Response[list[models.Step]]:
        reply: c.ListStepsResponse = await calling.ask(
            ctx, org, app, sent_as(mapping.list_steps_request(workflow_id, request_id="", limit=limit, offset=offset)),
            failed_status=one_workflow(workflow_id))
        return calling.answer(mapping.steps_out(reply))

    @get("/workflows/{workflow_id:str}/events", operation_id="listWorkflowEvents", summary="A workflow's events (key, value)")
    async def list_events(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                          ctx: Context) -> Response[list[models.Event]]:
        reply: c.GetWorkflowEventsResponse = await calling.ask(
            ctx, org, app, sent_as(mapping.events_request(workflow_id, request_id="")),
            failed_status=one_workflow(workflow_id))
        return calling.answer(mapping.events_out(reply))

    @get("/workflows/{workflow_id:str}/notifications", operation_id="listWorkflowNotifications",
         summary="The messages sent to a workflow")
    async def list_notifications(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                                 ctx: Context) -> Response[list[models.Notification]]:
        reply: c.GetWorkflowNotificationsResponse = await calling.ask(
            ctx, org, app, sent_as(mapping.notifications_request(workflow_id, request_id="")),
            failed_status=one_workflow(workflow_id))
        return calling.answer(mapping.notifications_out(reply))

    @get("/workflows/{workflow_id:str}/streams", operation_id="listWorkflowStreams", summary="A workflow's streams")
    async def list_streams(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                           ctx: Context) -> Response[list[models.StreamEntry]]:
        reply: c.GetWorkflowStreamsResponse = await calling.ask(
            ctx, org, app, sent_as(mapping.streams_request(workflow_id, request_id="")),
            failed_status=one_workflow(workflow_id))
        return calling.answer(mapping.streams_out(reply))

    @post("/steps/aggregates", opt=openapi.body(models.StepAggregatesBody, required=False),
          operation_id="getStepAggregates", summary="Count and time steps, grouped",
          status_code=200, request_max_body_size=MAX_SEARCH_BODY)
    async def step_aggregates(self, org: FromPath[str], app: FromPath[str], ctx: Context,
                              request: Request[Any, Any, Any]) -> Response[list[models.StepAggregate]]:
        b: models.StepAggregatesBody = await calling.body(request) or models.StepAggregatesBody()
        asked = mapping.step_aggregates_request(b, request_id="")
        grouped(asked)
        reply: c.GetStepAggregatesResponse = await calling.ask(ctx, org, app, sent_as(asked))
        return calling.answer(mapping.step_aggregates_out(reply))


@get(APP + "/workflows/{workflow_id:str}", operation_id="getWorkflow",
     summary="One workflow, with its input and output")
async def get_workflow(org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                       ctx: Context) -> Response[models.Workflow]:
    """A plain handler, not one of :class:`WorkflowsController`'s: ``DELETE`` at this path is
    :class:`~relay_es.adapters.rest.workflow_actions.WorkflowActionsController`'s, and Litestar 2
    refuses two controllers at one path (each brings its own ``OPTIONS`` handler). Registered
    after that controller."""
    reply: c.GetWorkflowResponse = await calling.ask(
        ctx, org, app, sent_as(mapping.get_workflow_request(workflow_id, request_id="")),
        failed_status=one_workflow(workflow_id))
    if reply.output is None:
        raise no_such_workflow(workflow_id)
    mapping.same_as_asked("WorkflowUUID", workflow_id, reply.output.WorkflowUUID)
    return calling.answer(mapping.workflow_out(reply.output))
