"""Encoded slashes in a path segment: a workflow id such as ``orders/42`` is addressable.

A workflow id, a queue or schedule name is chosen by the application and may hold ``/``; a client
sends it percent-encoded (``/workflows/orders%2F42/steps``). The server hands the application a
decoded ``path`` in which that ``%2F`` has become a separator like any other, so no route matches
(a 404). :class:`EncodedSlashes`, around the REST application, decodes the path from the request's
``raw_path`` one segment at a time, and writes a slash that was encoded inside a segment as
:data:`SLASH`; :func:`restore` turns it back into ``/`` in the free-text path parameters (the guard
does it, before any handler sees them). :data:`SLASH` is NUL, which no such name can hold (Postgres
text cannot); a NUL the client sent itself (``%00``) is made another unprintable character, so that
it stays invalid and is never taken for a slash.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote

SLASH = "\x00"  # a "/" that was encoded inside one path segment, from the server to the guard
SENT_NUL = "\x01"  # a NUL the client sent: unprintable, so refused like it, never a slash

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def decoded_path(raw_path: bytes) -> str:
    """The path with each segment percent-decoded on its own, a slash inside a segment as :data:`SLASH`."""
    return "/".join(unquote(segment).replace(SLASH, SENT_NUL).replace("/", SLASH)
                    for segment in raw_path.decode("ascii").split("/"))


def restore(params: dict[str, Any], keys: Iterable[str]) -> None:
    """The ``keys`` of ``params`` with :data:`SLASH` made ``/`` again (in place)."""
    for key in keys:
        value = params.get(key)
        if isinstance(value, str) and SLASH in value:
            params[key] = value.replace(SLASH, "/")


class EncodedSlashes:
    """An HTTP request whose path holds a percent-escape is routed on :func:`decoded_path` (so an
    encoded slash stays in its segment, and a NUL the client sent can't pass for one); any other
    scope passes as it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and b"%" in raw:  # any escape: a %00 must not reach the guard as NUL, which it reads as "/"
            try:
                scope = {**scope, "path": decoded_path(raw)}
            except UnicodeDecodeError:
                pass  # not ASCII: the server's own decoding stands
        await self.app(scope, receive, send)
