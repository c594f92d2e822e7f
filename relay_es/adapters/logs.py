"""Logging set-up. Executor keys travel in the WebSocket path, and servers log
paths; a filter on every handler scrubs the key segment from every record."""

from __future__ import annotations

import logging
import re
import sys

_KEY_IN_PATH = re.compile(r"(/websocket/[^/\s\"']+/)[^\s\"'?]+")
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)


def scrub_text(text: str) -> str:
    return _BEARER.sub(r"\1***", _KEY_IN_PATH.sub(r"\1***", text))


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


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ScrubKeys())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
