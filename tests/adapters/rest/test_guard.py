"""The authorization guard (``relay_es/adapters/rest/guard.py``): in process,
development mode stays on this machine and auth mode needs a live token whose
row of the table accepts it, refusals problem documents, counted; then the
matrix on a real ``relay serve --auth``. Every operation against every caller
is in ``tests/adapters/test_authz.py``. With OIDC: a forged token is a 401 (counted, recorded),
never a 500, and a slow issuer keeps no caller with a Relay token waiting."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from litestar.exceptions import NotFoundException
from litestar.testing import TestClient

from relay_es.adapters import authz
from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.guard import bearer, check_path_names
from relay_es.adapters.oidc import OidcSettings, OidcUsers, Verifier
from relay_es.adapters.rest.recording import MAX_REFUSALS_PER_WINDOW
from relay_es.domain.clock import FakeClock
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.service import Relay
from relay_es.protocol.limits import OutOfBounds, check_identifier
from tests.adapters.rest.fakes import fake_context
from tests.adapters.test_oidc import Stall, _forged
from tests.oidc_issuer import Issuer
from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.support import POPO

ADMIN = authz.Principal("acme", "admin", None, authz.permissions_for(None))
SCOPED = authz.Principal("acme", "orders-only", ("orders",), authz.permissions_for(["orders"]))


class FakeCredentials:
    """Secrets: ``admin`` (org-wide, acme), ``scoped`` (acme, orders only), ``away`` (the store is away)."""

    def check(self, secret: str) -> authz.Principal | None:
        if secret == "away":
            raise authz.StoreUnavailable("the store is unavailable; the key cannot be checked now")
        return {"admin": ADMIN, "scoped": SCOPED}.get(secret)

    def org_exists(self, org: str) -> bool:
        if org == "down":
            raise ConnectionError("the read models are away")
        return org == "acme"


class Refused:
    """A relay that keeps the refusals put on record, as ``(org, actor, status)``."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, int]] = []

    def record_action_refused(self, org: str, app: str | None, **kw: Any) -> str:
        self.made.append((org, kw["actor"].id, kw["status"]))
        return f"action-{len(self.made)}"


