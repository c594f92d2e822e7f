"""The client CLI prints what executors and paths supplied without letting it
drive the terminal, and follows the server's pages (against a mock server)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from relay_es.composition import client_cli

REAL_CLIENT = httpx.Client
HOSTILE = "web-1\n\x1b[2J\x1b]0;pwned\x07\rroot\u202eexe.txt"


def run(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response], *argv: str) -> int:
    def client(**kw: Any) -> httpx.Client:
        return REAL_CLIENT(transport=httpx.MockTransport(handler), **kw)

    monkeypatch.setattr(client_cli.httpx, "Client", client)
    parser = argparse.ArgumentParser()
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))
    return client_cli.run(parser.parse_args(list(argv)))


def executor(executor_id: str, hostname: str = "web-1") -> dict[str, Any]:
    return {"executorId": executor_id, "status": "HEALTHY", "appVersion": "v1\r", "hostname": hostname,
            "language": "python", "dbosVersion": "3.2.0", "updatedAt": None, "deadline": None}


def clean(text: str) -> None:
    for bad in ("\x1b", "\r", "\x07", "\u202e"):
        assert bad not in text, repr(text)


def test_executor_supplied_strings_cannot_drive_the_terminal(monkeypatch, capsys) -> None:
    rows = [executor("A\x1b[2J", HOSTILE), executor("B")]
    assert run(monkeypatch, lambda r: httpx.Response(200, json=rows), "executors", "list", "--app", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 3  # the header and one line per executor: no injected line
    assert "A\\x1b[2J" in out and "web-1\\n\\x1b[2J" in out


def test_audit_details_and_key_value_listings_are_escaped(monkeypatch, capsys) -> None:
    entries = [{"seq": 1, "at": "2026-11-30T12:00:00.000Z", "app": "orders", "executorId": "A\n2",
                "action": "protocol.violation", "detail": {"hostname": HOSTILE}}]
    assert run(monkeypatch, lambda r: httpx.Response(200, json=entries), "audit") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 2
    app = {"name": "orders", "status": "AVAILABLE", "language": HOSTILE, "x\x1b[2J": 1}
    assert run(monkeypatch, lambda r: httpx.Response(200, json=app), "apps", "show", "orders") == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == len(app)


def test_error_texts_from_the_server_are_escaped(monkeypatch, capsys) -> None:
    problem = {"status": 404, "title": "Not found", "detail": f"no such executor {HOSTILE}"}
    code = run(monkeypatch, lambda r: httpx.Response(404, json=problem), "history", "A", "--app", "orders")
    assert code == 1
    err = capsys.readouterr().err
    clean(err)
    assert len(err.splitlines()) == 1


def test_names_typed_by_the_user_stay_one_path_segment(monkeypatch, capsys) -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.url.raw_path.decode())
        return httpx.Response(200, json=[])

    run(monkeypatch, handler, "history", "../../tokens/admin?x=", "--app", "orders")
    assert seen == ["/v2/orgs/local/apps/orders/executors/..%2F..%2Ftokens%2Fadmin%3Fx%3D/history"]


def test_as_of_follows_the_servers_pages(monkeypatch, capsys) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        after = r.url.params.get("after")
        if after is None:
            return httpx.Response(200, json=[executor("A")], headers={
                "Link": '</v2/orgs/local/apps/orders/executors?asOf=2026-01-01T00%3A00%3A00Z&after=A&limit=1>; rel="next"'})
        return httpx.Response(200, json=[executor("B")])

    assert run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z",
               "--json") == 0
    assert [e["executorId"] for e in json.loads(capsys.readouterr().out)] == ["A", "B"]


def test_tables_ask_for_relay_s_own_fields(monkeypatch, capsys) -> None:
    """Without ``?relay=extended`` the server answers Conductor's fields only: no deadline, no appNames."""
    asked: list[httpx.URL] = []
    tokens = [{"tokenName": "ci", "createdAt": "2026-01-01T00:00:00.000Z", "permissions": ["application.read"],
               "appIds": ["id-1"], "appNames": ["orders"]}]

    def handler(r: httpx.Request) -> httpx.Response:
        asked.append(r.url)
        if r.url.path.endswith("/tokens"):
            return httpx.Response(200, json=tokens)
        return httpx.Response(200, json=[{**executor("A"), "deadline": "2026-01-01T00:00:05.000Z"}])

    assert run(monkeypatch, handler, "executors", "list", "--app", "orders") == 0
    assert "2026-01-01T00:00:05.000Z" in capsys.readouterr().out
    assert run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z") == 0
    assert run(monkeypatch, handler, "tokens", "list") == 0
    out = capsys.readouterr().out
    assert "appNames" in out.splitlines()[-2] and "orders" in out.splitlines()[-1]
    assert [u.params.get("relay") for u in asked] == ["extended"] * 3
    assert asked[1].params["asOf"] == "2026-01-01T00:00:00Z"


def test_a_next_page_elsewhere_is_not_followed(monkeypatch, capsys) -> None:
    asked: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        asked.append(str(r.url))
        return httpx.Response(200, json=[executor("A")], headers={"Link": '<https://evil.example/steal>; rel="next"'})

    code = run(monkeypatch, handler, "executors", "list", "--app", "orders", "--as-of", "2026-01-01T00:00:00Z",
               "--token", "relay_secret")
    assert code == 1 and len(asked) == 1 and "evil.example" in capsys.readouterr().err


def test_history_is_read_page_by_page(monkeypatch, capsys) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        after = int(r.url.params.get("after", "0"))
        n = 1000 if after == 0 else 5
        return httpx.Response(200, json=[{"version": after + i + 1, "at": "t", "type": "Connected", "data": {}}
                                         for i in range(n)])

    assert run(monkeypatch, handler, "history", "A", "--app", "orders", "--json") == 0
    assert [e["version"] for e in json.loads(capsys.readouterr().out)] == list(range(1, 1006))


def test_printable_keeps_ordinary_text() -> None:
    assert client_cli.printable("café-1.example_host~v2") == "café-1.example_host~v2"
    assert client_cli.printable("a\\nb") == "a\\\\nb"  # a typed backslash cannot fake an escape
