"""Store commands off the event loop: the hub's small thread pool.

Every store call the hub makes (admission, the outbox's writes, audit entries, retention
records) goes through :meth:`CommandPool.run`, so that the event loop never waits on a
transaction.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class CommandPool:
    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relay-cmd")

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a worker thread, awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def shutdown(self, wait: bool = True) -> None:
        """No new commands; with ``wait``, returns once those running are done. Idempotent."""
        self._executor.shutdown(wait=wait, cancel_futures=False)
