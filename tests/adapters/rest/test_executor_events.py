"""The audit log (``relay_es/adapters/rest/audit.py``) on a real ``relay serve``, both stores.

The REST layer's own job: each entry's shape, the org's entries in ``seq``
order, the ``app`` and ``executorId`` filters, pages of ``limit`` (1-1000,
default 100) after ``after``, and refusals as problem documents. Which events
make which entries is ``tests/projections/test_audit.py``'s.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
import pytest

from relay_es.adapters import authz
from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.server import RelayServer, TLS

L = "/v2/orgs/local"
LOG = L + "/executor-events"
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def entries(server: RelayServer, **params: Any) -> list[dict[str, Any]]:
    r = call(server, "GET", LOG, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def connect_and_leave(server: RelayServer, app: str, executor_id: str) -> None:
    async def go() -> None:
        ex = await FakeExecutor(server.ws, app=app, executor_id=executor_id).connect()
        await ex.close()

    asyncio.run(go())


def test_entries_in_order_in_their_shape_filtered_by_app_and_executor(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    call(server, "PUT", L + "/apps/billing")
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 30}).status_code == 204
    connect_and_leave(server, "orders", "A")
    connect_and_leave(server, "billing", "B")
    deadline = time.monotonic() + 15  # the hub records a disconnection after the socket has closed
    while len([e for e in entries(server, limit=1000) if e["action"] == "executor.disconnected"]) < 2:
        assert time.monotonic() < deadline, "both disconnections audited"
        time.sleep(0.05)
    assert call(server, "POST", L + "/tokens/ci", json={"appNames": ["orders"]}).status_code == 201

    everything = entries(server, limit=1000)
    seqs = [e["seq"] for e in everything]
    assert seqs == sorted(set(seqs))
    for e in everything:
        assert set(e) == {"seq", "at", "org", "app", "executorId", "action", "detail"}, e
        assert e["org"] == "local" and INSTANT.match(e["at"]) and isinstance(e["detail"], dict)
    assert [(e["app"], e["executorId"], e["action"]) for e in everything] == [
        ("orders", None, "app.registered"), ("billing", None, "app.registered"), ("orders", None, "app.updated"),
        ("orders", "A", "executor.connected"), ("orders", "A", "executor.disconnected"),
        ("billing", "B", "executor.connected"), ("billing", "B", "executor.disconnected"),
        (None, None, "token.created"),
    ]
    assert everything[2]["detail"] == {"changes": {"executorTimeoutSecs": 30}}
    assert everything[7]["detail"]["tokenName"] == "ci"

    assert entries(server, app="orders") == [e for e in everything if e["app"] == "orders"]
    assert entries(server, app="billing") == [e for e in everything if e["app"] == "billing"]
    assert entries(server, executorId="A") == everything[3:5]
    assert entries(server, app="orders", executorId="A") == everything[3:5]
    assert entries(server, app="billing", executorId="A") == []
    assert entries(server, app="nope") == [] and entries(server, executorId="nobody") == []
    assert entries(server, app="orders", after=everything[3]["seq"]) == [everything[4]]  # filters and pages together
    assert entries(server, app="orders", after=everything[3]["seq"], limit=1) == [everything[4]]
    assert entries(server, app="orders", limit=1) == [everything[0]]


def test_pages_of_limit_after_a_seq(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    for i in range(1, 106):
        assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": i}).status_code == 204
    everything = entries(server, limit=1000)
    assert len(everything) == 106  # registered, then 105 changes
    assert [e["detail"]["changes"]["executorTimeoutSecs"] for e in everything[1:]] == list(range(1, 106))

    assert entries(server) == everything[:100]  # the default page
    assert entries(server, after=0) == everything[:100]
    pages, after = [], 0
    while page := entries(server, after=after, limit=40):
        assert len(pages) < 3, [len(p) for p in pages]  # a page that ignores after would never end
        pages.append(page)
        after = page[-1]["seq"]
    assert [len(p) for p in pages] == [40, 40, 26] and [e for p in pages for e in p] == everything
    assert entries(server, after=everything[-2]["seq"]) == everything[-1:]
    assert entries(server, after=everything[-1]["seq"]) == []
    assert entries(server, after=2**63 - 1) == []


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server for the refusals, which change nothing."""
    s = RelayServer(tmp_path_factory.mktemp("dev")).start()
    call(s, "PUT", L + "/apps/orders")
    yield s
    s.stop()


