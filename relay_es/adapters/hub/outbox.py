"""The hub's outbox: executor transitions on their way to the store."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.adapters.failures import OutageLog, is_store_error
from relay_es.engine.service import Relay

log = logging.getLogger(__name__)


class Outbox:
    """Executor transitions on their way to the store: grouped, ordered, retried.

    * **Grouped**: one writer takes the oldest waiting transition of every
      executor (up to ``max_batch``) and records them in one transaction, so a
      storm of connects costs a handful of commits.
    * **Ordered**: per executor, transitions are recorded in the order they
      happened (one in flight per executor).
    * **Retried**: while the store is unreachable (Postgres restarting) the
      batch is retried with backoff until it is recorded; none is lost, and
      the sockets -- whose pings uvicorn answers without us -- stay up. The
      outage is logged as :class:`~relay_es.adapters.failures.OutageLog` says
      (a line as it starts, one a minute, one as it ends), not at every retry.
    * **Never dropped on a bug**: a batch that fails with anything but a store
      outage is a bug. Its transitions are tried one by one; each that fails
      alone is logged with its traceback once, counted (``errors``), kept at
      the head of its executor's queue and retried with its own backoff
      (``BUG_BACKOFF``, doubling to ``BUG_BACKOFF_MAX``), while the other
      executors' transitions keep flowing.
    """

    BUG_BACKOFF = 1.0
    BUG_BACKOFF_MAX = 60.0

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]], *, max_batch: int = 1000,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.relay = relay
        self.run = run
        self.max_batch = max_batch
        self.monotonic = monotonic
        self._queues: dict[Any, deque[Any]] = {}
        self._stuck: dict[Any, tuple[float, float]] = {}  # key -> (retry at, backoff) of a head that hit a bug
        self._task: asyncio.Task[Any] | None = None
        self._wake = asyncio.Event()
        self.retries = 0
        self.batches = 0
        self.errors = 0  # transitions that failed for a reason other than the store being away
        self.queued = 0  # transitions waiting (or being written); the hub caps new handshakes on it
        self.outage = OutageLog(log, "the hub's outbox", monotonic=monotonic)

    def __len__(self) -> int:
        return self.queued

    def holds(self, key: Any) -> bool:
        """Transitions of this executor are waiting (or being written)."""
        return key in self._queues

    def stuck(self) -> list[Any]:
        """Executors whose oldest transition failed on a bug and waits to be retried."""
        return list(self._stuck)

    def submit(self, key: Any, op: Any) -> None:
        self._queues.setdefault(key, deque()).append(op)
        self.queued += 1
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write())

    def _heads(self, now: float) -> list[tuple[Any, deque[Any]]]:
        out = []
        for key, queue in self._queues.items():
            stuck = self._stuck.get(key)
            if stuck is not None and stuck[0] > now:
                continue
            out.append((key, queue))
            if len(out) >= self.max_batch:
                break
        return out

    def _done(self, key: Any, queue: deque[Any]) -> None:
        queue.popleft()
        self.queued -= 1
        self._stuck.pop(key, None)
        if not queue:
            del self._queues[key]

    async def _write(self) -> None:
        delay = 0.2
        while self._queues:
            self._wake.clear()
            heads = self._heads(self.monotonic())
            if not heads:  # only stuck executors: wait for the first retry, or for new work
                wait = min(at for at, _ in self._stuck.values()) - self.monotonic()
                try:
                    await asyncio.wait_for(self._wake.wait(), max(0.01, wait))
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                await self.run(self.relay.execute, [q[0] for _, q in heads])
            except Exception as e:
                if not is_store_error(e):
                    await self._one_by_one(heads)
                    continue
                self.retries += 1
                self.outage.failed(f"failed recording {len(heads)} transition(s)", e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)  # resume within a second of the store's return
                continue
            self.outage.worked("records on the store again")
            self.batches += 1
            delay = 0.2
            for key, queue in heads:
                self._done(key, queue)

    async def _one_by_one(self, heads: list[tuple[Any, deque[Any]]]) -> None:
        """A batch failed on a bug: record what can be, alone; keep what cannot."""
        for key, queue in heads:
            try:
                await self.run(self.relay.execute, [queue[0]])
            except Exception as e:
                if is_store_error(e):  # the store went away meanwhile: the writer's loop retries it all
                    return
                self.errors += 1
                previous = self._stuck.get(key)
                backoff = self.BUG_BACKOFF if previous is None else min(previous[1] * 2, self.BUG_BACKOFF_MAX)
                if previous is None:  # the traceback once per stuck transition, not once per retry
                    log.exception("recording a transition of %s failed (a bug, not an outage); "
                                  "kept and retried every %g-%gs", key, self.BUG_BACKOFF, self.BUG_BACKOFF_MAX)
                else:
                    log.error("a transition of %s still fails (%s: %s); retrying in %gs", key,
                              e.__class__.__name__, e, backoff)
                self._stuck[key] = (self.monotonic() + backoff, backoff)
                continue
            self.batches += 1
            self._done(key, queue)

    def stop(self) -> int:
        """Ends the writer as the process stops (after :meth:`drained`), before the pool it records on
        is shut down (on which a batch would fail as a bug, with its traceback). What still waits is not
        recorded: how many is logged once, and returned. The next start finds those executors as the log
        has them (ADR 3: an executor HEALTHY there gets a fresh grace)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.queued:
            log.warning("%d executor transition(s) not recorded as Relay stops (the store away)", self.queued)
        return self.queued

    async def drained(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._queues and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not self._queues
