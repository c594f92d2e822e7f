"""Relay's log cannot be forged or used to drive a terminal (issue 11)."""

from __future__ import annotations

import io
import logging

from relay_es.adapters import logs


def _logger(stream: io.StringIO) -> logging.Logger:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.EscapingFormatter(logs.FORMAT))
    handler.addFilter(logs.ScrubKeys())
    lg = logging.getLogger("relay-test-logs")
    lg.handlers[:] = [handler]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    return lg


def test_executor_supplied_strings_in_args_cannot_break_the_line_or_reach_the_terminal() -> None:
    out = io.StringIO()
    _logger(out).warning("executor %s of %s connected from %s", "ex\n2026-12-01 00:00:00 ERROR forged: admin",
                         "app\r", "\x1b[2J\x1b]0;owned\x07")
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one record, one line
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "ex\\n2026-12-01 00:00:00 ERROR forged" in text
    assert "\\x1b[2J" in text and "app\\r" in text


def test_a_path_in_the_message_itself_is_escaped_and_its_key_scrubbed() -> None:
    out = io.StringIO()
    _logger(out).info('"GET /websocket/orders/relay_secretkey HTTP/1.1" 101 /v2/orgs/x%s', "\nforged\u2028line")
    text = out.getvalue()
    assert text.count("\n") == 1
    assert "relay_secretkey" not in text and "\\nforged\\u2028line" in text


def test_a_traceback_keeps_its_lines_indented_with_hostile_text_escaped() -> None:
    out = io.StringIO()
    try:
        raise ValueError("bad hostname 'x\n2026-12-01 ERROR forged\x1b[2J'")
    except ValueError:
        _logger(out).exception("failed for %s", "y\nz")
    lines = out.getvalue().rstrip("\n").split("\n")
    assert "y\\nz" in lines[0]
    assert len(lines) > 2 and all(line.startswith("  ") for line in lines[1:])  # nothing looks like a record
    assert "\x1b" not in out.getvalue()
    assert "  2026-12-01 ERROR forged\\x1b[2J'" in lines  # the forged line: indented, its escape escaped


def test_a_key_in_a_tracebacks_text_is_scrubbed() -> None:
    """The filter scrubs the message; a traceback ends with the exception's own text, which it never saw."""
    out = io.StringIO()
    secret = "relay_" + "k" * 43
    try:
        raise RuntimeError(f"token {secret} refused\nfor /websocket/orders/{secret}")
    except RuntimeError:
        _logger(out).exception("handshake failed")
    lines = out.getvalue().split("\n")
    assert secret not in out.getvalue()
    assert "  RuntimeError: token relay_*** refused" in lines and "  for /websocket/orders/***" in lines


def test_configure_installs_the_escaping_formatter() -> None:
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        logs.configure("INFO")
        assert isinstance(root.handlers[0].formatter, logs.EscapingFormatter)
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_bidi_overrides_zero_width_and_lone_surrogates_are_escaped_not_lost() -> None:
    out = io.StringIO()
    _logger(out).warning("hostname %s", "evil\u202egnp.exe\u200b\ud800")
    text = out.getvalue()
    assert "evil\\u202egnp.exe\\u200b\\ud800" in text
    text.encode("utf-8")  # writable to any UTF-8 stream


# ---------------------------------------------------------------- keys however they are spelt

import pytest  # noqa: E402

from relay_es.aggregates.token import new_secret  # noqa: E402


@pytest.mark.parametrize("spelt", ["/WebSocket/", "/WEBSOCKET/", "/%77ebsocket/", "/WebSocke%54/", "/websocket/"])
def test_a_key_in_a_websocket_path_is_scrubbed_however_the_path_is_spelt(spelt: str) -> None:
    # /WebSocket/orders/<valid key> was refused with a 404, and uvicorn's "< GET" and 404 lines logged the key.
    out = io.StringIO()
    lg = _logger(out)
    lg.info('< GET %sorders/devkey-chosen-by-client HTTP/1.1', spelt)
    lg.info('127.0.0.1:5555 - "GET %sorders/devkey-chosen-by-client?x=1 HTTP/1.1" 404', spelt)
    text = out.getvalue()
    assert "devkey-chosen-by-client" not in text and text.count("orders/***") == 2


