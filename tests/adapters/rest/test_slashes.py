"""Encoded slashes: the path decoded a segment at a time, and the guard's restoring of them."""

from __future__ import annotations

import asyncio
from typing import Any

from relay_es.adapters.rest.slashes import SLASH, EncodedSlashes, decoded_path, restore


def test_an_encoded_slash_stays_inside_its_segment_and_everything_else_is_decoded() -> None:
    raw = b"/v2/orgs/local/apps/a/workflows/orders%2F42%2fx%20y%3A1/steps"
    assert decoded_path(raw) == f"/v2/orgs/local/apps/a/workflows/orders{SLASH}42{SLASH}x y:1/steps"
    assert decoded_path(b"/a/b") == "/a/b"
    assert decoded_path(b"/w/%E2%9C%93%2F") == f"/w/\u2713{SLASH}"


def test_a_nul_the_client_sent_is_never_taken_for_a_slash() -> None:
    path = decoded_path(b"/w/a%00b%2Fc")
    assert path == f"/w/a\x01b{SLASH}c"
    params = {"workflow_id": path.split("/")[2]}
    restore(params, ["workflow_id"])
    assert params["workflow_id"] == "a\x01b/c"  # still unprintable: the guard refuses it


def test_restore_touches_only_the_keys_it_is_given() -> None:
    params: dict[str, Any] = {"workflow_id": f"a{SLASH}b", "app": f"x{SLASH}y", "n": 3}
    restore(params, ["workflow_id", "queue_name", "n"])
    assert params == {"workflow_id": "a/b", "app": f"x{SLASH}y", "n": 3}


def seen_path(scope: dict[str, Any]) -> str:
    got: dict[str, Any] = {}

    async def app(s: dict[str, Any], receive: Any, send: Any) -> None:
        got.update(s)

    asyncio.run(EncodedSlashes(app)(scope, None, None))
    return got["path"]


def test_only_an_http_request_with_an_escape_in_its_path_is_rerouted() -> None:
    assert seen_path({"type": "http", "path": "/w/a", "raw_path": b"/w/a"}) == "/w/a"  # no escape: as it is
    http = {"type": "http", "path": "/w/a/b", "raw_path": b"/w/a%2Fb"}
    assert seen_path(http) == f"/w/a{SLASH}b"
    assert http["path"] == "/w/a/b"  # the server's scope is not changed: a copy is
    assert seen_path({"type": "http", "path": "/w/a b", "raw_path": b"/w/a%20b"}) == "/w/a b"
    assert seen_path({"type": "http", "path": "/w/a", "raw_path": None}) == "/w/a"
    # a NUL the client sent, with no encoded slash beside it, is not left for the guard to read as "/"
    assert seen_path({"type": "http", "path": "/w/a\x00b", "raw_path": b"/w/a%00b"}) == "/w/a\x01b"
    assert seen_path({"type": "websocket", "path": "/w/a/b", "raw_path": b"/w/a%2Fb"}) == "/w/a/b"
    assert seen_path({"type": "http", "path": "/w/\u00e9/b", "raw_path": "/w/\u00e9%2Fb".encode()}) == "/w/\u00e9/b"
