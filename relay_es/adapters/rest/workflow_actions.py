"""Workflow actions (Conductor API v2): cancel, resume, fork, delete, the bulk forms, export and import.

Each route is one Conductor operation at its Conductor path, with Conductor's bodies
(:mod:`~relay_es.adapters.rest.conductor.models`, decoded strictly) and statuses, carried
to one executor of the application (:mod:`~relay_es.adapters.rest.calling`):

=========================================  ===============================  ======  =============
route (under ``.../apps/{app}/workflows``)  operation                        answer  executor type
=========================================  ===============================  ======  =============
``POST /{workflow_id}/cancel``              ``cancelWorkflow``               204     ``cancel``
``POST /{workflow_id}/resume``              ``resumeWorkflow``               204     ``resume``
``POST /{workflow_id}/fork``                ``forkWorkflow``                 201     ``fork_workflow``
``DELETE /{workflow_id}``                   ``deleteWorkflow``               204     ``delete``
``POST /bulk-cancel``                       ``bulkCancelWorkflows``          204     ``cancel``
``POST /bulk-resume``                       ``bulkResumeWorkflows``          204     ``resume``
``POST /bulk-delete``                       ``bulkDeleteWorkflows``          204     ``delete``
``POST /bulk-fork-from-failure``            ``bulkForkWorkflowsFromFailure`` 200     ``fork_from_failure``
``GET /{workflow_id}/export``               ``exportWorkflow``               200     ``export_workflow``
``POST /import``                            ``importWorkflow``               201     ``import_workflow``
=========================================  ===============================  ======  =============

A bulk cancel, resume or delete of more than one workflow goes only to an executor whose SDK acts
on every id of the bulk form (:mod:`~relay_es.adapters.rest.releases`, which :func:`~relay_es.adapters.rest.calling.ask`
applies to every request; an older one would act
on the first and answer success): with none of those connected it is a 501, on record as failed,
nothing sent. One workflow goes to any executor.

Every route but export is an operator's action, recorded before it is sent and completed
however it ends (:func:`~relay_es.adapters.rest.calling.act`): its ``parameters`` and
``result`` summaries hold the options and counts, never a workflow's inputs or outputs nor an
imported payload. Export is a read. Resume and fork (single and bulk) are sent to an executor of
the latest application version first (``prefer_latest``, :mod:`relay_es.engine.routing`). That
executor only writes the change to the system database the application's executors share; the
workflow is enqueued there, and which executors may dequeue it is the SDK's rule: those of its
application version. A resumed workflow keeps its version (every SDK re-enqueues it as it was),
so it runs only where that version still runs. A fork runs on ``appVersion``; without it, on the
latest version with Python's dbos 3.2.0 (the fork gets no version, which only an executor of the
latest version dequeues) and on the original's with TypeScript's 5.2.11 (it copies the original's).

A fork without ``startStep`` starts at step 0: every SDK then copies no step (Python numbers
steps from 1 and copies those below ``start_step``, TypeScript from 0), so it reruns the whole
workflow on either. ``startStep`` is the executor's step number, as ``listWorkflowSteps``'
``stepId`` shows it.

The serialized workflow of export and import is passed through as the string it is, never
decoded: a Python executor's is a pickle, the others' JSON, so a workflow imports only into an
application of the SDK language that exported it (another refuses it: 422). The import body
(up to :data:`~relay_es.adapters.rest.conductor.models.MAX_SERIALIZED_WORKFLOW` characters in
at most :data:`IMPORT_BODY` bytes) is read into one buffer and decoded from it, the buffer
dropped before the executor is asked; it answers 201 with no content (and so no content type),
as Conductor's reference declares it. An export is answered only if that import would take it
back (:func:`importable`): an executor may reply with up to 128 MiB
(:data:`~relay_es.protocol.limits.MAX_FRAME`), an import carries less (what every SDK takes in
one message, :data:`~relay_es.protocol.limits.SDK_MAX_MESSAGE`, bounds it); a larger export is
a 502 that names the cap.

The executor's ``error_message`` becomes the problem's detail; its status (:func:`failed_status`):
404 when it is an SDK's own "no such workflow" naming a workflow the action names
(:func:`~relay_es.adapters.rest.calling.no_such_workflow`; never its database's "relation ... does
not exist", a 500), 409 when what the action would create exists
already (a fork's ``newWorkflowId``, an imported workflow), 403 when the executor refuses data
operations (metadata-only mode), 422 for a fork-from-failure step name no workflow has, else 500:
the executor failed for a reason that is not the client's (its database, a bug), which retrying
may cure. An import is the payload and nothing else, so an import that failed for a reason but a
conflict and its database failing (:func:`store_failed`, never read in what the message quotes of
the payload) is the payload's: a 422, whatever the SDK said of it -- not base64, not gzip, not a
pickle or JSON, or one that loads but is not a list of exported workflows (``TypeError: 'int'
object is not iterable``, ``workflows is not iterable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Controller, Request, Response, delete, get, post, route
from litestar.enums import HttpMethod, MediaType
from litestar.params import FromPath, QueryParameter
from litestar.response.base import ASGIResponse
from msgspec import UNSET

from relay_es.adapters.rest import bodies, calling, openapi
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import APP
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.text import bytes_said
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import SDK_MAX_MESSAGE

FIRST_STEP = 0  # a fork without startStep: no step copied, on every SDK (see the module's docstring)

# Request body caps (the app-wide cap is 64 KiB). A bulk body names up to MAX_IDS workflows;
# 4 MiB allows that many ids of ~400 bytes. An import body is one serialized workflow, its JSON
# object around it (and a ``$schema`` link) at most 64 KiB more. Its import_workflow message is no
# larger than the body and some 100 bytes of envelope (msgspec writes a string's JSON in as few
# bytes as a client can): within what every SDK takes in one (limits.SDK_MAX_MESSAGE, 100 MiB).
BULK_BODY = 4 * 1024 * 1024
IMPORT_BODY = m.MAX_SERIALIZED_WORKFLOW + 64 * 1024

WORKFLOW = "workflow"  # the actions' target type in the audit log

# "conflictingworkflow": DBOSConflictingWorkflowError, as metadata-only mode names an error and nothing more
CONFLICT_WORDS = ("already exists", "conflicting workflow", "conflictingworkflow", "duplicate key",
                  "unique constraint")
NO_SUCH_STEP = "has no step named"

# What an executor says when its system database failed, not what it was given (:func:`store_failed`):
# Python's DB-API classes for a database's own failure (PEP 249's OperationalError -- connection lost
# or refused, out of memory or disk, a serialization failure, an administrator's shutdown --,
# InterfaceError, InternalError) and SQLAlchemy's pool that found no connection in time; Node's
# socket errors (node-postgres' "connect ECONNREFUSED 127.0.0.1:5432") and node-postgres' own;
# PostgreSQL's words for the same (in the TypeScript SDK's messages as the server wrote them); a
# schema that is not there ("relation ... does not exist"; SQLite's "no such table"); the SDK's own
# "System database shutting down".
STORE_FAILURE = re.compile(
    r"operationalerror|interfaceerror|internalerror|queuepool limit"
    r"|\be(?:connrefused|connreset|timedout|notfound|ai_again|hostunreach|netunreach|pipe)\b"
    r"|connection terminated|timeout exceeded when trying to connect|is not queryable|connection refused"
    r"|terminating connection|server closed the connection|the database system is|too many clients"
    r"|connection slots are reserved|could not serialize access|deadlock detected|canceling statement due to"
    r"|out of memory|no space left on device|could not extend file|does not exist|no such table"
    r"|database is locked|unable to open database file|disk i/o error|shutting down",
    re.IGNORECASE)
# A Python traceback's frames and source lines (indented), and the statement and parameters
# SQLAlchemy appends to a database's error: not what failed, and the parameters hold the payload's
# own text (or a column such as ``workflow_timeout_ms``).
_NOT_THE_ERROR = re.compile(r"^(?:[ \t].*|\[SQL: .*|\[parameters: .*)$", re.MULTILINE)
# What the lines that say what failed quote of the payload, its words read as no store's: PostgreSQL
# quotes the value it refused as the value is, quotes and line breaks included ('invalid input
# syntax for type bigint: "does not exist"'), and Node's JSON.parse an excerpt of the text
# ('Unexpected token 'd', "does not e"... is not valid JSON'): from the first double quote to the
# last. Python's repr quotes a name a pickle gave ("No module named 'deadlock detected'"), on one
# line: from a line's first single quote to its last.
_QUOTED = (re.compile(r'"[\s\S]*"'), re.compile(r"'.*'"))


def store_failed(message: str) -> bool:
    """Whether an executor's error says its system database failed (:data:`STORE_FAILURE`, read in
    the lines that say what failed, without what they quote), rather than the request it was given."""
    said = _NOT_THE_ERROR.sub("", message)
    for quoted in _QUOTED:
        said = quoted.sub(" ", said)
    return STORE_FAILURE.search(said) is not None


def importable(serialized: str, answer: bytes) -> None:
    """Refuses (502) an export that ``importWorkflow`` would not take back: a serialized workflow of
    more than ``MAX_SERIALIZED_WORKFLOW`` characters, or an answer (the body that imports it) of
    more than :data:`IMPORT_BODY` bytes. The detail names both caps and why."""
    chars, limit = len(serialized), m.MAX_SERIALIZED_WORKFLOW
    if chars <= limit and len(answer) <= IMPORT_BODY:
        return
    raise calling.ExecutorProblem(
        502, "export too large to import",
        f"the executor exported a workflow of {chars:,} characters, an answer of {bytes_said(len(answer))}; "
        f"importWorkflow takes at most {limit:,} characters in a body of at most {bytes_said(IMPORT_BODY)}, "
        f"and Relay answers no export it could not import back (an import goes to the executor in one "
        f"WebSocket message: the TypeScript SDK takes at most {bytes_said(SDK_MAX_MESSAGE)} in one)")


def created() -> ASGIResponse:
    """201 and nothing else: no content, so no content type (Litestar gives one to every answer whose
    status may carry content), as Conductor's ``importWorkflow`` is declared ("Created")."""
    resp = ASGIResponse(body=b"", status_code=201)
    del resp.headers["content-type"]
    return resp