@pytest.mark.parametrize("logged", [
    '127.0.0.1:5555 - "GET /websocket/orders/devkey%s HTTP/1.1" 404',  # uvicorn's access line
    '< GET /websocket/orders/devkey%s HTTP/1.1',
    '127.0.0.1:5555 - "WebSocket /websocket/orders/devkey%s" 403',  # uvicorn's WebSocket line
    "refused on /websocket/orders/devkey%s",  # a path at the end of a line
])
@pytest.mark.parametrize("tail", [" chosen-by-client", '" chosen-by-client', "\nchosen-by-client",
                                  "?chosen-by-client", " HTTP/1.1 chosen-by-client"])
def test_a_key_is_scrubbed_to_the_end_of_its_path_whatever_it_decodes_to(logged: str, tail: str) -> None:
    # uvicorn logs the path percent-decoded: a key holding %20 (a space), %22 (a quote) or %0A
    # (a newline) showed what followed it.
    out = io.StringIO()
    _logger(out).info(logged, tail)
    text = out.getvalue()
    assert "devkey" not in text and "chosen-by-client" not in text and "orders/***" in text
    assert text.count("\n") == 1


def test_a_key_in_a_path_with_a_spaced_application_is_scrubbed() -> None:
    out = io.StringIO()
    _logger(out).info('"GET /websocket/my orders/devkey-chosen-by-client HTTP/1.1" 404')
    assert "devkey" not in out.getvalue() and "my orders/***" in out.getvalue()


def test_a_line_scrubbed_twice_keeps_what_follows_the_path() -> None:
    # the hub scrubs the path it logs, then the filter sees the whole line
    line = logs.scrub_text("refused executor handshake on /websocket/orders/devkey chosen") + ": 403 Forbidden"
    assert logs.scrub_text(line) == line == "refused executor handshake on /websocket/orders/***: 403 Forbidden"
    request = '"GET /websocket/orders/devkey HTTP/1.1" 404'
    assert logs.scrub_text(logs.scrub_text(request)) == logs.scrub_text(request) == '"GET /websocket/orders/*** HTTP/1.1" 404'


def test_anything_shaped_like_a_relay_secret_is_scrubbed_wherever_it_is() -> None:
    secret = new_secret()
    encoded = "%72%65lay_" + secret[len("relay_"):]  # letters percent-encoded
    out = io.StringIO()
    lg = _logger(out)
    lg.info("GET /v2/orgs/acme/apps?key=%s", secret)
    lg.info("< GET /ws/orders/%s HTTP/1.1", encoded)
    lg.info("odd %s%s", secret.upper(), "x")
    lg.warning("body: {'token': '%s'}", secret)
    text = out.getvalue()
    assert secret not in text and secret[len("relay_"):] not in text
    assert secret.upper() not in text and secret[len("relay_"):].upper() not in text
    assert text.count("relay_***") == 4
    # and what merely starts like one is kept: table names, settings, short ids
    out = io.StringIO()
    _logger(out).info("relay_executors RELAY_SQLITE_DBNAME relay_test_1234567890ab")
    assert "relay_executors RELAY_SQLITE_DBNAME relay_test_1234567890ab" in out.getvalue()


def test_the_servers_loggers_go_through_the_scrubbing_handler() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO")
        (handler,) = root.handlers
        out = io.StringIO()
        handler.setStream(out)
        secret = new_secret()
        for name in ("uvicorn.error", "uvicorn.access", "websockets.server"):
            logging.getLogger(name).info('"GET /WebSocket/orders/%s HTTP/1.1" 404', secret)
        assert secret not in out.getvalue() and out.getvalue().count("/WebSocket/orders/***") == 3
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_http_clients_request_lines_are_not_logged_at_info() -> None:
    """httpx logs each request's full URL at INFO; an alert webhook's URL can be its credential."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        logs.configure("INFO")
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
