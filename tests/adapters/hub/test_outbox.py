"""The hub's outbox: a transition that fails on a bug is kept, retried with
backoff and never lost, while other executors' transitions keep flowing.
A fake store and a fake monotonic clock; the event loop's own time is not used
for the assertions."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from relay_es.adapters.hub.outbox import Outbox


class FakeStore:
    """``execute`` records ops (strings); an op listed in ``bugs`` raises a
    ValueError (a bug), one in ``outage`` an OSError (the store away)."""

    def __init__(self) -> None:
        self.recorded: list[str] = []
        self.bugs: set[str] = set()
        self.outage = False
        self.calls = 0

    def execute(self, ops: list[str]) -> list[bool]:
        self.calls += 1
        if self.outage:
            raise OSError("connection refused")
        bad = [op for op in ops if op in self.bugs]
        if bad:
            raise ValueError(f"cannot record {bad[0]}")
        self.recorded += ops
        return [True] * len(ops)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def direct(fn: Any, *args: Any) -> Any:
    return fn(*args)


async def eventually(pred: Any, what: str = "") -> None:
    """Lets the writer task run until ``pred()`` holds (it needs a few turns of the loop)."""
    for _ in range(500):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what or pred}")


def test_a_bug_keeps_the_transition_and_others_keep_flowing(caplog: pytest.LogCaptureFixture) -> None:
    store, clock = FakeStore(), Clock()

    async def main() -> None:
        outbox = Outbox(store, direct, monotonic=clock)  # type: ignore[arg-type]
        store.bugs = {"A1"}
        outbox.submit("A", "A1")
        outbox.submit("A", "A2")
        outbox.submit("B", "B1")
        await eventually(lambda: outbox.errors == 1 and store.recorded == ["B1"])
        # B flowed; A's first is kept (with A2 behind it, in order), nothing dropped
        assert store.recorded == ["B1"]
        assert outbox.holds("A") and len(outbox) == 2 and outbox.stuck() == ["A"]
        assert outbox.errors == 1
        # more work for others keeps flowing while A waits for its retry
        outbox.submit("C", "C1")
        await eventually(lambda: store.recorded == ["B1", "C1"])
        # retried with backoff: not before its time...
        calls = store.calls
        clock.t += 0.5
        outbox.submit("D", "D1")
        await eventually(lambda: "D1" in store.recorded)
        assert "A1" not in store.recorded and store.calls == calls + 1  # only D's batch
        # ...and again after it, still failing: counted, backoff doubled, one traceback in all
        clock.t += 1.0
        outbox.submit("E", "E1")
        await eventually(lambda: "E1" in store.recorded)
        assert outbox.errors == 2 and outbox._stuck["A"][1] == 2.0 and outbox.holds("A")
        # the bug is fixed: A's transitions are recorded, in order
        store.bugs = set()
        clock.t += 2.0
        outbox.submit("F", "F1")
        await eventually(lambda: len(outbox) == 0)
        assert store.recorded.index("A1") < store.recorded.index("A2")
        assert sorted(store.recorded) == ["A1", "A2", "B1", "C1", "D1", "E1", "F1"]
        assert len(outbox) == 0 and not outbox.holds("A") and outbox.stuck() == []
        if outbox._task is not None:
            outbox._task.cancel()

    with caplog.at_level(logging.INFO, logger="relay_es.adapters.hub.outbox"):
        asyncio.run(main())
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "A" in tracebacks[0].getMessage()


def test_a_store_outage_is_retried_whole_and_loses_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """And it is told in a line as it starts and one as it ends, not a line a retry (the retries
    within a minute of the first line are counted in the last)."""
    store, clock = FakeStore(), Clock()

    async def main() -> None:
        outbox = Outbox(store, direct, monotonic=clock)  # type: ignore[arg-type]
        store.outage = True
        outbox.submit("A", "A1")
        outbox.submit("B", "B1")
        await eventually(lambda: outbox.retries >= 3)
        assert store.recorded == [] and len(outbox) == 2 and outbox.errors == 0
        store.outage = False
        await eventually(lambda: len(outbox) == 0)
        assert sorted(store.recorded) == ["A1", "B1"]

    with caplog.at_level(logging.INFO, logger="relay_es.adapters.hub.outbox"):
        asyncio.run(main())
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("WARNING", "the hub's outbox failed recording 2 transition(s) on the store (OSError: connection refused); "
                    "retrying"),
        ("INFO", "the hub's outbox records on the store again (2 failures since the last line)"),
    ]


def test_stopped_as_the_process_stops_it_writes_nothing_more_and_says_what_it_left(
        caplog: pytest.LogCaptureFixture) -> None:
    """Relay stopping through an outage (its lease lost): the writer went on after the command pool was
    shut down, and each transition it tried failed as a bug, with chained tracebacks."""
    store, clock = FakeStore(), Clock()

    async def main() -> None:
        outbox = Outbox(store, direct, monotonic=clock)  # type: ignore[arg-type]
        store.outage = True
        outbox.submit("A", "A1")
        outbox.submit("B", "B1")
        await eventually(lambda: outbox.retries >= 1)
        with caplog.at_level(logging.WARNING):
            assert outbox.stop() == 2
        calls = store.calls
        store.outage = False
        for _ in range(50):
            await asyncio.sleep(0.01)
        assert store.calls == calls and store.recorded == [] and outbox.errors == 0

    asyncio.run(main())
    assert "2 executor transition(s) not recorded as Relay stops" in caplog.text


def test_a_runtime_exposes_outbox_errors_stuck_transitions_and_poison_skips(tmp_path, monkeypatch) -> None:
    """The runtime's /metrics: the outbox's errors and stuck executors, and the read
    models' poison skips, each wired to what the components count."""
    from relay_es.projections.runner import Poison
    from relay_es.composition.runtime import Runtime
    from relay_es.composition.settings import Settings

    rt = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db"))
    try:
        store, clock = FakeStore(), Clock()
        store.bugs = {"a1"}
        box = rt.hub.outbox
        box.relay, box.run, box.monotonic = store, direct, clock

        async def main() -> None:
            box.submit("a", "a1")
            box.submit("b", "b1")
            await eventually(lambda: box.errors == 1 and "b1" in store.recorded)

        asyncio.run(main())
        for fn in rt.runner.on_poison:
            fn(Poison("executors", 7, "s", "Executor.Connected", "DataError: NUL", True))
        text = rt.metrics.render().decode()
        assert "relay_outbox_errors_total 1.0" in text
        assert "relay_outbox_stuck_transitions 1.0" in text
        assert "relay_outbox_queued_transitions 1.0" in text
        assert 'relay_projection_poison_events_total{projection="executors"} 1.0' in text
    finally:
        rt.hub.pool.shutdown(wait=False)
        rt.close()
