"""Request bodies, decoded strictly.

Litestar's own decoding of a body converts ``"60"`` to ``60``; a string is not
a number of seconds. Every body is decoded by :func:`decoded` instead: no
conversion between JSON types, an unknown field refused, and a refusal that is
a 422 problem naming the field (a body that is not JSON at all: 400). A route
that takes a body declares it in its decorator's ``opt``
(:func:`relay_es.adapters.rest.openapi.body`) and its handler reads it with
:func:`relay_es.adapters.rest.calling.body` (an import, with
``workflow_actions.streamed_body``): no handler has a ``data`` parameter.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
from litestar.exceptions import ClientException, ValidationException

from relay_es.adapters.rest.conductor import models

T = TypeVar("T")


def refused(key: str, message: str) -> ValidationException:
    return ValidationException(detail=f"{key}: {message}", extra=[{"key": key, "message": message}])


def of_request(raw: bytes | bytearray, cls: type[T], *, required: bool) -> T | None:
    """A request's whole body as ``cls`` (:func:`decoded`). An empty one (or only whitespace) is None
    where the route's declaration lets it be left out, else a 422."""
    if not raw or raw.isspace():  # isspace: no copy, unlike strip
        if not required:
            return None
        raise refused("body", "a JSON object is required")
    return decoded(raw, cls)


def decoded(raw: bytes | bytearray | memoryview, cls: type[T]) -> T:
    """``raw`` as ``cls``, with no conversion between JSON types (``cls``'s own rules refuse
    unknown fields and values out of bounds)."""
    try:
        return models.decode(raw, cls)  # type: ignore[type-var]  # any closed Struct, not only Conductor's
    except RecursionError:
        raise refused("body", "JSON is nested too deeply") from None
    except msgspec.ValidationError as e:
        text = str(e)
        where = text.rsplit("at `$.", 1)[-1].rstrip("`") if "at `$." in text else "body"
        raise ValidationException(detail=text, extra=[{"key": where, "message": text}]) from None
    except msgspec.DecodeError as e:  # not JSON at all: a 400, as Litestar answers for its own bodies
        raise ClientException(detail=f"body: {e}") from None