def failed_status(default: int = 500, *, payload: bool = False,
                  workflow_ids: Collection[str] | None = None) -> Callable[[str], int]:
    """The status of an executor's error message (see the module's docstring). ``payload``:
    the action is a payload the executor must load (import): what failed it but a conflict or the
    executor's database (:func:`store_failed`) is the payload's, a 422. ``workflow_ids``: the
    workflows the action names, the only ones whose absence is a 404 (:func:`calling.no_such_workflow`)."""
    not_found = calling.not_found_or(0, workflow_ids)

    def pick(message: str) -> int:
        low = message.lower()
        if calling.refused(message):
            return 403  # the executors refuse data operations: no retry or other body will help
        if any(w in low for w in CONFLICT_WORDS):
            return 409
        if payload:
            return 500 if store_failed(message) else 422  # another try of the same payload fails alike
        if NO_SUCH_STEP in low:
            return 422
        return not_found(message) or default

    return pick


async def streamed_body(request: Request[Any, Any, Any]) -> Any:
    """The request's body as its route declared it, strictly, like :func:`calling.body` (422
    naming the field, 400 for what is not JSON, 413 past the route's cap), read into one buffer
    that is dropped once decoded: a large body is held once as bytes, then once decoded."""
    declared = openapi.declared(request.route_handler)
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
    try:
        return bodies.of_request(buf, declared.model, required=declared.required)
    finally:
        del buf


