"""Autoscaling recommendations, Conductor's ``getAutoscale``, ``getAutoscalingPolicy``,
``setAutoscalingPolicy`` and ``deleteAutoscalingPolicy`` (``docs/autoscaling.md``).

The policy is the application's (an event of its stream, :class:`~relay_es.aggregates.application.Application`):
it survives a restart and goes with the application. Setting it asks a healthy executor for the
queues first: the queue must be registered, not partitioned and have a worker concurrency
(:func:`relay_es.engine.autoscale.unusable`), else 422 and nothing is stored; no executor is a 503.
Setting and deleting are in the audit log (target: the application). Deleting an absent policy
is a 204, as Conductor's.

``getAutoscale`` (404 without a policy) asks one executor of the application, chosen once as
every call is, at once for its queues, its registered versions and its backlog on the policy's
queue per version (``get_workflow_aggregates``: ENQUEUED and PENDING, grouped by application
version), and answers :func:`relay_es.engine.autoscale.recommend`'s ``QueueAutoscale`` per version;
``observedAt`` is when the answers were in. The three reads go to that executor alone, so one that
does not answer fails only the polls it was chosen for. A count or a queue's number out of its
format is a bad reply (502); backlogs and executors stop at ``INT64_MAX``. Relay recommends; it
scales nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Controller, Request, Response, delete, get, put
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.status_codes import HTTP_204_NO_CONTENT
from msgspec import UNSET

from relay_es.adapters.hub.calls import NoCapableExecutor
from relay_es.adapters.rest import calling, openapi, releases
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.queues import sent_as
from relay_es.adapters.rest.recording import recorded
from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout
from relay_es.domain.errors import InvalidSetting
from relay_es.engine import autoscale
from relay_es.engine.calls import NoHealthyExecutor
from relay_es.protocol import catalogue as c


def policy_of(b: m.AutoscalePolicy) -> AutoscalingPolicy:
    """The body as Relay's policy (:class:`InvalidSetting`, a 422, for a value out of bounds)."""
    r = b.rollout
    rollout = None if r is UNSET else Rollout(
        None if r.max_old_application_versions is UNSET else r.max_old_application_versions,
        None if r.max_executors_for_old_application_versions is UNSET else r.max_executors_for_old_application_versions)
    return AutoscalingPolicy(b.queue, rollout).check()


def policy_out(p: AutoscalingPolicy) -> m.AutoscalePolicy:
    r = p.rollout
    rollout = UNSET if r is None else m.RolloutPolicy(
        max_old_application_versions=UNSET if r.max_old_versions is None else r.max_old_versions,
        max_executors_for_old_application_versions=UNSET if r.max_old_executors is None else r.max_old_executors)
    return m.AutoscalePolicy(queue=p.queue, rollout=rollout)


def parameters_of(p: AutoscalingPolicy) -> dict[str, Any]:
    """The policy as the audit log records it (scalars, Conductor's field names; ``rollout`` says
    whether one was given)."""
    out: dict[str, Any] = {"queue": p.queue, "rollout": p.rollout is not None}
    if p.rollout is not None:
        out |= {k: v for k, v in (("maxOldApplicationVersions", p.rollout.max_old_versions),
                                  ("maxExecutorsForOldApplicationVersions", p.rollout.max_old_executors))
                if v is not None}
    return out


def queue_of(answer: c.ListQueuesResponse, name: str) -> autoscale.Queue | None:
    """The queue ``name`` of an executor's list, its numbers checked as ``listQueues`` checks them
    (:class:`~relay_es.adapters.rest.conductor.mapping.ExecutorReplyError`, a 502, for one out of bounds)."""
    for q in answer.output or ():
        if q.name == name:
            queue = mapping.queue_out(q)
            return autoscale.Queue(queue.name, queue.worker_concurrency, queue.partition_queue)
    return None


def backlog_of(answer: c.GetWorkflowAggregatesResponse) -> dict[str | None, int]:
    """ENQUEUED and PENDING workflows by application version (None: enqueued without one). Each
    row's count is an ``int64`` from 0 (else :class:`~relay_es.adapters.rest.conductor.mapping.ExecutorReplyError`,
    a 502); a version's sum stops at ``INT64_MAX``."""
    depth: dict[str | None, int] = {}
    for row in answer.output or ():
        version = (row.group or {}).get("application_version")
        n = mapping.whole_number("count", row.count)
        if n is not None:
            depth[version] = min(m.INT64_MAX, depth.get(version, 0) + n)
    return depth


async def _policy(ctx: RestContext, org: str, app: str) -> AutoscalingPolicy | None:
    return await asyncio.to_thread(ctx.relay.autoscaling_policy, org, app)  # UnknownApplication: 404


async def _ask(ctx: RestContext, org: str, app: str, request: Any, only_executor: str | None = None) -> Any:
    """Always after :func:`_policy`, which read the application's stream (a 404 for one absent).
    An executor's error is a 500, whatever it says: a 404 here means "no policy" or "no application".
    ``only_executor``: that executor answers, or none does (:func:`calling.ask`)."""
    return await calling.ask(ctx, org, app, sent_as(request), failed_status=500, app_checked=True,
                             only_executor=only_executor)


