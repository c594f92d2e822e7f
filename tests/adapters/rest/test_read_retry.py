"""A read whose executor's socket closed before it answered is answered by another executor of
the application (``calling.ask``), within the call's one timeout; an action is never sent again.

On real WebSockets on loopback (the hub's ``serving`` and scripted executors), through the REST
API; what time a read has left is checked with a fake ``Calls`` and a fake clock."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from relay_es.adapters.rest import calling
from relay_es.engine.calls import ExecutorGone, ExecutorTimedOut, NoHealthyExecutor
from relay_es.protocol import catalogue as c
from tests.adapters.hub.test_calls import Scripted, Served, join, run, serving, workflow
from tests.adapters.rest.fakes import fake_context


class Dropping:
    """Executors of one application of which the first ``drop`` asked (for ``kind``) drop their
    socket with no close frame and answer nothing; any asked after them answers. ``asked``: who
    was asked, in order."""

    def __init__(self, kind: str, drop: int = 1) -> None:
        self.kind, self.drop = kind, drop
        self.asked: list[str] = []
        self.executors: dict[str, Scripted] = {}

    async def join(self, s: Served, name: str) -> Scripted:
        def reply(msg: dict[str, Any]) -> dict[str, Any] | None:
            self.asked.append(name)
            if len(self.asked) <= self.drop:
                self.executors[name].abort()  # like SIGKILL, while the call waits
                return None
            return dict(output=workflow(msg["workflow_id"])) if self.kind == "get_workflow" else dict(success=True)

        ex = await join(s, executor_id=name, replies={self.kind: reply})
        self.executors[name] = ex
        return ex

    def requests(self, name: str) -> int:
        return sum(1 for r in self.executors[name].requests if r["type"] == self.kind)

    async def close(self) -> None:
        for ex in self.executors.values():
            await ex.close()


def test_a_read_whose_executor_went_is_answered_by_another(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("get_workflow")
            for name in ("A", "B"):
                await d.join(s, name)
            async with httpx.AsyncClient(base_url=s.http) as client:
                r = await client.get("/v2/orgs/local/apps/app/workflows/w1")
            assert r.status_code == 200, r.text
            assert r.json()["workflowId"] == "w1"
            assert sorted(d.asked) == ["A", "B"]  # the one that went, then the other
            await d.close()

    run(main())


def test_each_executor_asked_is_told_and_each_attempt_observed(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            seen: list[tuple[str, str]] = []
            s.runtime.calls.observe = lambda kind, outcome, took: seen.append((kind, outcome))
            d = Dropping("get_workflow")
            for name in ("A", "B"):
                await d.join(s, name)
            ctx = fake_context(relay=SimpleNamespace(app_exists=lambda org, app: True), calls=s.runtime.calls)
            told: list[str] = []
            answer = await calling.ask(ctx, "local", "app",
                                       lambda rid: c.GetWorkflowRequest(request_id=rid, workflow_id="w2"),
                                       chosen=told.append)
            assert answer.output.WorkflowUUID == "w2"
            assert told == d.asked and len(set(told)) == 2  # each executor asked, never the one that went
            assert [o for k, o in seen if k == "get_workflow"] == ["gone", "ok"]
            await d.close()

    run(main())


def test_an_action_whose_executor_went_is_not_sent_again(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("cancel")
            for name in ("A", "B"):
                await d.join(s, name)
            async with httpx.AsyncClient(base_url=s.http) as client:
                r = await client.post("/v2/orgs/local/apps/app/workflows/w1/cancel")
            assert r.status_code == 502 and r.json()["title"] == "executor disconnected", r.text
            assert len(d.asked) == 1 and d.requests("A") + d.requests("B") == 1  # it may have cancelled: once
            await d.close()

    run(main())


def test_a_read_whose_only_executor_went_is_a_502(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("get_workflow")
            await d.join(s, "A")
            async with httpx.AsyncClient(base_url=s.http) as client:
                r = await client.get("/v2/orgs/local/apps/app/workflows/w1")
            assert r.status_code == 502 and r.json()["title"] == "executor disconnected", r.text
            assert d.asked == ["A"]
            await d.close()

    run(main())


def test_a_read_is_sent_to_two_executors_at_most(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("get_workflow", drop=3)  # every one asked goes
            for name in ("A", "B", "C"):
                await d.join(s, name)
            async with httpx.AsyncClient(base_url=s.http) as client:
                r = await client.get("/v2/orgs/local/apps/app/workflows/w1")
            assert r.status_code == 502 and r.json()["title"] == "executor disconnected", r.text
            assert len(d.asked) == len(set(d.asked)) == calling.READ_ATTEMPTS == 2  # the third never asked
            await d.close()

    run(main())


def test_a_read_for_one_executor_is_not_sent_to_another(tmp_path) -> None:
    """The reads of one answer (getAutoscale's) come from one executor or fail."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("get_workflow")
            for name in ("A", "B"):
                await d.join(s, name)
            ctx = fake_context(relay=SimpleNamespace(app_exists=lambda org, app: True), calls=s.runtime.calls)
            with pytest.raises(ExecutorGone):
                await calling.ask(ctx, "local", "app",
                                  lambda rid: c.GetWorkflowRequest(request_id=rid, workflow_id="w1"),
                                  only_executor="A")
            assert d.asked == ["A"] and d.requests("B") == 0
            await d.close()

    run(main())


# --- the call's one timeout, on a fake clock -------------------------------------------------------


class Going:
    """A stand-in for ``Calls``: each call takes ``took[i]`` seconds of the fake clock, then ends
    as ``outcomes[i]`` (raised if an exception, else the answer). Records each call's timeout
    and the executors it was told to leave out."""

    def __init__(self, now: list[float], took: list[float], outcomes: list[Any]) -> None:
        self.now, self.took, self.outcomes = now, took, outcomes
        self.timeouts: list[float] = []
        self.excluding: list[tuple[str, ...]] = []

    async def call(self, org: str, app: str, make_request: Any, *, timeout: float,
                   excluding: tuple[str, ...] = (), **kw: Any) -> Any:
        i = len(self.timeouts)
        self.timeouts.append(timeout)
        self.excluding.append(excluding)
        self.now[0] += self.took[i]
        if isinstance(self.outcomes[i], BaseException):
            raise self.outcomes[i]
        return self.outcomes[i]


def asking(monkeypatch: pytest.MonkeyPatch, calls: Going, now: list[float]) -> Any:
    monkeypatch.setattr(calling, "time", SimpleNamespace(monotonic=lambda: now[0]))
    ctx = fake_context(relay=SimpleNamespace(app_exists=lambda org, app: True), calls=calls)
    return asyncio.run(calling.ask(ctx, "local", "shop",
                                   lambda rid: c.GetWorkflowRequest(request_id=rid, workflow_id="w1")))


def test_a_read_sent_again_has_what_is_left_of_the_calls_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_es.adapters.hub.calls import ExecutorGoneOthersRemain

    now = [100.0]
    calls = Going(now, [15.0, 1.0], [ExecutorGoneOthersRemain("A", "closed"), "answer"])
    assert asking(monkeypatch, calls, now) == "answer"
    assert calls.timeouts == [20.0, 5.0] and calls.excluding == [(), ("A",)]


def test_a_read_whose_time_is_spent_is_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay_es.adapters.hub.calls import ExecutorGoneOthersRemain

    now = [0.0]
    calls = Going(now, [20.0], [ExecutorGoneOthersRemain("A", "closed")])
    with pytest.raises(ExecutorGoneOthersRemain):
        asking(monkeypatch, calls, now)
    assert calls.timeouts == [20.0]


def test_a_timeout_is_not_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    calls = Going(now, [20.0, 0.0], [ExecutorTimedOut("A", 20.0), "answer"])
    with pytest.raises(ExecutorTimedOut):
        asking(monkeypatch, calls, now)
    assert calls.timeouts == [20.0]


def test_with_none_left_to_ask_the_executor_that_went_is_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The others went too between the two calls: the 502 of the request that was sent, not a 503."""
    from relay_es.adapters.hub.calls import ExecutorGoneOthersRemain

    now = [0.0]
    went = ExecutorGoneOthersRemain("A", "closed")
    calls = Going(now, [1.0, 0.0], [went, NoHealthyExecutor("local", "shop")])
    with pytest.raises(ExecutorGone) as e:
        asking(monkeypatch, calls, now)
    assert e.value is went and calls.excluding == [(), ("A",)]
