"""The alert manager's window on the sockets and the network (its
:class:`~relay_es.engine.alerting.AlertSender`).

Everything runs on the event loop; the alert manager calls from its own thread and is answered
through :meth:`~relay_es.engine.alerting.AlertManager.probed` and
:meth:`~relay_es.engine.alerting.AlertManager.delivered`, always, whatever happens:

* **probes** ask one executor of the watched application (through :class:`Calls`, observed like
  the API's calls): ``WorkflowFailure``, ``list_workflows`` of ``ERROR`` workflows completed in
  the window, or since the rule's last probe answered when that is earlier (or gave up after too
  many recovery attempts; of the rule's workflow, at most ``threshold``, no inputs or outputs);
  ``SlowQueue``, ``list_queued_workflows`` of the oldest ``ENQUEUED`` workflow created before the
  threshold (on the rule's queue);
* **deliveries** send the ``alert`` message to one executor of the receiving application (the
  SDK calls its alert handler; an error it answers is a failed attempt), or POST to a webhook
  (:mod:`relay_es.adapters.webhooks`). The alert manager hands over at most ``in_flight``
  attempts at once (:class:`~relay_es.engine.alerting.AlertTiming`); the webhook client holds as
  many connections, and its posts as many slots, so an attempt never waits in httpx's pool (where
  its 10 s would run while it is not sent) and the pool's queue never grows on the event loop. Its
  resolver (:class:`~relay_es.adapters.webhooks.Resolver`) has as many threads, and a post answers
  (freeing its slot, here and in the alert manager) only once its host's lookup has returned: no
  lookup waits for a thread, and one that hangs holds its slot as a receiver that hangs does, until
  the resolver gives up (not cut at 10 s: a lookup cannot be).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any

import httpx

from relay_es.adapters import webhooks
from relay_es.adapters.hub.calls import Calls
from relay_es.domain.alerting import AlertingRule
from relay_es.engine.alerting import AlertManager, AlertTiming, Delivered, Delivery, Probed
from relay_es.engine.calls import CallFailed, NoHealthyExecutor
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import printable

log = logging.getLogger(__name__)

IDS_IN_ALERT = 10  # workflow ids an alert's metadata names
FAILURES_SCANNED = 1000  # failures a WorkflowFailure probe reads when it looks back further than its window
FAILED = ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")  # a workflow that ended without its result


class AlertSender:
    def __init__(self, calls: Calls, *, timeout: float, egress: webhooks.Egress = webhooks.Egress(),
                 in_flight: int = AlertTiming.max_in_flight) -> None:
        """``timeout``: one executor call. ``egress``: where webhooks may go. ``in_flight``: webhook
        posts at once (the alert manager's bound). :attr:`manager` is set before the first call."""
        self.calls = calls
        self.timeout = timeout
        self.egress = egress
        self.in_flight = in_flight
        self.manager: AlertManager | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._posts = asyncio.Semaphore(in_flight)  # a post's clock starts once it holds one
        self.resolver = webhooks.Resolver(in_flight)  # a thread for each post at once
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._client is not None:
            await self._client.aclose()
        self.resolver.close()

    def _submit(self, coro: Awaitable[Any]) -> None:
        assert self.loop is not None, "alert sender not started"
        self.loop.call_soon_threadsafe(self._spawn, coro)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --------------------------------------------------------------- probes
    def probe(self, rule: AlertingRule, now: datetime, since: datetime | None = None) -> None:
        self._submit(self._probe(rule, now, since))

    async def _probe(self, rule: AlertingRule, now: datetime, since: datetime | None) -> None:
        assert self.manager is not None
        try:
            answer = await self._ask(rule, now, since)
        except CallFailed as e:
            answer = Probed(rule.id, error=printable(str(e)))
        except Exception as e:  # noqa: BLE001  # the manager must hear back, whatever happened
            log.exception("probe of alerting rule %s failed", rule.id)
            answer = Probed(rule.id, error=f"relay: {type(e).__name__}")
        self.manager.probed(answer)

    async def _ask(self, rule: AlertingRule, now: datetime, since: datetime | None) -> Probed:
        p = rule.parameters
        if rule.rule_type == "WorkflowFailure":
            window, threshold = p["windowSecs"], p["threshold"]
            start = now - timedelta(seconds=window)
            further = since is not None and since < start  # the last probe answered is further back: from there
            if further:
                start = since  # type: ignore[assignment]
            body = c.ListWorkflowsBody(status=list(FAILED), completed_after=start.isoformat(),
                                       workflow_name=p.get("workflowName"),
                                       limit=max(threshold, FAILURES_SCANNED) if further else threshold,
                                       sort_desc=True, load_input=False, load_output=False)
            got = await self.calls.call(rule.org, rule.app, lambda rid: c.ListWorkflowsRequest(request_id=rid, body=body),
                                        timeout=self.timeout)
            # An SDK that ignores completed_after (Python dbos of 1.x and early 2.x read only the filters they
            # knew) answers the newest failures of all time: those older than the span are no failures of it.
            rows = _completed_since(got.output or [], start)
            if further:  # threshold failures within windowSecs of one another, anywhere in the longer span
                rows = _densest(rows, window)
            if len(rows) < threshold:
                return Probed(rule.id)
            which = f" of {p['workflowName']}" if p.get("workflowName") else ""
            when = f"within {window} s of one another" if further else f"in the last {window} s"
            return Probed(rule.id, True, f"{len(rows)} workflow(s){which} of {rule.app} failed {when}",
                          {"failedWorkflows": str(len(rows)), "windowSecs": str(window),
                           "workflowName": p.get("workflowName") or "",
                           "workflowIds": ",".join(printable(w.WorkflowUUID) for w in rows[:IDS_IN_ALERT])})
        if rule.rule_type == "SlowQueue":
            threshold = p["thresholdSecs"]
            body = c.ListWorkflowsBody(status="ENQUEUED", end_time=(now - timedelta(seconds=threshold)).isoformat(),
                                       queue_name=p.get("queueName"), limit=1, sort_desc=False,
                                       load_input=False, load_output=False)
            got = await self.calls.call(rule.org, rule.app,
                                        lambda rid: c.ListQueuedWorkflowsRequest(request_id=rid, body=body),
                                        timeout=self.timeout)
            rows = got.output or []
            if not rows:
                return Probed(rule.id)
            w = rows[0]
            waited = _age(w.CreatedAt, now)
            queue = printable(w.QueueName or p.get("queueName") or "")
            return Probed(rule.id, True, f"workflow {printable(w.WorkflowUUID)} has been ENQUEUED on queue {queue!r} "
                                         f"of {rule.app} for {waited} (threshold {threshold} s)",
                          {"queueName": queue, "workflowId": printable(w.WorkflowUUID), "thresholdSecs": str(threshold),
                           "enqueuedFor": waited})
        return Probed(rule.id, error=f"{rule.rule_type} is not a checked rule")

    # ----------------------------------------------------------- deliveries
    def deliver(self, delivery: Delivery) -> None:
        self._submit(self._deliver(delivery))

    async def _deliver(self, d: Delivery) -> None:
        assert self.manager is not None
        try:
            if d.webhook is None:
                answer = await self._to_app(d)
            else:
                async with self._posts:
                    posted = await webhooks.post(self._webhook_client(), d, d.webhook, self.egress, resolver=self.resolver)
                answer = Delivered(d, posted.ok, posted.detail, posted.retry)
        except Exception as e:  # noqa: BLE001  # the manager must hear back, whatever happened
            log.exception("delivery of alert %s on %s failed", d.alert_id, d.channel)
            answer = Delivered(d, False, f"relay: {type(e).__name__}")
        self.manager.delivered(answer)

    def _webhook_client(self) -> httpx.AsyncClient:
        """One client for every webhook, with a connection for each post at once: none waits in its pool."""
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False, limits=httpx.Limits(
                max_connections=self.in_flight, max_keepalive_connections=self.in_flight))
        return self._client

    async def _to_app(self, d: Delivery) -> Delivered:
        executor = ""

        def chosen(executor_id: str) -> None:
            nonlocal executor
            executor = executor_id

        try:
            await self.calls.call(d.org, d.receiving_app, lambda rid: c.AlertRequest(
                request_id=rid, name=d.rule_type, message=d.message, metadata=dict(d.metadata)),
                timeout=self.timeout, chosen=chosen)
        except NoHealthyExecutor:
            return Delivered(d, False, f"application {d.receiving_app} has no HEALTHY executor")
        except CallFailed as e:
            return Delivered(d, False, printable(f"executor {executor}: {e}"))
        return Delivered(d, True, f"executor {executor} handled it")


