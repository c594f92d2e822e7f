"""The API's OpenAPI document, served at ``/openapi.json`` (and nothing else under it).

Litestar writes the document from the handlers' signatures. A handler that decodes its own
body (:func:`~relay_es.adapters.rest.calling.body`: strictly, with Relay's 422 naming the
field, not Litestar's lenient conversion) has no ``data`` parameter, so Litestar sees no body.
Such a route declares it instead, in its decorator's ``opt`` (:func:`body`), and
:func:`~relay_es.adapters.rest.calling.body` decodes exactly the type declared there, so the
document and the decoding cannot part. :class:`DocumentRender` then completes the document:
each declared body becomes the operation's ``requestBody`` (a ``$ref`` to the model, named as
the Conductor reference names it), and the models' JSON Schemas (msgspec's own, which know
its renames, bounds and optional fields) are added to the components. Every operation's
refusals and failures are its ``default`` response: the ``application/problem+json`` document
:mod:`~relay_es.adapters.rest.problems` sends (:class:`ProblemDetails`), in place of Litestar's
400 (a shape Relay never sends: its validation errors are 422 problems).

No rendered pages (Swagger UI, Redoc, Elements, RapiDoc, Scalar load unpinned scripts from
public CDNs, which would run on Relay's origin with its API at hand): Litestar answers 404
under the path.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from litestar import Litestar, MediaType, Request
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.routes import HTTPRoute

BODY = "relay.body"  # the key of a route's ``opt`` that declares its body
REF = "#/components/schemas/{name}"
PROBLEM = "application/problem+json"


class ProblemError(msgspec.Struct):
    """One thing a refusal names: where (a field or parameter) and what was wrong."""

    location: str
    message: str


class ProblemDetails(msgspec.Struct):
    """An RFC 7807 problem document: how Relay refuses or fails a request."""

    type: str
    title: str
    status: Annotated[int, msgspec.Meta(ge=400, le=599)]
    detail: str
    errors: list[ProblemError] | msgspec.UnsetType = msgspec.UNSET


PROBLEMS = {
    "description": "Refused or failed, as an RFC 7807 problem document: 400 a malformed request (a query "
                   "parameter given twice, a body that is not JSON), 422 invalid input (`errors` names each "
                   "field or parameter), 401 no or an unknown token, 403 a permission the token does not hold, "
                   "404 an unknown org, application or object, 405 a method the path does not take, 409 what the "
                   "current state refuses, 413 a body too large, 500 the executor's reported error (its text) or "
                   "Relay's own failure, 502, 503 or 504 an executor's refused, missing or late answer.",
    "content": {PROBLEM: {"schema": {"$ref": REF.format(name=ProblemDetails.__name__)}}},
}


@dataclass(frozen=True)
class Body:
    """A route's JSON body: its model, and whether it may be left out (then None)."""

    model: type[msgspec.Struct]
    required: bool = True


def body(model: type[msgspec.Struct], *, required: bool = True) -> dict[str, Body]:
    """The ``opt`` of a route whose handler reads ``model`` with ``calling.body``."""
    return {BODY: Body(model, required)}


def declared(handler: Any) -> Body:
    """The body a route handler declared (a ``KeyError`` names a handler that reads a body it
    did not declare: a bug, caught by any test of the route)."""
    return handler.opt[BODY]


def declared_bodies(app: Litestar) -> dict[str, Body]:
    """operationId -> the body its route declared, for every route of ``app`` that declares one."""
    out: dict[str, Body] = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                if BODY in handler.opt and isinstance(handler.operation_id, str):
                    out[handler.operation_id] = handler.opt[BODY]
    return out


def complete(doc: dict[str, Any], bodies: dict[str, Body]) -> dict[str, Any]:
    """``doc`` with each declared body as its operation's ``requestBody``, every operation's
    refusals as its ``default`` response (:data:`PROBLEMS`, no other 4xx or 5xx), and the bodies'
    and :class:`ProblemDetails`'s schemas (and those they refer to) among the components, msgspec's:
    where Litestar wrote a component of the same name (a model that is also part of an answer),
    msgspec's replaces it, as the exact one (closed, bounded). The REST layer's models have distinct
    names (a test checks)."""
    doc = copy.deepcopy(doc)
    seen = set()
    for item in doc.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict):
                continue
            answers = op.get("responses", {})
            op["responses"] = {code: r for code, r in answers.items() if not code.startswith(("4", "5"))}
            op["responses"]["default"] = copy.deepcopy(PROBLEMS)
            if op.get("operationId") not in bodies:
                continue
            b = bodies[op["operationId"]]
            op["requestBody"] = {"required": b.required, "content": {
                "application/json": {"schema": {"$ref": REF.format(name=b.model.__name__)}}}}
            seen.add(op["operationId"])
    missing = sorted(set(bodies) - seen)
    if missing:
        raise ValueError(f"declared bodies of operations not in the document: {missing}")
    models = sorted({b.model for b in bodies.values()} | {ProblemDetails}, key=lambda m: m.__name__)
    _, components = msgspec.json.schema_components(models, ref_template=REF)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(components)  # msgspec's, where Litestar wrote the same model too (it is looser)
    return doc


class DocumentRender(JsonRenderPlugin):
    """Litestar's JSON document, completed with the declared bodies (once: the routes are fixed)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rendered: bytes | None = None

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = self.render_json(request, complete(openapi_schema, declared_bodies(request.app)))
        return self._rendered


def config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Relay",
        version="0.1.0",
        description="Self-hosted control plane for DBOS executors (a subset of Conductor API v2, plus Relay's own)",
        path="/openapi.json",
        render_plugins=[DocumentRender(path="/", media_type=MediaType.JSON)],
        components=Components(security_schemes={"BearerAuth": SecurityScheme(type="http", scheme="bearer")}),
    )
