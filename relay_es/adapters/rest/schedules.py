"""Schedules: ``listSchedules``, ``getSchedule``, ``pauseSchedule``, ``resumeSchedule``,
``triggerSchedule``, ``backfillSchedule`` (Conductor API v2), answered by an executor.

The schedules live in the application's system database (``workflow_schedules``), so any
healthy executor answers and acts (protocol section 5.19). Reads: the list (filters ``status``,
``workflowName``, ``scheduleNamePrefix``, one value each; ``loadContext``, default true) and one schedule (404 when there is none), each Conductor's ``Schedule``.

The executor's error is a 500 with its text, but on a route about one schedule 404 when it is the
SDK's own "no such schedule" naming it (:func:`~relay_es.adapters.rest.calling.no_such_schedule`);
never on the list, whatever the text says (its database's "relation ... does not exist" too).

Actions are recorded before they are sent and completed however they end
(:func:`~relay_es.adapters.rest.calling.act`; target ``schedule``, its name):

* pause / resume: 204. The SDKs update the row without looking whether it exists, so Relay
  first reads the schedule and answers 404 for an unknown name (nothing recorded, nothing
  changed, like a refused body).
* trigger: 201, ``{"workflowId"}`` of the workflow the executor enqueued now, ``Location`` its
  ``getWorkflow`` path; recorded with that id (an empty id is a 502).
* backfill: 200, ``{"workflowIds"}`` enqueued for the times the cron names in
  [``startTime``, ``endTime``) that have no workflow yet; ``endTime`` before ``startTime`` is a
  422. Recorded with the window and the count.

An SDK that predates schedules (Python dbos before 2.15) answers "Unknown message type": a 501
(:mod:`~relay_es.adapters.rest.calling`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, QueryParameter

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.queues import failed_status, sent_as
from relay_es.adapters.rest.workflow_actions import AS_BOOLEAN, query_bool
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol import catalogue as c

# Query filters: one value each, as Conductor's (a repeated parameter is refused by the guard).
Status = Annotated[str | None, QueryParameter(
    name="status", required=False, description="ACTIVE or PAUSED (an unknown value matches nothing)")]
WorkflowName = Annotated[str | None, QueryParameter(
    name="workflowName", required=False, description="the scheduled workflow's name")]
NamePrefix = Annotated[str | None, QueryParameter(
    name="scheduleNamePrefix", required=False, description="the start of the schedule's name")]
# A boolean as sent, read by query_bool: a refusal names the parameter (Litestar's names the argument).
LoadContext = Annotated[str | None, QueryParameter(
    name="loadContext", required=False, schema_extra=AS_BOOLEAN,
    description="include each schedule's `context` (default true)")]


def one_schedule(schedule_name: str) -> Callable[[str], int]:
    """The status of an executor's error about one schedule: 404 for its SDK's "no such schedule"
    naming it, else 500 (or 403, :func:`calling.refused_or`)."""
    return calling.schedule_not_found_or(500, schedule_name)


async def _get(ctx: RestContext, org: str, app: str, schedule_name: str) -> c.ScheduleOutput:
    """The schedule the executor reads, or 404 (502 for a schedule of another name)."""
    request = mapping.get_schedule_request(schedule_name, request_id="")
    answer: c.GetScheduleResponse = await calling.ask(ctx, org, app, sent_as(request),
                                                      failed_status=one_schedule(schedule_name))
    if answer.output is None:
        raise NotFoundException(detail=f"schedule {schedule_name[:200]!r} not found in application {app!r}")
    mapping.same_as_asked("schedule_name", schedule_name, answer.output.schedule_name)
    return answer.output


class SchedulesController(Controller):
    path = APP + "/schedules"

    @get("/", operation_id="listSchedules", summary="List schedules")
    async def list_schedules(
        self, org: FromPath[str], app: FromPath[str], ctx: Context,
        status: Status = None, workflow_name: WorkflowName = None, schedule_name_prefix: NamePrefix = None,
        load_context: LoadContext = None,
    ) -> Response[list[m.Schedule]]:
        request = mapping.list_schedules_request(request_id="", status=status, workflow_name=workflow_name,
                                                 schedule_name_prefix=schedule_name_prefix,
                                                 load_context=query_bool("loadContext", load_context))
        answer: c.ListSchedulesResponse = await calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status)
        return calling.answer(mapping.schedules_out(answer))

    @get("/{schedule_name:str}", operation_id="getSchedule", summary="Get schedule", description="One schedule by name; 404 when there is none.")
    async def get_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                           ctx: Context) -> Response[m.Schedule]:
        return calling.answer(mapping.schedule_out(await _get(ctx, org, app, schedule_name)))

    @post("/{schedule_name:str}/pause", operation_id="pauseSchedule", summary="Pause schedule", status_code=204,
          description="It fires no more until resumed; 404 for an unknown schedule.")
    async def pause_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                             request: Request[Any, Any, Any], ctx: Context) -> None:
        await self._set_status(ctx, request, org, app, schedule_name,
                               mapping.pause_schedule_request(schedule_name, request_id=""), "pauseSchedule")

    @post("/{schedule_name:str}/resume", operation_id="resumeSchedule", summary="Resume schedule", status_code=204,
          description="It fires again; 404 for an unknown schedule.")
    async def resume_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                              request: Request[Any, Any, Any], ctx: Context) -> None:
        await self._set_status(ctx, request, org, app, schedule_name,
                               mapping.resume_schedule_request(schedule_name, request_id=""), "resumeSchedule")

    @staticmethod
    async def _set_status(ctx: RestContext, request: Request[Any, Any, Any], org: str, app: str, schedule_name: str,
                          wire_request: c.PauseScheduleRequest | c.ResumeScheduleRequest, operation: str) -> None:
        await _get(ctx, org, app, schedule_name)
        await calling.act(
            ctx, request, org, app, operation=operation, target_type="schedule", target_ids=[schedule_name],
            parameters={"scheduleName": schedule_name}, make_request=sent_as(wire_request),
            failed_status=one_schedule(schedule_name))

    @post("/{schedule_name:str}/trigger", operation_id="triggerSchedule", summary="Trigger schedule", status_code=201,
          description="Enqueues the scheduled workflow now; its id, and its path in `Location`.")
    async def trigger_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                               request: Request[Any, Any, Any], ctx: Context) -> Response[m.TriggerOutputBody]:
        wire_request = mapping.trigger_schedule_request(schedule_name, request_id="")
        answer: c.TriggerScheduleResponse = await calling.act(
            ctx, request, org, app, operation="triggerSchedule", target_type="schedule", target_ids=[schedule_name],
            parameters={"scheduleName": schedule_name}, make_request=sent_as(wire_request),
            result=lambda a: {"workflowId": a.workflow_id}, failed_status=one_schedule(schedule_name))
        out = mapping.trigger_out(answer)
        response = calling.answer(out, 201)
        response.headers["Location"] = f"/v2/orgs/{quote(org, safe='')}/apps/{quote(app, safe='')}" \
                                       f"/workflows/{quote(out.workflow_id, safe='')}"
        return response

    @post("/{schedule_name:str}/backfill", opt=openapi.body(m.BackfillInputBody),
          operation_id="backfillSchedule", summary="Backfill schedule", status_code=200,
          description="Enqueues the workflows the schedule would have started in [startTime, endTime) and has not.")
    async def backfill_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                                request: Request[Any, Any, Any], ctx: Context) -> Response[m.BackfillOutputBody]:
        b: m.BackfillInputBody = await calling.body(request)
        wire_request = mapping.backfill_schedule_request(schedule_name, b, request_id="")
        if units.parse_rfc3339("endTime", wire_request.end) < units.parse_rfc3339("startTime", wire_request.start):
            raise InvalidSetting("endTime", "must not be before startTime")
        answer: c.BackfillScheduleResponse = await calling.act(
            ctx, request, org, app, operation="backfillSchedule", target_type="schedule", target_ids=[schedule_name],
            parameters={"scheduleName": schedule_name, "startTime": b.start_time, "endTime": b.end_time},
            make_request=sent_as(wire_request), result=lambda a: {"count": len(a.workflow_ids or ())},
            failed_status=one_schedule(schedule_name))
        return calling.answer(mapping.backfill_out(answer))
