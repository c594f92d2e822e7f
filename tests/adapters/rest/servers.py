"""Running ``relay serve`` for the REST tests: development mode, and auth mode with tokens made by the CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.rest_client import rest as call
from tests.server import RelayServer
from tests.server import admin_token as server_admin_token


def known(s: RelayServer, org: str, token: str) -> None:
    """Waits until the server accepts ``token`` (an org-wide token of ``org``). A server that just
    started learns the tokens made before it from its read models, which it brings up to date
    in the background; a key not there yet is refused."""
    deadline = time.monotonic() + 15
    while call(s, "GET", f"/v2/orgs/{org}/apps", token).status_code != 200:
        assert time.monotonic() < deadline, f"the server did not learn {org}'s tokens"
        time.sleep(0.05)


@pytest.fixture
def server(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url]).start()
    yield s
    s.stop()


@pytest.fixture
def auth_server(tmp_path, store_url) -> Iterator[tuple[RelayServer, dict[str, str]]]:
    """A server in auth mode, with tokens made the way the README says: relay admin create-token."""

    def admin_token(org: str, name: str, *apps: str) -> str:
        return server_admin_token(tmp_path, store_url, org, name, *apps)

    tokens = {"acme": admin_token("acme", "admin"), "other": admin_token("other", "admin"),
              "scoped": admin_token("acme", "billing-only", "billing"),
              "revoked": admin_token("acme", "old")}
    s = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    known(s, "acme", tokens["revoked"])  # made last: every token is in the read models
    call(s, "PUT", "/v2/orgs/acme/apps/orders", tokens["acme"])
    call(s, "PUT", "/v2/orgs/acme/apps/billing", tokens["acme"])
    assert call(s, "DELETE", "/v2/orgs/acme/tokens/old", tokens["acme"]).status_code == 204
    yield s, tokens
    s.stop()
