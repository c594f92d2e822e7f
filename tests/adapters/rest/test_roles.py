"""Roles and permissions (``relay_es/adapters/rest/roles.py``) and the permission matrix, on a real
``relay serve`` in auth mode, both stores.

``listRoles``, ``createRole``, ``deleteRole`` and ``listPermissions`` answer the reference's shapes
and statuses. The three roles operations are Conductor's OAuth-only ones: served with OIDC configured
(``--oidc-issuer``, a real issuer on loopback), a 404 without it in either mode, and listed in the
OpenAPI document all the same. Then **every route × every permission**, with OIDC configured: a
token carrying exactly one permission is let through every route that needs it and refused (403)
on every route that needs another, and a token limited to one application is refused on another's;
a token cannot be made stronger than its maker. Which status a let-through call ends in (200, 404,
422, 503...) is the operation's business; the matrix checks only that the guard let it through.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from relay_es.adapters import authz
from relay_es.domain.roles import BUILT_IN, PERMISSIONS
from tests.adapters.rest.servers import server_admin_token
from tests.adapters.rest.test_queues import actions
from tests.conductor_schema import check_response
from tests.oidc_issuer import Issuer
from tests.rest_client import rest as call
from tests.server import RelayServer

O = "/v2/orgs/acme"


def conforms(operation: str, r: Any, status: int) -> Any:
    assert r.status_code == status, r.text
    body = r.json() if r.content else None
    check_response(operation, status, body)
    return body


ROLES = [("GET", O + "/roles", "listRoles"), ("POST", O + "/roles", "createRole"),
         ("DELETE", O + "/roles/some_role", "deleteRole")]


def oidc_args(issuer: Issuer) -> list[str]:
    """OIDC configured for acme (as ``tests/adapters/rest/test_org.py``'s server), no group mapped to a role."""
    return ["--oidc-issuer", issuer.url, "--oidc-audience", "relay", "--oidc-org", "acme",
            "--oidc-username-claim", "email"]


def started(tmp_path, url: str, *args: str) -> tuple[RelayServer, str]:
    """``relay serve --auth`` on ``url`` (and ``args``), with acme's admin token and two applications."""
    admin = server_admin_token(tmp_path, url, "acme", "admin")
    s = RelayServer(tmp_path, args=["--database-url", url, "--auth", *args]).start()
    assert call(s, "PUT", O + "/apps/orders", admin).status_code == 204
    assert call(s, "PUT", O + "/apps/billing", admin).status_code == 204
    return s, admin


@pytest.fixture
def acme(tmp_path, store_url):
    s, admin = started(tmp_path, store_url)
    yield s, admin
    s.stop()


@pytest.fixture
def acme_oidc(tmp_path, store_url):
    with Issuer() as issuer:
        s, admin = started(tmp_path, store_url, *oidc_args(issuer))
        yield s, admin
        s.stop()


def test_roles_are_listed_made_and_deleted_in_conductors_shapes(acme_oidc: tuple[RelayServer, str]) -> None:
    s, admin = acme_oidc
    assert conforms("listPermissions", call(s, "GET", O + "/permissions", admin), 200) == list(PERMISSIONS)
    listed = conforms("listRoles", call(s, "GET", O + "/roles", admin), 200)
    assert listed == [{"name": n, "isGlobal": True, "permissions": sorted(p)} for n, p in BUILT_IN.items()]

    made = conforms("createRole", call(s, "POST", O + "/roles", admin, json={
        "name": "deployer", "permissions": ["application.write", "application.read", "application.read"]}), 201)
    assert made == {"name": "deployer", "permissions": ["application.read", "application.write"]}
    conforms("createRole", call(s, "POST", O + "/roles", admin, json={"name": "nobody"}), 201)
    roles = conforms("listRoles", call(s, "GET", O + "/roles", admin), 200)
    assert roles[3:] == [{"name": "deployer", "isGlobal": False, "permissions": ["application.read",
                                                                                 "application.write"]},
                         {"name": "nobody", "isGlobal": False, "permissions": []}]

    for body, status in (({"name": "deployer"}, 409), ({"name": "admin"}, 409), ({"name": "Viewer"}, 409),
                         ({"name": "ab"}, 422), ({"name": "has space"}, 422), ({"name": "x" * 31}, 422),
                         ({"name": "ok_name", "permissions": ["root"]}, 422), ({"permissions": []}, 422),
                         ({"name": "ok_name", "extra": 1}, 422)):
        r = conforms("createRole", call(s, "POST", O + "/roles", admin, json=body), status)
        assert "\n" not in r["detail"]
    # organization.write alone hands out no more than it holds, nor takes away more: it neither makes nor
    # deletes a role stronger than itself (deleting one would demote whoever held it), and both are on record
    writer = call(s, "POST", O + "/tokens/org-writer", admin,
                  json={"permissions": ["organization.write", "organization.read"]}).json()["token"]
    conforms("createRole", call(s, "POST", O + "/roles", writer, json={"name": "sneaky",
                                                                      "permissions": ["token.write"]}), 403)
    r = conforms("deleteRole", call(s, "DELETE", O + "/roles/deployer", writer), 403)
    assert "application.write" in r["detail"]
    conforms("deleteRole", call(s, "DELETE", O + "/roles/nobody", writer), 204)  # holds all of nothing
    conforms("deleteRole", call(s, "DELETE", O + "/roles/deployer", admin), 204)
    conforms("deleteRole", call(s, "DELETE", O + "/roles/deployer", admin), 404)
    conforms("deleteRole", call(s, "DELETE", O + "/roles/operator", admin), 409)
    assert [r["name"] for r in call(s, "GET", O + "/roles", admin).json()] == ["admin", "operator", "viewer"]

    done = [(req, end) for req, end in actions(s, None, "createRole", org="acme", token=admin)  # type: ignore[arg-type]
            if end is not None and end["outcome"] == "succeeded"]
    assert [req["target"] for req, _ in done] == [{"type": "role", "ids": ["deployer"], "count": 1},
                                                  {"type": "role", "ids": ["nobody"], "count": 1}]
    assert [(req["actor"]["id"], end["outcome"]) for req, end in actions(  # type: ignore[arg-type]
        s, None, "deleteRole", org="acme", token=admin)] == [
        ("org-writer", "failed"), ("org-writer", "succeeded"), ("admin", "succeeded"), ("admin", "failed"),
        ("admin", "failed")]
    refused = [(req["target"]["ids"], end["message"]) for req, end in actions(  # type: ignore[arg-type]
        s, None, "createRole", org="acme", token=admin) if end is not None and end["outcome"] == "failed"]
    assert [ids for ids, _ in refused if ids == ["sneaky"]] == [["sneaky"]]
    assert any("token.write" in (message or "") for ids, message in refused if ids == ["sneaky"])

    # a token limited to applications sends alerts only to those, and its attempt at another is on record
    billing = call(s, "POST", O + "/tokens/billing-writer", admin,
                   json={"appNames": ["billing"], "permissions": ["application.read", "application.write"]}
                   ).json()["token"]
    r = call(s, "POST", O + "/apps/billing/alerting-rules", billing, json={
        "ruleType": "UnresponsiveApplication", "ruleMetadata": {}, "receivingAppName": "orders"})
    assert r.status_code == 403 and "receivingAppName" in r.json()["detail"], r.text
    [(req, end)] = actions(s, "billing", "createAlertingRule", org="acme", token=admin)
    assert req["actor"]["id"] == "billing-writer" and end is not None and end["outcome"] == "failed"


@pytest.mark.parametrize("mode", ["development", "auth"])
def test_without_oidc_the_roles_operations_are_not_there_but_listed(tmp_path, store_url, mode: str) -> None:
    """Conductor serves listRoles, createRole and deleteRole only with OAuth: without --oidc-issuer they
    answer 404, a problem document naming OIDC, as listMembers does; in auth mode to every token (the
    admin's, and each of one permission), as every OAuth-only row of the table does. listPermissions is
    served. The OpenAPI document lists them, as it lists listMembers."""
    if mode == "auth":
        s, admin = started(tmp_path, store_url)
        tokens = [admin] + [call(s, "POST", f"{O}/tokens/only-{p.replace('.', '-')}", admin,
                                 json={"permissions": [p]}).json()["token"] for p in PERMISSIONS]
        org = "acme"
    else:
        s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
        tokens, org = [None], "local"
    try:
        asked = [(how, at.replace(O, f"/v2/orgs/{org}"), op) for how, at, op in ROLES]
        for method, path, operation in asked + [("GET", f"/v2/orgs/{org}/members", "listMembers")]:
            for token in tokens:
                r = call(s, method, path, token, **body_for(method, path))
                assert r.headers["content-type"].startswith("application/problem+json"), (path, r.text)
                assert "OIDC" in conforms(operation, r, 404)["detail"], (path, r.text)
        oauth = [route for route, rule in authz.TABLE.items() if rule.oauth]
        assert {("GET", "/v2/orgs/{org}/roles"), ("POST", "/v2/orgs/{org}/roles"),
                ("DELETE", "/v2/orgs/{org}/roles/{role_name}")} <= set(oauth)
        if mode == "auth":  # every OAuth-only row, to every token
            for method, template in oauth:
                for token in tokens:
                    r = call(s, method, fill(template), token, **body_for(method, template))
                    assert r.status_code == 404, (method, template, r.text)
        assert conforms("listPermissions", call(s, "GET", f"/v2/orgs/{org}/permissions", tokens[0]), 200) == list(
            PERMISSIONS)
        doc = call(s, "GET", "/openapi.json").json()
        listed = {op["operationId"] for item in doc["paths"].values() for op in item.values()
                  if isinstance(op, dict) and "operationId" in op}
        assert {"listRoles", "createRole", "deleteRole", "listMembers"} <= listed
    finally:
        s.stop()


@pytest.fixture
def acme_sqlite(tmp_path):
    """The matrix is the guard's (the table, the caller, the path): one store is enough for it; the
    token lookups it rests on run on both stores everywhere else. With OIDC configured, so that the
    OAuth-only rows are served and in the matrix too (no group mapped to a role: a member not signed in
    is guarded by no role of theirs)."""
    with Issuer() as issuer:
        s, admin = started(tmp_path, f"sqlite:///{tmp_path}/relay.db", *oidc_args(issuer))
        yield s, admin
        s.stop()


def test_every_route_lets_in_exactly_its_permission(acme_sqlite: tuple[RelayServer, str]) -> None:
    s, admin = acme_sqlite
    one = {}
    for p in PERMISSIONS:
        r = call(s, "POST", f"{O}/tokens/only-{p.replace('.', '-')}", admin, json={"permissions": [p]})
        assert r.status_code == 201, r.text
        one[p] = r.json()["token"]
    scoped = call(s, "POST", f"{O}/tokens/billing-writer", admin,
                  json={"appNames": ["billing"], "permissions": list(PERMISSIONS)}).json()["token"]

    checked = 0
    for (method, template), rule in authz.TABLE.items():
        if rule.scope in (authz.Scope.PUBLIC, authz.Scope.SELF):  # SELF: a signed-in user's (test_org.py)
            continue
        path = fill(template)
        for p, token in one.items():
            r = call(s, method, path, token, **body_for(method, template))
            if p == rule.permission:
                assert r.status_code not in (401, 403), (method, path, p, r.status_code, r.text)
            else:  # refused by the guard, for that reason, before the operation ran
                assert r.status_code == 403, (method, path, p, r.status_code, r.text)
                assert f"lacks the {rule.permission} permission" in r.json()["detail"], (method, path, p, r.text)
            checked += 1
        if rule.scope == authz.Scope.APP:  # a token limited to billing, with every permission, on orders
            r = call(s, method, path, scoped, **body_for(method, template))
            assert r.status_code == 403, (method, path, "billing-only", r.status_code, r.text)
        elif rule.scope == authz.Scope.ORG:  # org-wide operations need an org-wide token
            r = call(s, method, path, scoped, **body_for(method, template))
            assert r.status_code == 403, (method, path, "billing-only", r.status_code, r.text)
    assert checked == 8 * sum(1 for r in authz.TABLE.values() if r.scope not in (authz.Scope.PUBLIC, authz.Scope.SELF))
    assert checked > 400
    assert sum(1 for r in authz.TABLE.values() if r.oauth and r.scope is authz.Scope.ORG) >= 9  # roles, members...


def test_a_token_cannot_be_made_stronger_than_its_maker(acme: tuple[RelayServer, str]) -> None:
    s, admin = acme
    maker = call(s, "POST", f"{O}/tokens/maker", admin,
                 json={"permissions": ["token.write", "application.read"]}).json()["token"]
    ok = call(s, "POST", f"{O}/tokens/reader", maker, json={"permissions": ["application.read"]})
    assert ok.status_code == 201, ok.text
    for body in ({"permissions": ["application.write"]}, {"permissions": ["token.write", "organization.write"]},
                 {}, {"appNames": ["orders"]}):  # no choice: the scope's own, which the maker does not all hold
        r = call(s, "POST", f"{O}/tokens/stronger", maker, json=body)
        assert r.status_code == 403, (body, r.text)
    names = [t["tokenName"] for t in call(s, "GET", f"{O}/tokens", admin).json()]
    assert "stronger" not in names and "reader" in names
    reader = ok.json()["token"]
    assert call(s, "GET", f"{O}/apps/orders", reader).status_code == 200
    assert call(s, "PATCH", f"{O}/apps/orders", reader, json={"executorTimeoutSecs": 5}).status_code == 403


def fill(template: str) -> str:
    """A route's template with plausible values (names of the org's applications, made-up ids)."""
    values = {"org": "acme", "app": "orders", "token_name": "x-token", "workflow_id": "wf-1", "executor_id": "ex-1",
              "schedule_name": "sched", "queue_name": "q", "rule_id": "r-1", "role_name": "some_role",
              "username": "bob@example.com"}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)


def body_for(method: str, template: str) -> dict[str, Any]:
    if template.endswith("/tokens/{token_name}") and method == "POST":
        return {"json": {"permissions": ["token.write"]}}  # one its maker holds: the operation's own check passes
    return {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
