"""The hub's outbox: executor transitions on their way to the store."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from relay_es.adapters.failures import is_store_error
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
      batch is retried with backoff until it is recorded (or the outbox is
      closed: :meth:`close`); none is lost while Relay runs, and the sockets --
      whose pings uvicorn answers without us -- stay up.
    * **Never dropped on a bug**: a batch that fails with anything but a store
      outage is a bug. Its transitions are tried one by one; each that fails
      alone is logged with its traceback once, counted (``errors``), kept at
      the head of its executor's queue and retried with its own backoff
      (``BUG_BACKOFF``, doubling to ``BUG_BACKOFF_MAX``), while the other
      executors' transitions keep flowing.

    The writer is a thread of its own (``relay-outbox``), started at the first
    transition: it goes from one batch to the next without the event loop.
    Until 2026-12-05 it was a task on the loop that ran each batch on the
    command pool and awaited it, and in a storm of handshakes the loop took
    up to 1.3 s to resume it after a batch of 1,000 had been recorded in
    0.16 s: the Connected events of a storm waited for the storm to end
    (ADR 10). :meth:`submit` is called on the loop; :meth:`holds` and the
    counters are read from any thread. A writer that ends on an unexpected
    error (none is known) is logged and started again by the next transition.
    """

    BUG_BACKOFF = 1.0
    BUG_BACKOFF_MAX = 60.0

    def __init__(self, relay: Relay, *, max_batch: int = 1000,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.relay = relay
        self.max_batch = max_batch
        self.monotonic = monotonic
        self._queues: dict[Any, deque[Any]] = {}
        self._stuck: dict[Any, tuple[float, float]] = {}  # key -> (retry at, backoff) of a head that hit a bug
        self._work = threading.Condition()  # guards the queues and the stuck heads; wakes the writer
        self._thread: threading.Thread | None = None
        self._closed = False
        self.retries = 0
        self.batches = 0
        self.errors = 0  # transitions that failed for a reason other than the store being away
        self.queued = 0  # transitions waiting (or being written); the hub caps new handshakes on it

    def __len__(self) -> int:
        return self.queued

    def holds(self, key: Any) -> bool:
        """Transitions of this executor are waiting (or being written)."""
        return key in self._queues

    def stuck(self) -> list[Any]:
        """Executors whose oldest transition failed on a bug and waits to be retried."""
        with self._work:
            return list(self._stuck)

    def submit(self, key: Any, op: Any) -> None:
        with self._work:
            self._queues.setdefault(key, deque()).append(op)
            self.queued += 1
            self._work.notify()
            if not self._closed and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._writer, name="relay-outbox", daemon=True)
                self._thread.start()

    def close(self, timeout: float = 5.0) -> bool:
        """The writer stops after the batch it is recording (a store away is not waited for
        any longer); what is still queued is not recorded. Whether the writer ended within
        ``timeout`` seconds (a batch blocked on the store may outlast it: logged). Idempotent."""
        with self._work:
            self._closed = True
            self._work.notify_all()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the outbox's writer is still recording a batch %gs after it was closed", timeout)
            return False
        return True

    async def drained(self, timeout: float) -> bool:
        """Whether every queued transition was recorded within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._queues and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not self._queues

    # ------------------------------------------------------------- the writer
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

    def _next(self) -> list[tuple[Any, deque[Any]]] | None:
        """The next batch's heads, once there is one; None once closed."""
        with self._work:
            while not self._closed:
                heads = self._heads(self.monotonic())
                if heads:
                    return heads
                if not self._stuck:
                    self._work.wait()
                else:  # only stuck executors: wait for the first retry, or for new work
                    self._work.wait(max(0.01, min(at for at, _ in self._stuck.values()) - self.monotonic()))
            return None

    def _pause(self, seconds: float) -> None:
        with self._work:
            self._work.wait_for(lambda: self._closed, timeout=seconds)

    def _writer(self) -> None:
        try:
            self._write()
        except BaseException:  # the thread ends here; what it held stays queued
            log.critical("the outbox's writer stopped on an unexpected error; the next transition starts "
                         "another (%d waiting)", self.queued, exc_info=True)

    def _write(self) -> None:
        delay = 0.2
        while (heads := self._next()) is not None:
            try:
                self.relay.execute([q[0] for _, q in heads])
            except Exception as e:
                if not is_store_error(e):
                    self._one_by_one(heads)
                    continue
                self.retries += 1
                log.warning("store unavailable recording %d transition(s) (%s: %s); retrying in %.1fs",
                            len(heads), e.__class__.__name__, e, delay)
                self._pause(delay)
                delay = min(delay * 2, 1.0)  # resume within a second of the store's return
                continue
            delay = 0.2
            with self._work:
                self.batches += 1
                for key, queue in heads:
                    self._done(key, queue)

    def _one_by_one(self, heads: list[tuple[Any, deque[Any]]]) -> None:
        """A batch failed on a bug: record what can be, alone; keep what cannot."""
        for key, queue in heads:
            if self._closed:
                return
            try:
                self.relay.execute([queue[0]])
            except Exception as e:
                if is_store_error(e):  # the store went away meanwhile: the writer's loop retries it all
                    return
                self.errors += 1
                with self._work:
                    previous = self._stuck.get(key)
                    backoff = self.BUG_BACKOFF if previous is None else min(previous[1] * 2, self.BUG_BACKOFF_MAX)
                    self._stuck[key] = (self.monotonic() + backoff, backoff)
                if previous is None:  # the traceback once per stuck transition, not once per retry
                    log.exception("recording a transition of %s failed (a bug, not an outage); "
                                  "kept and retried every %g-%gs", key, self.BUG_BACKOFF, self.BUG_BACKOFF_MAX)
                else:
                    log.error("a transition of %s still fails (%s: %s); retrying in %gs", key,
                              e.__class__.__name__, e, backoff)
                continue
            with self._work:
                self.batches += 1
                self._done(key, queue)
