"""Applications (``relay_es/adapters/rest/applications.py``) on a real ``relay serve``:
a Conductor client's sequence, and settings refused with what was wrong."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rest_client import rest as call
from tests.server import RelayServer


def test_conductor_style_client_sequence_works_unchanged(server: RelayServer) -> None:
    base = "/v2/orgs/local/apps/orders"
    assert call(server, "PUT", base, json={}).status_code == 204
    assert call(server, "PUT", base, json={}).status_code == 204  # idempotent
    r = call(server, "PATCH", base, json={"executorTimeoutSecs": 90, "gcTimeThresholdMs": 86_400_000,
                                          "gcRowsThreshold": 100_000, "globalTimeoutMs": 7_200_000})
    assert r.status_code == 204, r.text
    r = call(server, "GET", base + "/executors")
    assert r.status_code == 200 and r.json() == []
    app = call(server, "GET", base).json()
    assert app == {
        "id": app["id"], "name": "orders", "orgId": "local", "status": "UNAVAILABLE", "language": None,
        "executorTimeoutSecs": 90, "gcTimeThresholdMs": 86_400_000, "gcRowsThreshold": 100_000,
        "globalTimeoutMs": 7_200_000, "privateMode": False, "dbosCloud": False,
    }
    assert [a["name"] for a in call(server, "GET", "/v2/orgs/local/apps").json()] == ["orders"]
    r = call(server, "PATCH", base, json={"gcTimeThresholdMs": None})
    assert r.status_code == 204
    assert call(server, "GET", base).json()["gcTimeThresholdMs"] is None
    assert call(server, "DELETE", base).status_code == 204
    assert call(server, "GET", base).status_code == 404
    assert call(server, "GET", "/v2/orgs/local/apps").json() == []


@pytest.mark.parametrize("body, field", [
    ({"executorTimeoutSecs": 1.5}, "executorTimeoutSecs"),
    ({"executorTimeoutSecs": "60"}, "executorTimeoutSecs"),
    ({"executorTimeoutSecs": True}, "executorTimeoutSecs"),
    ({"executorTimeoutSecs": -1}, "executorTimeoutSecs"),
    ({"executorTimeoutSecs": 0}, "executorTimeoutSecs"),
    ({"executorTimeoutSecs": 10**12}, "executorTimeoutSecs"),
    ({"gcTimeThresholdMs": 0.5}, "gcTimeThresholdMs"),
    ({"gcTimeThresholdMs": -5}, "gcTimeThresholdMs"),
    ({"globalTimeoutMs": 10**15}, "globalTimeoutMs"),
    ({"gcRowsThreshold": -1}, "gcRowsThreshold"),
    ({"gcRowsThreshold": 10**13}, "gcRowsThreshold"),
    ({"privateMode": "yes"}, "privateMode"),
    ({"executorTimeoutSec": 60}, "executorTimeoutSec"),
])
def test_bad_settings_are_refused_with_422_and_nothing_changes(tmp_path, body: dict[str, Any], field: str) -> None:
    s = RelayServer(tmp_path).start()
    try:
        base = "/v2/orgs/local/apps/orders"
        call(s, "PUT", base)
        call(s, "PATCH", base, json={"executorTimeoutSecs": 30})
        before = call(s, "GET", base).json()
        def transitions() -> list[dict[str, Any]]:  # the feed, but for the operator actions' records
            return [e for e in call(s, "GET", "/v2/orgs/local/executor-events").json()
                    if not e["action"].startswith("action.")]

        audit_before = transitions()
        r = call(s, "PATCH", base, json=body)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["status"] == 422 and field in problem["detail"]
        assert call(s, "GET", base).json() == before
        assert transitions() == audit_before
    finally:
        s.stop()


def test_units_are_named_in_refusals(server: RelayServer) -> None:
    call(server, "PUT", "/v2/orgs/local/apps/orders")
    detail = call(server, "PATCH", "/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 0}).json()["detail"]
    assert "second" in detail
    detail = call(server, "PATCH", "/v2/orgs/local/apps/orders", json={"gcTimeThresholdMs": 0}).json()["detail"]
    assert "millisecond" in detail
    detail = call(server, "PATCH", "/v2/orgs/local/apps/orders", json={"gcRowsThreshold": 0}).json()["detail"]
    assert "row" in detail