@pytest.mark.parametrize("params, location", [
    ({"limit": 0}, "limit"),
    ({"limit": 1001}, "limit"),
    ({"limit": "all"}, "limit"),
    ({"after": -1}, "after"),
    ({"after": 2**63}, "after"),
    ({"after": "abc"}, "after"),
    ({"app": "or\x00ders"}, "app"),
    ({"app": "a" * 257}, "app"),
    ({"executorId": "A\x00"}, "executorId"),
    ({"executorId": "x" * (authz.MAX_EXECUTOR_ID + 1)}, "executorId"),
])
def test_bad_parameters_are_422_problems_naming_them(dev: RelayServer, params: dict[str, Any], location: str) -> None:
    r = call(dev, "GET", LOG, params=params)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["status"] == 422 and location in problem["detail"]
    assert [e["location"] for e in problem["errors"]] == [location], problem
    assert "\x00" not in r.text


def test_the_limits_themselves_are_accepted(dev: RelayServer) -> None:
    for params in ({"limit": 1}, {"limit": 1000}, {"after": 0}, {"after": 2**63 - 1},
                   {"app": "a" * 256}, {"executorId": "x" * authz.MAX_EXECUTOR_ID}):
        assert call(dev, "GET", LOG, params=params).status_code == 200, params
    assert len(entries(dev, limit=1)) == 1


def test_a_repeated_parameter_is_a_400_and_another_org_a_404(dev: RelayServer) -> None:
    r = httpx.get(dev.http + LOG + "?limit=1&limit=2", verify=TLS, timeout=10)
    assert r.status_code == 400 and r.json()["status"] == 400 and "limit" in r.json()["detail"]
    r = call(dev, "GET", "/v2/orgs/other/executor-events")
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


A = "/v2/orgs/acme"


def follow(server: RelayServer, token: str, limit: int) -> list[dict[str, Any]]:
    """What a follower (``relay events -f``) reads: pages of ``limit`` after the last ``seq``, until one is empty."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        r = call(server, "GET", A + "/executor-events", token, params={"after": after, "limit": limit})
        assert r.status_code == 200, r.text
        if not r.json():
            return out
        assert len(out) < 1000, "a page that ignores after would never end"
        out += r.json()
        after = out[-1]["seq"]


def test_the_feed_needs_application_read_and_its_token_entries_token_read(
        auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    """The feed names applications, executors (hostnames, peers) and tokens (names, applications):
    ``organization.read`` alone (an auditor's role) reads none of it, as listApplications, listExecutors
    and listTokens refuse it; ``application.read`` reads the feed without its token entries, left out
    by the query: a follower whose pages of 5 meet 29 token entries in a row still reaches what comes
    after them."""
    s, t = auth_server
    admin = t["acme"]

    def token(name: str, *permissions: str) -> str:
        r = call(s, "POST", f"{A}/tokens/{name}", admin, json={"permissions": list(permissions)})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    auditor = token("auditor", "organization.read")
    reader = token("reader", "application.read")
    both = token("both", "application.read", "token.read")
    tokens_only = token("tokens-only", "organization.read", "token.read")
    for i in range(12):  # with the fixture's "old" revoked and the four above: 29 token entries in a row
        token(f"t{i}", "application.read")
        assert call(s, "DELETE", f"{A}/tokens/t{i}", admin).status_code == 204
    assert call(s, "PATCH", f"{A}/apps/orders", admin, json={"executorTimeoutSecs": 30}).status_code == 204

    for who in (auditor, tokens_only):  # as the routes that serve the same data
        for path in ("/apps", "/apps/orders/executors", "/executor-events"):
            r = call(s, "GET", A + path, who)
            assert r.status_code == 403 and "application.read" in r.json()["detail"], (path, r.text)
    assert call(s, "GET", A + "/tokens", reader).status_code == 403

    everything = follow(s, admin, 1000)
    assert everything[-1]["action"] == "app.updated" and everything[-2]["action"] == "token.revoked"
    actions = [e["action"] for e in everything]
    assert actions.count("token.created") == 3 + 4 + 12 and actions.count("token.revoked") == 1 + 12
    assert follow(s, both, 1000) == everything == follow(s, both, 5)
    without = [e for e in everything if not e["action"].startswith("token.")]
    assert {e["action"] for e in without} == {"app.registered", "app.updated"}
    assert follow(s, reader, 1000) == without == follow(s, reader, 5) == follow(s, reader, 1)
    # the page right after the org's applications were registered: the change that follows 29 token entries
    registered = without[-2]["seq"]
    r = call(s, "GET", A + "/executor-events", reader, params={"after": registered, "limit": 5})
    assert r.json() == without[-1:]
    r = call(s, "GET", A + "/executor-events", both, params={"after": registered, "limit": 5})
    assert [e["action"] for e in r.json()] == ["token.revoked"] + ["token.created"] * 4
