"""Tokens (``relay_es/adapters/rest/tokens.py``) on a real ``relay serve``; then, in process on a real
store, revocations that fail: one whose answer is lost after its commit disconnects the token's
executors, and so does the client's retry (409, revoked already); a refused one disconnects nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from relay_es.composition.asgi import rest_context
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from tests.rest_client import rest as call
from tests.server import RelayServer


def test_tokens_are_shown_once_and_listed_without_the_secret(server: RelayServer) -> None:
    call(server, "PUT", "/v2/orgs/local/apps/orders")
    r = call(server, "POST", "/v2/orgs/local/tokens/ci", json={"appNames": ["orders"]})
    assert r.status_code == 201
    secret = r.json()["token"]
    listed = call(server, "GET", "/v2/orgs/local/tokens").json()
    assert [t["tokenName"] for t in listed] == ["ci"] and secret not in str(listed)
    assert listed[0]["appIds"] == [call(server, "GET", "/v2/orgs/local/apps/orders").json()["id"]]
    extended = call(server, "GET", "/v2/orgs/local/tokens", params={"relay": "extended"}).json()
    assert extended[0]["appNames"] == ["orders"] and secret not in str(extended)
    assert call(server, "POST", "/v2/orgs/local/tokens/ci").status_code == 409  # live token of that name
    assert call(server, "DELETE", "/v2/orgs/local/tokens/ci").status_code == 204
    assert call(server, "GET", "/v2/orgs/local/tokens").json() == []
    actions = [a["action"] for a in call(server, "GET", "/v2/orgs/local/executor-events").json()]
    assert actions[-2:] == ["token.created", "token.revoked"]
    assert secret not in server.log()


# ------------------------------------------- a revocation whose answer is lost (in process, real store)


class LostAnswer:
    """``relay.save`` whose next call commits, then raises as a store whose connection failed as it
    answered (the commit acknowledged, the answer lost); the calls after are the store's own."""

    def __init__(self, relay: Any) -> None:
        self.relay = relay
        relay.save = self

    def __call__(self, *objs: Any, **kw: Any) -> Any:
        del self.relay.save  # once: the class's own from here on
        self.relay.save(*objs, **kw)
        raise sqlite3.OperationalError("disk I/O error (injected: the commit made, its answer lost)")


@pytest.fixture
def revoking(tmp_path) -> Iterator[tuple[TestClient, Any, list[tuple[str, str]]]]:
    """The REST API on a runtime of its own in auth mode (nothing started: the read models move when a
    read waits for them), and the tokens whose executors it disconnects, as ``(org, token)``: the
    runtime's own disconnection (admission forgets the key) is called too."""
    runtime = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", auth=True, instance="test-instance"))
    closed: list[tuple[str, str]] = []

    def token_revoked(org: str, name: str) -> None:
        closed.append((org, name))
        runtime.token_revoked(org, name)

    ctx = dataclasses.replace(rest_context(runtime), token_revoked=token_revoked,
                              read_your_writes=lambda: runtime.runner.catch_up())
    try:
        yield TestClient(build_app(ctx), base_url="http://127.0.0.1"), runtime, closed
    finally:
        runtime.close()


def test_a_revocation_whose_answer_is_lost_disconnects_and_so_does_its_retry(revoking) -> None:
    client, runtime, closed = revoking
    admin = {"Authorization": "Bearer " + runtime.relay.create_token("acme", "admin")}
    ci = runtime.relay.create_token("acme", "ci")
    other_ci = runtime.relay.create_token("other", "ci")  # another org's token of that name
    runtime.runner.catch_up()
    LostAnswer(runtime.relay)
    r = client.delete("/v2/orgs/acme/tokens/ci", headers=admin)
    assert r.status_code == 503 and "disk" not in r.text  # the store failed: retry (a3939cf)
    assert closed == [("acme", "ci")]  # revoked, perhaps: disconnected all the same
    assert runtime.gate.credentials.check(ci) is None  # it was: the commit was made
    r = client.delete("/v2/orgs/acme/tokens/ci", headers=admin)  # the client retries
    assert r.status_code == 409 and "already revoked" in r.json()["detail"]
    assert closed == [("acme", "ci")] * 2  # revoked already: disconnected again, in case the first could not be
    assert runtime.gate.credentials.check(other_ci) is not None


def test_a_revocation_refused_or_failing_before_its_check_disconnects_nothing(revoking) -> None:
    client, runtime, closed = revoking
    admin = {"Authorization": "Bearer " + runtime.relay.create_token("acme", "admin")}
    weak = {"Authorization": "Bearer " + runtime.relay.create_token("acme", "weak", permissions=["token.write"])}
    runtime.relay.create_token("other", "ci")
    runtime.runner.catch_up()
    assert client.delete("/v2/orgs/acme/tokens/ci", headers=admin).status_code == 404  # other's only
    assert client.delete("/v2/orgs/acme/tokens/admin", headers=weak).status_code == 403  # a stronger key
    real = runtime.relay._maybe

    def store_away(*_: Any) -> Any:
        raise sqlite3.OperationalError("unable to open database file (injected)")

    runtime.relay._maybe = store_away  # the command cannot read the token: nothing saved
    try:
        assert client.delete("/v2/orgs/acme/tokens/weak", headers=admin).status_code == 503  # the store away
    finally:
        runtime.relay._maybe = real
    assert closed == []
    assert client.delete("/v2/orgs/acme/tokens/weak", headers=admin).status_code == 204
    assert closed == [("acme", "weak")]
