"""What a read sent again needs of ``Calls`` (``relay_es.adapters.hub.calls``), on real WebSockets
on loopback: a socket lost mid-call says whether other executors able to take the call were
connected then (``ExecutorGoneOthersRemain``), and ``excluding`` keeps a call from the executors
that went."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay_es.adapters.hub.calls import ExecutorGoneOthersRemain, NoCapableExecutor, Needs
from relay_es.engine.calls import ExecutorGone, NoHealthyExecutor
from relay_es.protocol import catalogue as c
from tests.adapters.hub.test_calls import get_workflow, join, run, serving, workflow
from tests.support import until


def test_a_lost_socket_says_whether_others_could_take_the_call(tmp_path) -> None:
    """Others able to take it as it was made (its needs too), not the executor that went."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            calls = s.runtime.calls
            asked: list[str] = []

            def silent(name: str) -> Any:
                return lambda msg: asked.append(name)  # and no answer

            execs = {name: await join(s, executor_id=name, sdk=("python", version),
                                      replies={"get_workflow": silent(name)})
                     for name, version in (("A", "3.2.0"), ("B", "2.14.0"), ("C", "3.2.0"))}
            new_sdk = Needs(lambda language, version: version == "3.2.0", "upgrade it")

            async def lose(**kw: Any) -> tuple[str, BaseException]:
                told: list[str] = []
                call = asyncio.ensure_future(calls.call("local", "app", get_workflow("w"), timeout=30,
                                                        chosen=told.append, **kw))
                await until(lambda: told and told[0] in asked, what="the call's executor asked")
                execs[told[0]].abort()  # mid-call, no close frame
                with pytest.raises(ExecutorGone) as e:
                    await call
                assert e.value.executor_id == told[0]
                return told[0], e.value

            first, gone = await lose(needs=new_sdk)  # A or C goes: the other can take it
            assert first in ("A", "C") and type(gone) is ExecutorGoneOthersRemain and gone.status == 502
            second, gone = await lose(needs=new_sdk)  # the other goes: B is connected, but cannot take it
            assert second in ("A", "C") and second != first and type(gone) is ExecutorGone
            with pytest.raises(NoCapableExecutor):
                await calls.call("local", "app", get_workflow("w"), timeout=5, needs=new_sdk)
            last, gone = await lose()  # B, alone
            assert last == "B" and type(gone) is ExecutorGone

    run(main())


def test_a_call_for_one_executor_that_went_has_no_others(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            calls = s.runtime.calls
            asked = asyncio.Event()

            def silent(msg: dict[str, Any]) -> None:
                asked.set()

            one = await join(s, executor_id="ONE", replies={"get_workflow": silent})
            other = await join(s, executor_id="OTHER", replies={"get_workflow": silent})
            call = asyncio.ensure_future(calls.call("local", "app", get_workflow("w"), timeout=30, only_executor="ONE"))
            await asked.wait()
            one.abort()
            with pytest.raises(ExecutorGone) as e:
                await call
            assert type(e.value) is ExecutorGone  # OTHER is connected, but the call was ONE's alone
            await other.close()

    run(main())


def test_a_call_excluding_executors_never_goes_to_them(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            calls = s.runtime.calls
            answer = {"get_workflow": lambda msg: dict(output=workflow(msg["workflow_id"]))}
            a = await join(s, executor_id="A", version="v1", replies=answer)
            b = await join(s, executor_id="B", version="v2", replies=answer)
            told: list[str] = []
            for _ in range(4):  # B is the latest version, and A the only one left to take it
                got = await calls.call("local", "app", get_workflow("w"), timeout=5, prefer_latest=True,
                                       excluding=("B",), chosen=told.append)
                assert isinstance(got, c.GetWorkflowResponse)
            assert told == ["A"] * 4
            with pytest.raises(NoHealthyExecutor):  # v2's only executor left out: nothing is sent
                await calls.call("local", "app", get_workflow("w"), timeout=5, only_version="v2", excluding=("B",))
            with pytest.raises(NoHealthyExecutor):
                await calls.call("local", "app", get_workflow("w"), timeout=5, excluding=("A", "B"))
            assert sum(1 for r in b.requests if r["type"] == "get_workflow") == 0
            await a.close()
            await b.close()

    run(main())
