"""The operator's endpoints (``relay_es/adapters/rest/health.py``) on a real ``relay serve``:
metrics, the OpenAPI document and nothing else under it, liveness in both modes."""

from __future__ import annotations

import asyncio

from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.support import until


def test_metrics_and_openapi(server: RelayServer) -> None:
    async def main() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A").connect()
        healthy = 'relay_executors{app="orders",org="local",status="HEALTHY"} 1.0'

        def counted() -> str | None:
            text = call(server, "GET", "/metrics").text
            return text if healthy in text else None

        text = await until(counted, what="A counted HEALTHY")
        # one charset: Litestar adds it to a text/ type, and a repeated parameter is an error (RFC 6838 4.3)
        assert call(server, "GET", "/metrics").headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "relay_open_connections 1.0" in text
        assert 'relay_transitions_total{event="Connected"}' in text
        assert "relay_event_store_append_seconds_count" in text
        await a.close()

    asyncio.run(main())
    doc = call(server, "GET", "/openapi.json").json()
    paths = doc["paths"]
    for p in ("/v2/orgs/{org}/apps", "/v2/orgs/{org}/apps/{app}", "/v2/orgs/{org}/apps/{app}/executors",
              "/v2/orgs/{org}/apps/{app}/executors/{executor_id}/history", "/v2/orgs/{org}/tokens",
              "/v2/orgs/{org}/tokens/{token_name}", "/v2/orgs/{org}/executor-events", "/v2/orgs/{org}/audit-logs",
              "/healthz", "/readyz", "/metrics"):
        assert p in paths, p
    assert set(paths["/v2/orgs/{org}/apps/{app}"]) >= {"get", "put", "patch", "delete"}
    # a body its handler decodes itself is in the document too (relay_es/adapters/rest/openapi.py)
    search = paths["/v2/orgs/{org}/apps/{app}/workflows/search"]["post"]["requestBody"]
    assert search["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/WorkflowSearchBody"}
    assert "workflowIds" in doc["components"]["schemas"]["WorkflowSearchBody"]["properties"]


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


def test_a_serving_instance_is_ready_to_anyone(server: RelayServer) -> None:
    """``/readyz``: the process manager started and the read models current (the server fixture has
    waited for neither: ``/healthz`` answers first)."""
    r = wait_ready(server)
    assert r.json() == {"status": "ready"}


def wait_ready(server: RelayServer, token: str | None = None):  # type: ignore[no-untyped-def]
    import time

    end = time.monotonic() + 20
    while True:
        r = call(server, "GET", "/readyz", token)
        if r.status_code == 200 or time.monotonic() > end:
            return r
        assert r.status_code == 503 and r.json() == {"status": "not_ready", "reason": "starting"}, r.text
        time.sleep(0.05)


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
    for token in (None, "relay_not-a-real-token", t["acme"]):  # readiness is public, and tells nothing more
        r = wait_ready(s, token)
        assert r.status_code == 200 and r.json() == {"status": "ready"}, (token, r.text)
    for token in (t["acme"], t["other"]):  # an org-wide token of any org: the instance is process-wide
        body = call(s, "GET", "/healthz", token).json()
        assert body["status"] == "ok" and body["instance"] and store_url.startswith(body["store"])
    # auth mode is the mode for behind a proxy: its headers change nothing there
    r = call(s, "GET", "/v2/orgs/acme/apps/orders", t["acme"], headers={"X-Forwarded-For": "203.0.113.9",
                                                                       "X-Forwarded-Proto": "https"})
    assert r.status_code == 200


def test_an_org_wide_token_scrapes_its_own_org_s_series_only(auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    """Two tenants on one Relay: ``other``'s token does not read ``acme``'s application names on
    ``/metrics``; ``acme``'s does, and both read the process-wide series."""
    s, tokens = auth_server

    async def main() -> None:
        a = await FakeExecutor(s.ws, app="orders", executor_id="A", key=tokens["acme"]).connect()
        healthy = 'relay_executors{app="orders",org="acme",status="HEALTHY"} 1.0'

        def counted() -> str | None:
            text = call(s, "GET", "/metrics", tokens["acme"]).text
            return text if healthy in text else None

        await until(counted, what="A counted HEALTHY")
        other = call(s, "GET", "/metrics", tokens["other"])
        assert other.status_code == 200
        assert 'org="acme"' not in other.text and "orders" not in other.text
        assert "relay_open_connections 1.0" in other.text
        assert call(s, "GET", "/metrics", tokens["scoped"]).status_code == 403
        await a.close()

    asyncio.run(main())