def refused(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["detail"]
    return body


@pytest.fixture
def dev() -> Iterator[TestClient]:
    with TestClient(build_app(fake_context()), base_url="http://127.0.0.1") as client:
        yield client


def test_development_mode_answers_this_machine_only(dev: TestClient) -> None:
    assert dev.get("/metrics").status_code == 200
    assert dev.get("/metrics", headers={"Host": "localhost:8090"}).status_code == 200
    refused(dev.get("/metrics", headers={"Host": "evil.example"}), 403)
    refused(dev.get("/metrics", headers={"Origin": "http://evil.example"}), 403)
    refused(dev.get("/metrics", headers={"Origin": "null"}), 403)
    assert "--auth" in refused(dev.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"}), 403)["detail"]
    refused(dev.get("/healthz", headers={"Host": "evil.example"}), 403)  # public routes too


def test_development_mode_has_one_org_and_checks_names_in_the_path(dev: TestClient) -> None:
    assert "'local'" in refused(dev.get("/v2/orgs/acme/apps"), 404)["detail"]
    body = refused(dev.put("/v2/orgs/local/apps/-lead"), 422)
    assert body["errors"] == [{"location": "appName", "message": body["errors"][0]["message"]}]
    refused(dev.get("/v2/orgs/local/apps/-lead"), 404)
    assert refused(dev.post("/v2/orgs/local/tokens/bad%0Aname"), 422)["errors"][0]["location"] == "tokenName"


def test_a_repeated_query_parameter_is_a_400(dev: TestClient) -> None:
    assert "'x'" in refused(dev.get("/healthz?x=1&x=2"), 400)["detail"]


@pytest.fixture
def auth() -> Iterator[tuple[TestClient, Any]]:
    ctx = fake_context(auth=True, credentials=FakeCredentials())
    with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
        yield client, ctx


def test_the_guard_keeps_one_entry_a_route_however_many_requests_pass() -> None:
    """Litestar calls the guard with a copy of the route's handler on every request: a cache kept by the
    handler gained an entry a request (20,000 requests, 20,003 entries, 25 MB that never came back)."""
    from relay_es.adapters.rest.guard import Authorize

    app = build_app(fake_context())
    (guard,) = [g for g in app.guards if isinstance(g, Authorize)]
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for i in range(200):
            client.get("/v2/orgs/local/apps" if i % 2 else "/v2/orgs/local/tokens")
    assert len(guard._null_takers) == 2  # one a route


def test_auth_mode_needs_a_live_token_whose_row_accepts_it(auth: tuple[TestClient, Any]) -> None:
    client, ctx = auth
    r = client.get("/metrics")
    refused(r, 401)
    assert r.headers["www-authenticate"] == "Bearer"
    for header in ("Token abc", "Bearer", "Bearer a b"):
        refused(client.get("/metrics", headers={"Authorization": header}), 401)
    refused(client.get("/metrics", headers={"Authorization": "Bearer unknown"}), 401)
    refused(client.get("/metrics", headers={"Authorization": "Bearer away"}), 503)
    assert "metric.read" in refused(client.get("/metrics", headers={"Authorization": "Bearer scoped"}), 403)["detail"]
    refused(client.get("/v2/orgs/other/apps", headers={"Authorization": "Bearer admin"}), 403)
    assert client.get("/metrics", headers={"Authorization": "Bearer admin"}).status_code == 200
    # behind a proxy is what auth mode is for
    assert client.get("/metrics", headers={"Authorization": "Bearer admin", "X-Forwarded-For": "203.0.113.9",
                                           "Host": "relay.example"}).status_code == 200
    # counted: the missing header, the three malformed ones, the unknown token, the two denials (the store away is not)
    assert ctx.metrics.registry.get_sample_value("relay_auth_refused_total", {"where": "rest"}) == 7


def test_an_anonymous_caller_s_refusals_go_only_into_an_org_that_exists_on_a_budget_of_their_own() -> None:
    relay = Refused()
    ctx = fake_context(auth=True, credentials=FakeCredentials(), relay=relay)
    with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
        refused(client.get("/v2/orgs/acme/apps"), 401)
        for i in range(MAX_REFUSALS_PER_WINDOW + 2):  # more made-up orgs than a window's records
            refused(client.get(f"/v2/orgs/ghost{i}/apps"), 401)
        refused(client.get("/v2/orgs/ghost0/apps", headers={"Authorization": "Bearer unknown"}), 401)
        refused(client.get("/v2/orgs/down/apps"), 401)  # the look-up fails: the refusal stands
        # the anonymous budget is spent; a known token's refusals still go on record
        refused(client.get("/v2/orgs/acme/apps", headers={"Authorization": "Bearer scoped"}), 403)
        refused(client.get("/v2/orgs/ghost1/apps/orders", headers={"Authorization": "Bearer admin"}), 403)
    assert relay.made == [("acme", "no valid token", 401), ("acme", "orders-only", 403), ("acme", "admin", 403)]
    assert ctx.metrics.registry.get_sample_value("relay_auth_refused_total",
                                                 {"where": "rest"}) == MAX_REFUSALS_PER_WINDOW + 7


def test_healthz_tells_the_instance_to_an_org_wide_token_only(auth: tuple[TestClient, Any]) -> None:
    client, _ = auth
    for headers in ({}, {"Authorization": "garbage"}, {"Authorization": "Bearer scoped"},
                    {"Authorization": "Bearer away"}, {"Authorization": "Bearer unknown"}):
        r = client.get("/healthz", headers=headers)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, headers
    r = client.get("/healthz", headers={"Authorization": "Bearer admin"})
    assert r.json() == {"status": "ok", "instance": "test-instance", "store": "sqlite"}


def test_an_oidc_token_naming_an_algorithm_its_key_cannot_verify_is_a_401_counted_and_recorded() -> None:
    relay = Refused()
    with Issuer() as issuer:
        issuer.publish_alg = False  # as Entra ID: the key's type says which algorithms it verifies
        ctx = fake_context(auth=True, credentials=FakeCredentials(), relay=relay,
                           oidc=OidcUsers(OidcSettings(issuer.url, "relay", "acme"), relay))
        with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
            for alg in ("ES256", "ES384"):  # PyJWT would load the RSA key as an EC one: a TypeError, a 500
                forged = _forged(issuer.kid, alg, issuer.url)
                r = client.get("/v2/orgs/acme/apps", headers={"Authorization": f"Bearer {forged}"})
                assert "not its key's" in refused(r, 401)["detail"]
    assert relay.made == [("acme", "no valid token", 401)]  # the second alike: throttled
    assert ctx.metrics.registry.get_sample_value("relay_auth_refused_total", {"where": "rest"}) == 2


def test_a_slow_oidc_issuer_keeps_no_caller_with_a_relay_token_waiting() -> None:
    one_thread = ThreadPoolExecutor(max_workers=1)  # the default pool, where Relay's tokens are checked, at its smallest
    stall = Stall()
    with Issuer() as issuer:
        relay = Relay(POPO, clock=FakeClock())
        users = OidcUsers(OidcSettings(issuer.url, "relay", "acme"), relay, Verifier(issuer.url, "relay", get=stall))
        ctx = fake_context(auth=True, credentials=FakeCredentials(), relay=relay, oidc=users,
                           on_startup=lambda: asyncio.get_running_loop().set_default_executor(one_thread))
        signed_in = {"Authorization": f"Bearer {issuer.token('ada')}"}
        with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
            stall.hold = True  # the issuer answers when the test says
            answers: list[int] = []
            fetcher = threading.Thread(target=lambda: answers.append(client.get("/metrics", headers=signed_in).status_code))
            fetcher.start()
            try:
                assert stall.entered.wait(10)
                assert "being fetched" in refused(client.get("/metrics", headers=signed_in), 401)["detail"]
                assert client.get("/metrics", headers={"Authorization": "Bearer admin"}).status_code == 200
                hung = not stall.done.is_set()
            finally:
                stall.go.set()
                fetcher.join()
    one_thread.shutdown()
    assert hung  # the token's caller was answered while the issuer still hung
    assert answers == [403]  # the keys came; ada has no role


def test_auth_mode_needs_a_credential_checker() -> None:
    with pytest.raises(ValueError, match="credential"):
        build_app(fake_context(auth=True))


def test_bearer_and_path_names() -> None:
    assert bearer("Bearer relay_abc") == "relay_abc"
    assert bearer("bearer  relay_abc ") == "relay_abc"
    rule = authz.TABLE[("PUT", "/v2/orgs/{org}/apps/{app}")]
    check_path_names(rule, {"org": "acme", "app": "orders"})
    with pytest.raises(InvalidSetting):
        check_path_names(rule, {"org": "acme", "app": "x" * 257})


def test_workflow_ids_queue_and_schedule_names_are_the_applications_text() -> None:
    rule = authz.TABLE[("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}")]
    # A scheduled workflow's id, a queue named with a space: the application chose them.
    check_path_names(rule, {"org": "acme", "app": "orders", "workflow_id": "sched-tick-2026-12-01T10:00:00+00:00"})
    check_path_names(rule, {"org": "acme", "app": "orders", "queue_name": "slow lane", "schedule_name": "x" * 8192})
    for fine in ("x" * 4097, "a\x1b[31m", "a\u202eb", "a\nb"):  # DBOS takes them: passed on as they are
        check_path_names(rule, {"org": "acme", "app": "orders", "workflow_id": fine})
    for bad in ("", "x" * 8193, "a\x00b"):  # what no executor can hold: a 422 naming the parameter
        with pytest.raises(InvalidSetting, match="^workflowId: "):
            check_path_names(rule, {"org": "acme", "app": "orders", "workflow_id": bad})
    with pytest.raises(NotFoundException):  # Relay's own names keep their alphabet
        check_path_names(rule, {"org": "acme", "app": "or ders", "workflow_id": "w"})


def test_an_executor_id_in_the_path_is_checked_by_the_handshake_s_rule() -> None:
    rule = authz.TABLE[("GET", "/v2/orgs/{org}/apps/{app}/executors/{executor_id}/history")]
    for ok in ("host/1", "nb\u00a0sp", "ideo\u3000gap", "pua\ue000x", "\u00e9" * 128):
        check_identifier("executor_id", ok, required=True)  # what an executor may register with
        check_path_names(rule, {"org": "acme", "app": "orders", "executor_id": ok})
    for bad in ("", "a\nb", "a\u202eb", "a\u2028b", "\u00e9" * 129):
        with pytest.raises(OutOfBounds):
            check_identifier("executor_id", bad, required=True)
        with pytest.raises(NotFoundException):
            check_path_names(rule, {"org": "acme", "app": "orders", "executor_id": bad})


# ------------------------------------------------------- on a real server


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
