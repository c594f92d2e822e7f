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
  changed, like a refused body); the action goes to the executor that found it (another's
  system database, misconfigured, may not hold it: "success", and nothing changed).
* trigger: 201, ``{"workflowId"}`` of the workflow the executor enqueued now, ``Location`` its
  ``getWorkflow`` path; recorded with that id (an empty id is a 502).
* backfill: 200, ``{"workflowIds"}`` enqueued for the times the cron names in
  (``startTime``, ``endTime``) -- both SDKs start from ``startTime`` and take each next firing, so
  one at exactly ``startTime`` is not backfilled -- that have no workflow yet; ``endTime`` before
  ``startTime`` is a 422. Recorded with the window and the count. Relay first reads the schedule
  (an unknown one: 404, nothing recorded) and counts its cron's firings in the window with
  ``croniter`` (ADR 29): more than :data:`BACKFILL_MAX_FIRINGS` is a 422 saying to split the window,
  nothing sent or recorded (an SDK enqueues them one by one while its control channel waits: 1,800
  held a Python executor's for a minute); the backfill goes to the executor that read it. A cron
  or time zone Relay cannot read, or a read the executor fails, is not counted: the backfill is
  sent as before, and the executor decides.

A message an SDK predates (Python dbos before 2.13 and @dbos-inc/dbos-sdk before 4.9 have none of
these) goes to an executor of the application whose ``executor_info`` names a release that has it
(:mod:`~relay_es.adapters.rest.releases`, which :func:`calling.ask` applies to every request); one
that names none answers for itself, and "Unknown message type" is a 501
(:mod:`~relay_es.adapters.rest.calling`), as is an application whose executors are all known to be
too old (nothing sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from croniter import croniter
from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, QueryParameter

from relay_es.adapters.hub.calls import NoCapableExecutor
from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.calling import ExecutorProblem
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.queues import failed_status, sent_as
from relay_es.adapters.rest.workflow_actions import AS_BOOLEAN, query_bool
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import printable

BACKFILL_MAX_FIRINGS = 10_000  # the most workflows one backfill may enqueue (ADR 29); counting stops one past it
CRON_MAX_CHARS = 1_000  # a longer cron or time zone from an executor is not parsed (not counted: sent as before)

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


async def _get(ctx: RestContext, org: str, app: str, schedule_name: str, *,
               chosen: Callable[[str], None] | None = None) -> c.ScheduleOutput:
    """The schedule the executor reads, or 404 (502 for a schedule of another name).
    ``chosen(executor_id)``: told each executor asked (:func:`calling.ask`)."""
    request = mapping.get_schedule_request(schedule_name, request_id="")
    answer: c.GetScheduleResponse = await calling.ask(ctx, org, app, sent_as(request),
                                                      failed_status=one_schedule(schedule_name), chosen=chosen)
    if answer.output is None:
        raise NotFoundException(detail=f"schedule {schedule_name[:200]!r} not found in application {app!r}")
    mapping.same_as_asked("schedule_name", schedule_name, answer.output.schedule_name)
    return answer.output


def firings(cron: str | None, time_zone: str | None, start: datetime, end: datetime, at_most: int) -> int | None:
    """How many times ``cron`` fires after ``start`` and before ``end`` (aware instants) in
    ``time_zone`` (UTC when None, as Python has it; TypeScript takes its process's), as both SDKs
    backfill it: from ``start`` to each next firing, with a six-field cron's seconds first
    (``croniter`` is what dbos vendors, with ``second_at_beginning``). Counted up to ``at_most``,
    so that a year of seconds costs no more than ``at_most`` steps. None when Relay cannot count:
    no cron, one or a time zone it cannot read or longer than :data:`CRON_MAX_CHARS` (the executor's
    text, hostile like any), a window croniter cannot walk (past year 9999)."""
    if not cron or len(cron) > CRON_MAX_CHARS or len(time_zone or "") > CRON_MAX_CHARS:
        return None
    try:
        zone = ZoneInfo(time_zone) if time_zone else timezone.utc
        it, count = croniter(cron, start.astimezone(zone), second_at_beginning=True), 0
        while count < at_most and it.get_next(datetime) < end:
            count += 1
        return count
    except Exception:  # noqa: BLE001  # croniter's errors and ZoneInfo's for a text it cannot read
        return None


async def _bounded(ctx: RestContext, org: str, app: str, schedule_name: str, start: datetime,
                   end: datetime) -> str | None:
    """Refuses (422) a backfill whose window holds more than :data:`BACKFILL_MAX_FIRINGS` of the
    schedule's firings, read from an executor; 404 for a schedule it has not. The executor that
    read it, which the backfill goes to (the cron counted is the one it holds). Its failure to read
    it (its error, an SDK without ``get_schedule``, none able to take it) is no refusal: None, the
    backfill is sent as before, and the executor's answer to it is on record. Not reaching one
    (503, 504, 502) ends the request, nothing recorded, as for pause and resume."""
    asked: list[str] = []  # the executors asked to read it: the last one answered
    try:
        schedule = await _get(ctx, org, app, schedule_name, chosen=asked.append)
    except ExecutorProblem as e:
        if e.status == 404:
            raise
        return None
    except NoCapableExecutor:
        return None
    count = await asyncio.to_thread(firings, schedule.schedule, schedule.cron_timezone, start, end,
                                    BACKFILL_MAX_FIRINGS + 1)  # a thread: about half a second of croniter's steps
    if count is not None and count > BACKFILL_MAX_FIRINGS:
        raise InvalidSetting("endTime", (
            f"the window holds at least {count:,} firings of schedule {printable(schedule_name, 200)!r} "
            f"(cron {printable(schedule.schedule, 100)!r}); one backfill enqueues at most "
            f"{BACKFILL_MAX_FIRINGS:,}: split the window"))
    return asked[-1] if asked else None


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
        asked: list[str] = []  # the executors asked to read it: the last one answered
        await _get(ctx, org, app, schedule_name, chosen=asked.append)
        await calling.act(  # where it was found: another executor's "success" may have changed nothing
            ctx, request, org, app, operation=operation, target_type="schedule", target_ids=[schedule_name],
            parameters={"scheduleName": schedule_name}, make_request=sent_as(wire_request),
            failed_status=one_schedule(schedule_name), only_executor=asked[-1] if asked else None)

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
          description="Enqueues the workflows the schedule would have started after startTime and before endTime "
                      f"and has not; a window of more than {BACKFILL_MAX_FIRINGS:,} firings is a 422 (split it).")
    async def backfill_schedule(self, org: FromPath[str], app: FromPath[str], schedule_name: FromPath[str],
                                request: Request[Any, Any, Any], ctx: Context) -> Response[m.BackfillOutputBody]:
        b: m.BackfillInputBody = await calling.body(request)
        wire_request = mapping.backfill_schedule_request(schedule_name, b, request_id="")
        start = units.parse_rfc3339("startTime", wire_request.start)
        end = units.parse_rfc3339("endTime", wire_request.end)
        if end < start:
            raise InvalidSetting("endTime", "must not be before startTime")
        counted_by = await _bounded(ctx, org, app, schedule_name, start, end)
        answer: c.BackfillScheduleResponse = await calling.act(
            ctx, request, org, app, operation="backfillSchedule", target_type="schedule", target_ids=[schedule_name],
            parameters={"scheduleName": schedule_name, "startTime": b.start_time, "endTime": b.end_time},
            make_request=sent_as(wire_request), result=lambda a: {"count": len(a.workflow_ids or ())},
            failed_status=one_schedule(schedule_name), only_executor=counted_by)
        return calling.answer(mapping.backfill_out(answer))

