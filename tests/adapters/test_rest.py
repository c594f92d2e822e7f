"""The REST API and the auth matrix, against a real ``relay serve``."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.fake_executor import FakeExecutor
from tests.server import RELAY, RelayServer
from tests.support import until


@pytest.fixture
def server(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    yield s
    s.stop()


def call(server: RelayServer, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, server.http + path, headers=headers, timeout=10, **kw)


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
        audit_before = call(s, "GET", "/v2/orgs/local/audit-logs").json()
        r = call(s, "PATCH", base, json=body)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["status"] == 422 and field in problem["detail"]
        assert call(s, "GET", base).json() == before
        assert call(s, "GET", "/v2/orgs/local/audit-logs").json() == audit_before
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


def test_errors_are_problem_documents(server: RelayServer) -> None:
    for method, path, status in (("GET", "/v2/orgs/local/apps/nope", 404),
                                 ("PATCH", "/v2/orgs/local/apps/nope", 404),
                                 ("DELETE", "/v2/orgs/local/tokens/nope", 404),
                                 ("GET", "/v2/orgs/other/apps", 404),
                                 ("PUT", "/v2/orgs/local/apps/bad%20name", 422),
                                 ("GET", "/v2/orgs/local/apps/nope/executors/x/history", 404),
                                 ("GET", "/v2/orgs/local/apps/nope/executors?asOf=yesterday", 422),
                                 ("GET", "/v2/orgs/local/audit-logs?limit=0", 422)):
        kw = {"json": {"executorTimeoutSecs": 5}} if method == "PATCH" else {}
        r = call(server, method, path, **kw)
        assert r.status_code == status, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json"), (method, path)
        assert r.json()["status"] == status and r.json()["detail"]


def test_tokens_are_shown_once_and_listed_without_the_secret(server: RelayServer) -> None:
    call(server, "PUT", "/v2/orgs/local/apps/orders")
    r = call(server, "POST", "/v2/orgs/local/tokens/ci", json={"appNames": ["orders"]})
    assert r.status_code == 201
    secret = r.json()["token"]
    listed = call(server, "GET", "/v2/orgs/local/tokens").json()
    assert [t["tokenName"] for t in listed] == ["ci"] and secret not in str(listed)
    assert listed[0]["appNames"] == ["orders"]
    assert call(server, "POST", "/v2/orgs/local/tokens/ci").status_code == 409  # live token of that name
    assert call(server, "DELETE", "/v2/orgs/local/tokens/ci").status_code == 204
    assert call(server, "GET", "/v2/orgs/local/tokens").json() == []
    actions = [a["action"] for a in call(server, "GET", "/v2/orgs/local/audit-logs").json()]
    assert actions[-2:] == ["token.created", "token.revoked"]
    assert secret not in server.log()


def test_metrics_and_openapi(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A").connect()
        healthy = 'relay_executors{app="orders",org="local",status="HEALTHY"} 1.0'

        def counted() -> str | None:
            text = call(server, "GET", "/metrics").text
            return text if healthy in text else None

        text = await until(counted, what="A counted HEALTHY")
        assert "relay_open_connections 1.0" in text
        assert 'relay_transitions_total{event="Connected"}' in text
        assert "relay_event_store_append_seconds_count" in text
        await a.close()

    asyncio.run(main())
    doc = call(server, "GET", "/openapi.json").json()
    paths = doc["paths"]
    for p in ("/v2/orgs/{org}/apps", "/v2/orgs/{org}/apps/{app}", "/v2/orgs/{org}/apps/{app}/executors",
              "/v2/orgs/{org}/apps/{app}/executors/{executor_id}/history", "/v2/orgs/{org}/tokens",
              "/v2/orgs/{org}/tokens/{token_name}", "/v2/orgs/{org}/audit-logs", "/healthz", "/metrics"):
        assert p in paths, p
    assert set(paths["/v2/orgs/{org}/apps/{app}"]) >= {"get", "put", "patch", "delete"}


def test_only_the_openapi_document_is_served_no_pages_that_load_scripts(server: RelayServer) -> None:
    """Litestar's /schema pages (Swagger UI, Redoc, Elements, RapiDoc, Scalar)
    load unpinned scripts from public CDNs onto Relay's origin."""
    for path in ("/schema", "/schema/", "/schema/swagger", "/schema/redoc", "/schema/elements", "/schema/rapidoc",
                 "/schema/scalar", "/schema/openapi.json", "/schema/openapi.yaml", "/schema/oauth2-redirect.html",
                 "/openapi.json/swagger", "/openapi.json/redoc", "/openapi.json/elements"):
        r = call(server, "GET", path)
        assert r.status_code == 404, (path, r.status_code)
        assert "<script" not in r.text.lower() and "cdn" not in r.text.lower(), path
    r = call(server, "GET", "/openapi.json")
    assert r.status_code == 200 and "/v2/orgs/{org}/apps/{app}" in r.json()["paths"]
    assert r.headers["content-type"] == "application/json"