def _opt(value: Any) -> Any:
    return None if value is UNSET else value


def _fork_summary(b: m.ForkWorkflowInputBody | None) -> dict[str, Any]:
    b = b or m.ForkWorkflowInputBody()
    return {"startStep": FIRST_STEP if b.start_step is UNSET else b.start_step,
            "newWorkflowId": _opt(b.new_workflow_id), "appVersion": _opt(b.app_version),
            "queueName": _opt(b.queue_name), "queuePartitionKey": _opt(b.queue_partition_key)}


def _fork_from_failure_summary(b: m.BulkForkFromFailureBody) -> dict[str, Any]:
    start = ("lastStep" if b.from_last_step is True else "step" if b.from_step is not UNSET
             else "stepName" if b.from_step_name is not UNSET else "lastFailure")
    return {"workflowCount": len(b.workflow_ids), "from": start, "fromStep": _opt(b.from_step),
            "fromStepName": _opt(b.from_step_name), "appVersion": _opt(b.app_version),
            "queueName": _opt(b.queue_name), "queuePartitionKey": _opt(b.queue_partition_key)}


def _forked(answer: c.ForkFromFailureResponse) -> dict[str, Any]:
    ids = answer.forked_workflow_ids or []
    return {"forkedCount": len(ids), "firstWorkflowId": ids[0] if ids else None}


# Booleans in the query parsed here (and on the read routes: workflows, schedules), so that a
# refusal names the parameter (Litestar's names the argument), spelled as Conductor's server reads
# them (Go's strconv.ParseBool).
TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