def _completed_since(rows: list[Any], start: datetime) -> list[Any]:
    """The rows not known to have completed before ``start`` (by ``CompletedAt``, else ``UpdatedAt``:
    epoch milliseconds); a row with neither time readable is the executor's to have filtered."""
    cutoff = start.timestamp() * 1000
    out = []
    for w in rows:
        try:
            if int((w.CompletedAt or w.UpdatedAt or "")[:20]) < cutoff:
                continue
        except (ValueError, OverflowError):
            pass
        out.append(w)
    return out


def _densest(rows: list[Any], window: float) -> list[Any]:
    """The most failures completed within ``window`` seconds of one another (by ``CompletedAt``, else
    ``UpdatedAt``: epoch milliseconds), latest first; a row with neither time counts with none."""
    timed = []
    for w in rows:
        try:
            timed.append((int((w.CompletedAt or w.UpdatedAt or "")[:20]), w))
        except (ValueError, OverflowError):
            continue
    timed.sort(key=lambda t: t[0])
    best, lo = (0, 0), 0
    for hi in range(len(timed)):
        while timed[hi][0] - timed[lo][0] > window * 1000:
            lo += 1
        if hi + 1 - lo > best[1] - best[0]:
            best = (lo, hi + 1)
    return [w for _, w in reversed(timed[best[0]:best[1]])]


def _age(created_ms: str | None, now: datetime) -> str:
    try:
        seconds = now.timestamp() - int((created_ms or "")[:20]) / 1000
    except (ValueError, OverflowError):
        return "longer than the threshold"
    return f"{max(0, seconds):.0f} s"
