"""The process manager's window on the sockets: recovery and retention conversations.

:class:`Dispatcher` is the :class:`~relay_es.engine.process_manager.Dispatcher` of a Relay
process. The process manager calls it from its own thread; every conversation runs on the
event loop, with the executor's :class:`~relay_es.adapters.hub.connection.Connection`:

* **recovery** (ADR 15): ``exist_pending_workflows`` then ``recovery``, both within the one
  deadline the process manager gave the attempt; an attempt it expired sends nothing more
  (a :class:`~relay_es.adapters.hub.connection.Guard` checked again by the socket right
  before it writes). The outcome goes into the process manager's
  :class:`~relay_es.engine.process_manager.Answers` inbox; there is none when Relay's shutdown
  closed the target's socket (the attempt stays outstanding, as after a kill: ADR 3).
* **retention**: the process manager's timer hands over an application's plan; it is sent to
  the application's newest registered connection, recorded before it is sent and its answer
  (or the lack of one) recorded after. A store away fails every application's round alike: told as an
  outage (:class:`~relay_es.adapters.failures.OutageLog`), only a bug with its traceback.
* **metrics**: the process manager's timer names an application; its
  :class:`~relay_es.adapters.hub.harvest.Harvest` collects what is due.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.adapters.failures import OutageLog
from relay_es.adapters.hub.calls import observed_call
from relay_es.adapters.hub.connection import Connection, ConnectionLost, Guard
from relay_es.adapters.hub.harvest import Harvest
from relay_es.adapters.hub.outbox import Outbox
from relay_es.adapters.hub.registry import Registry
from relay_es.adapters.uvicorn_ws import Withdrawn
from relay_es.domain.ids import new_id
from relay_es.engine.process_manager import Answers, RecoveryOutcome, RecoveryRequest
from relay_es.engine.service import Relay
from relay_es.protocol import messages as m
from relay_es.protocol import retention
from relay_es.protocol.limits import printable

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(
        self,
        relay: Relay,
        registry: Registry,
        outbox: Outbox,
        run: Callable[..., Awaitable[Any]],
        *,
        answers: Answers,
        response_timeout: float,
        monotonic: Callable[[], float],
        crash_point: Callable[[str], None] = lambda name: None,
        harvest: Harvest | None = None,
        observe: Callable[[str, str, float], None] | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """``run``: how a store command is run off the loop. ``answers``: where recovery
        outcomes go. ``response_timeout``: an attempt without a deadline of its own, and a
        retention answer. ``monotonic``: the process manager's clock (deadlines are on it).
        ``crash_point``: the fault suite's hook (``relay_es.adapters.faults.crash_point``).
        ``harvest``: collects the metrics (None: :meth:`collect_metrics` does nothing).
        ``observe(type, outcome, seconds)``: told of every request of a recovery or retention
        conversation once it ended, as :class:`~relay_es.adapters.hub.calls.Calls` tells of the
        API's (the metrics). ``stopping``: whether Relay's shutdown has begun (the hub's ``shutting_down``):
        a recovery whose target's socket then closes, or is closed, is left outstanding, not failed."""
        self.relay = relay
        self.registry = registry
        self.outbox = outbox
        self.run = run
        self.answers = answers
        self.response_timeout = response_timeout
        self.monotonic = monotonic
        self.crash_point = crash_point
        self.harvest = harvest
        self.observe = observe or (lambda kind, outcome, seconds: None)
        self.stopping = stopping
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Recovery attempts the process manager expired (see Guard); guarded by _dispatch_lock.
        self._dispatch_lock = threading.Lock()
        self._expired: set[str] = set()
        self._recovering: set[str] = set()
        self.retention_outage = OutageLog(log, "retention", monotonic=monotonic,  # on the loop only
                                          then="tried again next round")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Conversations run on ``loop`` from now on."""
        self.loop = loop

    def stop(self) -> None:
        """Cancels the conversations under way (on the loop)."""
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _submit(self, coro: Awaitable[Any]) -> None:
        """From any thread: runs ``coro`` on the loop."""
        assert self.loop is not None, "dispatcher not started"
        self.loop.call_soon_threadsafe(self._spawn, coro)

    # ------------------------------------------------------------- recovery
    def is_connected(self, org: str, app: str, executor_id: str) -> bool:
        """A registered, open socket for this executor exists here, or transitions of it are
        still on their way to the store (while Postgres restarts, a reconnect may wait in the
        outbox). Either way the store's view of it is stale, so it must not be declared dead."""
        key = (org, app, executor_id)
        if self.outbox.holds(key):
            return True
        conn = self.registry.executor(key)
        return conn is not None and conn.registered

    def is_gone(self, org: str, app: str, executor_id: str) -> bool:
        """No registered, open socket of this executor here (it dropped; its Disconnected may
        not have been followed by the process manager yet): not a recovery target."""
        conn = self.registry.executor((org, app, executor_id))
        return conn is None or conn.closed or not conn.registered

    def admissions(self) -> int:
        """Executor sockets admitted here since start (from any thread: one int read)."""
        return self.registry.admitted

    def send_recovery(self, request: RecoveryRequest) -> None:
        """From the process manager's thread: the attempt starts on the loop."""
        assert self.loop is not None, "dispatcher not started"
        with self._dispatch_lock:
            self._recovering.add(request.request_id)
        self._submit(self._recover(request))

    def expire(self, request_id: str) -> None:
        """From the process manager's thread: the attempt's deadline came and its failure is
        about to be recorded. Once this returns, no frame of it is being written or will be."""
        with self._dispatch_lock:
            if request_id in self._recovering:
                self._expired.add(request_id)

    async def _recover(self, req: RecoveryRequest) -> None:
        """Asks the target within the attempt's one deadline: nothing is sent
        after it, whatever the process manager's thread is doing."""
        deadline = req.deadline if req.deadline is not None else self.monotonic() + self.response_timeout
        timeout = f"no answer within {self.response_timeout:g}s"
        guard = Guard(self._dispatch_lock,
                      lambda: req.request_id not in self._expired and self.monotonic() < deadline)
        answer = self.answers.put
        with self._dispatch_lock:
            self._recovering.add(req.request_id)
        try:
            conn = self.registry.executor((req.org, req.app, req.target_executor_id))
            if conn is None or conn.closed or (req.target_connection_id and conn.id != req.target_connection_id):
                if self.stopping():
                    return  # the shutdown closed it (see ConnectionLost below)
                answer(RecoveryOutcome(req.request_id, False, reason=f"target {req.target_executor_id} is not connected"))
                return
            version = req.app_version or ""
            exist = await self._call(
                conn, lambda rid: m.ExistPendingWorkflowsRequest(request_id=rid, executor_id=req.dead_executor_id,
                                                           application_version=version),
                deadline - self.monotonic(), guard,
            )
            if exist.failed:
                answer(RecoveryOutcome(req.request_id, False,
                                       reason=f"exist_pending_workflows failed: {printable(exist.error_message)}"))
                return
            if not getattr(exist, "exist", False):
                answer(RecoveryOutcome(req.request_id, True, pending_found=False))
                return
            recovered = await self._call(
                conn, lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=[req.dead_executor_id]),
                deadline - self.monotonic(), guard,
            )
            self.crash_point("before_answer_recorded")
            if recovered.failed:
                answer(RecoveryOutcome(req.request_id, False, reason="recovery failed: "
                                       + printable(recovered.error_message or "success is not true")))
                return
            answer(RecoveryOutcome(req.request_id, True, pending_found=True))
        except (asyncio.TimeoutError, Withdrawn):
            answer(RecoveryOutcome(req.request_id, False, reason=timeout))
        except ConnectionLost as e:
            if self.stopping():
                # Relay's shutdown closed the socket: the target is not at fault (ADR 3). The dispatch stays
                # outstanding, and the next Relay fails it at its response timeout and tries again, as after a kill.
                log.info("recovery %s of %s left outstanding: Relay is shutting down", req.request_id,
                         req.dead_executor_id)
                return
            answer(RecoveryOutcome(req.request_id, False, reason=f"target connection lost: {e}"))
        finally:
            with self._dispatch_lock:
                self._recovering.discard(req.request_id)
                self._expired.discard(req.request_id)

    async def _call(self, conn: Connection, make: Callable[[str], m.Request], timeout: float,
                    guard: Guard | None = None) -> m.Response:
        """``conn.call``, observed as the API's calls are (:func:`~relay_es.adapters.hub.calls.observed_call`)."""
        return await observed_call(conn, make, timeout, self.observe, guard)

    # -------------------------------------------------------------- metrics
    def collect_metrics(self, org: str, app: str) -> None:
        """From the process manager's thread: the collection runs on the loop."""
        if self.harvest is not None:
            self._submit(self.harvest.collect(org, app))

    # ------------------------------------------------------------ retention
    def send_retention(self, org: str, app: str, plan: retention.RetentionPlan) -> None:
        """From the process manager's thread: the plan goes to the application's newest
        registered connection here (none: nothing is sent, nothing recorded)."""
        self._submit(self._retain(org, app, plan))

    async def _retain(self, org: str, app: str, plan: retention.RetentionPlan) -> None:
        conn = self.registry.newest(org, app)
        if conn is None:
            log.debug("no connection of %s/%s to send retention to", org, app)
            return
        await self._send_retention(conn, plan)

    async def _send_retention(self, conn: Connection, p: retention.RetentionPlan) -> None:
        """Recorded first, then sent; the answer is recorded when it comes (or does not)."""
        rid = new_id()
        try:  # cut again from the settings the record reads: a change since the timer fired holds
            recorded = await self.run(self.relay.record_retention_plan, conn.org, conn.app, request_id=rid,
                                      target_executor_id=conn.executor_id or "", plan=p)
        except Exception as e:
            if not self.retention_outage.store_failed(f"failed recording a round for {conn.org}/{conn.app} "
                                                      "(not sent)", e):
                log.exception("could not record a retention round for %s/%s; not sending it", conn.org, conn.app)
            return
        if recorded is None:
            return  # the settings want no retention any more (nothing written: an outage is not over)
        self.retention_outage.worked("records on the store again")
        p = recorded
        try:
            answer = await self._call(conn, lambda _: m.RetentionRequest(request_id=rid, body=p.body()),
                                      self.response_timeout)
            # the executor's own text, on its way to the store: escaped and bounded like any other
            success, error = not answer.failed, None if answer.error_message is None else printable(answer.error_message)
        except asyncio.TimeoutError:
            success, error = False, f"no answer within {self.response_timeout:g}s"
        except ConnectionLost as e:
            success, error = False, f"connection lost: {e}"
        try:
            await self.run(self.relay.record_retention_answered, conn.org, conn.app, request_id=rid,
                           success=success, error=error)
        except Exception as e:
            if not self.retention_outage.store_failed(f"failed recording the answer of {conn.org}/{conn.app} "
                                                      "(lost)", e):
                log.exception("could not record the retention answer of %s/%s", conn.org, conn.app)
            return
        self.retention_outage.worked("records on the store again")
