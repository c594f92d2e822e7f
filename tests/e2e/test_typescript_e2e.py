"""End to end with the TypeScript SDK: ``relay serve`` as a process, real
``@dbos-inc/dbos-sdk@5.2.11`` executors (Node) as processes, their system database on
Postgres; Relay's own store on SQLite and on Postgres.

The TypeScript twin of ``test_relay_e2e.py::test_killed_executor_is_recovered_by_its_peer``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import postgres_admin_url
from tests.e2e import harness, ts_harness
from tests.server import RelayServer

APP = "e2e-ts-app"
FAST = {
    "RELAY_PING_INTERVAL_SECS": "1",
    "RELAY_PING_WAIT_SECS": "2",
    "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "5",
    "RELAY_RESTART_SETTLE_SECS": "1",
}

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


class TsScene:
    """One Relay, one DBOS system database, the TypeScript executors started so far."""

    def __init__(self, server: RelayServer, admin_url: str) -> None:
        self.server = server
        self.admin_url = admin_url
        self.app_dir = ts_harness.ensure_node_modules()
        self.sys_name, self.steps_name = harness.unique_name("sys"), harness.unique_name("steps")
        self.sys_db = harness.create_database(admin_url, self.sys_name)
        self.steps_db = harness.create_database(admin_url, self.steps_name)
        self.executors: list[ts_harness.TsExecutor] = []

    def spawn(self, name: str, version: str = "v1") -> ts_harness.TsExecutor:
        # One at a time: the constructor returns after `launched`, and we wait until Relay has the
        # executor HEALTHY, so two first launches never race in the SDK's schema migration.
        ex = ts_harness.TsExecutor(relay_url=self.server.ws, app_name=APP, app_version=version,
                                   system_database_url=self.sys_db, steps_db_url=self.steps_db, name=name,
                                   app_dir=self.app_dir)
        self.executors.append(ex)
        self.wait(lambda: (self.executor(ex.executor_id) or {}).get("status") == "HEALTHY",
                  f"{name} to be HEALTHY in Relay")
        return ex

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, self.server.http + path, timeout=10, **kw)

    def executors_now(self) -> dict[str, dict[str, Any]]:
        r = self.api("GET", f"/v2/orgs/local/apps/{APP}/executors")
        assert r.status_code == 200, r.text
        return {e["executorId"]: e for e in r.json()}

    def executor(self, executor_id: str) -> dict[str, Any] | None:
        return self.executors_now().get(executor_id)

    def audit(self, executor_id: str) -> list[dict[str, Any]]:
        r = self.api("GET", "/v2/orgs/local/audit-logs", params={"executorId": executor_id, "limit": 1000})
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, pred: Any, what: str, timeout: float = 60.0) -> Any:
        return harness.wait_until(pred, timeout=timeout, interval=0.1, message=what)

    def set_grace(self, secs: int) -> None:
        assert self.api("PUT", f"/v2/orgs/local/apps/{APP}").status_code == 204
        r = self.api("PATCH", f"/v2/orgs/local/apps/{APP}", json={"executorTimeoutSecs": secs})
        assert r.status_code == 204, r.text
        assert self.api("GET", f"/v2/orgs/local/apps/{APP}").json()["executorTimeoutSecs"] == secs

    def close(self) -> None:
        for ex in self.executors:
            ex.close()
        harness.drop_database(self.admin_url, self.sys_name)
        harness.drop_database(self.admin_url, self.steps_name)

    def debug(self) -> str:
        return "\n".join(ex.stderr_tail(30) for ex in self.executors) + "\n--- relay ---\n" + self.server.log()[-6000:]


@pytest.fixture
def scene(tmp_path, store_url) -> Iterator[TsScene]:
    admin = postgres_admin_url()
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    s: TsScene | None = None
    try:
        s = TsScene(server, admin)
        yield s
    except BaseException:
        if s is not None:
            print(s.debug())
        raise
    finally:
        if s is not None:
            s.close()
        server.stop()


def at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))


def test_killed_typescript_executor_is_recovered_by_its_peer(scene: TsScene) -> None:
    grace = 3
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
    assert a.executor_id != b.executor_id
    ids = a.start_workflows(count=3, steps=6, step_secs=0.4)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 2), 0) for wf in ids),
               "every workflow to reach step 2")
    a.kill()
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered and deleted", timeout=60)
    scene.wait(lambda: set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"SUCCESS"},
               "every workflow to end SUCCESS", timeout=60)
    # each completed step ran once (only the step in flight at the kill may have run twice)
    runs = harness.step_runs(scene.steps_db)
    counts = harness.step_run_counts(scene.steps_db)
    for wf in ids:
        in_flight = max(r["step_no"] for r in runs if r["workflow_id"] == wf and r["executor_id"] == a.executor_id)
        for step in range(1, 7):
            allowed = (1, 2) if step == in_flight else (1,)
            assert counts[(wf, step)] in allowed, (wf, step, in_flight, counts)
        assert {r["executor_id"] for r in runs if r["workflow_id"] == wf and r["step_no"] > in_flight} == \
            {b.executor_id}, (wf, runs)
    assert {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {b.executor_id}
    # the story, in order, and the timing of the death
    entries = scene.audit(a.executor_id)
    assert [e["action"] for e in entries] == ["executor.connected", "executor.disconnected", "executor.declared_dead",
                                              "recovery.dispatched", "recovery.confirmed", "executor.deleted"]
    late = (at(entries[2]) - at(entries[1])).total_seconds() - grace
    assert 0 <= late < 1.0, f"declared dead {late:.3f}s after the grace ended"
    assert entries[3]["detail"]["targetExecutorId"] == b.executor_id
    assert entries[4]["detail"]["pendingFound"] is True
    # A is gone from the live list, but its history is still readable
    r = scene.api("GET", f"/v2/orgs/local/apps/{APP}/executors/{a.executor_id}/history")
    assert r.status_code == 200, r.text
    assert [h["type"] for h in r.json()] == ["Registered", "Connected", "Disconnected", "DeclaredDead",
                                            "RecoveryDispatched", "RecoveryConfirmed", "Deleted"]
    b_now = scene.executor(b.executor_id)
    assert b_now is not None and b_now["status"] == "HEALTHY"