# A boolean query parameter is declared as the text sent (for query_bool to read), a boolean in the
# OpenAPI document.
AS_BOOLEAN: dict[str, Any] = {"oneOf": [{"type": "boolean"}, {"type": "null"}]}
DeleteChildren = Annotated[str | None, QueryParameter(
    name="deleteChildren", required=False, schema_extra=AS_BOOLEAN,
    description="also delete the workflow's children, recursively")]
ExportChildren = Annotated[str | None, QueryParameter(
    name="exportChildren", required=False, schema_extra=AS_BOOLEAN,
    description="also export the workflow's children, recursively")]


def query_bool(name: str, value: str | None) -> bool | None:
    """A boolean query parameter, None when absent; anything else is a 422 naming it."""
    if value is None:
        return None
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise InvalidSetting(name, f"must be true or false, got {value[:64]!r}")


def query_flag(name: str, value: str | None) -> bool:
    """A boolean query parameter (absent: false); anything else is a 422 naming it."""
    return query_bool(name, value) is True


class WorkflowActionsController(Controller):
    """The ten routes. ``deleteWorkflow`` shares its path with ``getWorkflow``, a plain handler
    (:func:`relay_es.adapters.rest.workflows.get_workflow`): Litestar 2.25 refuses a second
    controller on a path already registered (each brings its own automatic OPTIONS handler),
    so that handler is registered after this controller. That path's ``OPTIONS`` is
    :meth:`allowed_on_workflow`, which lists ``GET`` too."""

    path = APP + "/workflows"

    # Named to sort before delete_workflow: Litestar registers a controller's handlers in the order of
    # their names, and adds its own OPTIONS handler to a path whose first handler is not one (that one
    # would then answer, with the methods of the path before getWorkflow joined it: DELETE, OPTIONS).
    @route("/{workflow_id:str}", http_method=[HttpMethod.OPTIONS], include_in_schema=False, sync_to_thread=False)
    def allowed_on_workflow(self, request: Request[Any, Any, Any]) -> Response[None]:
        """``OPTIONS`` at a workflow's path: ``Allow`` lists the methods of the route as served
        (``DELETE``, ``GET`` and ``OPTIONS``), as a 405 there does."""
        template = request.scope.get("path_template")
        served = next(r for r in request.app.routes if r.path_format == template)
        return Response(content=None, status_code=204, headers={"Allow": ", ".join(sorted(served.methods))},
                        media_type=MediaType.TEXT)

    @post("/{workflow_id:str}/cancel", opt=openapi.body(m.CancelWorkflowInputBody, required=False),
          operation_id="cancelWorkflow", status_code=204, summary="Cancel workflow",
          description="Marks the workflow CANCELLED in the executors' system database (and its children, "
                      "recursively, with `cancelChildren`). Conductor's `cancelWorkflow`.")
    async def cancel(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                     request: Request[Any, Any, Any], ctx: Context) -> None:
        b: m.CancelWorkflowInputBody | None = await calling.body(request)
        made = mapping.cancel_request(workflow_id, b, request_id="")  # checks the id before anything is recorded
        await calling.act(ctx, request, org, app, operation="cancelWorkflow", target_type=WORKFLOW,
                          target_ids=[workflow_id], parameters={"cancelChildren": made.cancel_children},
                          make_request=lambda rid: mapping.cancel_request(workflow_id, b, request_id=rid),
                          failed_status=failed_status(workflow_ids=[workflow_id]))

    @post("/{workflow_id:str}/resume", opt=openapi.body(m.ResumeWorkflowInputBody, required=False),
          operation_id="resumeWorkflow", status_code=204, summary="Resume workflow",
          description="Re-enqueues a cancelled workflow, or one past its recovery attempts, on `queueName` if "
                      "given (one that ended, `SUCCESS` or `ERROR`, is left as it is). It keeps its application "
                      "version: only an executor of that version runs it. Conductor's `resumeWorkflow`.")
    async def resume(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                     request: Request[Any, Any, Any], ctx: Context) -> None:
        b: m.ResumeWorkflowInputBody | None = await calling.body(request)
        made = mapping.resume_request(workflow_id, b, request_id="")
        await calling.act(ctx, request, org, app, operation="resumeWorkflow", target_type=WORKFLOW,
                          target_ids=[workflow_id], parameters={"queueName": made.queue_name},
                          make_request=lambda rid: mapping.resume_request(workflow_id, b, request_id=rid),
                          prefer_latest=True, failed_status=failed_status(workflow_ids=[workflow_id]))

    @post("/{workflow_id:str}/fork", opt=openapi.body(m.ForkWorkflowInputBody, required=False),
          operation_id="forkWorkflow", status_code=201, summary="Fork workflow",
          description="Starts a new workflow (`newWorkflowId`, or one the executor picks) that copies the "
                      "steps before `startStep` (the step's `stepId`; none without it) and runs from there, on "
                      "`appVersion`; without it, on the latest version (Python's SDK) or the original's "
                      "(TypeScript's). Answers the new id, linked in `Location`. Conductor's `forkWorkflow`.")
    async def fork(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                   request: Request[Any, Any, Any], ctx: Context) -> Response[Any]:
        b: m.ForkWorkflowInputBody | None = await calling.body(request)
        mapping.fork_request(workflow_id, b, request_id="", first_step=FIRST_STEP)
        answer: c.ForkWorkflowResponse = await calling.act(
            ctx, request, org, app, operation="forkWorkflow", target_type=WORKFLOW, target_ids=[workflow_id],
            parameters=_fork_summary(b),
            make_request=lambda rid: mapping.fork_request(workflow_id, b, request_id=rid, first_step=FIRST_STEP),
            result=lambda a: {"workflowId": a.new_workflow_id}, prefer_latest=True,
            failed_status=failed_status(workflow_ids=[workflow_id]))
        out = mapping.fork_out(answer)
        resp = calling.answer(out, 201)
        resp.headers["Location"] = (f"/v2/orgs/{quote(org)}/apps/{quote(app)}/workflows/"
                                    f"{quote(out.workflow_id, safe='')}")
        return resp

    @delete("/{workflow_id:str}", operation_id="deleteWorkflow", status_code=204, summary="Delete workflow",
            description="Deletes the workflow's rows, steps, events and streams from the executors' system "
                        "database (and its children's, with `deleteChildren`). Conductor's `deleteWorkflow`.")
    async def delete_workflow(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str],
                              request: Request[Any, Any, Any], ctx: Context,
                              delete_children: DeleteChildren = None) -> None:
        children = query_flag("deleteChildren", delete_children)
        mapping.delete_request(workflow_id, children, request_id="")
        await calling.act(ctx, request, org, app, operation="deleteWorkflow", target_type=WORKFLOW,
                          target_ids=[workflow_id], parameters={"deleteChildren": children},
                          make_request=lambda rid: mapping.delete_request(workflow_id, children, request_id=rid),
                          failed_status=failed_status(workflow_ids=[workflow_id]))

    @post("/bulk-cancel", opt=openapi.body(m.BulkCancelInputBody), operation_id="bulkCancelWorkflows", status_code=204,
          request_max_body_size=BULK_BODY, summary="Bulk cancel workflows",
          description=f"`cancelWorkflow` for 1 to {m.MAX_IDS} workflows at once. Conductor's `bulkCancelWorkflows`.")
    async def bulk_cancel(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                          ctx: Context) -> None:
        b: m.BulkCancelInputBody = await calling.body(request)
        await calling.act(ctx, request, org, app, operation="bulkCancelWorkflows", target_type=WORKFLOW,
                          target_ids=b.workflow_ids,
                          parameters={"workflowCount": len(b.workflow_ids),
                                      "cancelChildren": b.cancel_children is True},
                          make_request=lambda rid: mapping.bulk_cancel_request(b, request_id=rid),
                          failed_status=failed_status(workflow_ids=frozenset(b.workflow_ids)))

    @post("/bulk-resume", opt=openapi.body(m.BulkResumeInputBody), operation_id="bulkResumeWorkflows", status_code=204,
          request_max_body_size=BULK_BODY, summary="Bulk resume workflows",
          description=f"`resumeWorkflow` for 1 to {m.MAX_IDS} workflows at once, each keeping its application "
                      "version. Conductor's `bulkResumeWorkflows`.")
    async def bulk_resume(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                          ctx: Context) -> None:
        b: m.BulkResumeInputBody = await calling.body(request)
        await calling.act(ctx, request, org, app, operation="bulkResumeWorkflows", target_type=WORKFLOW,
                          target_ids=b.workflow_ids,
                          parameters={"workflowCount": len(b.workflow_ids), "queueName": _opt(b.queue_name)},
                          make_request=lambda rid: mapping.bulk_resume_request(b, request_id=rid),
                          prefer_latest=True, failed_status=failed_status(workflow_ids=frozenset(b.workflow_ids)))

    @post("/bulk-delete", opt=openapi.body(m.BulkDeleteInputBody), operation_id="bulkDeleteWorkflows", status_code=204,
          request_max_body_size=BULK_BODY, summary="Bulk delete workflows",
          description=f"`deleteWorkflow` for 1 to {m.MAX_IDS} workflows at once. Conductor's `bulkDeleteWorkflows`.")
    async def bulk_delete(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                          ctx: Context) -> None:
        b: m.BulkDeleteInputBody = await calling.body(request)
        await calling.act(ctx, request, org, app, operation="bulkDeleteWorkflows", target_type=WORKFLOW,
                          target_ids=b.workflow_ids,
                          parameters={"workflowCount": len(b.workflow_ids),
                                      "deleteChildren": b.delete_children is True},
                          make_request=lambda rid: mapping.bulk_delete_request(b, request_id=rid),
                          failed_status=failed_status(workflow_ids=frozenset(b.workflow_ids)))

    @post("/bulk-fork-from-failure", opt=openapi.body(m.BulkForkFromFailureBody),
          operation_id="bulkForkWorkflowsFromFailure", status_code=200,
          request_max_body_size=BULK_BODY,
          summary="Bulk fork workflows from failure",
          description="Forks each workflow from its last failed step (the default), its last step "
                      "(`fromLastStep`), a step number (`fromStep`) or the last step of a name (`fromStepName`), "
                      "on `appVersion`; without it, on the latest version (Python's SDK) or each original's "
                      "(TypeScript's). Answers the new ids. "
                      "Conductor's `bulkForkWorkflowsFromFailure`.")
    async def bulk_fork_from_failure(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                                     ctx: Context) -> Response[Any]:
        b: m.BulkForkFromFailureBody = await calling.body(request)
        answer: c.ForkFromFailureResponse = await calling.act(
            ctx, request, org, app, operation="bulkForkWorkflowsFromFailure", target_type=WORKFLOW,
            target_ids=b.workflow_ids, parameters=_fork_from_failure_summary(b),
            make_request=lambda rid: mapping.fork_from_failure_request(b, request_id=rid),
            result=_forked, prefer_latest=True, failed_status=failed_status(workflow_ids=frozenset(b.workflow_ids)))
        return calling.answer(mapping.fork_from_failure_out(answer))

    @get("/{workflow_id:str}/export", operation_id="exportWorkflow", summary="Export workflow",
         description="The workflow (and its children, with `exportChildren`) serialized by the executor: an "
                     "opaque string, importable into an application of the same SDK language only. "
                     "Conductor's `exportWorkflow`.")
    async def export(self, org: FromPath[str], app: FromPath[str], workflow_id: FromPath[str], ctx: Context,
                     export_children: ExportChildren = None) -> Response[Any]:
        children = query_flag("exportChildren", export_children)
        mapping.export_request(workflow_id, children, request_id="")
        answer: c.ExportWorkflowResponse = await calling.ask(
            ctx, org, app, lambda rid: mapping.export_request(workflow_id, children, request_id=rid),
            failed_status=failed_status(workflow_ids=[workflow_id]))
        if answer.serialized_workflow is None:  # TypeScript: an unknown id exports nothing, no error
            raise calling.ExecutorProblem(404, "Not found",  # repr: the id's controls escaped, cut
                                          f"the executor exported nothing: workflow {workflow_id[:256]!r} not found")
        resp = calling.answer(mapping.export_out(answer))
        importable(answer.serialized_workflow, resp.content)
        return resp

    @post("/import", opt=openapi.body(m.ImportWorkflowInputBody),
          operation_id="importWorkflow", status_code=201, request_max_body_size=IMPORT_BODY,
          summary="Import workflow",
          description="Loads a workflow `exportWorkflow` answered (from this application or another of the same "
                      "SDK language) into the application's system database; Relay passes it through undecoded. "
                      "Importing into a Python executor unpickles the payload: only for payloads you trust. "
                      "Conductor's `importWorkflow`.")
    async def import_workflow(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                              ctx: Context) -> ASGIResponse:
        b: m.ImportWorkflowInputBody = await streamed_body(request)
        size = len(b.serialized_workflow)
        await calling.act(ctx, request, org, app, operation="importWorkflow", target_type=WORKFLOW,
                          parameters={"serializedChars": size},
                          make_request=lambda rid: mapping.import_request(b, request_id=rid),
                          failed_status=failed_status(payload=True, workflow_ids=()))
        return created()