def _one_executor(ctx: RestContext, org: str, app: str, *requests: Any) -> str | None:
    """The executor all the reads of one ``getAutoscale`` go to, chosen as every call is
    (:meth:`~relay_es.adapters.hub.calls.Calls.choose`) among those whose SDK release answers all of
    ``requests`` (:func:`releases.needs_of`: of executors on mixed releases, not one too old for the
    queues' messages); None when there is none (the reads then answer 503, or 501, as any call
    without an executor able to take it)."""
    if ctx.calls is None:
        return None
    try:
        return ctx.calls.choose(org, app, needs=releases.both(*map(releases.needs_of, requests))).executor_id
    except (NoHealthyExecutor, NoCapableExecutor):
        return None


class AutoscalingController(Controller):
    path = APP

    @get("/autoscaling-policy", operation_id="getAutoscalingPolicy", summary="Get autoscaling policy",
         description="The application's stored autoscaling policy; 404 when none is set.")
    async def get_autoscaling_policy(self, org: FromPath[str], app: FromPath[str],
                                     ctx: Context) -> Response[m.PolicyOutputBody]:
        policy = await _policy(ctx, org, app)
        if policy is None:
            raise NotFoundException(detail=f"application {app!r} has no autoscaling policy")
        return calling.answer(m.PolicyOutputBody(policy=policy_out(policy)))

    @put("/autoscaling-policy", opt=openapi.body(m.AutoscalePolicy),
         operation_id="setAutoscalingPolicy", summary="Set autoscaling policy",
         description="Checks the queue with a healthy executor (registered, not partitioned, with a worker "
                     "concurrency) and stores the policy, echoing it.")
    async def set_autoscaling_policy(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                                     ctx: Context) -> Response[m.PolicyOutputBody]:
        b: m.AutoscalePolicy = await calling.body(request)
        policy = policy_of(b)
        await _policy(ctx, org, app)  # 404 before an executor is asked
        queues = await _ask(ctx, org, app, mapping.list_queues_request(request_id=""))
        why = autoscale.unusable(queue_of(queues, policy.queue))
        if why is not None:
            raise InvalidSetting("queue", f"queue {policy.queue!r} {why}: it cannot drive autoscaling (a queue "
                                          "registered in the system database, e.g. DBOS.register_queue(name, "
                                          "worker_concurrency=N), not partitioned)")

        def store() -> None:
            with recorded(ctx, request, org, app, operation="setAutoscalingPolicy", target_type="application",
                          target_ids=[app], parameters=parameters_of(policy)):
                ctx.relay.set_autoscaling_policy(org, app, policy)

        await asyncio.to_thread(store)
        return calling.answer(m.PolicyOutputBody(policy=policy_out(policy)))

    @delete("/autoscaling-policy", operation_id="deleteAutoscalingPolicy", status_code=HTTP_204_NO_CONTENT,
            sync_to_thread=True, summary="Delete autoscaling policy",
            description="Clears the stored policy; deleting an absent one succeeds.")
    def delete_autoscaling_policy(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                                  ctx: Context) -> None:
        with recorded(ctx, request, org, app, operation="deleteAutoscalingPolicy", target_type="application",
                      target_ids=[app]):
            ctx.relay.clear_autoscaling_policy(org, app)  # notes whether there was one

    @get("/autoscale", operation_id="getAutoscale", summary="Get autoscaling recommendation",
         description="Executors each version of the application needs now, from its backlog on the policy's queue; "
                     "404 when no policy is set.")
    async def get_autoscale(self, org: FromPath[str], app: FromPath[str],
                            ctx: Context) -> Response[list[m.QueueAutoscale]]:
        policy = await _policy(ctx, org, app)
        if policy is None:
            raise NotFoundException(detail=f"application {app!r} has no autoscaling policy")
        backlog_request = c.GetWorkflowAggregatesRequest(request_id="", body=c.WorkflowAggregatesBody(
            group_by_application_version=True, select_count=True, status=list(autoscale.BACKLOG),
            queue_name=[policy.queue]))
        queues_request = mapping.list_queues_request(request_id="")
        versions_request = mapping.list_versions_request(request_id="")
        executor = _one_executor(ctx, org, app, queues_request, versions_request, backlog_request)
        queues, versions, backlog = await asyncio.gather(
            _ask(ctx, org, app, queues_request, executor),
            _ask(ctx, org, app, versions_request, executor),
            _ask(ctx, org, app, backlog_request, executor))
        observed_at = int(time.time() * 1000)
        depth = backlog_of(backlog)
        known = [autoscale.Version(v.version_name, v.created_at or 0, v.version_timestamp or 0)
                 for v in versions.output or ()]
        recs = autoscale.recommend(policy, known, queue_of(queues, policy.queue), depth)
        # int64, as the reference has them: the latest's backlog adds those enqueued without a version
        return calling.answer([m.QueueAutoscale(
            application_version=r.version, is_latest=r.is_latest, desired_executors=min(r.desired, m.INT64_MAX),
            queue_depth=min(r.backlog, m.INT64_MAX), observed_at=observed_at,
            queue_name=UNSET if r.queue is None else r.queue) for r in recs])
