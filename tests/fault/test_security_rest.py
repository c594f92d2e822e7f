"""Attacks on the REST API and the handshake from outside (ADR 14), against a
real ``relay serve`` on both stores: a web page in development mode (DNS
rebinding, cross-site requests), hostile names and query strings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.fake_executor import FakeExecutor
from tests.server import RelayServer, TLS
from tests.support import until

L = "/v2/orgs/local"


@pytest.fixture
def dev(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    yield s
    s.stop()


def call(s: RelayServer, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, s.http + path, verify=TLS, timeout=10, **kw)


PAGE_CALLS = [
    ("GET", f"{L}/apps", None),
    ("PUT", f"{L}/apps/evil", {}),
    ("PATCH", f"{L}/apps/orders", {"executorTimeoutSecs": 1}),
    ("DELETE", f"{L}/apps/orders", None),
    ("POST", f"{L}/tokens/evil", {}),
    ("GET", f"{L}/tokens", None),
    ("GET", f"{L}/executor-events", None),
    ("GET", f"{L}/apps/orders/executors", None),
    ("GET", "/metrics", None),
]


def test_a_rebinding_page_cannot_call_the_api_in_development_mode(dev: RelayServer) -> None:
    """evil.example resolves to 127.0.0.1: the browser sends Host: evil.example:<port>
    (and, for its script's requests, its own Origin)."""
    assert call(dev, "PUT", f"{L}/apps/orders", json={}).status_code == 204
    before = (call(dev, "GET", f"{L}/apps").json(), call(dev, "GET", f"{L}/tokens").json())
    for headers in ({"Host": f"evil.example:{dev.port}"},
                    {"Host": f"evil.example:{dev.port}", "Origin": f"http://evil.example:{dev.port}"},
                    {"Origin": "http://evil.example"},  # a cross-site request straight to 127.0.0.1
                    {"Origin": "null"},  # a sandboxed frame, a file:// page
                    {"Host": "127.0.0.1.evil.example"}, {"Host": "localhost.evil.example"}):
        for method, path, body in PAGE_CALLS:
            r = call(dev, method, path, headers=headers, **({} if body is None else {"json": body}))
            assert r.status_code == 403, (headers, method, path, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
    assert (call(dev, "GET", f"{L}/apps").json(), call(dev, "GET", f"{L}/tokens").json()) == before
    assert call(dev, "GET", f"{L}/apps/orders").json()["executorTimeoutSecs"] != 1


PROXY_HEADERS = [{"X-Forwarded-For": "203.0.113.9"}, {"X-Forwarded-Host": "relay.example.com"},
                 {"X-Forwarded-Proto": "https"}, {"X-Real-IP": "203.0.113.9"},
                 {"Forwarded": "for=203.0.113.9;proto=https"}, {"X-Forwarded-Port": "443"},
                 {"x-forwarded-server": "proxy.example.com"}, {"X-Forwarded-Prefix": "/relay"}]


def test_development_mode_behind_a_reverse_proxy_is_refused(dev: RelayServer) -> None:
    """nginx on this machine sends Host: 127.0.0.1:8090 (its $proxy_host) from
    127.0.0.1: only its headers tell that the request came from elsewhere.
    uvicorn moves a trusted X-Forwarded-For into the client address; the
    header itself is what is checked."""
    assert call(dev, "PUT", f"{L}/apps/orders", json={}).status_code == 204
    before = (call(dev, "GET", f"{L}/apps").json(), call(dev, "GET", f"{L}/tokens").json())
    for headers in PROXY_HEADERS:
        headers = {"Host": f"127.0.0.1:{dev.port}", **headers}
        for method, path, body in PAGE_CALLS + [("GET", "/healthz", None), ("GET", "/openapi.json", None)]:
            r = call(dev, method, path, headers=headers, **({} if body is None else {"json": body}))
            assert r.status_code == 403, (headers, method, path, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["detail"] == ("development mode serves this machine only; "
                                          "run with --auth behind a proxy")
    assert (call(dev, "GET", f"{L}/apps").json(), call(dev, "GET", f"{L}/tokens").json()) == before
    assert call(dev, "GET", f"{L}/apps/orders").json()["executorTimeoutSecs"] != 1

    async def main() -> None:
        for headers in PROXY_HEADERS:
            with pytest.raises(websockets.InvalidStatus) as e:
                await websockets.connect(f"{dev.ws}/websocket/proxied/any-key", additional_headers=headers,
                                         open_timeout=15)
            assert e.value.response.status_code == 403
            assert b"run with --auth behind a proxy" in e.value.response.body
        ok = await FakeExecutor(dev.ws, app="mine", executor_id="A").connect()  # no proxy: served
        await ok.close()

    asyncio.run(main())
    assert "proxied" not in [a["name"] for a in call(dev, "GET", f"{L}/apps").json()]


def test_this_machine_is_still_served(dev: RelayServer) -> None:
    for headers in ({}, {"Host": f"localhost:{dev.port}"}, {"Host": f"127.0.0.1:{dev.port}"},
                    {"Host": "[::1]"}, {"Origin": f"http://localhost:{dev.port}"},
                    {"Origin": f"http://127.0.0.1:{dev.port}"}):
        assert call(dev, "GET", f"{L}/apps", headers=headers).status_code == 200, headers


def test_a_page_cannot_register_a_fake_executor_in_development_mode(dev: RelayServer) -> None:
    async def main() -> None:
        for origin in (f"http://evil.example:{dev.port}", "null", "https://attacker.test"):
            with pytest.raises(websockets.InvalidStatus) as e:
                await websockets.connect(f"{dev.ws}/websocket/pwned/any-key", origin=origin, open_timeout=15)
            assert e.value.response.status_code == 403
        # the SDKs send no Origin; a loopback page is this machine
        ok = await FakeExecutor(dev.ws, app="mine", executor_id="A").connect()
        await ok.close()
        local = await websockets.connect(f"{dev.ws}/websocket/mine/k", origin=f"http://localhost:{dev.port}",
                                         open_timeout=15)
        await local.close()

    asyncio.run(main())
    assert "pwned" not in [a["name"] for a in call(dev, "GET", f"{L}/apps").json()]
    assert call(dev, "GET", f"{L}/apps/pwned/executors").status_code == 404

    def refusals() -> list[dict[str, Any]]:
        return [a for a in call(dev, "GET", f"{L}/executor-events", params={"limit": 1000}).json()
                if a["action"] == "auth.refused"]

    got = asyncio.run(until(refusals, 10, what="the refusal in the lifecycle feed"))  # a read model: folded after
    assert all(a["detail"]["status"] == 403 for a in got)


def test_hostile_names_and_queries_get_clear_refusals_and_change_nothing(dev: RelayServer) -> None:
    assert call(dev, "PUT", f"{L}/apps/orders", json={}).status_code == 204
    for path in (f"{L}/apps/orders%0A", f"{L}/apps/%1B%5B2J", f"{L}/apps/" + "a" * 300, f"{L}/apps/.hidden"):
        r = call(dev, "PUT", path, json={})
        assert r.status_code == 422, (path, r.text)
        assert call(dev, "GET", path).status_code == 404
    r = call(dev, "GET", f"{L}/apps/orders/executors/{'x' * 600}/history")
    assert r.status_code == 404 and "x" * 600 not in r.text
    r = call(dev, "GET", f"{L}/apps/orders/executors/a%1Bb/history")
    assert r.status_code == 404 and "\x1b" not in r.text
    r = call(dev, "GET", f"{L}/executor-events", params={"executorId": "x" * 1000})
    assert r.status_code == 422
    r = call(dev, "GET", f"{L}/apps/orders/executors", params={"asOf": "2026-01-01T00:00:00Z" + "0" * 100})
    assert r.status_code == 422
    assert call(dev, "GET", f"{L}/apps?x=1&x=2").status_code == 400
    assert call(dev, "GET", "/v2/orgs/other/apps").status_code == 404
    assert [a["name"] for a in call(dev, "GET", f"{L}/apps").json()] == ["orders"]
