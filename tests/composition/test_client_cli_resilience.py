"""The client CLI where a server goes away or misbehaves in ways :mod:`test_client_cli_hostile`
does not cover: a feed read a page at a time (and where the next starts), ``events --follow``
outliving a restart, one deadline over a whole call (headers included), replies that Python
reads but that are not JSON, endless pages, and ``--server`` values that are not Relay's URL
alone. The CLI's clock and sleep are faked (``client_cli.time``); the one real socket is a fake
server on a port of this suite's range."""

from __future__ import annotations

import argparse
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from relay_es.composition import cli, client_cli
from tests.composition.test_client_cli import run

PORTS = range(23700, 23750)  # where this suite's fake servers listen


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    client_cli.add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def fake_time(monkeypatch: pytest.MonkeyPatch, now: list[float] | None = None) -> list[float]:
    """The CLI's clock (``now[0]``) and sleep (recorded, not waited): what it slept, in order."""
    now = now if now is not None else [0.0]
    slept: list[float] = []
    monkeypatch.setattr(client_cli, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=slept.append))
    return slept


def event(seq: int) -> dict[str, Any]:
    return {"seq": seq, "at": "2026-11-30T12:00:00.000Z", "org": "local", "app": "orders", "executorId": "A",
            "action": "executor.connected", "detail": {}}