def test_healthz_tells_the_instance_in_development_mode(server: RelayServer) -> None:
    full = call(server, "GET", "/healthz").json()  # development mode: this machine
    assert full["status"] == "ok" and full["instance"] and full["store"] in ("sqlite", "postgres")


def test_healthz_tells_the_instance_only_to_an_operator_in_auth_mode(
        auth_server: tuple[RelayServer, dict[str, str]], store_url: str) -> None:
    s, t = auth_server
    for token in (None, "relay_not-a-real-token", t["revoked"], t["scoped"]):
        r = call(s, "GET", "/healthz", token)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, (token, r.text)
    r = call(s, "GET", "/healthz", headers={"Authorization": "garbage"})
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    for token in (t["acme"], t["other"]):  # an org-wide token of any org: the instance is process-wide
        body = call(s, "GET", "/healthz", token).json()
        assert body["status"] == "ok" and body["instance"] and store_url.startswith(body["store"])
    # auth mode is the mode for behind a proxy: its headers change nothing there
    r = call(s, "GET", "/v2/orgs/acme/apps/orders", t["acme"], headers={"X-Forwarded-For": "203.0.113.9",
                                                                       "X-Forwarded-Proto": "https"})
    assert r.status_code == 200


# ------------------------------------------------------------------ auth


@pytest.fixture
def auth_server(tmp_path, store_url) -> Iterator[tuple[RelayServer, dict[str, str]]]:
    """A server in auth mode, with tokens made the way the README says: relay admin create-token."""

    def admin_token(org: str, name: str, *apps: str) -> str:
        args = RELAY + ["admin", "create-token", name, "--org", org, "--database-url", store_url]
        for a in apps:
            args += ["--app", a]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    tokens = {"acme": admin_token("acme", "admin"), "other": admin_token("other", "admin"),
              "scoped": admin_token("acme", "billing-only", "billing"),
              "revoked": admin_token("acme", "old")}
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    call(s, "PUT", "/v2/orgs/acme/apps/orders", tokens["acme"])
    call(s, "PUT", "/v2/orgs/acme/apps/billing", tokens["acme"])
    assert call(s, "DELETE", "/v2/orgs/acme/tokens/old", tokens["acme"]).status_code == 204
    yield s, tokens
    s.stop()


