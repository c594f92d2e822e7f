"""End to end: ``listMetrics`` (``relay_es/adapters/rest/app_metrics.py``) through a real
``relay serve`` collecting every second (``RELAY_METRICS_INTERVAL_SECS=1``) from a real Python
(``dbos==3.2.0``) and a real TypeScript (``@dbos-inc/dbos-sdk@5.2.11``) executor, on the ground
of ``tests/e2e/ground.py``; Relay's own store on SQLite and on Postgres.

For a window Relay has collected, the answer holds exactly what the executor's system
database holds: workflows created per name, steps completed per function, per one-second
bucket (read directly with SQL, as the SDKs count them), in the reference's ``Metric`` shape;
and ``/metrics`` has each application's workflows by name.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conductor_schema import check_response
from tests.e2e.ground import Ground

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def bucket(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def truth(g: Ground, start: int, end: int) -> Counter[tuple[str, str, str]]:
    """What the system database holds for the buckets of ``[start, end)``, counted as the SDKs count."""
    counted: Counter[tuple[str, str, str]] = Counter()
    for r in g.db._rows("SELECT name, created_at FROM {s}.workflow_status WHERE created_at >= %s AND "
                        "created_at < %s AND application_name = %s", (start * 1000, end * 1000, g.scene.app)):
        counted[(bucket(int(r["created_at"]) // 1000), "workflow_count", r["name"])] += 1
    for r in g.db._rows("SELECT function_name, completed_at_epoch_ms FROM {s}.operation_outputs WHERE "
                        "completed_at_epoch_ms >= %s AND completed_at_epoch_ms < %s AND application_name = %s",
                        (start * 1000, end * 1000, g.scene.app)):
        counted[(bucket(int(r["completed_at_epoch_ms"]) // 1000), "step_count", r["function_name"])] += 1
    return counted


def answered(g: Ground, start: int, end: int) -> tuple[Counter[tuple[str, str, str]], list[dict[str, Any]]]:
    r = g.scene.api("GET", f"/v2/orgs/local/apps/{g.scene.app}/metrics",
                    params={"startTime": iso(start), "endTime": iso(end)})
    assert r.status_code == 200, r.text
    body = r.json()
    check_response("listMetrics", 200, body)
    return Counter({(m["timeBucket"], m["metricType"], m["metricName"]): m["value"] for m in body
                    if m["metricType"] != "recovery_count"}), body


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_collected_metrics_are_what_the_system_database_holds(grounds: dict[str, Ground], sdk: str) -> None:
    g = grounds[sdk]
    first = min(int(w["created_at"]) for w in g.db.workflows()) // 1000
    # the scheduled tick goes on creating workflows: compare a window that ended a little ago
    end = int(time.time()) - 2
    want = truth(g, first, end)
    assert any(k[1] == "workflow_count" for k in want) and any(k[1] == "step_count" for k in want), want
    deadline = time.monotonic() + 30
    while True:
        got, body = answered(g, first, end)
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == want, {"missing": want - got, "extra": got - want}
    app_id = g.scene.api("GET", f"/v2/orgs/local/apps/{g.scene.app}").json()["id"]
    assert {m["appId"] for m in body} == {app_id} and {m["granularity"] for m in body} == {1}

    text = g.scene.api("GET", "/metrics").text
    fams = {f.name: f.samples for f in text_string_to_metric_families(text)}
    by_name = {s.labels["workflow"]: s.value for s in fams["relay_app_workflows"]
               if s.name == "relay_app_workflows_total" and s.labels["app"] == g.scene.app}
    for (_, kind, name), n in want.items():
        if kind == "workflow_count":
            assert by_name.get(name, 0) >= n, (name, by_name)
