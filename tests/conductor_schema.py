"""Relay's answers checked against the Conductor API 2.0.0 document (the reference, not vendored).

``../shared/reference/conductor-openapi-3.1.json`` is read at test time. :func:`check_response`
validates a response's body against the schema the document gives the operation for that
status (``default`` for errors: ``ErrorModel``, problem+json); :func:`check_schema` validates a
value against one component schema. Conductor's schemas are closed
(``additionalProperties: false``): an extra field fails. Formats are checked too (``date-time``,
``uri``, ...): under Draft 2020-12 a validator treats ``format`` as a note unless told otherwise.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs

# shared/ lies beside the clone (as for CI); RELAY_CONDUCTOR_OPENAPI names another copy.
REFERENCE = Path(os.environ.get("RELAY_CONDUCTOR_OPENAPI") or
                 Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "conductor-openapi-3.1.json")


@cache
def document() -> dict[str, Any]:
    if not REFERENCE.exists():
        raise FileNotFoundError(f"the Conductor API reference is not at {REFERENCE}: clone beside shared/ "
                                "or set RELAY_CONDUCTOR_OPENAPI")
    return json.loads(REFERENCE.read_text())


@cache
def operations() -> dict[str, tuple[str, str, dict[str, Any]]]:
    """operationId -> (method, path template, operation object)."""
    out = {}
    for path, item in document()["paths"].items():
        for method, op in item.items():
            if isinstance(op, dict) and "operationId" in op:
                out[op["operationId"]] = (method.upper(), path, op)
    return out


def _validator(schema: dict[str, Any]) -> Any:
    # The component schemas travel with the schema so that "#/components/schemas/X" resolves.
    return jsonschema_rs.Draft202012Validator({**schema, "components": document()["components"]},
                                              validate_formats=True)


@cache
def _component(name: str) -> Any:
    return _validator({"$ref": f"#/components/schemas/{name}"})


def check_schema(name: str, value: Any) -> None:
    """Raises AssertionError naming every way ``value`` breaks component schema ``name``."""
    errors = [f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}"
              for e in _component(name).iter_errors(value)]
    assert not errors, f"{name}: " + "; ".join(errors[:10])


def response_schema(operation_id: str, status: int) -> dict[str, Any] | None:
    """The schema of the body the document gives ``operation_id`` at ``status`` (None: no body)."""
    _, _, op = operations()[operation_id]
    responses = op["responses"]
    r = responses.get(str(status)) or (responses.get("default") if status >= 400 else None)
    assert r is not None, f"{operation_id} has no response {status} in the reference"
    content = r.get("content") or {}
    if not content:
        return None
    (media,) = content.values() if len(content) == 1 else [content.get("application/json") or next(iter(content.values()))]
    return media.get("schema")


def check_response(operation_id: str, status: int, body: Any) -> None:
    """Asserts that ``body`` (decoded JSON, or None for no body) is what the reference allows
    ``operation_id`` to answer with ``status``."""
    schema = response_schema(operation_id, status)
    if schema is None:
        assert body in (None, b"", ""), f"{operation_id} {status} has no body in the reference, got {body!r}"
        return
    errors = [f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}"
              for e in _validator(schema).iter_errors(body)]
    assert not errors, f"{operation_id} {status}: " + "; ".join(errors[:10])
