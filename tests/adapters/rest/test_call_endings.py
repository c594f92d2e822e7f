"""Two ways a call to an executor ends without an answer, as a client and the audit log see them, on
real WebSockets on loopback (the hub's ``serving`` and scripted executors), through the REST API:

* a reply over the frame cap (the hub's ``frame_cap``, set small here) is the reply's fault: a 502
  naming the cap, and the read is never sent to another executor (which would send the same and be
  disconnected too; a client once waited for a 504);
* an action whose executor's socket closed before it answered may have been carried out: a 502 that
  says so, on record ``unknown`` (not ``failed``), sent once."""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from relay_es.adapters.hub.calls import ReplyTooLarge
from tests.adapters.hub.test_calls import join, run, serving
from tests.adapters.rest.test_read_retry import Dropping
from tests.conductor_schema import check_response
from tests.support import until

CAP = 64 * 1024  # bytes: the hub's cap in these tests
APP = "/v2/orgs/local/apps/app"


def test_an_export_over_the_cap_is_a_502_naming_it_from_one_executor(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            s.runtime.hub.frame_cap = CAP
            asked: list[str] = []

            def exporting(name: str) -> Any:
                def reply(msg: dict[str, Any]) -> dict[str, Any]:
                    asked.append(name)
                    return dict(serialized_workflow=secrets.token_hex(CAP))  # twice the cap
                return reply

            execs = [await join(s, executor_id=name, replies={"export_workflow": exporting(name)}) for name in "AB"]
            async with httpx.AsyncClient(base_url=s.http, timeout=30) as client:
                r = await client.get(f"{APP}/workflows/w1/export")
            assert r.status_code == 502, r.text
            body = r.json()
            check_response("exportWorkflow", 502, body)
            assert body["title"] == "executor reply too large"
            assert "larger than the 64 KiB Relay accepts" in body["detail"]
            assert len(asked) == 1, asked  # not sent again: the other would send the same
            for ex in execs:
                await ex.close()

    run(main())


def test_an_action_whose_executor_went_mid_call_may_have_been_done(tmp_path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as s:
            d = Dropping("fork_workflow")
            for name in ("A", "B"):
                await d.join(s, name)
            async with httpx.AsyncClient(base_url=s.http, timeout=30) as client:
                r = await client.post(f"{APP}/workflows/w1/fork", json={"newWorkflowId": "f1"})
                assert r.status_code == 502, r.text
                body = r.json()
                check_response("forkWorkflow", 502, body)
                assert body["title"] == "executor disconnected"
                assert "may have carried the action out" in body["detail"], body["detail"]
                assert len(d.asked) == 1  # sent once: another executor would fork it again

            def completed() -> list[dict[str, Any]] | None:
                got = httpx.get(f"{s.http}/v2/orgs/local/audit-logs", params={"operation": "forkWorkflow"})
                assert got.status_code == 200, got.text
                entries = got.json()
                return entries if entries and entries[0]["details"]["outcome"] != "pending" else None

            entries = await until(completed, what="the fork's end on record")
            [entry] = entries
            assert entry["status"] == "failure" and entry["details"]["outcome"] == "unknown"
            assert "may have carried the action out" in entry["details"]["message"]
            assert entry["details"]["executorId"] == d.asked[0]
            await d.close()

    run(main())


def test_an_action_waiting_on_a_socket_closed_for_a_reply_over_the_cap_may_have_been_done() -> None:
    from tests.adapters.rest.test_calling import FakeCalls, FakeRelay, client

    relay = FakeRelay()
    with client(FakeCalls(ReplyTooLarge("e1", CAP, others=1)), relay) as c:
        r = c.post("/act/shop")
    assert r.status_code == 502 and r.json()["title"] == "executor reply too large", r.text
    assert "64 KiB" in r.json()["detail"] and "may have carried the action out" in r.json()["detail"]
    [done] = relay.completed
    assert str(done["outcome"]) == "unknown" and done["executor_id"] == "e1"


def test_a_bulk_resume_of_several_unknown_workflows_is_a_404(tmp_path) -> None:
    """Both SDKs name the missing workflows of a bulk action together (here TypeScript 5.2.11's words):
    a 500 before, as if the executor had failed."""
    async def main() -> None:
        async with serving(tmp_path) as s:
            ex = await join(s, replies={"resume": lambda msg: dict(success=False, error_message=(
                f"Exception encountered when resuming workflow(s) {','.join(msg['workflow_ids'])}: Workflow "
                f"{', '.join(msg['workflow_ids'])} does not exist"))})
            async with httpx.AsyncClient(base_url=s.http, timeout=30) as client:
                r = await client.post(f"{APP}/workflows/bulk-resume", json={"workflowIds": ["nope-3", "nope-4"]})
            assert r.status_code == 404, r.text
            check_response("bulkResumeWorkflows", 404, r.json())
            await ex.close()

    run(main())
