"""The literal ``null`` in a query parameter (``relay_es/adapters/rest/guard.py``, :func:`null_takers`).

Litestar converts query strings laxly (msgspec, ``strict=False``): ``?limit=null`` became
``limit=None``, the parameter left out, and the executor was asked for every workflow. The
reference types these integers and booleans without null. Every route's such parameter is now a
422 naming it, before the service is asked; a text parameter keeps ``null`` as text, and a caller
the guard refuses is refused first. (The read routes' booleans are text their handlers parse,
``true`` or ``false`` only: ``null`` there is their own 422, checked here all the same.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from tests.adapters.rest.fakes import Calls, fake_context
from tests.adapters.rest.test_guard import FakeCredentials

A = "/v2/orgs/local/apps/orders"


class NoApps:
    """A relay that knows no application: a call that gets past its parameters is a 404."""

    def __init__(self, calls: Calls) -> None:
        self.app_exists = lambda org, app: calls("app_exists")(org, app) or False


@pytest.fixture
def api() -> Iterator[tuple[TestClient, Calls]]:
    calls = Calls()
    with TestClient(build_app(fake_context(relay=NoApps(calls))), base_url="http://127.0.0.1") as client:
        yield client, calls


@pytest.mark.parametrize("query, name", [
    ("/workflows?limit=null&offset=null", "limit"),  # the hunter's: limit None sent to the executor
    ("/workflows?limit=5&offset=null", "offset"),
    ("/workflows?sortDesc=null", "sortDesc"),
    ("/workflows?loadInput=NULL", "loadInput"),  # msgspec's null is any case
    ("/workflows?loadOutput=Null", "loadOutput"),
    ("/workflows/wf-1/steps?offset=null", "offset"),
    ("/workflows/wf-1/steps?limit=nul%6C", "limit"),  # decoded before it is read
    ("/schedules?loadContext=null", "loadContext"),
    ("/executors?relay=null", "relay"),
])
def test_null_for_a_number_a_boolean_or_a_closed_set_is_a_422_naming_it(api: tuple[TestClient, Calls],
                                                                        query: str, name: str) -> None:
    client, calls = api
    r = client.get(A + query)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert [e["location"] for e in r.json()["errors"]] == [name]
    assert "null" in r.json()["detail"].lower()
    assert calls.made == []


def test_null_after_an_org_s_events_is_refused_too(api: tuple[TestClient, Calls]) -> None:
    client, _ = api
    r = client.get("/v2/orgs/local/executor-events?after=null")
    assert r.status_code == 422 and r.json()["errors"][0]["location"] == "after"


@pytest.mark.parametrize("query", ["/workflows?limit=5&offset=0&sortDesc=true", "/workflows?status=null",
                                   "/workflows?workflowName=null", "/schedules?workflowName=null&loadContext=false",
                                   "/workflows?limit=nullable"])
def test_values_and_text_that_reads_null_go_on(api: tuple[TestClient, Calls], query: str) -> None:
    """``status=null`` is a status nobody has, not an absent filter; ``nullable`` is Litestar's 422."""
    client, calls = api
    r = client.get(A + query)
    assert r.status_code == (422 if "nullable" in query else 404), r.text
    assert calls.made == ([] if "nullable" in query else [("app_exists", "local", "orders")])


def test_the_parameters_it_covers_are_every_route_s_optional_number_and_closed_set() -> None:
    from relay_es.adapters.rest.guard import null_takers

    app = build_app(fake_context())
    found: dict[str, Any] = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if takers := null_takers(handler):
                found[handler.operation_id] = takers
    for op, names in {"listWorkflows": {"limit", "offset"}, "listWorkflowSteps": {"limit", "offset"},
                      "listExecutors": {"relay"}, "listTokens": {"relay"}, "listExecutorEvents": {"after"}}.items():
        assert names <= found.get(op, frozenset()), (op, found)
    assert all(name not in ("status", "workflowName", "scheduleNamePrefix")  # text keeps "null" as text
               for names in found.values() for name in names)


def test_a_caller_without_a_token_is_refused_before_its_query_is_read() -> None:
    ctx = fake_context(auth=True, credentials=FakeCredentials())
    with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
        assert client.get("/v2/orgs/acme/apps/orders/workflows?limit=null").status_code == 401
        r = client.get("/v2/orgs/acme/apps/orders/workflows?limit=null", headers={"Authorization": "Bearer admin"})
        assert r.status_code == 422 and r.json()["errors"][0]["location"] == "limit"
