"""Request bodies, decoded strictly.

Litestar's own decoding of a body converts ``"60"`` to ``60``; a string is not
a number of seconds. A handler whose body carries numbers decodes it again
with :func:`strict`, whose refusal is a 422 problem naming the field (a body
that is not JSON at all: 400).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.exceptions import ClientException, ValidationException

T = TypeVar("T")


async def strict(request: Request[Any, Any, Any], cls: type[T]) -> T:
    """The request's body as ``cls``, with no conversion between JSON types."""
    try:
        return msgspec.json.decode(await request.body(), type=cls, strict=True)
    except RecursionError:
        raise ValidationException(detail="body: JSON is nested too deeply",
                                  extra=[{"key": "body", "message": "JSON is nested too deeply"}]) from None
    except msgspec.ValidationError as e:
        text = str(e)
        where = text.rsplit("at `$.", 1)[-1].rstrip("`") if "at `$." in text else "body"
        raise ValidationException(detail=text, extra=[{"key": where, "message": text}]) from None
    except msgspec.DecodeError as e:  # not JSON at all: a 400, as Litestar answers for its own bodies
        raise ClientException(detail=f"body: {e}") from None
