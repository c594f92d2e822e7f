"""Tokens (``relay_es/adapters/rest/tokens.py``) on a real ``relay serve``."""

from __future__ import annotations

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