def test_rest_auth_matrix(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = auth_server
    app = "/v2/orgs/acme/apps/orders"
    assert call(s, "GET", app).status_code == 401
    assert call(s, "GET", app, headers={"Authorization": "Token abc"}).status_code == 401
    assert call(s, "GET", app, headers={"Authorization": "Bearer"}).status_code == 401
    assert call(s, "GET", app, "relay_not-a-real-token").status_code == 401
    assert call(s, "GET", app, t["revoked"]).status_code == 401
    assert call(s, "GET", app, t["other"]).status_code == 403  # another org's token
    assert call(s, "GET", app, t["scoped"]).status_code == 403  # scoped to another application
    assert call(s, "GET", "/v2/orgs/acme/apps/billing", t["scoped"]).status_code == 200
    assert call(s, "GET", "/v2/orgs/acme/apps", t["scoped"]).status_code == 403
    assert call(s, "GET", app, t["acme"]).status_code == 200
    assert call(s, "GET", "/v2/orgs/other/apps", t["other"]).json() == []
    r = call(s, "GET", app)
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers.get("www-authenticate") == "Bearer"
    assert call(s, "GET", "/healthz").status_code == 200  # liveness needs no token
    log = s.log()
    for secret in t.values():
        assert secret not in log


def test_websocket_auth_matrix_and_revocation(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = auth_server

    async def refused(app: str, key: str) -> int:
        with pytest.raises(websockets.InvalidStatus) as e:
            await websockets.connect(f"{s.ws}/websocket/{app}/{key}", open_timeout=15)
        return e.value.response.status_code

    async def main() -> None:
        assert await refused("orders", "relay_unknown") == 401
        assert await refused("orders", t["revoked"]) == 401
        assert await refused("orders", t["other"]) == 403  # another org: the app is not registered there
        assert await refused("orders", t["scoped"]) == 403  # scoped to another application
        assert await refused("unregistered", t["acme"]) == 403
        ok = await FakeExecutor(s.ws, app="orders", key=t["acme"], executor_id="A").connect()
        scoped = await FakeExecutor(s.ws, app="billing", key=t["scoped"], executor_id="B").connect()
        assert call(s, "DELETE", "/v2/orgs/acme/tokens/billing-only", t["acme"]).status_code == 204
        assert await scoped.closed() == 4003
        assert ok.ws.close_code is None  # the other executor is undisturbed
        b = await until(lambda: (e := call(s, "GET", "/v2/orgs/acme/audit-logs", t["acme"],
                                           params={"executorId": "B"}).json())
                        and e[-1]["action"] == "executor.disconnected" and e, what="B's disconnect audited")
        assert b[-1]["detail"]["reason"] == "token_revoked"
        await ok.close()

    asyncio.run(main())
    refusals = [a for a in call(s, "GET", "/v2/orgs/acme/audit-logs", t["acme"], params={"limit": 1000}).json()
                if a["action"] == "auth.refused"]
    assert {a["detail"]["status"] for a in refusals} >= {401, 403}
    assert all(secret not in s.log() for secret in t.values())
    assert "relay_unknown" not in s.log()


def test_repeated_refusals_from_one_address_are_slowed_down(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = auth_server

    async def attempt() -> float:
        started = time.monotonic()
        with pytest.raises(websockets.InvalidStatus):
            await websockets.connect(f"{s.ws}/websocket/orders/relay_wrong", open_timeout=15)
        return time.monotonic() - started

    async def main() -> list[float]:
        return [await attempt() for _ in range(5)]

    took = asyncio.run(main())
    # 0, 0.1, 0.2, 0.4, 0.8 s of added delay: the fifth costs the client at least its delay
    # (compared with the bound, not with the first attempt, whose own time varies with load)
    assert took[4] >= 0.75, took
    metrics = call(s, "GET", "/metrics", t["acme"]).text  # /metrics needs an org-wide token in auth mode
    assert 'relay_auth_refused_total{where="websocket"} 5.0' in metrics


def test_schemathesis_finds_no_server_error(tmp_path) -> None:
    """A property-based run of the API from its own OpenAPI document: no 5xx."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    s = RelayServer(tmp_path).start()
    try:
        call(s, "PUT", "/v2/orgs/local/apps/orders")
        schema = schemathesis.openapi.from_url(s.http + "/openapi.json")
        failures: list[str] = []
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12
        for operation in operations:

            @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            @given(case=operation.as_strategy())
            def run(case: Any) -> None:
                response = case.call(base_url=s.http)
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.formatted_path} -> {response.status_code}: "
                                    f"{response.text[:200]}")

            run()
        assert not failures, "\n".join(failures[:10])
    finally:
        s.stop()
