"""The client CLI against a server that answers what it should not: redirects, replies that never
end or never stop growing, huge error pages, shapes no command can use, lone surrogates, pages
that do not move on; and a token that cannot go in a header, and a reader of stdout that goes
away. Each ends in one line on stderr and a non-zero exit, never a traceback or a hang."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from relay_es.composition import client_cli
from tests.composition.test_client_cli import clean, run


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    assert captured.err.startswith("relay: ") and len(captured.err.splitlines()) == 1, captured.err
    clean(captured.err)
    return captured.err


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_error_naming_where_it_points(monkeypatch, capsys, status: int) -> None:
    asked: list[httpx.Request] = []

    def handler(r: httpx.Request) -> httpx.Response:
        asked.append(r)
        return httpx.Response(status, headers={"Location": "http://evil.example/login"})

    assert run(monkeypatch, handler, "apps", "delete", "orders", "--token", "relay_t") == 1
    err = one_line_error(capsys)
    assert f"{status} " in err and "http://evil.example/login" in err and "not followed" in err
    assert len(asked) == 1  # not followed: the token goes to --server only
    assert run(monkeypatch, lambda r: httpx.Response(302), "apps", "list") == 1
    assert "302" in one_line_error(capsys)


def test_the_token_loses_surrounding_whitespace_and_one_no_header_can_carry_is_never_shown(monkeypatch,
                                                                                             capsys) -> None:
    sent: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(r.headers.get("Authorization"))
        return httpx.Response(200, json=[])

    assert run(monkeypatch, handler, "apps", "list", "--token", " relay_SECRET\r\n") == 0
    assert sent == ["Bearer relay_SECRET"]
    capsys.readouterr()
    for token in ("relay_SÉCRET", "relay_SECRET\x00x", "relay_SECRET inner", "relay_SECRET\u2028x"):
        assert run(monkeypatch, handler, "apps", "list", "--token", token) == 2, repr(token)
        err = one_line_error(capsys)
        assert "SECRET" not in err and "SÉCRET" not in err and "RELAY_TOKEN" in err
    assert sent == ["Bearer relay_SECRET"]  # nothing sent with them


def test_httpx_s_refusal_of_a_header_is_not_quoted(monkeypatch, capsys) -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError("Illegal header value b'Bearer relay_SECRET\\r'")

    assert run(monkeypatch, handler, "apps", "list", "--token", "relay_SECRET") == 2
    assert "SECRET" not in one_line_error(capsys)


def test_a_reply_that_trickles_is_cut_at_the_deadline(monkeypatch, capsys) -> None:
    monkeypatch.setattr(client_cli, "REQUEST_TIMEOUT_SECS", 0.5)

    def trickle() -> Iterator[bytes]:  # a byte every 50 ms: no single wait is long; for 10 s at most
        end = time.monotonic() + 10
        while time.monotonic() < end:
            time.sleep(0.05)
            yield b" "

    started = time.monotonic()
    assert run(monkeypatch, lambda r: httpx.Response(200, content=trickle()), "apps", "list") == 2
    assert time.monotonic() - started < 5
    assert "within 0.5s" in one_line_error(capsys)


def test_a_reply_larger_than_the_cap_is_refused_as_it_arrives(monkeypatch, capsys) -> None:
    monkeypatch.setattr(client_cli, "MAX_REPLY_BYTES", 1 << 20)
    chunks: list[int] = []

    def endless() -> Iterator[bytes]:
        for i in range(64):  # 4 MiB
            chunks.append(i)
            yield b" " * (64 << 10)

    assert run(monkeypatch, lambda r: httpx.Response(200, content=endless()), "apps", "list") == 1
    assert "larger than 1 MiB" in one_line_error(capsys)
    assert len(chunks) < 20  # not read to its end


@pytest.mark.parametrize("answer", [
    httpx.Response(500, headers={"Content-Type": "text/html"},
                   content=b"<html>\n<body>\x1b[31mInternal\x1b[0m Error</body>\n</html>" + b"x" * 5000),
    httpx.Response(500, headers={"Content-Type": "text/plain"}, content=b"A" * 5_000_000),
    httpx.Response(400, json={"detail": "D" * 10_000, "errors": [{"location": "x", "message": "M" * 10_000}] * 100}),
    httpx.Response(400, json={"detail": {"x": "\x1b[2J" * 1000}}),
], ids=["html", "huge-text", "long-problem", "detail-object"])
def test_an_error_s_text_is_cut(monkeypatch, capsys, answer: httpx.Response) -> None:
    assert run(monkeypatch, lambda r: answer, "apps", "list") == 1
    captured = capsys.readouterr()
    clean(captured.err)
    lines = captured.err.splitlines()
    assert captured.out == "" and lines[0].startswith("relay: ") and len(lines[0]) < 1000, lines[0][:300]
    assert len(lines) <= 1 + client_cli.MAX_DETAILS + 1 and all(len(line) < 1000 for line in lines)


SHAPES = [  # (argv, the server's answer): nothing any of them can use
    (["events"], b'{"a": 1}'), (["events"], b'[{"at": "x"}]'), (["events", "--json"], b"null"),
    (["events"], b'[{"seq": "7"}]'), (["events"], b"[1]"),
    (["history", "A", "--app", "orders"], b"null"), (["history", "A", "--app", "orders"], b'{"version": 1}'),
    (["tokens", "create", "ci"], b""), (["tokens", "create", "ci"], b"[1]"), (["tokens", "create", "ci"], b"{}"),
    (["tokens", "create", "ci", "--json"], b'{"tokenName": "ci"}'),
    (["apps", "list"], b"null"), (["apps", "list"], b'"hello"'), (["apps", "list"], b'{"name": "orders"}'),
    (["apps", "show", "orders"], b'"hello"'), (["apps", "show", "orders"], b"[]"),
    (["audit"], b"null"), (["audit"], b'{"a": 1}'), (["workflows", "get", "wf", "--app", "orders"], b"null"),
    (["executors", "list", "--app", "orders"], b'{"a": 1}'), (["queues", "list", "--app", "orders"], b"7"),
]


@pytest.mark.parametrize(("argv", "body"), SHAPES, ids=[f"{' '.join(a)}:{b.decode()[:20]}" for a, b in SHAPES])
def test_an_answer_of_a_shape_the_command_cannot_use_is_one_line_and_exit_1(monkeypatch, capsys, argv: list[str],
                                                                             body: bytes) -> None:
    answer = httpx.Response(200 if body else 204, content=body)
    assert run(monkeypatch, lambda r: answer, *argv) == 1
    one_line_error(capsys)


def test_a_capped_queue_without_its_count_is_shown_unknown(monkeypatch, capsys) -> None:
    stranded = {"executors": [], "workflows": [], "queues": [{"queueName": "q", "enqueuedCapped": True}]}
    assert run(monkeypatch, lambda r: httpx.Response(200, json=stranded), "workflows", "stranded", "--app",
               "orders") == 0
    assert "-+" in capsys.readouterr().out


def test_tokens_create_prints_the_secret_alone_on_stdout(monkeypatch, capsys) -> None:
    created = {"tokenName": "ci", "token": "relay_abc", "createdAt": "2026-11-30T12:00:00.000Z"}
    assert run(monkeypatch, lambda r: httpx.Response(201, json=created), "tokens", "create", "ci") == 0
    captured = capsys.readouterr()
    assert captured.out == "relay_abc\n"
    assert "token ci created" in captured.err


def test_a_lone_surrogate_is_shown_escaped(monkeypatch, capsys) -> None:
    body = b'[{"name": "a\\ud800b", "status": "x\\udfff"}]'
    assert run(monkeypatch, lambda r: httpx.Response(200, content=body), "apps", "list") == 0
    out = capsys.readouterr().out
    out.encode("utf-8")
    assert "a\\ud800b" in out and "x\\udfff" in out
    assert client_cli.printable("a\ud800b") == "a\\ud800b"


def test_a_next_page_already_read_is_refused(monkeypatch, capsys) -> None:
    path = "/v2/orgs/local/apps/orders/executors"
    for links in ({"": path + "?relay=extended"},  # itself
                  {"": path + "?relay=extended&after=A", "A": path + "?relay=extended"}):  # one back to the first
        asked: list[str] = []

        def handler(r: httpx.Request, links: dict[str, str] = links) -> httpx.Response:
            asked.append(str(r.url))
            assert len(asked) < 10, "the pages never end"
            nxt = links[r.url.params.get("after", "")]
            return httpx.Response(200, json=[{"executorId": "A"}], headers={"Link": f'<{nxt}>; rel="next"'})

        assert run(monkeypatch, handler, "executors", "list", "--app", "orders") == 1
        assert "already read" in one_line_error(capsys)
        assert len(asked) == len(links)


def test_pages_of_events_that_do_not_move_on_are_refused(monkeypatch, capsys) -> None:
    asked: list[httpx.URL] = []

    def stuck(r: httpx.Request) -> httpx.Response:
        asked.append(r.url)
        if len(asked) > 10:
            raise KeyboardInterrupt  # what the user would do
        if r.url.path.endswith("/history"):
            return httpx.Response(200, json=[{"version": 5, "type": "Connected"}] * 1000)
        return httpx.Response(200, json=[{"seq": 7, "action": "x"}] * 3)

    assert run(monkeypatch, stuck, "events", "--follow", "--limit", "3", "--interval", "0") == 1
    assert "seq 7" in capsys.readouterr().err
    assert len(asked) == 2
    asked.clear()
    assert run(monkeypatch, stuck, "history", "A", "--app", "orders") == 1
    assert "version 5" in one_line_error(capsys)
    assert len(asked) == 2


@pytest.mark.parametrize("server", ["http://[::1", "::::"])
def test_a_malformed_server_url_is_a_usage_error(monkeypatch, capsys, server: str) -> None:
    assert run(monkeypatch, lambda r: httpx.Response(200, json=[]), "apps", "list", "--server", server) == 2
    assert "--server" in one_line_error(capsys)


def test_a_reader_of_stdout_that_goes_away_ends_the_command_quietly() -> None:
    """``relay events -f | head -1``: exit 141, as a shell reports SIGPIPE, and nothing on stderr."""
    seq = iter(range(1, 1_000_000))

    class Feed(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps([{"seq": next(seq), "action": "executor.connected"}]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Feed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for json_flag in ([], ["--json"]):
            proc = subprocess.Popen([sys.executable, "-m", "relay_es", "events", "-f", "--interval", "0.01",
                                     "--server", f"http://127.0.0.1:{server.server_address[1]}", *json_flag],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline()
            proc.stdout.close()  # as head does after its line
            try:
                err = proc.stderr.read().decode()
                assert proc.wait(timeout=30) == 141, err
            finally:
                proc.kill()
            assert err == ""
    finally:
        server.shutdown()
        server.server_close()
