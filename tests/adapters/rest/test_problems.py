"""Errors (``relay_es/adapters/rest/problems.py``) on a real ``relay serve``: every one a problem document."""

from __future__ import annotations

from tests.rest_client import rest as call
from tests.server import RelayServer


def test_errors_are_problem_documents(server: RelayServer) -> None:
    for method, path, status in (("GET", "/v2/orgs/local/apps/nope", 404),
                                 ("PATCH", "/v2/orgs/local/apps/nope", 404),
                                 ("DELETE", "/v2/orgs/local/tokens/nope", 404),
                                 ("GET", "/v2/orgs/other/apps", 404),
                                 ("PUT", "/v2/orgs/local/apps/bad%20name", 422),
                                 ("GET", "/v2/orgs/local/apps/nope/executors/x/history", 404),
                                 ("GET", "/v2/orgs/local/apps/nope/executors?asOf=yesterday", 422),
                                 ("GET", "/v2/orgs/local/executor-events?limit=0", 422)):
        kw = {"json": {"executorTimeoutSecs": 5}} if method == "PATCH" else {}
        r = call(server, method, path, **kw)
        assert r.status_code == status, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json"), (method, path)
        assert r.json()["status"] == status and r.json()["detail"]
