"""The ground of the workflow operations' end-to-end tests: a real ``relay serve``, one real
Python (``dbos==3.2.0``) and one real TypeScript (``@dbos-inc/dbos-sdk@5.2.11``) executor, each in
its own app with its own system database, each holding one workflow of every kind.

Per app (ids begin with the app's prefix; see ``ground`` in dbos_app.py and ts_app/app.js):
    running    blocked_workflow: PENDING, event "state" = waiting, until ``executor.release(id)``
    queued     3 blocked_workflows on ``ground_queue`` (concurrency 1): 1 PENDING, 2 ENQUEUED
    failed     failing_workflow: ERROR after one step
    steps      steps_workflow: SUCCESS; steps plain_step, flaky_step (retried), failing_step
               (error recorded), plain_step; events "progress", "result"; stream "numbers"
               (0, 1, 2, closed); a message on topic "note" to ``running``
    parent     parent_workflow: SUCCESS; children ``<parent>-child-0`` and ``-1``, SUCCESS
    schedule   ``<prefix>-tick``, every 2 s, runs tick_workflow

Use::

    def test_cancel(grounds: dict[str, Ground]) -> None:
        for g in grounds.values():                 # "python", "typescript"
            ... REST call on g.scene.api(...) for app g.app, workflow g.ids["running"] ...
            g.scene.wait(lambda: g.db.status(g.ids["running"]) == "CANCELLED", "cancelled")

``grounds`` runs once per Relay store (``store_url``: SQLite and Postgres).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import postgres_admin_url
from tests.e2e import harness
from tests.e2e.scene import FAST, Scene, TsScene
from tests.e2e.sysdb import SystemDb
from tests.server import RelayServer

QUEUE = "ground_queue"
WORKFLOW_NAMES = ("blocked_workflow", "failing_workflow", "steps_workflow", "parent_workflow",
                  "child_workflow", "tick_workflow")


@dataclass
class Ground:
    """One app's ground: its scene (Relay + system database), executor, workflow ids and probe."""

    sdk: str  # "python" or "typescript"
    scene: Scene
    executor: harness.Executor
    ids: dict[str, Any]  # running, failed, steps, parent: id; queued: [3 ids]; children: [2 ids]
    schedule: str
    db: SystemDb

    @property
    def app(self) -> str:
        return self.scene.app

    def settled(self) -> list[str]:
        """What still differs from the settled ground (empty once it is settled)."""
        return unsettled(self.db, self.ids)

    def wait_settled(self, timeout: float = 60.0) -> None:
        try:
            self.scene.wait(lambda: not self.settled(), f"the {self.sdk} ground to settle", timeout=timeout)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\nstill unsettled: {self.settled()}") from None


def unsettled(db: SystemDb, ids: dict[str, Any]) -> list[str]:
    """What in system database ``db`` still differs from the settled ground of ``ids``."""
    wrong = []
    st = db.statuses([ids["running"], ids["failed"], ids["steps"], ids["parent"], *ids["children"]])
    want = {ids["running"]: "PENDING", ids["failed"]: "ERROR", ids["steps"]: "SUCCESS",
            ids["parent"]: "SUCCESS", **{c: "SUCCESS" for c in ids["children"]}}
    wrong += [f"{wf} is {st[wf]}, not {s}" for wf, s in want.items() if st[wf] != s]
    queued = sorted(map(str, db.statuses(ids["queued"]).values()))
    if queued != ["ENQUEUED", "ENQUEUED", "PENDING"]:
        wrong.append(f"queued are {queued}")
    if db.events(ids["running"]).get("state") is None:
        wrong.append("running has not set its event yet")
    if not any(w["status"] == "SUCCESS" for w in db.workflows(name="tick_workflow")):
        wrong.append("no scheduled tick has run yet")
    return wrong


def start_ground(scene: Scene, sdk: str, prefix: str) -> Ground:
    """Spawns one executor in ``scene`` (HEALTHY in Relay) and starts its ground (not yet settled)."""
    executor = scene.spawn(f"{sdk}-ground")
    started = executor.ground(prefix)
    return Ground(sdk=sdk, scene=scene, executor=executor, ids=started["workflow_ids"],
                  schedule=started["schedule"], db=SystemDb(scene.sys_db))


@pytest.fixture
def grounds(tmp_path, store_url) -> Iterator[dict[str, Ground]]:
    """A Relay on ``store_url`` with a settled Python and a settled TypeScript ground."""
    admin = postgres_admin_url()
    # metrics collected and alerting rules checked every second: the e2e tests read them
    server = RelayServer(tmp_path, args=["--database-url", store_url],
                         env=FAST | {"RELAY_METRICS_INTERVAL_SECS": "1", "RELAY_ALERT_CHECK_SECS": "1",
                                         "RELAY_ALERT_WEBHOOK_ALLOW": "127.0.0.0/8"}).start()
    scenes: list[Scene] = []
    try:
        scenes.append(Scene(server, admin))
        scenes.append(TsScene(server, admin))
        ground = {"python": start_ground(scenes[0], "python", "py"),
                  "typescript": start_ground(scenes[1], "typescript", "ts")}
        for g in ground.values():
            g.wait_settled()
        yield ground
    except BaseException:
        for s in scenes:
            print(s.debug())
        raise
    finally:
        for s in scenes:
            s.close()
        server.stop()
