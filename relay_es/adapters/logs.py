"""Logging set-up. Executor keys travel in the WebSocket path, and servers log
paths; a filter on every handler scrubs from every record the key segment of a
``/websocket/{app}/{key}`` path however it is spelt (``/WebSocket/``, letters
percent-encoded: the path is refused, but the servers log it first), up to the
end of the path whatever the key decodes to (a space, a quote, a newline), a
``Bearer`` credential, and anything shaped like a Relay secret (``relay_`` and
at least 40 URL-safe characters, see :func:`relay_es.aggregates.token.new_secret`)
wherever it appears.

Executors and clients choose much of what Relay logs (executor ids, hostnames,
application names in paths, reasons), so the formatter escapes every control
character of the rendered message (``\\n``, ``\\x1b``): one record is one
line, and nobody can forge a log line or send a terminal escape sequence
through Relay's log. A traceback keeps its lines, each indented, with the
same escapes inside them.
"""

from __future__ import annotations

import logging
import re
import sys

from relay_es.domain.text import escape_controls


def _spelt_any_way(word: str) -> str:
    """A pattern for ``word`` in any case, each letter possibly percent-encoded."""
    return "".join(f"(?:{re.escape(c)}|%{ord(c.lower()):02x}|%{ord(c.upper()):02x})" for c in word)


# The key runs to the end of the path, whatever it decodes to (servers log the
# path percent-decoded: a key may hold a space, a quote, a '?' or a newline). A
# path ends where a request line's " HTTP/1.1" closes it, where uvicorn's quote
# closes it ('"WebSocket <path>" 403'), or else at the end of the message. A key
# already scrubbed ("***" and no more key: the hub scrubs the path it logs, then
# this filter sees the whole line) is left as it is.
_KEY_IN_PATH = re.compile(
    r"(/" + _spelt_any_way("websocket") + r"/[^/\"]+/)"
    r"(?:\*\*\*(?=[\s\"':]|$)"
    r"|[\s\S]*(?=\sHTTP/\d(?:\.\d)?(?:\"|$))"
    r"|[\s\S]*(?=\"(?:\s+(?:\d{3}|\[\w+\]))?$)"
    r"|[\s\S]+)",
    re.IGNORECASE)
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)
# new_secret(): "relay_" + token_urlsafe(32), 43 characters of [A-Za-z0-9_-]; a few fewer still look like one
_SECRET = re.compile(_spelt_any_way("relay_") + r"(?:[A-Za-z0-9_-]|%[0-9A-Fa-f]{2}){40,}",
                     re.IGNORECASE)


def scrub_text(text: str) -> str:
    return _SECRET.sub("relay_***", _BEARER.sub(r"\1***", _KEY_IN_PATH.sub(r"\1***", text)))


class ScrubKeys(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = scrub_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


class EscapingFormatter(logging.Formatter):
    """Renders a record as one line: control characters of the message escaped;
    a traceback's lines indented under it, escaped likewise."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        # scrubbed here too, line by line: ScrubKeys sees the message, and a traceback ends with the
        # exception's own text
        return _indented(super().formatException(ei))  # type: ignore[arg-type]

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("  " + escape_controls(scrub_text(line)) for line in text.split("\n"))


FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter(FORMAT))
    handler.addFilter(ScrubKeys())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    # httpx logs every request's full URL at INFO; an alert webhook's URL can be its credential (Slack's).
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
