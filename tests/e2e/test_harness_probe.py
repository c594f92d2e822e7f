"""Proves the e2e harness against the probe server (not against Relay).

Two real dbos 3.2.0 executors A and B of one app/version share a fresh Postgres system database.
A runs workflows and is SIGKILLed mid-workflow; the probe then asks B
``exist_pending_workflows(A, version)`` and ``recovery([A])``, exactly the round-trip of
conductor-protocol.md §9.3 / §13, and every workflow must end SUCCESS on B with each step run
once (except the one step that was in flight when A died, which may run twice).
"""

from __future__ import annotations

import os
import time

import pytest

try:  # tests/e2e may or may not become a package
    from . import harness
    from .probe_server import ProbeServer
except ImportError:
    import harness  # type: ignore[no-redef]
    from probe_server import ProbeServer  # type: ignore[no-redef]

APP = "relay-harness-probe"
VERSION = "v-harness-1"
N_WORKFLOWS = 3
N_STEPS = 4
STEP_SECS = 0.5


def _admin_url() -> str:
    url = os.environ.get("RELAY_TEST_POSTGRES_URL")
    if not url:
        pytest.fail("RELAY_TEST_POSTGRES_URL is not set: the e2e tests need a Postgres server URL such as "
                    "postgresql://postgres@127.0.0.1:55432/postgres (scripts/test starts one)", pytrace=False)
    return url


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_probe_recovers_killed_executor_workflows_on_peer() -> None:
    admin_url = _admin_url()
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def mark(what: str) -> None:
        marks[what] = round(time.monotonic() - t0, 2)

    python = harness.ensure_dbos_venv(harness.REPO_ROOT)
    mark("venv")
    sys_name, steps_name = harness.unique_name("sys"), harness.unique_name("steps")
    sys_db = harness.create_database(admin_url, sys_name)
    steps_db = harness.create_database(admin_url, steps_name)
    executors: list[harness.Executor] = []
    probe = ProbeServer().start()

    def spawn(name: str) -> harness.Executor:
        ex = harness.Executor(python, relay_url=probe.url, app_name=APP, app_version=VERSION,
                              system_database_url=sys_db, steps_db_url=steps_db, name=name,
                              executor_metadata={"harness": name})
        executors.append(ex)
        return ex

    try:
        # One at a time: concurrent first launches can race in the schema migration (§13).
        a = spawn("A")
        conn_a = probe.wait_for_executor(a.executor_id)
        mark("A connected")
        b = spawn("B")
        conn_b = probe.wait_for_executor(b.executor_id)
        mark("B connected")
        assert a.executor_id != b.executor_id
        for conn, ex in ((conn_a, a), (conn_b, b)):
            assert conn.app == APP and conn.key == "dev-key"
            assert conn.info["application_version"] == VERSION
            assert conn.info["executor_metadata"] == {"harness": ex.name}
            assert conn.info["language"] == "python" and conn.info["dbos_version"] == "3.2.0"

        ids = a.start_workflows(count=N_WORKFLOWS, steps=N_STEPS, step_secs=STEP_SECS)
        assert len(set(ids)) == N_WORKFLOWS

        # Kill A once every workflow is inside its second step: well before any can finish.
        def all_in_step_2() -> bool:
            counts = harness.step_run_counts(steps_db)
            return all(counts.get((wf, 2), 0) >= 1 for wf in ids)

        harness.wait_until(all_in_step_2, timeout=15, interval=0.05, message="every workflow to reach step 2")
        a.kill()
        mark("A killed")
        assert set(harness.workflow_statuses(sys_db, ids).values()) == {"PENDING"}

        close_code = probe.wait_disconnected(a.executor_id)
        assert close_code == 1006, f"SIGKILL should look like an abnormal close, got {close_code}"

        reply = probe.exist_pending_workflows(via=b.executor_id, executor_id=a.executor_id,
                                              application_version=VERSION)
        assert reply["exist"] is True and not reply.get("error_message"), reply
        reply = probe.recovery(via=b.executor_id, executor_ids=[a.executor_id])
        assert reply["success"] is True and not reply.get("error_message"), reply
        mark("recovery sent")

        harness.wait_until(
            lambda: set(harness.workflow_statuses(sys_db, ids).values()) == {"SUCCESS"},
            timeout=30, interval=0.2, message="all recovered workflows to reach SUCCESS")
        mark("all SUCCESS")

        rows = harness.workflow_rows(sys_db, ids)
        assert {r["executor_id"] for r in rows.values()} == {b.executor_id}, rows
        reply = probe.exist_pending_workflows(via=b.executor_id, executor_id=a.executor_id,
                                              application_version=VERSION)
        assert reply["exist"] is False, reply

        counts = harness.step_run_counts(steps_db)
        runs = harness.step_runs(steps_db)
        for wf in ids:
            a_steps = [r["step_no"] for r in runs if r["workflow_id"] == wf and r["executor_id"] == a.executor_id]
            in_flight = max(a_steps)
            for step in range(1, N_STEPS + 1):
                n = counts.get((wf, step), 0)
                if step == in_flight:
                    assert n in (1, 2), f"{wf} step {step} (in flight at the kill) ran {n} times"
                else:
                    assert n == 1, f"{wf} step {step} ran {n} times"
            b_steps = sorted(r["step_no"] for r in runs if r["workflow_id"] == wf and r["executor_id"] == b.executor_id)
            assert b_steps and b_steps[-1] == N_STEPS and b_steps[0] >= in_flight, (wf, a_steps, b_steps)

        assert b.exit() == 0
        assert probe.wait_disconnected(b.executor_id) == 1000
        mark("B exited")
        print(f"\n[harness-probe] timings (s since test start): {marks}")
    except BaseException:
        for ex in executors:
            print(ex.stderr_tail())
        print("--- probe transcript ---\n" + probe.transcript())
        raise
    finally:
        for ex in executors:
            ex.close()
        probe.stop()
        harness.drop_database(admin_url, sys_name)
        harness.drop_database(admin_url, steps_name)
