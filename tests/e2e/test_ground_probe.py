"""The ground's executors answer ``list_workflows`` (conductor-protocol.md §5) with every workflow
of the ground, decoded by Relay's catalogue types (``relay_es.protocol.catalogue``), in both SDK
dialects (and pins a trap of the TypeScript dialect: a null tri-state filter filters). The
request goes through the probe server (a stand-in conductor that sends any request
to a chosen executor), not through Relay: Relay has no route for it yet."""

from __future__ import annotations

import json
from collections.abc import Iterator

import msgspec
import pytest

from relay_es.protocol.catalogue import (
    ListWorkflowsBody,
    ListWorkflowsResponse,
    decode_response_for,
)
from tests.conftest import postgres_admin_url
from tests.e2e import harness, ts_harness
from tests.e2e.ground import unsettled
from tests.e2e.probe_server import ProbeServer
from tests.e2e.sysdb import SystemDb

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def probe() -> Iterator[ProbeServer]:
    with ProbeServer() as server:
        yield server


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_ground_executor_answers_list_workflows(probe: ProbeServer, sdk: str) -> None:
    admin = postgres_admin_url()
    sys_name, steps_name = harness.unique_name("sys"), harness.unique_name("steps")
    sys_db = harness.create_database(admin, sys_name)
    steps_db = harness.create_database(admin, steps_name)
    common = {"relay_url": probe.url, "app_name": f"probe-ground-{sdk}", "app_version": "v1",
              "system_database_url": sys_db, "steps_db_url": steps_db, "name": f"{sdk}-ground"}
    ex: harness.Executor | None = None
    try:
        if sdk == "python":
            ex = harness.Executor(harness.ensure_dbos_venv(harness.REPO_ROOT), **common)
        else:
            ex = ts_harness.TsExecutor(app_dir=ts_harness.ensure_node_modules(), **common)
        probe.wait_for_executor(ex.executor_id)
        ids = ex.ground("g")["workflow_ids"]
        db = SystemDb(sys_db)
        harness.wait_until(lambda: not unsettled(db, ids), 60, message="the ground to settle")

        wire = msgspec.to_builtins(ListWorkflowsBody(workflow_id_prefix="g-", load_input=True, load_output=True))
        # The trap: TS 5.2.11 reads a null was_forked_from / has_parent as a filter
        # (`was_forked_from = NULL`, `parent_workflow_id IS NULL`: its listWorkflows tests
        # `!== undefined`), so with both null it lists nothing; Python reads null as "either".
        nulls = probe.request(ex.executor_id, "list_workflows",
                              body={**wire, "was_forked_from": None, "has_parent": None})
        assert (len(nulls["output"]) == 0) == (sdk == "typescript"), nulls
        # Unset tri-state filters left out, both dialects list every workflow of the ground.
        wire = {k: v for k, v in wire.items() if not (k in ("was_forked_from", "has_parent") and v is None)}
        reply = probe.request(ex.executor_id, "list_workflows", body=wire)
        answer = decode_response_for("list_workflows", json.dumps(reply))
        assert isinstance(answer, ListWorkflowsResponse) and answer.error_message is None, reply
        got = {w.WorkflowUUID: w for w in answer.output or []}
        mine = [ids["running"], ids["failed"], ids["steps"], ids["parent"], *ids["queued"], *ids["children"]]
        assert set(got) == set(mine), sorted(got)
        assert {wf: got[wf].Status for wf in mine} == db.statuses(mine)
        assert got[ids["parent"]].WorkflowName == "parent_workflow"
        assert {got[c].ParentWorkflowID for c in ids["children"]} == {ids["parent"]}
        assert {got[wf].QueueName for wf in ids["queued"]} == {"ground_queue"}
        assert "failed on purpose" in (got[ids["failed"]].Error or "")
        assert "steps done" in (got[ids["steps"]].Output or "")
        assert got[ids["steps"]].CreatedAt is not None and got[ids["steps"]].CreatedAt.isdigit()
    except BaseException:
        if ex is not None:
            print(ex.stderr_tail())
        print("--- probe transcript ---\n" + probe.transcript()[-8000:])
        raise
    finally:
        if ex is not None:
            ex.close()
        harness.drop_database(admin, sys_name)
        harness.drop_database(admin, steps_name)
