"""Store commands off the event loop (``relay_es.adapters.hub.pool``)."""

from __future__ import annotations

import asyncio
import threading

from relay_es.adapters.hub import CommandPool


def test_a_command_runs_on_a_worker_thread_and_its_result_is_awaited() -> None:
    pool = CommandPool(2)

    def command(x: int, *, y: int) -> tuple[int, str]:
        return x + y, threading.current_thread().name

    async def main() -> tuple[int, str]:
        return await pool.run(command, 1, y=2)

    try:
        total, thread = asyncio.run(main())
    finally:
        pool.shutdown()
        pool.shutdown()  # idempotent
    assert total == 3 and thread.startswith("relay-cmd") and thread != threading.current_thread().name
