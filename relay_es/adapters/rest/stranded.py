"""Stranded work, Relay's own: PENDING workflows whose executor is not alive, why, and their fixes (issue 13).

``GET /v2/orgs/{org}/apps/{app}/stranded-workflows`` asks one HEALTHY executor of the
application (any version: they share the system database) for a page of PENDING workflows,
oldest first, and joins them with Relay's executors table (:mod:`relay_es.engine.stranded`
classifies). Query: ``limit`` (1-1000, default 100: PENDING workflows *examined* per page,
stranded or not), ``offset`` (the next page's is ``nextOffset``; null on the last page),
``relayOnly=true`` (no executor is asked: only what Relay knows alone, the not-alive
executors; also the answer to give when no executor is connected, where the full listing is a
503). The answer (camelCase, times RFC 3339 UTC with milliseconds)::

    {"at": "2026-12-01T12:00:00.000Z",         # Relay's clock when it classified
     "relayOnly": false,
     "examined": 3, "nextOffset": null,        # both null with relayOnly
     "workflows": [                            # null with relayOnly
       {"workflowId": "w1", "name": "checkout", "status": "PENDING", "queueName": "orders",
        "executorId": "A", "appVersion": "v1", "createdAt": "...",
        "reason": "recovery_deferred",         # relay_es.engine.stranded.Reason
        "fixes": ["fork", "cancel"],           # of recover, resume, fork, cancel: those that apply
        "relayState": {...} | null}],          # the executor as Relay knows it; null: unknown to Relay
     "queues": [                               # null with relayOnly; most blocked first
       {"queueName": "orders", "strandedWorkflows": 1,      # stranded PENDING ones on this page
        "enqueued": 12, "enqueuedCapped": false}],          # ENQUEUED waiting on it (at least, when capped)
     "executors": [                            # the executors waited on, and every other not-alive one
       {"executorId": "A", "reason": "recovery_deferred", "fixes": [...],
        "strandedWorkflows": 1,                # on this page
        "relayState": {...} | null}]}

``relayState``: ``status`` (DISCONNECTED, DEAD, DELETED, or null when registered but never
connected), ``appVersion``, ``disconnectReason``, ``deadline`` (a DISCONNECTED executor is
declared dead then), ``declaredDeadAt``, ``recoveryPhase`` (pending, deferred, dispatched,
confirmed or null), ``recoveryVersion``, ``recoveryAttempt``, ``recoveryTarget``,
``recoveryDispatchedAt``. Queue counts: at most :data:`MAX_QUEUE_COUNTS` queues a page are
counted (the rest ``enqueued`` null), each up to :data:`ENQUEUED_CAP`, all at once within one
call's timeout; a count that failed or did not come in time is null too.

``POST .../stranded-workflows/fix`` with ``{"fix": "resume"|"cancel", "workflowIds": [...]}``
(1-1000 ids) sends one bulk ``resume`` or ``cancel`` and answers ``{"fix", "workflowIds"}``.
A resumed workflow keeps its application version (every SDK: it is enqueued again and only an
executor of that version dequeues it), so resume fixes a workflow whose version still runs.
``{"fix": "fork", "workflowIds": [...], "appVersion": "v2"}`` is the fix when none of its
version is left: once an executor has listed every one of them (an id the application does not
have is a 404 with nothing done: DBOS refuses a bulk fork with one unknown id whole), the
workflows are cancelled (so that no executor of the old version ever runs
them again), then forked from their last recorded step (the protocol's ``fork_from_failure``
with ``from_last_step``: new workflow ids, the steps before it copied) on ``appVersion``,
by default the latest version running (Relay names it: an SDK left to choose may keep the
original's, as the TypeScript SDK does); it answers
``{"fix", "workflowIds", "forkedWorkflowIds"}``; a fork that fails after the cancel is the
fork's problem, its detail saying the workflows are CANCELLED and not forked. With
``{"fix": "recover", "executorIds": [...], "force": false}`` (1-20 ids) Relay has a HEALTHY
executor *of each one's application version* recover its PENDING workflows now (the
protocol's ``recovery`` message, one per version), without waiting for the process
manager's deadline or backoff, and answers ``{"fix", "recovered": [{"appVersion",
"executorIds"}]}``. Recover refuses (409, every refusal in ``errors``, nothing sent): an
executor Relay does not know or deleted, a HEALTHY one, one whose recovery is in flight, a
DISCONNECTED one without ``"force": true`` (it may still be running: its workflows would then
run twice), and one with no executor of its version connected (then fork is the fix: the
detail says so). Every fix is an operator's action in the audit log (``strandedResume``,
``strandedCancel``, ``strandedFork`` -- after its ``strandedCancel`` --, ``strandedRecover``),
recorded before it is sent and completed however it ends. Recovery sent here does not change the process manager's own record: it still declares
and dispatches as usual, and its recovery then finds the workflows already taken.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import FromPath, QueryParameter
from msgspec import UNSET, Meta, UnsetType

from relay_es.adapters.hub.calls import ReplyTooLarge
from relay_es.adapters.rest import calling, openapi, recording
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.problems import problem
from relay_es.domain import units
from relay_es.domain.ids import new_id
from relay_es.engine.action_commands import Outcome
from relay_es.engine.calls import CallFailed, ExecutorGone, ExecutorTimedOut, NoHealthyExecutor
from relay_es.engine.stranded import (
    Classified,
    Fix,
    StrandedExecutor,
    WorkflowSummary,
    classify,
    plan_recovery,
)
from relay_es.projections.executors import ExecutorRow, all_rows
from relay_es.protocol import catalogue as c

LIST_LIMIT = 1000  # PENDING workflows examined per page, at most
DEFAULT_LIMIT = 100
MAX_QUEUE_COUNTS = 20  # blocked queues whose ENQUEUED workflows are counted, per page
ENQUEUED_CAP = 1000  # ENQUEUED workflows counted per queue, at most
MAX_FIX_WORKFLOWS = 1000
MAX_FIX_EXECUTORS = 20
FIX_BODY = 1024 * 1024  # bytes
WORKFLOW, EXECUTOR = "workflow", "executor"


# --- the answer ------------------------------------------------------------------------------


class RelayState(msgspec.Struct, rename="camel"):
    status: str | None
    app_version: str | None
    disconnect_reason: str | None
    deadline: str | None
    declared_dead_at: str | None
    recovery_phase: str | None
    recovery_version: str | None
    recovery_attempt: int
    recovery_target: str | None
    recovery_dispatched_at: str | None


class StrandedWorkflow(msgspec.Struct, rename="camel"):
    workflow_id: str
    name: str | None
    status: str
    queue_name: str | None
    executor_id: str | None
    app_version: str | None
    created_at: str | None
    reason: str
    fixes: list[str]
    relay_state: RelayState | None


class BlockedQueueOut(msgspec.Struct, rename="camel"):
    queue_name: str
    stranded_workflows: int
    enqueued: int | None
    enqueued_capped: bool


class StrandedExecutorOut(msgspec.Struct, rename="camel"):
    executor_id: str
    reason: str
    fixes: list[str]
    stranded_workflows: int
    relay_state: RelayState | None


class Listing(msgspec.Struct, rename="camel"):
    at: str
    relay_only: bool
    examined: int | None
    next_offset: int | None
    workflows: list[StrandedWorkflow] | None
    queues: list[BlockedQueueOut] | None
    executors: list[StrandedExecutorOut]


def relay_state(r: ExecutorRow | None) -> RelayState | None:
    if r is None:
        return None
    return RelayState(status=r.status, app_version=r.app_version, disconnect_reason=r.disconnect_reason,
                      deadline=units.rfc3339(r.deadline), declared_dead_at=units.rfc3339(r.declared_dead_at),
                      recovery_phase=r.recovery_phase, recovery_version=r.recovery_version,
                      recovery_attempt=r.recovery_attempt, recovery_target=r.recovery_target,
                      recovery_dispatched_at=units.rfc3339(r.recovery_dispatched_at))


def _executor_out(e: StrandedExecutor) -> StrandedExecutorOut:
    return StrandedExecutorOut(executor_id=e.executor_id, reason=e.reason.value, fixes=[f.value for f in e.fixes],
                               stranded_workflows=e.stranded, relay_state=relay_state(e.row))


def summary(w: m.Workflow) -> WorkflowSummary:
    return WorkflowSummary(workflow_id=w.workflow_id, status=w.status, executor_id=w.executor_id,
                           name=w.workflow_name, queue_name=w.queue_name, app_version=w.app_version,
                           created_at=w.created_at)


# --- the fix body ----------------------------------------------------------------------------

FixIds = Annotated[list[m.Name], Meta(min_length=1, max_length=MAX_FIX_WORKFLOWS)]
ExecutorIds = Annotated[list[m.Name], Meta(min_length=1, max_length=MAX_FIX_EXECUTORS)]


class FixBody(m._Body, kw_only=True):
    fix: Literal["recover", "resume", "fork", "cancel"]
    workflow_ids: FixIds | UnsetType = UNSET
    executor_ids: ExecutorIds | UnsetType = UNSET
    force: bool | UnsetType = UNSET
    app_version: m.OptionalText | UnsetType = UNSET  # "" is not given, as in Conductor's bodies


def _refuse(where: str, message: str) -> ValidationException:
    return ValidationException(detail=f"{where}: {message}", extra=[{"key": where, "message": message}])


def checked(b: FixBody) -> FixBody:
    """Recover names executors, the others workflows: never both, never neither; ``force`` is
    recover's, ``appVersion`` fork's."""
    if b.app_version is not UNSET and b.fix != Fix.FORK:
        raise _refuse("appVersion", "only fork takes appVersion")
    if b.fix == Fix.RECOVER:
        if b.workflow_ids is not UNSET:
            raise _refuse("workflowIds", "recover names executors (executorIds), not workflows")
        if b.executor_ids is UNSET:
            raise _refuse("executorIds", "required for recover")
    else:
        if b.executor_ids is not UNSET:
            raise _refuse("executorIds", f"{b.fix} names workflows (workflowIds), not executors")
        if b.force is not UNSET:
            raise _refuse("force", "only recover takes force")
        if b.workflow_ids is UNSET:
            raise _refuse("workflowIds", f"required for {b.fix}")
    return b


BACK = "the executor is connected again: its workflows are not stranded"


class Refused(Exception):
    """A fix refused before anything was sent (409), each reason by id."""

    def __init__(self, detail: str, reasons: dict[str, str]) -> None:
        super().__init__(detail)
        self.detail, self.reasons = detail, reasons


def _refused(_: Request[Any, Any, Any], exc: Refused) -> Response[Any]:
    return problem(409, "Conflict", exc.detail,
                   [{"location": f"executorIds[{k}]", "message": v} for k, v in exc.reasons.items()])


EXCEPTION_HANDLERS = {Refused: _refused}


# --- the controller --------------------------------------------------------------------------


class StrandedController(Controller):
    path = APP + "/stranded-workflows"
    exception_handlers = EXCEPTION_HANDLERS  # type: ignore[assignment]

    @get("/", operation_id="listStrandedWorkflows", summary="List stranded workflows (Relay's own)",
         description="PENDING workflows whose executor is not alive, why, the fixes that apply, the queues they "
                     "block and the executors they wait on (see the module documentation). `limit` PENDING "
                     "workflows are examined per page, oldest first; the next page is `offset` = `nextOffset`. "
                     "`relayOnly=true`: no executor is asked; only the executors Relay knows are not alive.")
    async def list_stranded(
        self, org: FromPath[str], app: FromPath[str], ctx: Context,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=LIST_LIMIT,
                                             description="PENDING workflows examined")] = DEFAULT_LIMIT,
        offset: Annotated[int, QueryParameter(name="offset", ge=0, le=m.INT64_MAX)] = 0,
        relay_only: Annotated[bool, QueryParameter(name="relayOnly", required=False)] = False,
    ) -> Response[Any]:
        await calling.app_must_exist(ctx, org, app)
        rows = await asyncio.to_thread(all_rows, ctx.db, org=org, app=app)
        if relay_only:
            now = ctx.relay.clock.now()
            got = classify([], rows, now)
            return calling.answer(Listing(at=units.rfc3339(now) or "", relay_only=True, examined=None,
                                          next_offset=None, workflows=None, queues=None,
                                          executors=[_executor_out(e) for e in got.executors]))
        try:
            answer = await calling.ask(ctx, org, app, lambda rid: mapping.list_workflows_request(
                request_id=rid, status="PENDING", limit=limit, offset=offset, sort_desc=False))
        except NoHealthyExecutor as e:
            resp = problem(503, e.title, f"{e.detail}: its workflows cannot be listed; relayOnly=true lists "
                                         "what Relay knows alone (the executors that are not alive)")
            resp.headers["Retry-After"] = "5"
            return resp
        listed = mapping.workflows_out(answer)
        now = ctx.relay.clock.now()
        got = classify([summary(w) for w in listed[:limit]], rows, now)
        queues = await _queue_counts(ctx, org, app, got)
        examined = min(len(listed), limit)
        return calling.answer(Listing(
            at=units.rfc3339(now) or "", relay_only=False, examined=examined,
            next_offset=offset + examined if examined == limit else None,
            workflows=[StrandedWorkflow(
                workflow_id=s.workflow.workflow_id, name=s.workflow.name, status=s.workflow.status,
                queue_name=s.workflow.queue_name, executor_id=s.workflow.executor_id,
                app_version=s.workflow.app_version, created_at=s.workflow.created_at, reason=s.reason.value,
                fixes=[f.value for f in s.fixes], relay_state=relay_state(s.executor)) for s in got.workflows],
            queues=queues,
            executors=[_executor_out(e) for e in got.executors]))

    @post("/fix", opt=openapi.body(FixBody),
          operation_id="fixStrandedWorkflows", status_code=200, request_max_body_size=FIX_BODY,
          summary="Fix stranded workflows (Relay's own)",
          description="`resume`, `cancel` or `fork` (cancel, then fork from the last step on `appVersion` or the "
                      "latest version) workflows (`workflowIds`, 1-1000), or `recover` executors (`executorIds`, "
                      "1-20; `force` for a DISCONNECTED one) now with a HEALTHY executor of their version. Recorded "
                      "in the audit log. 409 when recover cannot be done now.")
    async def fix(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                  ctx: Context) -> Response[Any]:
        b: FixBody = await calling.body(request)
        b = checked(b)
        if b.fix == Fix.RECOVER:
            assert b.executor_ids is not UNSET
            recovered = await _recover(ctx, request, org, app, list(b.executor_ids), force=b.force is True)
            return calling.answer({"fix": "recover", "recovered": recovered})
        assert b.workflow_ids is not UNSET
        ids = list(b.workflow_ids)
        fork_version = await _fork_version(ctx, org, app, b) if b.fix == Fix.FORK else None
        if b.fix == Fix.FORK:
            await _all_exist(ctx, org, app, ids)
        if b.fix == Fix.RESUME:
            made: c.Request = mapping.bulk_resume_request(m.BulkResumeInputBody(workflow_ids=ids), request_id="")
        else:  # cancel, and fork's first step
            made = mapping.bulk_cancel_request(m.BulkCancelInputBody(workflow_ids=ids), request_id="")
        parameters: dict[str, Any] = {"workflowCount": len(ids)}
        if b.fix == Fix.FORK:
            parameters["forFork"] = True
        await calling.act(ctx, request, org, app, operation="strandedResume" if b.fix == Fix.RESUME else "strandedCancel",
                          target_type=WORKFLOW, target_ids=ids, parameters=parameters,
                          make_request=lambda rid: msgspec.structs.replace(made, request_id=rid),
                          failed_status=calling.not_found_or(500))
        if b.fix != Fix.FORK:
            return calling.answer({"fix": b.fix, "workflowIds": ids})
        fork = m.BulkForkFromFailureBody(workflow_ids=ids, from_last_step=True,
                                         app_version=UNSET if fork_version is None else fork_version)
        try:
            answer = await calling.act(
                ctx, request, org, app, operation="strandedFork", target_type=WORKFLOW, target_ids=ids,
                parameters={"workflowCount": len(ids), "fromLastStep": True, "appVersion": fork_version},
                make_request=lambda rid: mapping.fork_from_failure_request(fork, request_id=rid),
                result=lambda a: {"forkedCount": len(a.forked_workflow_ids or ())},
                prefer_latest=True, failed_status=calling.not_found_or(500))
            forked = mapping.fork_from_failure_out(answer).workflow_ids
        except (CallFailed, calling.ExecutorProblem, mapping.ExecutorReplyError) as e:
            raise _cancelled_not_forked(e, len(ids)) from None
        return calling.answer({"fix": "fork", "workflowIds": ids, "forkedWorkflowIds": forked})


async def _all_exist(ctx: RestContext, org: str, app: str, ids: list[str]) -> None:
    """404 naming the workflows the application does not have, before fork's cancel: DBOS refuses a
    bulk fork with one unknown id whole, and the others would be left cancelled, not forked."""
    asked = mapping.search_request(m.WorkflowSearchBody(workflow_ids=ids, limit=len(ids)), request_id="")
    reply: c.ListWorkflowsResponse = await calling.ask(
        ctx, org, app, lambda rid: msgspec.structs.replace(asked, request_id=rid))
    found = {w.WorkflowUUID for w in reply.output or ()}
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFoundException(
            f"no such workflow in application {app[:200]!r}: " + ", ".join(repr(i[:256]) for i in missing[:10])
            + (f" and {len(missing) - 10} more" if len(missing) > 10 else "") + "; nothing was cancelled or forked")


def _cancelled_not_forked(e: Exception, count: int) -> calling.ExecutorProblem:
    """The fork's failure, saying what its cancel did: the workflows are CANCELLED and not forked
    (or, when the executor did not answer, perhaps forked: look before trying again)."""
    if isinstance(e, mapping.ExecutorReplyError):
        status, title, detail = 502, "executor reply refused", str(e)
    else:
        status, title = getattr(e, "status", 502), getattr(e, "title", "executor call failed")
        detail = getattr(e, "detail", str(e))
    them = "the workflow was" if count == 1 else f"the {count} workflows were"
    if isinstance(e, ExecutorTimedOut):
        after = (f" {them.capitalize()} cancelled first (strandedCancel, in the audit log); whether the fork was "
                 "made is not known: list the workflows forked from them before trying again.")
    else:
        after = (f" {them.capitalize()} cancelled first (strandedCancel, in the audit log) and "
                 f"{'is' if count == 1 else 'are'} CANCELLED now, not forked: fix=fork again forks "
                 f"{'it' if count == 1 else 'them'}.")
    return calling.ExecutorProblem(status, title, detail + after)


async def _fork_version(ctx: RestContext, org: str, app: str, b: FixBody) -> str | None:
    """The version a fork runs on: the body's ``appVersion``, else the latest version running
    now -- named in the request, because an SDK left to choose keeps the original's (TypeScript
    5.2.11 does, seen live: the fork then waits for an executor of the version that is gone).
    Resolved before anything is sent, so that no executor at all is a 503 with nothing done."""
    if b.app_version is not UNSET:
        return b.app_version
    await calling.app_must_exist(ctx, org, app)
    if ctx.calls is None:
        raise NoHealthyExecutor(org, app)
    latest = await calling.latest_version(ctx, org, app)
    return ctx.calls.choose(org, app, prefer_latest=True, latest_version=latest).app_version  # None: one that never said


async def _queue_counts(ctx: RestContext, org: str, app: str, got: Classified) -> list[BlockedQueueOut]:
    """Each blocked queue's ENQUEUED workflows (the first :data:`MAX_QUEUE_COUNTS` queues),
    counted up to :data:`ENQUEUED_CAP`: one executor call per queue, all asked at once and given one
    call's timeout in all. A count that failed or was not answered in time is null: the listing,
    classified already, does not fail or wait for it."""

    async def count(name: str) -> tuple[int | None, bool]:
        body = m.WorkflowSearchBody(status=["ENQUEUED"], queue_name=[name], limit=ENQUEUED_CAP + 1,
                                    load_input=False, load_output=False)
        try:
            answer: c.ListWorkflowsResponse = await calling.ask(
                ctx, org, app, lambda rid: mapping.search_request(body, request_id=rid), app_checked=True)
        except (CallFailed, calling.ExecutorProblem):
            return None, False
        # counted by what each says it is: an executor that ignores a filter does not inflate it
        n = sum(1 for w in answer.output or () if w.Status == "ENQUEUED" and w.QueueName == name)
        return min(n, ENQUEUED_CAP), n > ENQUEUED_CAP

    tasks = [asyncio.ensure_future(count(q.name)) for q in got.queues[:MAX_QUEUE_COUNTS]]
    if tasks:
        await asyncio.wait(tasks, timeout=ctx.call_timeout.total_seconds())
    counts: list[tuple[int | None, bool]] = []
    for t in tasks:
        if t.done():
            counts.append(t.result())
        else:
            t.cancel()
            counts.append((None, False))
    counts += [(None, False)] * (len(got.queues) - len(counts))
    return [BlockedQueueOut(queue_name=q.name, stranded_workflows=q.stranded, enqueued=n, enqueued_capped=capped)
            for q, (n, capped) in zip(got.queues, counts)]


async def _recover(ctx: RestContext, request: Request[Any, Any, Any], org: str, app: str, executor_ids: list[str],
                   *, force: bool) -> list[dict[str, Any]]:
    """Recovers each version's executors with one HEALTHY executor of that version here, one
    recorded action per version; refuses (nothing sent) when any cannot be recovered now."""
    await calling.app_must_exist(ctx, org, app)
    rows = await asyncio.to_thread(all_rows, ctx.db, org=org, app=app)
    plan = plan_recovery(executor_ids, rows, force=force)
    for version, ids in list(plan.groups.items()):
        # The table trails the hub: one back a moment ago is still DISCONNECTED or DEAD there.
        for x in [x for x in ids if ctx.executor_here(org, app, x)]:
            ids.remove(x)
            plan.refused[x] = BACK
        if not ids:
            del plan.groups[version]
    calls = ctx.calls
    for version, ids in plan.groups.items():  # HEALTHY in the table; connected here, now?
        chosen = None
        if calls is not None:
            try:
                chosen = calls.choose(org, app, only_version=version)
            except NoHealthyExecutor:
                pass
        if chosen is None:
            for x in ids:
                plan.refused[x] = (f"no executor of application version {version!r} is connected to this Relay; "
                                   "fork its workflows (cancelled, then forked from their last step on the "
                                   "latest version) or cancel them")
    if plan.refused:
        advice = " Fork is the fix where no executor of the version is connected." \
            if any("fork its" in why for why in plan.refused.values()) else ""
        raise Refused(f"{len(plan.refused)} of {len(set(executor_ids))} executors cannot be recovered now; "
                      f"nothing was sent.{advice}", plan.refused)
    assert calls is not None
    done = []
    for version, ids in plan.groups.items():
        action_id = await asyncio.to_thread(
            ctx.relay.record_action_requested, org, app, request_id=new_id(), operation="strandedRecover",
            actor=recording.actor_of(request), source=recording.source_of(request), target_type=EXECUTOR,
            target_ids=ids, parameters={"appVersion": version, "executorCount": len(ids), "force": force})
        outcome, message, executor_id = Outcome.FAILED, None, None
        try:
            if back := [x for x in ids if ctx.executor_here(org, app, x)]:  # since the check above
                message = f"{', '.join(back)}: {BACK}"
                raise Refused(f"{len(back)} of {len(ids)} executors of version {version!r} came back; nothing "
                              f"was sent for them" + (f" (recovered before: {done})" if done else ""),
                              {x: BACK for x in back})
            await calls.call(org, app, lambda rid, ids=ids: c.RecoveryRequest(request_id=rid, executor_ids=ids),
                             timeout=ctx.call_timeout.total_seconds(), only_version=version)
            outcome = Outcome.SUCCEEDED
        except NoHealthyExecutor as e:
            outcome, message = Outcome.NO_HEALTHY_EXECUTOR, e.detail
            raise
        except ExecutorTimedOut as e:
            outcome, message, executor_id = Outcome.TIMED_OUT, e.detail, e.executor_id
            raise
        except (ExecutorGone, ReplyTooLarge) as e:  # sent, and no answer will come: it may have started them
            unknown = calling.MayHaveActed(e)
            outcome, message, executor_id = Outcome.UNKNOWN, unknown.detail, e.executor_id
            raise unknown from None
        except CallFailed as e:
            message, executor_id = e.detail, getattr(e, "executor_id", None)
            raise
        except Refused:
            raise
        except BaseException as e:  # cancelled (client gone) or a bug: the action still ends on record
            message = f"relay: {type(e).__name__}"
            raise
        finally:
            await asyncio.shield(calling.completed(
                ctx, action_id, outcome, message, executor_id,
                {"executorCount": len(ids)} if outcome == Outcome.SUCCEEDED else None))
        done.append({"appVersion": version, "executorIds": ids})
    return done
