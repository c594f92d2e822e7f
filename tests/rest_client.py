"""Reading a running ``relay serve`` over its REST API, for the tests that drive one."""

from __future__ import annotations

from typing import Any

import httpx

from tests.server import TLS, RelayServer


def rest(server: RelayServer, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, server.http + path, headers=headers, timeout=30, verify=TLS, **kw)


def listing(server: RelayServer, app: str = "app", org: str = "local",
            token: str | None = None) -> dict[str, dict[str, Any]]:
    """The executors table by executor id; empty while the application is not in the read model yet."""
    r = rest(server, "GET", f"/v2/orgs/{org}/apps/{app}/executors", token)
    if r.status_code == 404:
        return {}
    assert r.status_code == 200, r.text
    return {e["executorId"]: e for e in r.json()}


def events(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """The first 1,000 entries of the lifecycle feed matching ``params``."""
    r = rest(server, "GET", f"/v2/orgs/{org}/executor-events", token, params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return r.json()


def events_all(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """Every entry of the lifecycle feed matching ``params``, paging with ``after``."""
    out: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        page = events(server, org, token, **params, **({} if after is None else {"after": after}))
        out += page
        if len(page) < 1000:
            return out
        after = page[-1]["seq"]


def audit_log(server: RelayServer, org: str = "local", token: str | None = None, **params: Any) -> list[dict[str, Any]]:
    """The first 1,000 entries of the audit log (Conductor's ``AuditLogEntry``, newest first) matching ``params``."""
    r = rest(server, "GET", f"/v2/orgs/{org}/audit-logs", token, params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return r.json()


Record = tuple[dict[str, Any], dict[str, Any] | None]


def as_records(entries: list[dict[str, Any]], app: str | None = None) -> list[Record]:
    """Audit-log entries (newest first) as the actions' two halves, oldest first, optionally of
    one application: (requested ``{actionId, operation, actor: {kind, id}, source, target:
    {type, ids, count}, parameters}``, completed ``{actionId, operation, outcome, message,
    executorId, result}`` or None while the action is pending)."""
    out: list[Record] = []
    for e in reversed(entries):
        d = e["details"]
        if app is not None and d["app"] != app:
            continue
        subject = e["subject"]
        anonymous = subject["display"] == f"anonymous ({subject['id']})"
        kind = "user" if subject["type"] == "user" else "anonymous" if anonymous else "token"
        requested = {"actionId": e["id"], "operation": e["operation"], "actor": {"kind": kind, "id": subject["id"]},
                     "source": e["sourceIp"] or None, "target": d["targets"], "parameters": d["parameters"]}
        completed = None if d["outcome"] == "pending" else {
            "actionId": e["id"], "operation": e["operation"], "outcome": d["outcome"], "message": d["message"],
            "executorId": d["executorId"], "result": d["result"]}
        out.append((requested, completed))
    return out
