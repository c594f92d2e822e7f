"""OIDC sign-in and the operations Conductor serves only with OAuth (``relay_es/adapters/rest/org.py``,
``relay_es/adapters/oidc.py``) on a real ``relay serve --auth --oidc-issuer``, both stores, against
a real OpenID Connect issuer on loopback (discovery and JWKS over HTTP, keys made here).

A user's permissions are their role's: the one granted them, else their groups'; none without
either. Refused: an expired token, another audience, another issuer, ``alg: none``, an HMAC token
keyed with the issuer's public key, a key the issuer does not publish. Without OIDC the ten
operations (the roles' three among them) answer 404, as Conductor's do. Every answer is checked
against the reference. A member's keys (generateSecret, createToken) are revoked with them; one not
signed in yet is guarded by every role their groups may give. Last, in process on a real store: a
removal disconnects the keys it revoked, also when its answer is lost after its commit; and a member
removed or demoted after their request for a key was let in gets none (401).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from litestar.testing import TestClient

from relay_es.adapters.oidc import OidcSettings, OidcUsers, parse_group_roles
from relay_es.adapters.rest import build_app
from relay_es.composition.asgi import rest_context
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings

from tests.adapters.rest.servers import server_admin_token
from tests.adapters.rest.test_queues import actions
from tests.adapters.rest.test_tokens import LostAnswer
from tests.conductor_schema import check_response
from tests.oidc_issuer import Issuer
from tests.rest_client import as_records, audit_log
from tests.rest_client import rest as call
from tests.server import RelayServer

O = "/v2/orgs/acme"
OAUTH_ONLY = [("GET", O, "getOrg"), ("PATCH", O, "updateOrg"), ("GET", O + "/members", "listMembers"),
              ("PUT", O + "/members/bob@example.com/roles/viewer", "grantRole"),
              ("DELETE", O + "/members/bob@example.com", "removeMember"), ("GET", "/v2/users/me", "getCurrentUser"),
              ("POST", O + "/secrets", "generateSecret"), ("GET", O + "/roles", "listRoles"),
              ("POST", O + "/roles", "createRole"), ("DELETE", O + "/roles/some_role", "deleteRole")]

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")  # RFC 3339, UTC, milliseconds


def conforms(operation: str, r: Any, status: int) -> Any:  # noqa: D103
    assert r.status_code == status, r.text
    body = r.json() if r.content else None
    check_response(operation, status, body)
    return body


@pytest.fixture
def oidc(tmp_path, store_url):
    with Issuer() as issuer:
        admin = server_admin_token(tmp_path, store_url, "acme", "admin")
        s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth", "--oidc-issuer", issuer.url,
                                        "--oidc-audience", "relay", "--oidc-org", "acme",
                                        "--oidc-username-claim", "email",
                                        "--oidc-group-roles", "admins=admin,ops=operator,watchers=viewer"]).start()
        assert call(s, "PUT", O + "/apps/orders", admin).status_code == 204
        yield s, issuer, admin
        s.stop()


def test_without_oidc_the_oauth_only_operations_are_not_there(tmp_path, store_url) -> None:
    admin = server_admin_token(tmp_path, store_url, "acme", "admin")
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    try:
        for method, path, operation in OAUTH_ONLY:
            r = conforms(operation, call(s, method, path, admin, **({"json": {}} if method in ("PATCH", "POST") else {})),
                         404)
            assert "OIDC" in r["detail"]
        assert call(s, "GET", O + "/apps", "eyJhbGciOiJSUzI1NiJ9.e30.x").status_code == 401  # a JWT is no token here
    finally:
        s.stop()


def test_a_users_permissions_are_their_groups_role(oidc: tuple[RelayServer, Issuer, str]) -> None:
    s, issuer, admin = oidc
    ops = issuer.token("olga", email="olga@example.com", groups=["staff", "ops"])
    viewer = issuer.token("vic", email="vic@example.com", groups=["watchers"])
    nobody = issuer.token("nemo", email="nemo@example.com", groups=["staff"])
    assert call(s, "GET", O + "/apps", ops).status_code == 200
    assert call(s, "PATCH", O + "/apps/orders", ops, json={"executorTimeoutSecs": 30}).status_code == 204
    r = call(s, "POST", O + "/roles", ops, json={"name": "x_role"})
    assert r.status_code == 403 and "organization.write" in r.json()["detail"]
    assert call(s, "GET", O + "/apps", viewer).status_code == 200
    assert call(s, "PATCH", O + "/apps/orders", viewer, json={"executorTimeoutSecs": 5}).status_code == 403
    assert call(s, "GET", O + "/apps", nobody).status_code == 403  # no role: no permission

    me = conforms("getCurrentUser", call(s, "GET", "/v2/users/me", ops), 200)
    assert STAMP.fullmatch(me["createdAt"]), me["createdAt"]
    assert me["email"] == "olga@example.com" and me["orgName"] == "acme" and me["name"] == "Olga"
    assert me["role"] == {"name": "operator", "isGlobal": True, "permissions": [
        "application.read", "application.write", "metric.read", "organization.read", "token.read"]}
    assert "role" not in conforms("getCurrentUser", call(s, "GET", "/v2/users/me", nobody), 200)
    conforms("getCurrentUser", call(s, "GET", "/v2/users/me", admin), 404)  # a token is not a user
    unverified = issuer.token("eve", email="olga@example.com", groups=["admins"], email_verified=False)
    r = call(s, "GET", O + "/apps", unverified)  # an email the issuer did not verify names nobody
    assert r.status_code == 401 and "verified" in r.json()["detail"]
    assert "nemo@example.com" not in call(s, "GET", O + "/members", issuer.token(
        "ann", email="ann@example.com", groups=["admins"])).json()["users"]  # no role: not kept

    # who did it, in the audit log: the user
    ((req, done),) = [a for a in actions(s, "orders", "updateApp", org="acme", token=admin)
                      if a[1] is not None and a[1]["outcome"] == "succeeded"]
    assert req["actor"] == {"kind": "user", "id": "olga@example.com"}


def test_a_granted_role_wins_over_groups_and_members_are_listed_and_removed(
        oidc: tuple[RelayServer, Issuer, str]) -> None:
    s, issuer, admin = oidc
    boss = issuer.token("ann", email="ann@example.com", groups=["admins"])
    bob = issuer.token("bob", email="bob@example.com", groups=["ops"])
    assert call(s, "PATCH", O + "/apps/orders", bob, json={"executorTimeoutSecs": 30}).status_code == 204
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/viewer", boss), 204)
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/no_such_role", boss), 404)
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/viewer", bob), 403)  # not his to grant
    assert call(s, "PATCH", O + "/apps/orders", bob, json={"executorTimeoutSecs": 5}).status_code == 403
    members = conforms("listMembers", call(s, "GET", O + "/members", boss), 200)
    assert members["orgName"] == "acme"
    assert members["users"]["bob@example.com"]["name"] == "viewer"
    assert members["users"]["ann@example.com"]["name"] == "admin"  # no grant: what her groups gave her
    assert set(members["users"]) == {"ann@example.com", "bob@example.com"}
    gone = conforms("removeMember", call(s, "DELETE", O + "/members/bob@example.com", boss), 200)
    assert gone["email"] == "bob@example.com" and gone["name"] == "Bob"
    conforms("removeMember", call(s, "DELETE", O + "/members/bob@example.com", boss), 404)
    assert call(s, "PATCH", O + "/apps/orders", bob, json={"executorTimeoutSecs": 5}).status_code == 204  # groups again

    # organization.write alone is not every permission: it hands out no more than it holds
    org_writer = call(s, "POST", O + "/tokens/org-writer", admin,
                      json={"permissions": ["organization.write", "organization.read"]}).json()["token"]
    conforms("grantRole", call(s, "PUT", O + "/members/mallory@example.com/roles/admin", org_writer), 403)
    conforms("createRole", call(s, "POST", O + "/roles", org_writer, json={"name": "sneaky",
                                                                         "permissions": ["token.write"]}), 403)
    conforms("grantRole", call(s, "PUT", O + "/members/mallory@example.com/roles/viewer", org_writer), 403)
    conforms("grantRole", call(s, "PUT", O + "/members/carl@example.com/roles/viewer", boss), 204)
    conforms("removeMember", call(s, "DELETE", O + "/members/carl@example.com", org_writer), 403)  # a stronger one
    # nor does a key that revokes keys revoke a stronger one (it locked out the admin's: only relay admin
    # create-token on the store brought one back)
    revoker = call(s, "POST", O + "/tokens/revoker", admin, json={"permissions": ["token.write", "token.read"]}
                   ).json()["token"]
    assert call(s, "POST", O + "/tokens/reader", admin, json={"permissions": ["token.read"]}).status_code == 201
    conforms("deleteToken", call(s, "DELETE", O + "/tokens/org-writer", revoker), 403)
    conforms("deleteToken", call(s, "DELETE", O + "/tokens/admin", revoker), 403)
    assert call(s, "GET", O, org_writer).status_code == 200 and call(s, "GET", O + "/apps", admin).status_code == 200
    conforms("deleteToken", call(s, "DELETE", O + "/tokens/reader", revoker), 204)  # no stronger than itself
    conforms("deleteToken", call(s, "DELETE", O + "/tokens/revoker", revoker), 204)
    conforms("getOrg", call(s, "GET", "/v2/orgs/other", admin), 404)  # only the OIDC org has members

    org = conforms("getOrg", call(s, "GET", O, boss), 200)
    assert STAMP.fullmatch(org["createdAt"]), org["createdAt"]  # as every time Relay answers
    assert org["name"] == "acme" and org["subscriptionPlan"] == "team"
    conforms("updateOrg", call(s, "PATCH", O, boss, json={}), 204)
    assert "renamed" in conforms("updateOrg", call(s, "PATCH", O, boss, json={"newName": "acme_two"}), 422)["detail"]
    conforms("updateOrg", call(s, "PATCH", O, boss, json={"auditLogRetentionDays": 30}), 422)
    # each on record, the refused changes too (none was), with what was asked
    asked = [(r["actor"]["id"], r["target"], r["parameters"], d and d["outcome"])
             for r, d in actions(s, None, "updateOrg", org="acme", token=admin)]  # type: ignore[arg-type]
    org_target = {"type": "organization", "ids": ["acme"], "count": 1}
    assert asked == [
        ("ann@example.com", org_target, {"newName": None, "auditLogRetentionDays": None}, "succeeded"),
        ("ann@example.com", org_target, {"newName": "acme_two", "auditLogRetentionDays": None}, "failed"),
        ("ann@example.com", org_target, {"newName": None, "auditLogRetentionDays": 30}, "failed")]
    by_id = audit_log(s, "acme", admin, target=org["id"], operation="updateOrg")  # getOrg's id finds the org's
    assert [e["details"]["outcome"] for e in by_id] == ["failed", "failed", "succeeded"]
    assert "renamed" in by_id[1]["details"]["message"] and by_id[0]["target"] == {"type": "organization", "id": "acme"}

    conforms("generateSecret", call(s, "POST", O + "/secrets", bob), 403)  # an operator makes no keys
    conforms("createRole", call(s, "POST", O + "/roles", boss, json={
        "name": "minter", "permissions": ["token.write", "application.read"]}), 201)
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/minter", boss), 204)
    conforms("deleteRole", call(s, "DELETE", O + "/roles/minter", boss), 409)  # granted to bob
    secret = conforms("generateSecret", call(s, "POST", O + "/secrets", bob), 201)["secret"]
    tokens = {t["tokenName"]: t for t in call(s, "GET", O + "/tokens", admin).json()}
    (made,) = [t for name, t in tokens.items() if name.startswith("secret-")]
    assert made["permissions"] == ["application.read", "token.write"]  # bob's: never more
    assert call(s, "GET", O + "/apps", secret).status_code == 200
    assert call(s, "PATCH", O + "/apps/orders", secret, json={"executorTimeoutSecs": 9}).status_code == 403
    # a key outlives nobody's membership: removing bob revokes the secrets he made, and no other token
    assert call(s, "POST", O + "/secrets", admin).status_code == 404  # a token is no member: no key of its own
    conforms("removeMember", call(s, "DELETE", O + "/members/bob@example.com", boss), 200)
    assert call(s, "GET", O + "/apps", secret).status_code == 401
    assert call(s, "GET", O + "/apps", admin).status_code == 200
    tokens = {t["tokenName"]: t for t in call(s, "GET", O + "/tokens", admin).json()}
    assert made["tokenName"] not in tokens  # revoked tokens are not listed
    removals = [d["result"] for _, d in actions(s, None, "removeMember", org="acme", token=admin)  # type: ignore[arg-type]
                if d is not None and d["outcome"] == "succeeded"]
    assert removals == [{"revokedTokens": 0}, {"revokedTokens": 1}]  # on record as the command counted them


def test_a_members_role_from_groups_is_listed_as_their_newest_token_gave_it_and_guards_them(
        oidc: tuple[RelayServer, Issuer, str]) -> None:
    s, issuer, admin = oidc
    now = int(time.time())
    boss = issuer.token("ann", email="ann@example.com", groups=["admins"])
    olga = issuer.token("olga", email="olga@example.com", groups=["ops"], iat=now - 100)
    assert call(s, "GET", O + "/apps", olga).status_code == 200  # her first sign-in: operator, by her groups
    assert conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]["olga@example.com"] == {
        "name": "operator", "isGlobal": True, "permissions": [
            "application.read", "application.write", "metric.read", "organization.read", "token.read"]}
    # organization.write alone cannot demote or remove an admin whose role comes from her groups (403,
    # as for a granted one), though it may grant the weaker role to someone weaker
    org_writer = call(s, "POST", O + "/tokens/org-writer", admin,
                      json={"permissions": ["organization.write", "organization.read"]}).json()["token"]
    conforms("createRole", call(s, "POST", O + "/roles", boss, json={"name": "reader",
                                                                    "permissions": ["organization.read"]}), 201)
    conforms("grantRole", call(s, "PUT", O + "/members/ann@example.com/roles/reader", org_writer), 403)
    conforms("removeMember", call(s, "DELETE", O + "/members/ann@example.com", org_writer), 403)
    conforms("grantRole", call(s, "PUT", O + "/members/nemo@example.com/roles/reader", org_writer), 204)
    assert conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]["ann@example.com"][
        "name"] == "admin"
    # a weak grant does not lower the bar: removing her would hand her groups' admin back
    conforms("grantRole", call(s, "PUT", O + "/members/ann@example.com/roles/reader", boss), 204)
    conforms("removeMember", call(s, "DELETE", O + "/members/ann@example.com", org_writer), 403)
    # her groups change at the issuer: her next token records it, and the list follows
    newer = issuer.token("olga", email="olga@example.com", groups=["watchers"], iat=now - 50)
    assert call(s, "PATCH", O + "/apps/orders", newer, json={"executorTimeoutSecs": 5}).status_code == 403
    assert conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]["olga@example.com"][
        "name"] == "viewer"
    # her older token, still valid, acts with its own groups but records nothing: the newer one stands
    assert call(s, "GET", O + "/apps", olga).status_code == 200
    assert conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]["olga@example.com"][
        "name"] == "viewer"
    none = issuer.token("olga", email="olga@example.com", groups=["staff"], iat=now - 10)  # no mapped group
    assert call(s, "GET", O + "/apps", none).status_code == 403
    assert conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]["olga@example.com"] == {
        "name": "", "isGlobal": False, "permissions": []}


def test_bad_tokens_are_refused(oidc: tuple[RelayServer, Issuer, str]) -> None:
    s, issuer, _ = oidc
    good = issuer.token("ada", groups=["admins"])
    assert call(s, "GET", O + "/apps", good).status_code == 200
    for case in ("expired", "audience", "issuer", "none", "hmac", "unpublished", "garbage"):  # one server for all
        refused(s, issuer, good, case)


def refused(s: RelayServer, issuer: Issuer, good: str, case: str) -> None:
    if case == "expired":
        bad = issuer.token("ada", groups=["admins"], ttl=-120)
    elif case == "audience":
        bad = issuer.token("ada", groups=["admins"], aud="someone-else")
    elif case == "issuer":
        bad = issuer.token("ada", groups=["admins"], iss="https://evil.example.com")
    elif case == "none":
        head = _b64({"alg": "none", "typ": "JWT", "kid": issuer.kid})
        body = _b64(json.loads(_payload(good)))
        bad = f"{head}.{body}."
    elif case == "hmac":  # the classic confusion: HS256 keyed with the issuer's public key
        public = issuer.keys[issuer.kid].public_key().public_bytes(serialization.Encoding.PEM,
                                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
        head = _b64({"alg": "HS256", "typ": "JWT", "kid": issuer.kid})
        body = _b64(json.loads(_payload(good)))
        import hashlib
        import hmac as hm
        sig = base64.urlsafe_b64encode(hm.new(public, f"{head}.{body}".encode(), hashlib.sha256).digest())
        bad = f"{head}.{body}.{sig.decode().rstrip('=')}"
    elif case == "unpublished":
        bad = issuer.token("ada", groups=["admins"], key=rsa.generate_private_key(65537, 2048))
    else:
        bad = "eyJ" + "x" * 40 + ".e30.abc"
    r = call(s, "GET", O + "/apps", bad)
    assert r.status_code == 401, (case, r.text)
    assert r.json()["detail"].startswith("the OIDC token is refused")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert bad not in s.log()


def _b64(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def _payload(token: str) -> str:
    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode()


def test_removing_a_member_revokes_no_secret_stronger_than_the_caller(oidc: tuple[RelayServer, Issuer, str]) -> None:
    """A member's secrets keep the permissions the member had when making them: removing a member
    demoted since may revoke them only for a caller who holds those permissions, as deleteToken asks."""
    s, issuer, admin = oidc
    boss = issuer.token("ann", email="ann@example.com", groups=["admins"])
    bob = issuer.token("bob", email="bob@example.com", groups=["ops"])
    conforms("createRole", call(s, "POST", O + "/roles", boss, json={
        "name": "minter", "permissions": ["token.write", "application.read"]}), 201)
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/minter", boss), 204)
    secret = conforms("generateSecret", call(s, "POST", O + "/secrets", bob), 201)["secret"]
    conforms("grantRole", call(s, "PUT", O + "/members/bob@example.com/roles/viewer", boss), 204)  # demoted
    roles = {r["name"]: r["permissions"] for r in call(s, "GET", O + "/roles", admin).json()}
    held = {*roles["viewer"], *roles["operator"], "organization.write"}  # his grant's and his groups' (ops)
    assert "token.write" not in held
    remover = call(s, "POST", O + "/tokens/remover", admin, json={"permissions": sorted(held)}).json()["token"]
    assert "token.write" in conforms("removeMember", call(s, "DELETE", O + "/members/bob@example.com", remover),
                                     403)["detail"]
    assert call(s, "GET", O + "/apps", secret).status_code == 200  # nothing changed
    assert "bob@example.com" in conforms("listMembers", call(s, "GET", O + "/members", boss), 200)["users"]
    conforms("removeMember", call(s, "DELETE", O + "/members/bob@example.com", boss), 200)
    assert call(s, "GET", O + "/apps", secret).status_code == 401


def test_a_member_who_has_not_signed_in_is_guarded_by_every_role_their_groups_may_give(
        oidc: tuple[RelayServer, Issuer, str]) -> None:
    """An admin restricts vic (in `admins` at the issuer) to viewer before his first sign-in: his groups
    are not on record, so removing him or changing his grant, which could hand him their admin, needs a
    caller holding every role --oidc-group-roles maps (organization.write and the viewer's are not)."""
    s, issuer, admin = oidc
    conforms("grantRole", call(s, "PUT", O + "/members/vic@example.com/roles/viewer", admin), 204)
    roles = {r["name"]: r["permissions"] for r in call(s, "GET", O + "/roles", admin).json()}
    weaker = call(s, "POST", O + "/tokens/weaker", admin, json={
        "permissions": sorted({*roles["viewer"], "organization.write"})}).json()["token"]
    conforms("createRole", call(s, "POST", O + "/roles", admin, json={"name": "reader",
                                                                     "permissions": ["organization.read"]}), 201)
    for method, path, operation in (("DELETE", O + "/members/vic@example.com", "removeMember"),
                                    ("PUT", O + "/members/vic@example.com/roles/reader", "grantRole")):
        detail = conforms(operation, call(s, method, path, weaker), 403)["detail"]
        assert "not signed in yet" in detail and "token.write" in detail, detail
    # nothing changed: his first sign-in is a viewer's, and records his groups' admin, which guards him as before
    vic = issuer.token("vic", email="vic@example.com", groups=["admins"])
    assert call(s, "POST", O + "/tokens/vics", vic).status_code == 403  # token.write: not a viewer's
    assert call(s, "GET", O + "/apps", vic).status_code == 200
    conforms("removeMember", call(s, "DELETE", O + "/members/vic@example.com", weaker), 403)
    # carol, restricted likewise, signs in with groups that give no role: known now, she is no stronger than it
    conforms("grantRole", call(s, "PUT", O + "/members/carol@example.com/roles/viewer", admin), 204)
    conforms("removeMember", call(s, "DELETE", O + "/members/carol@example.com", weaker), 403)
    carol = issuer.token("carol", email="carol@example.com", groups=["staff"])
    assert call(s, "GET", O + "/apps", carol).status_code == 200
    conforms("removeMember", call(s, "DELETE", O + "/members/carol@example.com", weaker), 200)
    # a first grant to someone not on record is a grant, checked as one (it hands out no more than the caller has)
    conforms("grantRole", call(s, "PUT", O + "/members/nemo@example.com/roles/reader", weaker), 204)
    conforms("removeMember", call(s, "DELETE", O + "/members/vic@example.com", admin), 200)  # holds every role


def test_the_keys_a_member_made_with_create_token_are_revoked_with_them(oidc: tuple[RelayServer, Issuer, str]) -> None:
    """A key outlives nobody's membership: one a member made with createToken, signed in, or with such a key."""
    s, issuer, admin = oidc
    boss = issuer.token("ann", email="ann@example.com", groups=["admins"])
    lee = issuer.token("lee", email="lee@example.com", groups=["admins"])
    made = call(s, "POST", O + "/tokens/lees-key", lee, json={"permissions": ["token.write", "application.read"]})
    assert made.status_code == 201, made.text
    key = made.json()["token"]
    hop = call(s, "POST", O + "/tokens/lees-hop", key, json={"permissions": ["application.read"]}).json()["token"]
    ci = call(s, "POST", O + "/tokens/ci", admin, json={"permissions": ["application.read"]}).json()["token"]
    assert all(call(s, "GET", O + "/apps", k).status_code == 200 for k in (key, hop, ci))
    conforms("removeMember", call(s, "DELETE", O + "/members/lee@example.com", boss), 200)
    assert [call(s, "GET", O + "/apps", k).status_code for k in (key, hop, ci)] == [401, 401, 200]
    assert {t["tokenName"] for t in call(s, "GET", O + "/tokens", admin).json()} == {"admin", "ci"}
    removals = [d["result"] for _, d in actions(s, None, "removeMember", org="acme", token=admin)  # type: ignore[arg-type]
                if d is not None and d["outcome"] == "succeeded"]
    assert removals == [{"revokedTokens": 2}]


def test_removing_a_member_disconnects_the_keys_they_made_with_create_token(tmp_path) -> None:
    """In process: the executors connected with a key a member made with createToken are disconnected
    when the member is removed, as those of a key generateSecret made."""
    runtime = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", auth=True, instance="test-instance"))
    closed: list[tuple[str, str]] = []

    def token_revoked(org: str, name: str) -> None:
        closed.append((org, name))
        runtime.token_revoked(org, name)

    oidc = SimpleNamespace(settings=SimpleNamespace(org="acme", group_roles=(("admins", "admin"),)))
    ctx = dataclasses.replace(rest_context(runtime), token_revoked=token_revoked, oidc=oidc,
                              read_your_writes=lambda: runtime.runner.catch_up())
    client = TestClient(build_app(ctx), base_url="http://127.0.0.1")
    try:
        relay = runtime.relay
        admin = {"Authorization": "Bearer " + relay.create_token("acme", "admin")}
        relay.member_seen("acme", "bob@example.com", email="bob@example.com", name="Bob", given_name="Bob",
                          family_name="")
        mine = relay.create_member_token("acme", "bobs-ci", user="bob@example.com", via=None, app_names=["orders"])
        runtime.runner.catch_up()
        assert runtime.gate.credentials.check(mine) is not None
        assert client.delete(O + "/members/bob@example.com", headers=admin).status_code == 200
        assert closed == [("acme", "bobs-ci")]
        assert runtime.gate.credentials.check(mine) is None
    finally:
        runtime.close()


def test_a_removal_whose_answer_is_lost_disconnects_the_secrets_it_revoked(tmp_path) -> None:
    """In process, on a real store: the member's removal is committed, then the store's connection fails
    as it answers. Their live secret's executors are disconnected all the same (the client's retry finds
    no member, and no secret of theirs, to disconnect); a name of theirs made again by someone else since
    is another key, left alone."""
    runtime = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", auth=True, instance="test-instance"))
    closed: list[tuple[str, str]] = []

    def token_revoked(org: str, name: str) -> None:
        closed.append((org, name))
        runtime.token_revoked(org, name)

    oidc = SimpleNamespace(settings=SimpleNamespace(org="acme", group_roles=()))  # its callers here use tokens
    ctx = dataclasses.replace(rest_context(runtime), token_revoked=token_revoked, oidc=oidc,
                              read_your_writes=lambda: runtime.runner.catch_up())
    client = TestClient(build_app(ctx), base_url="http://127.0.0.1")
    try:
        relay = runtime.relay
        admin = {"Authorization": "Bearer " + relay.create_token("acme", "admin")}
        mine = relay.generate_secret("acme", "bob@example.com", "secret-1", permissions=["application.read"])
        relay.generate_secret("acme", "bob@example.com", "secret-2", permissions=["application.read"])
        relay.revoke_token("acme", "secret-2")
        theirs = relay.create_token("acme", "secret-2")  # made again: not bob's
        runtime.runner.catch_up()
        LostAnswer(relay)
        r = client.delete(O + "/members/bob@example.com", headers=admin)
        assert r.status_code == 503 and "disk" not in r.text  # the store failed: retry (a3939cf)
        assert closed == [("acme", "secret-1")]
        assert runtime.gate.credentials.check(mine) is None  # revoked: the commit was made
        assert client.delete(O + "/members/bob@example.com", headers=admin).status_code == 404  # the retry
        assert closed == [("acme", "secret-1")]
        assert runtime.gate.credentials.check(theirs) is not None
    finally:
        runtime.close()


class LetInThen:
    """Real sign-ins (:class:`OidcUsers`), and after each the next of ``meanwhile``: an admin's change to the
    member that commits once the guard has let the request in, before its command runs."""

    def __init__(self, users: OidcUsers) -> None:
        self.users, self.settings = users, users.settings
        self.meanwhile: list[Callable[[], Any]] = []

    def principal(self, token: str) -> Any:
        who = self.users.principal(token)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        return who


def test_a_key_asked_by_a_member_removed_or_demoted_after_they_were_let_in_is_refused(store_url: str) -> None:
    """In process, both stores. A member's createToken or generateSecret let in on their grant, then they
    are removed (or demoted, or, let in on their first sign-in's record, removed) before the command runs:
    401, a failure on record, and no key made (one made then was theirs, listed and working, after
    removeMember had answered 200). Let in on the record as it stands, they make keys as before."""
    with Issuer() as issuer:
        runtime = Runtime(Settings(database_url=store_url, auth=True, instance="test-instance"))
        users = LetInThen(OidcUsers(OidcSettings(issuer.url, "relay", "acme", username_claim="email",
                                                 group_roles=parse_group_roles("admins=admin")), runtime.relay))
        ctx = dataclasses.replace(rest_context(runtime), oidc=users, read_your_writes=lambda: runtime.runner.catch_up())
        client = TestClient(build_app(ctx), base_url="http://127.0.0.1")
        try:
            relay = runtime.relay
            admin = {"Authorization": "Bearer " + relay.create_token("acme", "admin")}
            mal = {"Authorization": "Bearer " + issuer.token("mal", email="mal@example.com", groups=["staff"])}
            ann = {"Authorization": "Bearer " + issuer.token("ann", email="ann@example.com", groups=["admins"])}

            def removed(user: str, *, added_again: bool = False) -> Callable[[], None]:
                def change() -> None:
                    relay.remove_member("acme", user)
                    if added_again:  # another record: another since
                        relay.grant_role("acme", user, "admin")
                return change

            asked = [(mal, O + "/tokens/removed", removed("mal@example.com")),
                     (mal, O + "/tokens/again", removed("mal@example.com", added_again=True)),
                     (mal, O + "/secrets", lambda: relay.grant_role("acme", "mal@example.com", "viewer")),
                     (ann, O + "/tokens/first", removed("ann@example.com"))]  # let in on her first sign-in's record
            for headers, path, meanwhile in asked:
                relay.grant_role("acme", "mal@example.com", "admin")
                users.meanwhile.append(meanwhile)
                r = client.post(path, headers=headers)
                assert r.status_code == 401, r.text
                assert "sign in again" in r.json()["detail"] and r.headers["WWW-Authenticate"] == "Bearer"
            runtime.runner.catch_up()
            assert [t["tokenName"] for t in client.get(O + "/tokens", headers=admin).json()] == ["admin"]
            ended = [(d["operation"], d["outcome"], d["message"]) for _, d in as_records(client.get(
                O + "/audit-logs", headers=admin, params={"limit": 100}).json())
                if d is not None and d["operation"] in ("createToken", "generateSecret")]
            assert [(op, outcome) for op, outcome, _ in ended] == [
                ("createToken", "failed"), ("createToken", "failed"), ("generateSecret", "failed"),
                ("createToken", "failed")]
            assert all("changed since this request was let in" in message for _, _, message in ended)
            # unchanged since they were let in: made, theirs, and working
            relay.grant_role("acme", "mal@example.com", "admin")
            made = client.post(O + "/tokens/kept", headers=mal)
            assert made.status_code == 201, made.text
            secret = client.post(O + "/secrets", headers=ann)
            assert secret.status_code == 201, secret.text
            for key in (made.json()["token"], secret.json()["secret"]):
                assert client.get(O + "/apps", headers={"Authorization": "Bearer " + key}).status_code == 200
            assert relay.remove_member("acme", "mal@example.com")[1] == ["kept"]
        finally:
            runtime.close()
