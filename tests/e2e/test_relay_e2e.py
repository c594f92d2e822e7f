"""End to end: ``relay serve`` as a process, real ``dbos==3.2.0`` executors as
processes, their system database on Postgres; Relay's own store on SQLite and
on Postgres."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import postgres_admin_url
from tests.e2e import harness
from tests.server import RelayServer

APP = "e2e-app"
FAST = {
    "RELAY_PING_INTERVAL_SECS": "1",
    "RELAY_PING_WAIT_SECS": "2",
    "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "5",
    "RELAY_RESTART_SETTLE_SECS": "1",
}

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


class Scene:
    """One Relay, one DBOS system database, the executors started so far."""

    def __init__(self, server: RelayServer, admin_url: str) -> None:
        self.server = server
        self.admin_url = admin_url
        self.python = harness.ensure_dbos_venv(harness.REPO_ROOT)
        self.sys_name, self.steps_name = harness.unique_name("sys"), harness.unique_name("steps")
        self.sys_db = harness.create_database(admin_url, self.sys_name)
        self.steps_db = harness.create_database(admin_url, self.steps_name)
        self.executors: list[harness.Executor] = []

    def spawn(self, name: str, version: str = "v1") -> harness.Executor:
        ex = harness.Executor(self.python, relay_url=self.server.ws, app_name=APP, app_version=version,
                              system_database_url=self.sys_db, steps_db_url=self.steps_db, name=name)
        self.executors.append(ex)
        self.wait(lambda: self.executor(ex.executor_id) is not None and
                  self.executor(ex.executor_id)["status"] == "HEALTHY", f"{name} to be HEALTHY in Relay")
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
def scene(tmp_path, store_url) -> Iterator[Scene]:
    admin = postgres_admin_url()
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    s = Scene(server, admin)
    try:
        yield s
    except BaseException:
        print(s.debug())
        raise
    finally:
        s.close()
        server.stop()


def at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00"))


def test_killed_executor_is_recovered_by_its_peer(scene: Scene) -> None:
    grace = 3
    scene.set_grace(grace)
    a = scene.spawn("A")
    b = scene.spawn("B")
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
    assert {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {b.executor_id}
    # the story, in order, and the timing of the death
    entries = scene.audit(a.executor_id)
    assert [e["action"] for e in entries] == ["executor.connected", "executor.disconnected", "executor.declared_dead",
                                              "recovery.dispatched", "recovery.confirmed", "executor.deleted"]
    late = (at(entries[2]) - at(entries[1])).total_seconds() - grace
    assert 0 <= late < 1.0, f"declared dead {late:.3f}s after the grace ended"
    assert entries[3]["detail"]["targetExecutorId"] == b.executor_id
    assert entries[4]["detail"]["pendingFound"] is True
    history = scene.api("GET", f"/v2/orgs/local/apps/{APP}/executors/{a.executor_id}/history").json()
    assert [h["type"] for h in history] == ["Registered", "Connected", "Disconnected", "DeclaredDead",
                                           "RecoveryDispatched", "RecoveryConfirmed", "Deleted"]
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"


def test_executor_that_comes_back_within_grace_is_not_recovered(scene: Scene) -> None:
    scene.set_grace(30)
    a = scene.spawn("A")
    b = scene.spawn("B")
    a.stop()  # frozen: pings go unanswered and Relay drops the socket
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "DISCONNECTED", "A to be DISCONNECTED", timeout=15)
    a.cont()  # thawed: the SDK notices and reconnects with the same executor id
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "HEALTHY", "A to be HEALTHY again", timeout=30)
    time.sleep(1)
    actions = [e["action"] for e in scene.audit(a.executor_id)]
    assert actions[:3] == ["executor.connected", "executor.disconnected", "executor.reconnected"]
    assert not any(x.startswith("recovery.") or x == "executor.declared_dead" for x in actions)
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"


def test_no_executor_of_the_version_means_waiting_until_one_connects(scene: Scene) -> None:
    scene.set_grace(2)
    a = scene.spawn("A", "v1")
    scene.spawn("B", "v2")
    ids = a.start_workflows(count=2, steps=20, step_secs=0.5)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 1), 0) for wf in ids),
               "every workflow to start")
    a.kill()
    scene.wait(lambda: (scene.executor(a.executor_id) or {}).get("status") == "DEAD", "A to be DEAD", timeout=30)
    scene.wait(lambda: "recovery.deferred" in [e["action"] for e in scene.audit(a.executor_id)], "the wait to be audited")
    time.sleep(2)
    assert "recovery.dispatched" not in [e["action"] for e in scene.audit(a.executor_id)]
    assert set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"PENDING"}
    c = scene.spawn("C", "v1")
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered by C", timeout=60)
    dispatched = [e for e in scene.audit(a.executor_id) if e["action"] == "recovery.dispatched"]
    assert [d["detail"]["targetExecutorId"] for d in dispatched] == [c.executor_id]
    scene.wait(lambda: {r["executor_id"] for r in harness.workflow_rows(scene.sys_db, ids).values()} == {c.executor_id},
               "the workflows to run on C", timeout=30)
