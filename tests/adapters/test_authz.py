"""Authorization (ADR 14): every REST operation against every kind of caller on
a real ``relay serve --auth``, the table against the routes, executors' keys at
the WebSocket handshake, and revocation while the read models lag, on both stores."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import websockets

from relay_es.adapters import authz
from relay_es.adapters.hub.admission import Refused
from relay_es.adapters.rest import build_app
from relay_es.aggregates.token import hash_secret
from relay_es.projections.apps import token_by_hash
from relay_es.composition.asgi import rest_context
from relay_es.composition.settings import Settings
from tests.adapters.rest.fakes import fake_context
from tests.adapters.rest import servers
from tests.fake_executor import FakeExecutor
from tests.server import RelayServer, TLS, admin_token
from tests.support import until


def call(server: RelayServer, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.request(method, server.http + path, headers=headers, verify=TLS, timeout=15, **kw)


# ------------------------------------------------------------- the table


def _routes(app: Any) -> set[tuple[str, str]]:
    return {(m, r.path_format) for r in app.routes for m in getattr(r, "methods", ())}


def _built(auth: bool = True) -> Any:
    return build_app(fake_context(auth=auth, credentials=object() if auth else None))


def test_every_registered_route_has_a_row_and_every_row_a_route() -> None:
    routes = _routes(_built())
    missing = [r for r in routes if authz.rule_for(*r) is None]
    assert not missing, f"routes without an authorization rule: {missing}"
    stale = [k for k in authz.TABLE if k not in routes]
    assert not stale, f"rows for routes that do not exist: {stale}"


def test_a_route_missing_from_the_table_is_refused() -> None:
    from litestar import get
    from litestar.params import FromPath
    from litestar.testing import TestClient

    @get("/v2/orgs/{org:str}/forgotten", sync_to_thread=False)
    def forgotten(org: FromPath[str]) -> str:
        return "leaked"

    app = _built(auth=False)
    app.register(forgotten)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        r = client.get("/v2/orgs/local/forgotten")
    assert r.status_code == 403 and "authorization table" in r.json()["detail"]


def test_decide_is_scope_and_permission() -> None:
    org_wide = authz.Principal("acme", "admin", None, authz.permissions_for(None))
    scoped = authz.Principal("acme", "orders", ("orders",), authz.permissions_for(["orders"]))
    get_app = authz.TABLE[("GET", "/v2/orgs/{org}/apps/{app}")]
    create_token = authz.TABLE[("POST", "/v2/orgs/{org}/tokens/{token_name}")]
    authz.decide(get_app, scoped, "acme", "orders")
    authz.decide(create_token, org_wide, "acme", None)
    for rule, who, org, app in ((create_token, scoped, "acme", None), (get_app, scoped, "acme", "billing"),
                                (get_app, org_wide, "other", "orders"), (authz.WEBSOCKET, scoped, None, "billing")):
        with pytest.raises(authz.Denied):
            authz.decide(rule, who, org, app)
    # issue 14 will give tokens fewer permissions: the permission is checked, not only the scope
    reader = authz.Principal("acme", "ro", None, frozenset({authz.APPLICATION_READ}))
    with pytest.raises(authz.Denied):
        authz.decide(authz.TABLE[("PATCH", "/v2/orgs/{org}/apps/{app}")], reader, "acme", "orders")


def test_a_token_limited_to_applications_reads_and_connects_and_writes_nothing() -> None:
    """It is the conductor key on every executor host: it must not be able to
    change what the executors are told to do (retention, timeouts)."""
    assert authz.permissions_for(["orders"]) == {authz.APPLICATION_READ, authz.WEBSOCKET_CONNECT}
    assert authz.permissions_for(None) == set(authz.PERMISSIONS)
    scoped = authz.Principal("acme", "orders", ("orders",), authz.permissions_for(["orders"]))
    for (method, path), rule in authz.TABLE.items():
        if rule.permission is not None and rule.permission.endswith(".write"):
            with pytest.raises(authz.Denied):  # it writes nothing, workflow actions included
                authz.decide(rule, scoped, "acme", "orders")
            if not path.startswith("/v2/orgs/{org}/apps/{app}/"):  # Relay's own settings: org-wide only
                assert rule.scope is authz.Scope.ORG, (method, path)
        elif rule.scope is authz.Scope.APP:  # the reads the table offers limited tokens, they have
            assert rule.permission in authz.APP_TOKEN_PERMISSIONS, (method, path)
            authz.decide(rule, scoped, "acme", "orders")
    authz.decide(authz.WEBSOCKET, scoped, None, "orders")
    assert "| PATCH | `/v2/orgs/{org}/apps/{app}` | apps.update | org-wide | application.write |" in authz.table_markdown()


def test_the_lifecycle_feed_is_application_data_not_the_org_s() -> None:
    """It names applications, executors (hostnames, peers) and tokens: an auditor's organization.read
    alone reads it no more than listApplications (its token entries need token.read as well: the
    route's filter, tests/adapters/rest/test_executor_events.py)."""
    feed = authz.TABLE[("GET", "/v2/orgs/{org}/executor-events")]
    assert feed.permission == authz.TABLE[("GET", "/v2/orgs/{org}/apps")].permission == authz.APPLICATION_READ
    auditor = authz.Principal("acme", "auditor", None, frozenset({authz.ORGANIZATION_READ}))
    with pytest.raises(authz.Denied):
        authz.decide(feed, auditor, "acme", None)
    authz.decide(feed, authz.Principal("acme", "reader", None, frozenset({authz.APPLICATION_READ})), "acme", None)


def test_the_readme_table_is_rendered_from_the_data() -> None:
    text = authz.table_markdown()
    assert text.count("\n") == len(authz.TABLE) + 2  # header, rule line, rows, the WebSocket
    assert "| POST | `/v2/orgs/{org}/tokens/{token_name}` | tokens.create | org-wide | token.write |" in text


# ------------------------------------------------------------ the matrix

CALLERS = ("none", "bad", "revoked", "other-org", "scoped-other-app", "scoped-this-app", "org-wide")


@dataclass
class Op:
    name: str
    method: str
    path: str
    ok: int
    scope: authz.Scope
    body: Any = None


A = "/v2/orgs/acme"
OPS = [
    Op("apps.list", "GET", f"{A}/apps", 200, authz.Scope.ORG),
    Op("apps.register", "PUT", f"{A}/apps/orders", 204, authz.Scope.ORG, {}),
    Op("apps.get", "GET", f"{A}/apps/orders", 200, authz.Scope.APP),
    Op("apps.update", "PATCH", f"{A}/apps/orders", 204, authz.Scope.ORG, {"executorTimeoutSecs": 60}),
    Op("apps.delete", "DELETE", f"{A}/apps/orders", 204, authz.Scope.ORG),
    Op("executors.list", "GET", f"{A}/apps/orders/executors", 200, authz.Scope.APP),
    Op("executors.as_of", "GET", f"{A}/apps/orders/executors?asOf=2100-01-01T00:00:00Z", 200, authz.Scope.APP),
    Op("executors.history", "GET", f"{A}/apps/orders/executors/A/history", 200, authz.Scope.APP),
    Op("tokens.list", "GET", f"{A}/tokens", 200, authz.Scope.ORG),
    Op("tokens.create", "POST", f"{A}/tokens/fresh", 201, authz.Scope.ORG, {}),
    Op("tokens.revoke", "DELETE", f"{A}/tokens/victim", 204, authz.Scope.ORG),
    Op("audit.list", "GET", f"{A}/audit-logs", 200, authz.Scope.ORG),
    Op("executor_events.list", "GET", f"{A}/executor-events", 200, authz.Scope.ORG),
    Op("metrics", "GET", "/metrics", 200, authz.Scope.ORG),
    Op("healthz", "GET", "/healthz", 200, authz.Scope.PUBLIC),
    Op("openapi", "GET", "/openapi.json", 200, authz.Scope.PUBLIC),
]


def expected(op: Op, caller: str) -> int:
    if op.scope is authz.Scope.PUBLIC:
        return op.ok
    if caller in ("none", "bad", "revoked"):
        return 401
    if caller == "other-org":
        return op.ok if op.path == "/metrics" else 403  # /metrics has no org: any org-wide token reads it
    if caller == "scoped-other-app":
        return 403
    if caller == "scoped-this-app":
        return op.ok if op.scope is authz.Scope.APP else 403
    return op.ok


@pytest.fixture
def acme(tmp_path, store_url) -> Iterator[tuple[RelayServer, dict[str, str]]]:
    t = {"org-wide": admin_token(tmp_path, store_url, "acme", "admin"),
         "other-org": admin_token(tmp_path, store_url, "other", "admin"),
         "scoped-other-app": admin_token(tmp_path, store_url, "acme", "billing-only", "billing"),
         "scoped-this-app": admin_token(tmp_path, store_url, "acme", "orders-only", "orders"),
         "revoked": admin_token(tmp_path, store_url, "acme", "old")}
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    servers.known(s, "acme", t["revoked"])  # made last: every token is in the read models
    admin = t["org-wide"]
    for app in ("orders", "billing"):
        assert call(s, "PUT", f"{A}/apps/{app}", admin).status_code == 204
    assert call(s, "PUT", "/v2/orgs/other/apps/orders", t["other-org"]).status_code == 204
    assert call(s, "DELETE", f"{A}/tokens/old", admin).status_code == 204

    async def executor_history() -> None:  # so that .../executors/A/history exists
        ex = await FakeExecutor(s.ws, app="orders", key=admin, executor_id="A").connect()
        await ex.close()
        # and the read models hold it (the application's language is its executor's): tests compare reads
        # and the read models hold it, closed (the application's language is its executor's;
        # with A disconnected the app is UNAVAILABLE): tests compare reads, which must not move under them
        await until(lambda: (lambda app: app["language"] and app["status"] == "UNAVAILABLE")(
            call(s, "GET", f"{A}/apps/orders", admin).json()), what="A in the read models, disconnected")

    asyncio.run(executor_history())
    t["bad"] = "relay_not-a-real-token"
    yield s, t
    s.stop()


def _prepare(s: RelayServer, admin: str, op: Op) -> None:
    """Puts back what a previous allowed call changed, so each call meets the same state."""
    assert call(s, "PUT", f"{A}/apps/orders", admin).status_code == 204  # after apps.delete
    if op.name == "tokens.create":
        call(s, "DELETE", f"{A}/tokens/fresh", admin)
    elif op.name == "tokens.revoke":
        call(s, "POST", f"{A}/tokens/victim", admin, json={})


def test_every_operation_against_every_caller(acme: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = acme
    admin = t["org-wide"]
    wrong = []
    for op in OPS:
        for caller in CALLERS:
            _prepare(s, admin, op)
            kw = {} if op.body is None else {"json": op.body}
            r = call(s, op.method, op.path, t.get(caller), **kw)
            if r.status_code != expected(op, caller):
                wrong.append(f"{op.name} as {caller}: {r.status_code} (expected {expected(op, caller)}) {r.text[:120]}")
            elif r.status_code in (401, 403):
                assert r.headers["content-type"].startswith("application/problem+json")
    assert call(s, "PUT", f"{A}/apps/orders", admin).status_code == 204
    assert not wrong, "\n".join(wrong)
    assert all(secret not in s.log() for secret in t.values())


def test_an_executor_key_cannot_take_over_its_org(acme: tuple[RelayServer, dict[str, str]]) -> None:
    """The reproduced attack: the query string named the app the token covers."""
    s, t = acme
    key = t["scoped-this-app"]
    assert call(s, "POST", f"{A}/tokens/pwn?app=orders", key, json={}).status_code == 403
    assert call(s, "DELETE", f"{A}/tokens/admin?app=orders", key).status_code == 403
    assert call(s, "GET", f"{A}/tokens?app=orders", key).status_code == 403
    assert call(s, "GET", f"{A}/executor-events?app=orders", key).status_code == 403
    assert call(s, "GET", f"{A}/apps/billing?app=orders", key).status_code == 403
    r = call(s, "GET", f"{A}/apps/{'x' * 300}%1B%5B2J", key)  # a refusal never echoes a hostile name
    assert r.status_code == 404 and "x" * 300 not in r.text and "\x1b" not in r.text
    assert call(s, "GET", f"{A}/apps", t["org-wide"]).status_code == 200  # the admin is untouched
    assert "pwn" not in [x["tokenName"] for x in call(s, "GET", f"{A}/tokens", t["org-wide"]).json()]


def test_an_executor_key_cannot_change_its_applications_retention(acme: tuple[RelayServer, dict[str, str]]) -> None:
    """The reproduced attack: with the key from an executor host, 1 ms timeouts
    would have the next retention round cancel every PENDING/ENQUEUED workflow
    and delete the completed history."""
    s, t = acme
    key, admin = t["scoped-this-app"], t["org-wide"]
    before = call(s, "GET", f"{A}/apps/orders", admin).json()
    for body in ({"globalTimeoutMs": 1, "gcTimeThresholdMs": 1}, {"gcRowsThreshold": 1}, {"executorTimeoutSecs": 1},
                 {"privateMode": True}, {"globalTimeoutMs": None}):
        r = call(s, "PATCH", f"{A}/apps/orders", key, json=body)
        assert r.status_code == 403, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "application.write" in r.json()["detail"]
    assert call(s, "PUT", f"{A}/apps/orders", key, json={"privateMode": True}).status_code == 403
    assert call(s, "GET", f"{A}/apps/orders", admin).json() == before
    assert call(s, "GET", f"{A}/apps/orders", key).status_code == 200  # it still reads its application
    assert not [a for a in call(s, "GET", f"{A}/executor-events", admin, params={"limit": 1000}).json()
                if a["action"] == "app.updated"]


def test_repeated_query_parameters_are_a_400_on_every_route(acme: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = acme
    for op in OPS:
        sep = "&" if "?" in op.path else "?"
        r = call(s, op.method, op.path + sep + "x=1&x=2", t["org-wide"], **({} if op.body is None else {"json": op.body}))
        assert r.status_code == 400, (op.name, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/problem+json") and "'x'" in r.json()["detail"]
    r = call(s, "GET", f"{A}/executor-events?app=orders&app=billing", t["org-wide"])
    assert r.status_code == 400


def test_token_bodies_and_names_are_validated(acme: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = acme
    admin = t["org-wide"]
    # an empty list used to make an org-wide token
    r = call(s, "POST", f"{A}/tokens/empty", admin, json={"appNames": []})
    assert r.status_code == 422 and "appNames" in r.json()["detail"]
    r = call(s, "POST", f"{A}/tokens/many", admin, json={"appNames": [f"a{i}" for i in range(101)]})
    assert r.status_code == 422
    r = call(s, "POST", f"{A}/tokens/nl", admin, json={"appNames": ["orders\n"]})
    assert r.status_code == 422
    for name in ("bad%0Aname", "bad%1B%5B2J", "x" * 300, "-lead"):
        r = call(s, "POST", f"{A}/tokens/{name}", admin, json={})
        assert r.status_code == 422, (name, r.text)
        assert "\x1b" not in r.text and "\n" not in r.json()["detail"]
        assert call(s, "DELETE", f"{A}/tokens/{name}", admin).status_code == 404
        assert call(s, "GET", f"{A}/apps/{name}", admin).status_code == 404
    assert call(s, "PUT", f"{A}/apps/orders%0A", admin).status_code == 422
    names = [x["tokenName"] for x in call(s, "GET", f"{A}/tokens", admin).json()]
    assert not {"empty", "many", "nl"} & set(names)
    listed = {x["tokenName"]: x["permissions"] for x in call(s, "GET", f"{A}/tokens", admin).json()}
    assert listed["admin"] == sorted(authz.PERMISSIONS)
    assert listed["orders-only"] == ["application.read", "websocket.connect"]


def test_request_bodies_are_capped(acme: tuple[RelayServer, dict[str, str]]) -> None:
    s, t = acme
    big = b'{"executorTimeoutSecs": 60' + b" " * (1024 * 1024) + b"}"
    r = call(s, "PATCH", f"{A}/apps/orders", t["org-wide"], content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert call(s, "GET", f"{A}/apps/orders", t["org-wide"]).json()["executorTimeoutSecs"] == 60


# ------------------------------------------------------ at the handshake

auth_server = servers.auth_server  # a fixture: relay serve --auth, tokens made by relay admin create-token


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
        b = await until(lambda: (e := call(s, "GET", "/v2/orgs/acme/executor-events", t["acme"],
                                           params={"executorId": "B"}).json())
                        and e[-1]["action"] == "executor.disconnected" and e, what="B's disconnect audited")
        assert b[-1]["detail"]["reason"] == "token_revoked"
        await ok.close()

    asyncio.run(main())
    refusals = [a for a in call(s, "GET", "/v2/orgs/acme/executor-events", t["acme"], params={"limit": 1000}).json()
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


# ------------------------------------------------ revocation while lagging


@pytest.fixture
def held(tmp_path, store_url, monkeypatch) -> Iterator[Any]:
    """A Runtime in this process whose workers never start: the read models
    move only when the test calls ``runner.catch_up()``. Its start counts as done (a key the read
    models do not hold is a 503 before it: ``test_runtime``), so they lag as a running server's do."""
    from relay_es.composition.runtime import Runtime

    rt = Runtime(Settings(database_url=store_url, auth=True))
    monkeypatch.setattr(rt, "start", lambda loop: None)
    rt._pm_started.set()

    async def stop() -> None:
        pass

    monkeypatch.setattr(rt, "stop", stop)
    yield rt
    rt.close()


def _admit(rt: Any, app: str, key: str) -> tuple[str, str | None]:
    async def main() -> tuple[str, str | None]:
        return await rt.hub.gate.admit(app, key, "127.0.0.1:1", headers=[])

    return asyncio.run(main())


def _refused(rt: Any, app: str, key: str) -> int:
    with pytest.raises(Refused) as e:
        _admit(rt, app, key)
    return e.value.status


def test_a_revoked_key_is_refused_while_the_read_models_lag(held: Any) -> None:
    from litestar.testing import TestClient

    rt = held
    rt.relay.register_app("acme", "orders")
    admin = rt.relay.create_token("acme", "admin")
    key = rt.relay.create_token("acme", "exec", app_names=["orders"])
    rt.runner.catch_up()
    assert _admit(rt, "orders", key) == ("acme", "exec")
    client = TestClient(build_app(rest_context(rt)), base_url="http://127.0.0.1")
    with client:
        assert client.get(f"{A}/apps/orders", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        # revoked in the event store; the read models are held back and still say "live"
        rt.relay.revoke_token("acme", "exec")
        rt.relay.revoke_token("acme", "admin")
        assert not token_by_hash(rt.db, hash_secret(key)).revoked
        assert not token_by_hash(rt.db, hash_secret(admin)).revoked
        assert _refused(rt, "orders", key) == 401
        r = client.get(f"{A}/apps/orders", headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 401, r.text
        r = client.get(f"{A}/apps/orders", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 401, r.text
        # re-issued under the same name: the old secret stays dead, the new one is not yet known (refused)
        new = rt.relay.create_token("acme", "exec", app_names=["orders"])
        assert _refused(rt, "orders", key) == 401
        assert _refused(rt, "orders", new) == 401
        rt.runner.catch_up()
        assert _admit(rt, "orders", new) == ("acme", "exec")
        assert _refused(rt, "orders", key) == 401


def test_while_the_store_is_away_only_keys_seen_live_and_not_revoked_here_pass(held: Any, monkeypatch) -> None:
    rt = held
    rt.relay.register_app("acme", "orders")
    live = rt.relay.create_token("acme", "live", app_names=["orders"])
    gone = rt.relay.create_token("acme", "gone", app_names=["orders"])
    never = rt.relay.create_token("acme", "never", app_names=["orders"])
    rt.runner.catch_up()
    assert _admit(rt, "orders", live) == ("acme", "live")
    assert _admit(rt, "orders", gone) == ("acme", "gone")
    rt.relay.revoke_token("acme", "gone")
    rt.token_revoked("acme", "gone")  # what the REST API calls after recording a revocation

    def away(*_: Any, **__: Any) -> Any:
        raise sqlite3.OperationalError("the store is away")

    monkeypatch.setattr(rt.relay, "_maybe", away)
    import relay_es.projections.apps as apps_view

    monkeypatch.setattr(apps_view, "token_by_hash", away)
    assert _admit(rt, "orders", live) == ("acme", "live")  # executors keep reconnecting through an outage
    assert _refused(rt, "orders", gone) == 503  # revoked here: never admitted again
    assert _refused(rt, "orders", never) == 503  # never seen: cannot be checked now
    from litestar.testing import TestClient

    with TestClient(build_app(rest_context(rt)), base_url="http://127.0.0.1") as client:
        for key, status in ((gone, 503), (never, 503), (live, 200)):
            r = client.get(f"{A}/apps/orders", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == status, r.text
        # liveness never depends on a key that cannot be checked: it answers, with its status only
        r = client.get("/healthz", headers={"Authorization": f"Bearer {never}"})
        assert r.status_code == 200 and r.json() == {"status": "ok"}


# ------------------------------------------------- where refusals are audited


def _refusal(rt: Any, app: str, key: str) -> Refused:
    with pytest.raises(Refused) as e:
        _admit(rt, app, key)
    return e.value


def test_a_refusal_names_only_the_org_the_key_belongs_to(held: Any) -> None:
    rt = held
    for org in ("acme", "other"):
        rt.relay.register_app(org, "orders")
    old = rt.relay.create_token("acme", "old", app_names=["orders"])
    billing = rt.relay.create_token("acme", "billing-only", app_names=["billing"])
    admin = rt.relay.create_token("acme", "admin")
    rt.relay.revoke_token("acme", "old")
    rt.runner.catch_up()
    unknown = _refusal(rt, "orders", "relay_nobody-has-this-key")
    assert (unknown.status, unknown.audit, unknown.org) == (401, False, None)
    revoked = _refusal(rt, "orders", old)
    assert (revoked.status, revoked.audit, revoked.org) == (401, True, "acme")
    assert revoked.detail == unknown.detail  # the client learns nothing about the key
    other_app = _refusal(rt, "orders", billing)
    assert (other_app.status, other_app.audit, other_app.org) == (403, True, "acme")
    unregistered = _refusal(rt, "shipping", admin)
    assert (unregistered.status, unregistered.audit, unregistered.org) == (403, True, "acme")


def test_an_unknown_key_writes_into_no_orgs_audit_log(acme: tuple[RelayServer, dict[str, str]]) -> None:
    """acme and other both have an application "orders": a handshake with a key
    nobody has used to be audited into both (the attacker's address, its text)."""
    s, t = acme

    async def refused(app: str, key: str) -> int:
        with pytest.raises(websockets.InvalidStatus) as e:
            await websockets.connect(f"{s.ws}/websocket/{app}/{key}", open_timeout=15)
        return e.value.response.status_code

    async def main() -> None:
        assert await refused("orders", "relay_unknown-key") == 401
        assert await refused("orders", t["revoked"]) == 401  # acme's (revoked) token: acme's business

    asyncio.run(main())

    def refusals(org: str, token: str) -> list[dict[str, Any]]:
        r = call(s, "GET", f"/v2/orgs/{org}/executor-events", token, params={"limit": 1000})
        assert r.status_code == 200, r.text
        return [a for a in r.json() if a["action"] == "auth.refused"]

    # audited in order, each before its refusal was answered: once acme shows the second, the first was handled
    acme_refusals = asyncio.run(until(lambda: refusals("acme", t["org-wide"]), what="the revoked key's refusal"))
    assert [(a["app"], a["detail"]["status"], a["detail"]["suppressed"]) for a in acme_refusals] == [("orders", 401, 0)]
    assert refusals("other", t["other-org"]) == []
    metrics = call(s, "GET", "/metrics", t["org-wide"]).text
    assert 'relay_auth_refused_total{where="websocket"} 2.0' in metrics  # the unknown key is still counted
    assert "relay_unknown-key" not in s.log()


def test_a_key_the_tokens_read_model_has_not_folded_yet_waits_for_it(tmp_path, clock) -> None:
    """A token made an instant ago (by another process, or before this one started) is not in the
    ``tokens`` read model until it folds it: the check asks the read models to catch up and looks
    again, instead of refusing a live key; with them current, an unknown key costs no wait."""
    from tests.support import World

    world = World(clock, f"sqlite:///{tmp_path}/relay.db")
    try:
        assert world.relay is not None and world.runner is not None
        world.runner.catch_up()
        secret = world.relay.create_token("acme", "fresh")
        asked: list[bool] = []

        def catch_up() -> bool:
            asked.append(True)
            assert world.runner is not None
            return world.runner.catch_up() > 0

        assert authz.Credentials(world.relay, world.db).check(secret) is None  # no catching up: refused
        who = authz.Credentials(world.relay, world.db, catch_up=catch_up).check(secret)
        assert who is not None and (who.org, who.token) == ("acme", "fresh") and asked == [True]
        asked.clear()
        assert authz.Credentials(world.relay, world.db, catch_up=catch_up).check("relay_unknown") is None
        assert asked == [True]  # asked, found the read models current, refused
    finally:
        world.close()


def test_a_token_made_by_another_process_is_accepted_at_once(tmp_path, store_url) -> None:
    """``relay admin create-token`` writes to the store from its own process: the server's read
    models learn of it on their next look at the log (up to a second later) -- the key is accepted
    at once all the same, before the server started (its first request) and while it runs."""
    first = admin_token(tmp_path, store_url, "acme", "first")
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    try:
        assert call(s, "PUT", "/v2/orgs/acme/apps/orders", first).status_code == 204
        for i in range(3):
            later = admin_token(tmp_path, store_url, "acme", f"later-{i}")
            assert call(s, "GET", "/v2/orgs/acme/apps/orders", later).status_code == 200
        assert call(s, "GET", "/v2/orgs/acme/apps/orders", "relay_not-a-token").status_code == 401
    finally:
        s.stop()
