"""The path prefixes the controllers share: Conductor's own, and where a handler reads its org and
application from."""

from __future__ import annotations

import re

from litestar import Controller, Litestar, get
from litestar.params import FromPath
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.paths import APP, ORG
from tests.adapters.rest.fakes import fake_context
from tests.conductor_schema import operations


def _shape(template: str) -> str:
    """A path template with its parameters' names and types left out: ``/v2/orgs/{}``."""
    return re.sub(r"\{[^}]*\}", "{}", template)


def test_the_prefixes_are_the_paths_of_conductors_org_and_application() -> None:
    ops = operations()
    assert _shape(ORG) == _shape(ops["getOrg"][1]) == "/v2/orgs/{}"
    assert _shape(APP) == _shape(ops["getApp"][1]) == "/v2/orgs/{}/apps/{}"


class Things(Controller):
    path = APP + "/things"

    @get("/{thing:str}")
    async def one(self, org: FromPath[str], app: FromPath[str], thing: FromPath[str]) -> dict[str, str]:
        return {"org": org, "app": app, "thing": thing}


@get(ORG + "/stuff")
async def org_stuff(org: FromPath[str]) -> dict[str, str]:
    return {"org": org}


def test_a_handler_under_them_reads_org_and_app_from_the_path() -> None:
    with TestClient(Litestar([Things, org_stuff])) as c:
        assert c.get("/v2/orgs/acme/apps/orders/things/t1").json() == {"org": "acme", "app": "orders", "thing": "t1"}
        assert c.get("/v2/orgs/acme/stuff").json() == {"org": "acme"}
        assert c.get("/v2/orgs/acme/things/t1").status_code == 404  # an application's resource needs the app


def test_every_org_and_application_route_is_under_them() -> None:
    paths = [r.path for r in build_app(fake_context()).routes]
    of_orgs = [p for p in paths if p.startswith("/v2/orgs/")]
    assert of_orgs and all(p == ORG or p.startswith(ORG + "/") for p in of_orgs)
    of_apps = [p for p in of_orgs if p.startswith(ORG + "/apps/")]
    assert of_apps and all(p == APP or p.startswith(APP + "/") for p in of_apps)
