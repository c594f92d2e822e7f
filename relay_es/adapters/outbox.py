"""The hub's outbox: executor transitions on their way to the store."""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.service import Relay, is_store_error

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
      the sockets -- whose pings uvicorn answers without us -- stay up.
    """

    def __init__(self, relay: Relay, run: Callable[..., Awaitable[Any]], *, max_batch: int = 1000) -> None:
        self.relay = relay
        self.run = run
        self.max_batch = max_batch
        self._queues: dict[Any, deque[Any]] = {}
        self._task: asyncio.Task[Any] | None = None
        self.retries = 0
        self.batches = 0

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def holds(self, key: Any) -> bool:
        """Transitions of this executor are waiting (or being written)."""
        return key in self._queues

    def submit(self, key: Any, op: Any) -> None:
        self._queues.setdefault(key, deque()).append(op)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        delay = 0.2
        while self._queues:
            heads = list(itertools.islice(self._queues.items(), self.max_batch))
            try:
                await self.run(self.relay.execute, [q[0] for _, q in heads])
            except Exception as e:
                if not is_store_error(e):
                    # A bug, not an outage: record what can be, one by one, and say what could not.
                    log.exception("recording %d transition(s) failed", len(heads))
                    for key, queue in heads:
                        try:
                            await self.run(self.relay.execute, [queue[0]])
                        except Exception:
                            if is_store_error(sys.exc_info()[1]):  # the store went away meanwhile
                                break
                            log.exception("dropped a transition of %s that cannot be recorded", key)
                        queue.popleft()
                        if not queue:
                            del self._queues[key]
                    continue
                self.retries += 1
                log.warning("store unavailable recording %d transition(s) (%s: %s); retrying in %.1fs",
                            len(heads), e.__class__.__name__, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)  # resume within a second of the store's return
                continue
            self.batches += 1
            delay = 0.2
            for key, queue in heads:
                queue.popleft()
                if not queue:
                    del self._queues[key]

    async def drained(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._queues and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not self._queues
