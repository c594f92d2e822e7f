"""Reading a running ``relay serve`` over its REST API, for the tests that drive one."""

from __future__ import annotations

from typing import Any

import httpx

from tests.server import RelayServer


def rest(server: RelayServer, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, server.http + path, headers=headers, timeout=30, **kw)


def listing(server: RelayServer, app: str = "app", org: str = "local",
            token: str | None = None) -> dict[str, dict[str, Any]]:
    """The executors table by executor id; empty while the application is not in the read model yet."""
    r = rest(server, "GET", f"/v2/orgs/{org}/apps/{app}/executors", token)
    if r.status_code == 404:
        return {}
    assert r.status_code == 200, r.text
    return {e["executorId"]: e for e in r.json()}


def audit(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """The first 1,000 audit entries matching ``params``."""
    r = rest(server, "GET", f"/v2/orgs/{org}/audit-logs", token, params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return r.json()


def audit_all(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """Every audit entry matching ``params``, paging with ``after``."""
    out: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = audit(server, org, token, **params, **({} if after is None else {"after": after}))
        out += page
        if len(page) < 1000:
            return out
        after = page[-1]["seq"]
