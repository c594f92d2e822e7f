"""A reply over the frame cap (``relay_es.adapters.hub.calls.ReplyTooLarge``), on real WebSockets on
loopback: the hub closes the executor's socket for it (1009, ``frame_too_large``) and every call
waiting on that socket fails as a reply too large, naming the cap -- not as an executor gone, which a
read would be sent again for (another executor sends the same reply, and its socket is closed too).

The cap is the hub's (``Hub.frame_cap``, :data:`~relay_es.protocol.limits.MAX_FRAME` in production),
set small here before any executor registers: a reply of a few hundred KiB crosses it."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest

from relay_es.adapters.hub.calls import ReplyTooLarge
from relay_es.domain.text import bytes_said
from relay_es.engine.calls import NoHealthyExecutor
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import MAX_FRAME
from tests.adapters.hub.test_calls import get_workflow, join, run, serving, workflow
from tests.support import until

CAP = 64 * 1024  # bytes: the hub's cap in these tests


def big(msg: dict[str, Any]) -> dict[str, Any]:
    """A workflow whose output is four times the cap."""
    return dict(output=workflow(msg["workflow_id"], Output=secrets.token_hex(2 * CAP)))


def test_the_cap_is_named_as_a_person_reads_it() -> None:
    assert bytes_said(MAX_FRAME) == "128 MiB" and bytes_said(CAP) == "64 KiB" and bytes_said(1000) == "1,000 bytes"
    assert "128 MiB" in ReplyTooLarge("e1", MAX_FRAME).detail


def test_a_reply_over_the_cap_fails_its_call_as_too_large_and_no_other_executor_is_asked(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            s.runtime.hub.frame_cap = CAP
            seen: list[tuple[str, str]] = []
            s.runtime.calls.observe = lambda kind, outcome, took: seen.append((kind, outcome))
            asked: list[str] = []

            def replying(name: str) -> Any:
                def reply(msg: dict[str, Any]) -> dict[str, Any]:
                    asked.append(name)
                    return big(msg)
                return reply

            execs = [await join(s, executor_id=name, replies={"get_workflow": replying(name)}) for name in "AB"]
            with pytest.raises(ReplyTooLarge) as e:
                await s.runtime.calls.call("local", "app", get_workflow("w1"), timeout=20)
            assert e.value.status == 502 and e.value.title == "executor reply too large"
            assert "larger than the 64 KiB Relay accepts" in e.value.detail and "MAX_FRAME" in e.value.detail
            assert e.value.executor_id in asked and len(asked) == 1
            assert [o for k, o in seen if k == "get_workflow"] == ["refused"]
            # its socket was closed for it; the other executor's was not
            went = next(x for x in execs if x.executor_id == e.value.executor_id)
            assert await went.closed() == 1009
            await until(lambda: s.runtime.registry.executor(("local", "app", went.executor_id)) is None,
                        what="the executor's socket gone from the registry")
            stayed = next(x for x in execs if x is not went)
            assert s.runtime.registry.executor(("local", "app", stayed.executor_id)).registered
            await stayed.close()

    run(main())


def test_every_call_waiting_on_the_socket_fails_as_too_large_and_says_it_may_be_another_s(tmp_path) -> None:
    """The message over the cap is never read: which call it answered is unknown, so every call waiting
    on the socket fails as too large, and says the reply may have been another's."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            s.runtime.hub.frame_cap = CAP
            cancel_asked = asyncio.Event()

            def silent(msg: dict[str, Any]) -> None:
                cancel_asked.set()

            ex = await join(s, executor_id="A", replies={"cancel": silent, "get_workflow": big})
            calls = s.runtime.calls
            cancel = asyncio.ensure_future(calls.call(
                "local", "app", lambda rid: c.CancelRequest(request_id=rid, workflow_id="w2"), timeout=20))
            await cancel_asked.wait()
            with pytest.raises(ReplyTooLarge) as read:
                await calls.call("local", "app", get_workflow("w1"), timeout=20)
            with pytest.raises(ReplyTooLarge) as waited:
                await cancel
            for e in (read.value, waited.value):
                assert e.others == 1 and "or that of one of the 1 other call(s)" in e.detail
                assert e.executor_id == "A"
            assert await ex.closed() == 1009
            with pytest.raises(NoHealthyExecutor):
                await calls.call("local", "app", get_workflow("w1"), timeout=5)

    run(main())


def test_a_reply_under_the_cap_is_answered(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            s.runtime.hub.frame_cap = CAP
            ex = await join(s, replies={"get_workflow": lambda msg: dict(
                output=workflow(msg["workflow_id"], Output=secrets.token_hex(CAP // 4)))})
            answer = await s.runtime.calls.call("local", "app", get_workflow("w1"), timeout=20)
            assert len(answer.output.Output) == CAP // 2
            await ex.close()

    run(main())
