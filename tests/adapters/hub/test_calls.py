"""Calls of the REST operations (``relay_es.adapters.hub.calls``), on real WebSockets on
loopback: a Relay runtime (SQLite) served by uvicorn in the test's own loop, executors that
answer as scripted. An answer comes back typed; an executor's error, silence, a dropped
socket and a hostile reply each fail the one call they concern, and nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import websockets

from relay_es.adapters.hub.calls import NoCapableExecutor, Needs
from relay_es.adapters.uvicorn_ws import protocol_class
from relay_es.composition.asgi import RelayASGI
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from relay_es.engine.calls import ExecutorFailed, ExecutorGone, ExecutorTimedOut, NoHealthyExecutor, ReplyRefused
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import MAX_FRAME
from tests.fake_executor import FakeExecutor
from tests.server import free_port
from tests.support import until

Reply = Callable[[dict[str, Any]], Awaitable[Any] | Any]


@dataclass
class Scripted(FakeExecutor):
    """A fake executor whose answers to the catalogue's requests are ``replies[type](msg)``:
    a dict (sent as the reply, the envelope filled in), a string (sent as is), a list of them,
    or None (no answer). Each request is handled in a task of its own (like the TypeScript
    SDK): answers may come back out of order."""

    replies: dict[str, Reply] = field(default_factory=dict)

    async def _loop(self) -> None:
        assert self.ws is not None
        tasks: set[asyncio.Task[Any]] = set()
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                self._note(msg)
                t = asyncio.ensure_future(self._answer(msg))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except websockets.ConnectionClosed:
            pass

    async def _answer(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        t = msg["type"]
        if t == "executor_info":
            out: Any = dict(executor_id=self.executor_id, application_version=self.version, hostname="fakehost",
                            **self.sdk_fields())
        elif t == "exist_pending_workflows":
            out = dict(exist=self.pending)
        elif t == "recovery":
            self.pending = False
            out = dict(success=True)
        elif t in self.replies:
            out = self.replies[t](msg)
            if asyncio.iscoroutine(out):
                out = await out
        else:
            out = dict(error_message="Unknown message type")
        for one in out if isinstance(out, list) else [out]:
            if one is None:
                continue
            try:
                await self.ws.send(one if isinstance(one, str) else self._reply(msg, **one))
            except websockets.ConnectionClosed:
                return


@dataclass
class Served:
    runtime: Runtime
    ws: str
    http: str


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **settings: Any) -> AsyncIterator[Served]:
    """A Relay runtime on SQLite, served by uvicorn on loopback in this loop, as ``relay serve`` does
    (lost sockets reported to the runtime's collector, which does not run in a test process)."""
    port = free_port()
    rt = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", port=port,
                          ping_interval=timedelta(seconds=1), ping_wait=timedelta(seconds=3),
                          restart_settle=timedelta(seconds=0.5), **settings))
    config = uvicorn.Config(RelayASGI(rt), host="127.0.0.1", port=port, ws=protocol_class(0.5, lost=rt.collector.lost),
                            ws_max_size=MAX_FRAME,
                            ws_ping_interval=1.0, ws_ping_timeout=1.5, ws_per_message_deflate=False, lifespan="on",
                            log_config=None, access_log=False, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    try:
        await until(lambda: server.started or task.done(), what="the server started")
        assert not task.done()
        yield Served(rt, f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}")
    finally:
        rt.begin_shutdown()
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def join(s: Served, **kw: Any) -> Scripted:
    """A scripted executor, connected and registered by Relay (a call may go to it)."""
    ex = await Scripted(s.ws, **kw).connect()

    def registered() -> bool:
        conn = s.runtime.registry.executor(("local", ex.app, ex.executor_id))
        return conn is not None and conn.registered

    await until(registered, what=f"executor {ex.executor_id} registered")
    return ex


def get_workflow(workflow_id: str) -> Callable[[str], c.GetWorkflowRequest]:
    return lambda rid: c.GetWorkflowRequest(request_id=rid, workflow_id=workflow_id)


def list_workflows(rid: str) -> c.ListWorkflowsRequest:
    return c.ListWorkflowsRequest(request_id=rid, body=c.ListWorkflowsBody(load_input=True, load_output=True))


def workflow(workflow_id: str, **kw: Any) -> dict[str, Any]:
    return {"WorkflowUUID": workflow_id, "Status": "SUCCESS", "CreatedAt": "1796040658645", **kw}


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


@pytest.mark.parametrize("style", ["python", "typescript"])
def test_an_answer_comes_back_of_the_catalogues_type(tmp_path: Path, style: str) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            ex = await join(s, style=style, replies={
                "list_workflows": lambda msg: dict(output=[workflow("w1"), workflow("w2", Output="42")]),
                "get_workflow": lambda msg: dict(output=workflow(msg["workflow_id"])),
            })
            calls = s.runtime.calls
            listed = await calls.call("local", "app", list_workflows, timeout=5)
            assert isinstance(listed, c.ListWorkflowsResponse)
            assert [w.WorkflowUUID for w in listed.output or []] == ["w1", "w2"]
            one = await calls.call("local", "app", get_workflow("w9"), timeout=5)
            assert isinstance(one, c.GetWorkflowResponse) and one.output is not None
            assert one.output.WorkflowUUID == "w9"
            sent = [r for r in ex.requests if r["type"] == "get_workflow"][0]
            assert sent["request_id"] == one.request_id  # the hub's id, echoed
            await ex.close()

    run(main())


def test_an_executors_error_message_fails_the_call_with_its_text(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            ex = await join(s, replies={
                "get_workflow": lambda msg: dict(error_message="Workflow \x1b[31mw1\x1b[0m does not exist"),
                "cancel": lambda msg: dict(success=False),
            })
            with pytest.raises(ExecutorFailed) as e:
                await s.runtime.calls.call("local", "app", get_workflow("w1"), timeout=5)
            assert e.value.message == "Workflow \\u001b[31mw1\\u001b[0m does not exist"
            assert isinstance(e.value.response, c.GetWorkflowResponse)
            with pytest.raises(ExecutorFailed) as e:
                await s.runtime.calls.call("local", "app", lambda rid: c.CancelRequest(request_id=rid, workflow_id="w"),
                                           timeout=5)
            assert "cancel did not succeed" in e.value.message
            await ex.close()

    run(main())


def test_no_executor_is_503_and_silence_is_a_timeout(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            with pytest.raises(NoHealthyExecutor):
                await s.runtime.calls.call("local", "app", list_workflows, timeout=5)
            ex = await join(s, replies={"list_workflows": lambda msg: None})
            started = time.monotonic()
            with pytest.raises(ExecutorTimedOut) as e:
                await s.runtime.calls.call("local", "app", list_workflows, timeout=0.3)
            assert 0.3 <= time.monotonic() - started < 2.0 and e.value.status == 504
            await ex.close()

    run(main())


def test_a_socket_dropped_mid_call_fails_the_call_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            asked = asyncio.Event()

            def silent(msg: dict[str, Any]) -> None:
                asked.set()

            ex = await join(s, replies={"list_workflows": silent})
            call = asyncio.ensure_future(s.runtime.calls.call("local", "app", list_workflows, timeout=30))
            await asked.wait()
            started = time.monotonic()
            ex.abort()  # no close frame, like SIGKILL
            with pytest.raises(ExecutorGone):
                await call
            assert time.monotonic() - started < 5.0  # the socket's end, not the call's 30 s
            with pytest.raises(NoHealthyExecutor):
                await s.runtime.calls.call("local", "app", list_workflows, timeout=5)

    run(main())


def test_a_hostile_reply_is_refused_and_the_sockets_other_calls_go_on(tmp_path: Path) -> None:
    """A field of the wrong type, a reply of another type than the request's, an answer to a
    request never made: the first two fail their own call with a clear error, the third
    answers nothing; each is audited; a call waiting meanwhile on the same socket is answered."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            release = asyncio.Event()

            async def slow(msg: dict[str, Any]) -> dict[str, Any]:
                await release.wait()
                return dict(output=workflow(msg["workflow_id"]))

            ex = await join(s, replies={
                "get_workflow": slow,
                "list_workflows": lambda msg: dict(output="not a list"),
                "list_steps": lambda msg: json.dumps({"type": "cancel", "request_id": msg["request_id"],
                                                      "success": True}),
                "list_queues": lambda msg: [json.dumps({"type": "list_queues", "request_id": "never-asked",
                                                        "output": []}), dict(output=[])],
            })
            calls = s.runtime.calls
            waiting = asyncio.ensure_future(calls.call("local", "app", get_workflow("w1"), timeout=20))
            with pytest.raises(ReplyRefused) as wrong:
                await calls.call("local", "app", list_workflows, timeout=5)
            assert "malformed 'list_workflows' reply" in wrong.value.detail and wrong.value.status == 502
            with pytest.raises(ReplyRefused) as mismatched:
                await calls.call("local", "app", lambda rid: c.ListStepsRequest(request_id=rid, workflow_id="w1"),
                                 timeout=5)
            assert "reply had type 'cancel'" in mismatched.value.detail
            queues = await calls.call("local", "app", lambda rid: c.ListQueuesRequest(
                request_id=rid, body=c.ListQueuesBody()), timeout=5)  # behind the unsolicited one
            assert isinstance(queues, c.ListQueuesResponse) and queues.output == []
            release.set()
            answer = await waiting
            assert isinstance(answer, c.GetWorkflowResponse) and answer.output.WorkflowUUID == "w1"
            conn = s.runtime.registry.registered("local", "app")[0]
            assert not conn.waiters and not conn.closed
            async with httpx.AsyncClient(base_url=s.http) as client:
                async def kinds() -> set[str]:
                    r = await client.get("/v2/orgs/local/executor-events", params={"limit": 1000})
                    return {e["detail"].get("kind") for e in r.json() if e["action"] == "protocol.violation"}

                async def all_audited() -> bool:
                    return {"malformed_reply", "type_mismatch", "unsolicited"} <= await kinds()

                for _ in range(200):
                    if await all_audited():
                        break
                    await asyncio.sleep(0.05)
                assert {"malformed_reply", "type_mismatch", "unsolicited"} <= await kinds()
            await ex.close()

    run(main())


def test_the_latest_version_first_where_the_operation_cares(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            def answer(msg: dict[str, Any]) -> dict[str, Any]:
                return dict(success=True)

            old = await join(s, executor_id="OLD", version="v1", replies={"resume": answer})
            await asyncio.sleep(0.05)
            new = await join(s, executor_id="NEW", version="v2", replies={"resume": answer})
            resume = lambda rid: c.ResumeRequest(request_id=rid, workflow_id="w")  # noqa: E731
            for _ in range(4):
                await s.runtime.calls.call("local", "app", resume, timeout=5, prefer_latest=True)
            assert [r["type"] for r in new.requests].count("resume") == 4
            await s.runtime.calls.call("local", "app", resume, timeout=5, prefer_latest=True, latest_version="v1")
            assert [r["type"] for r in old.requests].count("resume") == 1
            for _ in range(4):  # no preference: spread over both
                await s.runtime.calls.call("local", "app", resume, timeout=5)
            assert [r["type"] for r in old.requests].count("resume") == 3
            for _ in range(3):  # only that version's (a recovery): never another
                await s.runtime.calls.call("local", "app", resume, timeout=5, only_version="v1")
            assert [r["type"] for r in old.requests].count("resume") == 6
            await old.close()
            await until(lambda: all(conn.executor_id != "OLD"
                                    for conn in s.runtime.calls.registry.registered("local", "app")),
                        what="OLD gone from the registry")
            with pytest.raises(NoHealthyExecutor):  # v2 is connected, v1 is not: nothing is sent
                await s.runtime.calls.call("local", "app", resume, timeout=5, only_version="v1")
            assert [r["type"] for r in new.requests].count("resume") == 6
            await new.close()

    run(main())


def test_a_call_for_one_executor_goes_to_it_alone_or_nowhere(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            release = asyncio.Event()

            async def answer(msg: dict[str, Any]) -> dict[str, Any]:
                if msg["workflow_id"] == "slow":
                    await release.wait()
                return dict(output=workflow(msg["workflow_id"]))

            one = await join(s, executor_id="ONE", replies={"get_workflow": answer})
            other = await join(s, executor_id="OTHER", replies={"get_workflow": answer})
            calls = s.runtime.calls
            busy = asyncio.ensure_future(calls.call("local", "app", get_workflow("slow"), timeout=20,
                                                    only_executor="ONE"))
            await until(lambda: any(r.get("workflow_id") == "slow" for r in one.requests), what="ONE busy")
            told: list[str] = []
            for _ in range(3):  # ONE has a call in flight, OTHER none: still ONE
                await calls.call("local", "app", get_workflow("w"), timeout=5, only_executor="ONE", chosen=told.append)
            assert told == ["ONE"] * 3 and calls.choose("local", "app", only_executor="ONE").executor_id == "ONE"
            assert [r["type"] for r in other.requests].count("get_workflow") == 0
            release.set()
            await busy
            await one.close()
            await until(lambda: all(conn.executor_id != "ONE" for conn in calls.registry.registered("local", "app")),
                        what="ONE gone from the registry")
            with pytest.raises(NoHealthyExecutor):  # OTHER is connected, ONE is not: nothing is sent
                await calls.call("local", "app", get_workflow("w"), timeout=5, only_executor="ONE")
            assert [r["type"] for r in other.requests].count("get_workflow") == 0
            await other.close()

    run(main())


def test_a_call_that_needs_a_form_goes_to_an_executor_able_to_take_it_or_to_none(tmp_path: Path) -> None:
    """A bulk cancel of several workflows must not reach an SDK that reads ``workflow_id`` alone: the
    executors able to take it are chosen among first (the routing rules then pick one of them); with
    none of them connected, nothing is sent and the call fails with a 501 naming what they run."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            seen: list[tuple[str, str]] = []
            calls = s.runtime.calls
            calls.observe = lambda kind, outcome, took: seen.append((kind, outcome))
            ok = {"cancel": lambda msg: dict(success=True)}
            bulk = Needs(lambda language, version: (language, version) == ("python", "3.2.0"), "upgrade it")
            cancel = lambda rid: c.CancelRequest(request_id=rid, workflow_id="a", workflow_ids=["a", "b"])  # noqa: E731
            old = await join(s, executor_id="OLD", version="v2", sdk=None, replies=ok)
            mid = await join(s, executor_id="MID", version="v2", sdk=("python", "2.14.0"), replies=ok)
            with pytest.raises(NoCapableExecutor) as e:
                await calls.call("local", "app", cancel, timeout=5, needs=bulk)
            assert (e.value.status, e.value.title) == (501, "not supported by the executor")
            assert e.value.detail == ("no executor of application 'app' connected here can take this call (they run "
                                      "an SDK naming neither language nor version, python 2.14.0): upgrade it")
            assert seen == [("none", "unavailable")]  # nothing was built, nothing sent
            await asyncio.sleep(0.05)
            new = await join(s, executor_id="NEW", version="v1", replies=ok)  # an older version, a newer SDK
            told: list[str] = []
            for _ in range(3):  # only NEW can take it, though v2 is the latest version
                await calls.call("local", "app", cancel, timeout=5, needs=bulk, prefer_latest=True, chosen=told.append)
            assert told == ["NEW"] * 3 and calls.choose("local", "app", needs=bulk).executor_id == "NEW"
            for _ in range(3):  # nothing needed: any executor, spread over the three
                await calls.call("local", "app", cancel, timeout=5, chosen=told.append)
            assert sorted(told[3:]) == ["MID", "NEW", "OLD"]
            assert [len([r for r in ex.requests if r["type"] == "cancel"]) for ex in (old, mid, new)] == [1, 1, 4]
            await new.close()
            await until(lambda: all(conn.executor_id != "NEW" for conn in calls.registry.registered("local", "app")),
                        what="NEW gone from the registry")
            with pytest.raises(NoCapableExecutor):
                await calls.call("local", "app", cancel, timeout=5, needs=bulk)
            await old.close()
            await mid.close()
            await until(lambda: not calls.registry.registered("local", "app"), what="all gone")
            with pytest.raises(NoHealthyExecutor):  # no executor at all: still a 503
                await calls.call("local", "app", cancel, timeout=5, needs=bulk)

    run(main())


def test_a_call_from_another_thread(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            ex = await join(s, replies={"get_workflow": lambda msg: dict(output=workflow(msg["workflow_id"]))})
            out: list[Any] = []
            t = threading.Thread(target=lambda: out.append(
                s.runtime.calls.call_threadsafe("local", "app", get_workflow("wt"), timeout=5)))
            t.start()
            await until(lambda: not t.is_alive(), what="the thread's call")
            assert out[0].output.WorkflowUUID == "wt"
            await ex.close()

    run(main())


def test_many_calls_across_many_apps_while_a_recovery_deadline_fires(tmp_path: Path) -> None:
    """200 calls at once over 20 applications (two executors each, answering out of order),
    while an executor of another application has dropped with a 1 s grace: every call gets
    its own answer, and the executor is declared dead and recovered meanwhile. (How late the
    deadline is under load is measured in bench/, not asserted here.)"""
    apps = [f"app{i}" for i in range(20)]

    async def answer(msg: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(random.random() * 0.2)
        return dict(output=workflow(msg["workflow_id"], Output=json.dumps("x" * 1000)))

    async def main() -> None:
        async with serving(tmp_path) as s:
            async with httpx.AsyncClient(base_url=s.http) as client:
                assert (await client.put("/v2/orgs/local/apps/dying")).status_code == 204
                r = await client.patch("/v2/orgs/local/apps/dying", json={"executorTimeoutSecs": 1})
                assert r.status_code == 204, r.text
                executors = [await join(s, app=app, replies={"get_workflow": answer})
                             for app in apps for _ in range(2)]
                peer = await join(s, app="dying", executor_id="B")
                doomed = await join(s, app="dying", executor_id="A")
                await until(lambda: len(s.runtime.registry) == len(executors) + 2)
                doomed.abort()
                wanted = [(apps[i % 20], f"wf-{i}") for i in range(200)]
                rounds: list[int] = []
                recovered = asyncio.Event()

                async def calling() -> None:  # rounds of 200 calls at once until A is recovered
                    while not recovered.is_set():
                        answers = await asyncio.gather(*(
                            s.runtime.calls.call("local", app, get_workflow(wf), timeout=20) for app, wf in wanted))
                        assert [a.output.WorkflowUUID for a in answers] == [wf for _, wf in wanted]
                        rounds.append(len(answers))

                async def actions() -> list[str]:
                    r = await client.get("/v2/orgs/local/executor-events", params={"limit": 1000, "executorId": "A"})
                    return [e["action"] for e in r.json()]

                load = asyncio.ensure_future(calling())
                try:
                    for _ in range(300):
                        if "recovery.confirmed" in await actions() or load.done():
                            break
                        await asyncio.sleep(0.05)
                finally:
                    recovered.set()
                    await load
                acts = await actions()
                assert "executor.declared_dead" in acts and "recovery.confirmed" in acts, acts
                assert len(rounds) >= 2  # the deadline fired while calls were under way
                for ex, app in zip(executors, [a for a in apps for _ in range(2)]):
                    asked = [r["workflow_id"] for r in ex.requests if r["type"] == "get_workflow"]
                    assert asked and all(int(w.split("-")[1]) % 20 == apps.index(app) for w in asked)  # spread, own app
                assert any(r["type"] == "recovery" for r in peer.requests)
                for ex in [*executors, peer]:
                    await ex.close()

    run(main())


def test_every_call_is_observed_with_its_type_outcome_and_time(tmp_path: Path) -> None:
    """What ``relay_executor_calls_total`` and ``relay_executor_call_seconds`` are fed."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            seen: list[tuple[str, str, float]] = []
            calls = s.runtime.calls
            calls.observe = lambda kind, outcome, took: seen.append((kind, outcome, took))
            with pytest.raises(NoHealthyExecutor):
                await calls.call("local", "app", list_workflows, timeout=5)
            ex = await join(s, replies={"list_workflows": lambda msg: dict(output=[]),
                                        "get_workflow": lambda msg: dict(error_message="no such workflow"),
                                        "cancel": lambda msg: None})
            await calls.call("local", "app", list_workflows, timeout=5)
            with pytest.raises(ExecutorFailed):
                await calls.call("local", "app", get_workflow("w1"), timeout=5)
            with pytest.raises(ExecutorTimedOut):
                await calls.call("local", "app", lambda rid: c.CancelRequest(request_id=rid, workflow_id="w"),
                                 timeout=0.2)
            assert [(k, o) for k, o, _ in seen] == [("none", "unavailable"), ("list_workflows", "ok"),
                                                    ("get_workflow", "failed"), ("cancel", "timeout")]
            assert seen[0][2] == 0.0 and all(t > 0 for _, _, t in seen[1:]) and seen[3][2] >= 0.2
            await ex.close()

    run(main())