def test_a_full_page_of_events_says_where_the_next_starts(monkeypatch, capsys) -> None:
    """The feed is oldest first: a full page tells, on stderr, the --after of the next (the way to
    the newest); a short one does not."""
    asked: list[dict[str, str]] = []

    def feed(r: httpx.Request) -> httpx.Response:
        asked.append(dict(r.url.params))
        return httpx.Response(200, json=[event(5), event(9)][:int(r.url.params["limit"])])

    assert run(monkeypatch, feed, "events", "--app", "orders", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3
    assert captured.err == "(2 shown; --after 9 for the next)\n"
    assert run(monkeypatch, feed, "events", "--limit", "3", "--after", "4") == 0
    assert asked[-1] == {"limit": "3", "after": "4"}
    assert capsys.readouterr().err == ""
    assert run(monkeypatch, feed, "events") == 0
    assert asked[-1] == {"limit": "100"}


def test_events_json_is_one_document_and_one_object_a_line_when_following(monkeypatch, capsys) -> None:
    pages = [[event(5), event(9)], []]

    def feed(r: httpx.Request) -> httpx.Response:
        if not pages:
            raise KeyboardInterrupt
        return httpx.Response(200, json=pages.pop(0))

    assert run(monkeypatch, feed, "events", "--json", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert [e["seq"] for e in json.loads(captured.out)] == [5, 9] and captured.err == ""
    assert run(monkeypatch, feed, "events", "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    pages[:] = [[event(5), event(9)], []]
    fake_time(monkeypatch)
    assert run(monkeypatch, feed, "events", "--json", "--follow") == 130
    assert [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()] == [5, 9]


def test_events_follow_asks_a_server_away_again_from_where_it_was(monkeypatch, capsys) -> None:
    """Refused, cut mid-reply, timed out, 502/503/504: asked again after 1 s, 2 s, 4 s... at most
    30 s, from the last seq printed, told once an outage; a 401 still ends it."""
    problem = {"type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": "draining"}
    script: list[Any] = [
        [event(3)], httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
        httpx.Response(503, json=problem), httpx.Response(502, text="Bad Gateway"), httpx.ReadTimeout("timed out"),
        httpx.Response(504, text="Gateway Timeout"), httpx.ConnectError("refused"),
        [event(9)], httpx.ConnectError("refused"), [],
        httpx.Response(401, json={"status": 401, "title": "Unauthorized", "detail": "the token is revoked"})]
    afters: list[str | None] = []

    def feed(r: httpx.Request) -> httpx.Response:
        afters.append(r.url.params.get("after"))
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step if isinstance(step, httpx.Response) else httpx.Response(200, json=step)

    slept = fake_time(monkeypatch)
    assert run(monkeypatch, feed, "events", "--follow", "--interval", "0.5") == 1
    assert afters == [None] + ["3"] * 8 + ["9"] * 3
    assert slept == [0.5, 1, 2, 4, 8, 16, 30, 30, 0.5, 1, 0.5]
    captured = capsys.readouterr()
    assert [line.split()[1] for line in captured.out.splitlines()] == ["at", "2026-11-30T12:00:00.000Z",
                                                                       "2026-11-30T12:00:00.000Z"]
    err = captured.err.splitlines()
    assert err == ["relay: cannot reach http://127.0.0.1:8090: [Errno 111] Connection refused; asking again until "
                   "it answers (Ctrl-C to stop)",
                   "relay: cannot reach http://127.0.0.1:8090: refused; asking again until it answers (Ctrl-C to stop)",
                   "relay: 401 the token is revoked"]


def test_events_follow_ends_on_a_first_call_that_fails_and_on_other_errors(monkeypatch, capsys) -> None:
    def down(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    slept = fake_time(monkeypatch)
    assert run(monkeypatch, down, "events", "--follow") == 2  # never answered: a wrong --server, not a restart
    assert slept == [] and len(capsys.readouterr().err.splitlines()) == 1
    answers = [httpx.Response(200, json=[]), httpx.Response(500, text="boom")]
    assert run(monkeypatch, lambda r: answers.pop(0), "events", "--follow") == 1
    assert capsys.readouterr().err == "relay: 500 boom\n"


@contextmanager
def trickling_server(now: list[float]) -> Iterator[tuple[str, dict[str, bool]]]:
    """A server that sends its reply's headers a byte at a time, each 10 s later on the CLI's clock
    (``now``), then waits for the client to give up before ending them: whether it did."""
    seen = {"gave_up": False}
    listener = socket.socket()
    for port in PORTS:
        try:
            listener.bind(("127.0.0.1", port))
            break
        except OSError:
            continue
    else:
        pytest.skip("no free port in this suite's range")
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            try:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 40:
                    now[0] += 10
                    conn.sendall(bytes([byte]))
                seen["gave_up"] = conn.recv(1) == b""  # the client closed while the headers were not in
            except TimeoutError:  # still waiting after 10 s
                pass
            except OSError:  # reset by the client
                seen["gave_up"] = True
            if not seen["gave_up"]:
                conn.sendall(b"\r\nContent-Length: 2\r\n\r\n[]")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        thread.join(timeout=15)
        listener.close()


def test_one_deadline_bounds_the_whole_call_headers_included(monkeypatch, capsys) -> None:
    """Each step alone is bounded by httpx's timeout; a reply's headers trickled byte by byte must
    not outlast the call's deadline (30 s from its start, on the CLI's clock)."""
    now = [0.0]
    fake_time(monkeypatch, now)
    with trickling_server(now) as (url, seen):
        assert client_cli.run(parse("apps", "list", "--server", url)) == 2
    assert seen["gave_up"]
    assert capsys.readouterr().err == "relay: the server did not send its whole reply within 30s\n"


@pytest.mark.parametrize(("body", "why"), [
    (b"[" * 100_000 + b"]" * 100_000, "it is nested too deeply"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "it is nested too deeply"),
    (b'[{"name": NaN, "status": "AVAILABLE"}]', "it holds NaN"),
    (b'[{"name": "orders", "gcRowsThreshold": -Infinity}]', "it holds -Infinity"),
    (b'{"name": Infinity}', "it holds Infinity")], ids=["deep-list", "deep-object", "nan", "-infinity", "infinity"])
def test_replies_python_reads_but_that_are_not_json_are_one_line(monkeypatch, capsys, body, why) -> None:
    for json_flag in ((), ("--json",)):
        assert run(monkeypatch, lambda r: httpx.Response(200, content=body), "apps", "list", *json_flag) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == f"relay: 200 from the server, but not JSON: {why}\n"
    assert run(monkeypatch, lambda r: httpx.Response(409, content=body), "apps", "list") == 1  # an error's body
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_pages_end_after_a_bounded_number_and_size(monkeypatch, capsys) -> None:
    monkeypatch.setattr(client_cli, "MAX_PAGES", 5, raising=False)
    asked: list[str] = []

    def endless(r: httpx.Request) -> httpx.Response:
        asked.append(str(r.url))
        if len(asked) > 50:
            raise KeyboardInterrupt  # the pages would never end
        n = int(r.url.params.get("n", 0))
        return httpx.Response(200, json=[{"executorId": f"e{n}"}],
                              headers={"Link": f'</v2/orgs/local/apps/a/executors?n={n + 1}>; rel="next"'})

    assert run(monkeypatch, endless, "executors", "list", "--app", "a") == 1
    assert len(asked) == 5
    assert capsys.readouterr().err == "relay: the server linked a next page after 5 pages (5 rows); stopped\n"

    def history(r: httpx.Request) -> httpx.Response:
        asked.append(str(r.url))
        if len(asked) > 50:
            raise KeyboardInterrupt
        after = int(r.url.params.get("after", 0))
        return httpx.Response(200, json=[{"version": after + i + 1, "at": None, "type": "x", "data": {}}
                                         for i in range(1000)])

    asked.clear()
    assert run(monkeypatch, history, "history", "A", "--app", "a") == 1
    assert len(asked) == 5 and "after 5 pages (5000 events)" in capsys.readouterr().err

    monkeypatch.setattr(client_cli, "MAX_REPLY_BYTES", 60)
    asked.clear()
    assert run(monkeypatch, endless, "executors", "list", "--app", "a") == 1
    assert len(asked) == 3  # 21 bytes a page
    assert capsys.readouterr().err == "relay: the server's pages are larger than 0 MiB together\n"


@pytest.mark.parametrize("server", ["http://.:1", "http://xn--:1", f"http://{'a' * 64}:1", "http://[::1"])
def test_a_server_that_is_no_host_is_one_line_and_exit_2(capsys, server) -> None:
    assert cli.main(["apps", "list", "--server", server]) == 2
    err = capsys.readouterr().err
    assert err.startswith("relay: ") and len(err.splitlines()) == 1


def recorder(sent: list[httpx.Request]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(r)
        return httpx.Response(200, json=[])

    return handler


@pytest.mark.parametrize("server", ["http://user:s3cret@127.0.0.1:9", "http://:s3cret@127.0.0.1:9",
                                    "http://127.0.0.1:9\\@s3cret", "http://u:s3cret@127.0.0.1:9/relay?x=1"])
def test_a_server_with_a_password_is_refused_and_not_shown(monkeypatch, capsys, server) -> None:
    """httpx would send them as Basic auth instead of the token: refused, nothing sent."""
    sent: list[httpx.Request] = []
    assert run(monkeypatch, recorder(sent), "apps", "list", "--server", server, "--token", "relay_t") == 2
    err = capsys.readouterr().err
    assert sent == [] and "s3cret" not in err and len(err.splitlines()) == 1
    assert "user name or password" in err


@pytest.mark.parametrize("server", ["http://127.0.0.1:9/?x=1", "http://127.0.0.1:9#f", "http://127.0.0.1:9/relay?"])
def test_a_server_with_a_query_or_fragment_is_refused(monkeypatch, capsys, server) -> None:
    sent: list[httpx.Request] = []
    assert run(monkeypatch, recorder(sent), "apps", "list", "--server", server) == 2
    assert sent == [] and "query or fragment" in capsys.readouterr().err


def test_a_server_with_a_path_keeps_it(monkeypatch, capsys) -> None:
    sent: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(str(r.url))
        return httpx.Response(200, json=[])

    assert run(monkeypatch, handler, "apps", "list", "--server", "https://relay.example/base/") == 0
    assert sent == ["https://relay.example/base/v2/orgs/local/apps"]


@pytest.mark.parametrize("interval", ["-1", "nan", "inf", "x"])
def test_a_follow_interval_is_a_number_of_seconds(capsys, interval) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["events", "--follow", "--interval", interval, "--server", "http://127.0.0.1:9"])
    assert e.value.code == 2
    capsys.readouterr()
