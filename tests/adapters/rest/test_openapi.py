"""The API's OpenAPI document (``relay_es/adapters/rest/openapi.py``): every request body is in it.

Handlers that decode their own body declare it in their route's ``opt``; the document is
completed from those declarations. Checked here against the Conductor reference: each operation
Relay serves that takes a body there takes one here, under the reference's name, with the same
properties and the same requiredness; every ``$ref`` resolves. Every operation declares its
refusals as problem documents, and a real ``relay serve``'s refusals are what it declares. The
served document is otherwise checked in ``test_health.py``; that a declared body is what is
decoded, by every route's own tests (:func:`calling.body` reads the declaration).
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import msgspec
import pytest
from litestar import Request, post

from relay_es.adapters.rest import build_app, calling
from relay_es.adapters.rest.openapi import Body, body, complete, declared, declared_bodies
from tests.adapters.rest.fakes import fake_context
from tests.conductor_schema import document as reference
from tests.rest_client import rest as call
from tests.server import RelayServer


def served() -> dict[str, Any]:
    app = build_app(fake_context())
    return complete(app.openapi_schema.to_schema(), declared_bodies(app))


def operations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for item in doc["paths"].values() for op in item.values()
            if isinstance(op, dict) and "operationId" in op}


def named(schema: dict[str, Any]) -> str | None:
    """The component a body's schema refers to."""
    return str(schema["$ref"]).rsplit("/", 1)[-1] if "$ref" in schema else None


# Relay's model names where they are not the reference's.
RENAMED = {"PatchAppInputBody": "PatchAppBody", "PutAppInputBody": "PutAppBody", "CreateTokenInputBody": "CreateTokenBody"}


def test_every_body_of_the_reference_is_in_relay_s_document_with_its_properties() -> None:
    doc, ref = served(), reference()
    mine, theirs = operations(doc), operations(ref)
    checked = []
    for oid, op in theirs.items():
        if oid not in mine or "requestBody" not in op:
            continue
        want = op["requestBody"]
        got = mine[oid].get("requestBody")
        assert got is not None, f"{oid}: no requestBody in Relay's document"
        ref_name = named(want["content"]["application/json"]["schema"])
        name = named(got["content"]["application/json"]["schema"])
        assert ref_name is not None and name == RENAMED.get(ref_name, ref_name), (oid, name, ref_name)
        assert bool(got.get("required")) == bool(want.get("required")), oid
        props = set(doc["components"]["schemas"][name].get("properties", {}))
        assert props == set(ref["components"]["schemas"][ref_name].get("properties", {})), oid
        checked.append(oid)
    # every body is one a handler decodes itself, from its route's declaration
    assert {"searchWorkflows", "getWorkflowAggregates", "getStepAggregates", "cancelWorkflow", "importWorkflow",
            "bulkForkWorkflowsFromFailure", "createAlertingRule", "backfillSchedule", "updateOrg",
            "updateApp", "registerApp", "createToken"} <= set(checked)
    assert mine["fixStrandedWorkflows"]["requestBody"]["required"] is True  # Relay's own


def test_every_reference_in_the_document_resolves() -> None:
    doc = served()
    schemas = doc["components"]["schemas"]

    def refs(value: Any) -> list[str]:
        if isinstance(value, dict):
            return ([value["$ref"]] if isinstance(value.get("$ref"), str) else []) + [
                r for v in value.values() for r in refs(v)]
        if isinstance(value, list):
            return [r for v in value for r in refs(v)]
        return []

    found = refs(doc)
    assert any(r.endswith("/WorkflowSearchBody") for r in found)
    for r in found:
        assert r.startswith("#/components/schemas/") and r.rsplit("/", 1)[-1] in schemas, r


def test_a_body_schema_is_msgspec_s_own_closed_and_bounded() -> None:
    schemas = served()["components"]["schemas"]
    s = schemas["WorkflowSearchBody"]
    assert s["additionalProperties"] is False and "limit" in s["properties"]
    assert s["properties"]["limit"]["minimum"] == 0  # msgspec's Meta(ge=0), as decoding enforces it
    # also where Litestar wrote the model for an answer (AutoscalePolicy is getAutoscalingPolicy's too)
    assert schemas["AutoscalePolicy"]["additionalProperties"] is False
    assert schemas["RolloutPolicy"]["additionalProperties"] is False


def test_the_rest_layer_s_models_have_distinct_names() -> None:
    """The document names components after the models: two models of one name would share one."""
    import importlib
    import inspect
    import pkgutil
    from collections import Counter

    import relay_es.adapters.rest as rest
    from relay_es.adapters.rest.conductor import models

    names: Counter[str] = Counter()
    modules = [importlib.import_module(m.name) for m in pkgutil.iter_modules(rest.__path__, rest.__name__ + ".")]
    for mod in [*modules, models]:
        names.update(o.__name__ for o in vars(mod).values()
                     if inspect.isclass(o) and issubclass(o, msgspec.Struct) and o.__module__ == mod.__name__)
    assert len(names) > 40 and [n for n, c in names.items() if c > 1] == []


class Thing(msgspec.Struct, forbid_unknown_fields=True):
    n: int


def test_a_declaration_names_its_model_and_a_missing_one_is_a_clear_bug() -> None:
    assert body(Thing, required=False) == {"relay.body": Body(Thing, False)}

    @post("/declared", opt=body(Thing))
    async def declared_route(request: Request[Any, Any, Any]) -> None:
        pass

    @post("/undeclared")
    async def undeclared_route(request: Request[Any, Any, Any]) -> None:
        await calling.body(request)

    assert declared(declared_route) == Body(Thing, True)
    with pytest.raises(KeyError):
        declared(undeclared_route)
    with pytest.raises(ValueError, match="nowhere"):
        complete({"paths": {}}, {"nowhere": Body(Thing)})


def test_every_operation_declares_its_refusals_as_problem_documents_and_they_are_so(
        auth_server: tuple[RelayServer, dict[str, str]]) -> None:
    s, tokens = auth_server
    doc = call(s, "GET", "/openapi.json").json()
    ops = operations(doc)
    assert len(ops) > 60
    for oid, op in ops.items():
        responses = op["responses"]
        assert responses["default"]["content"] == {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemDetails"}}}, oid
        assert [c for c in responses if c.startswith(("4", "5"))] == [], oid  # no Litestar 400 shape
        assert [c for c in responses if c.startswith("2")], oid  # the answers are still there
    problem = jsonschema_rs.Draft202012Validator(
        {"$ref": "#/components/schemas/ProblemDetails", "components": doc["components"]})
    acme = "/v2/orgs/acme/apps/orders"
    refusals = {
        401: call(s, "GET", "/v2/orgs/acme/apps"),
        403: call(s, "GET", acme + "/executors", tokens["scoped"]),
        404: call(s, "GET", "/v2/orgs/acme/apps/nope/executors", tokens["acme"]),
        422: call(s, "GET", acme + "/executors", tokens["acme"], params={"asOf": "yesterday"}),
        503: call(s, "GET", acme + "/workflows", tokens["acme"]),  # no executor connected
    }
    for status, r in refusals.items():
        assert r.status_code == status, (status, r.text)
        assert r.headers["content-type"].startswith("application/problem+json"), status
        assert [e.message for e in problem.iter_errors(r.json())] == [], (status, r.json())
    assert [e["location"] for e in refusals[422].json()["errors"]] == ["asOf"]  # the optional part too
    assert not problem.is_valid({"status_code": 400, "detail": "Bad Request", "extra": {}})  # Litestar's shape
