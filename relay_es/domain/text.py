"""Strings at the domain boundary: what the stores can hold, and bounded.

The protocol layer validates what executors send, with its own, tighter
limits. These are the last line behind it, for any caller that reaches the
service another way: a string the stores cannot hold (a NUL byte: Postgres
``TEXT`` refuses it) is never recorded, and an identifier never grows past
what a b-tree index entry can take (Postgres refuses an index row above about
2.7 kB; ``org`` + ``app`` + ``executor_id`` stay well under it).
"""

from __future__ import annotations

import re

from relay_es.domain.errors import InvalidSetting

MAX_ID_BYTES = 1024  # executor ids, connection ids, request ids, versions: UTF-8 bytes
MAX_TEXT_BYTES = 16 * 1024  # hostnames, languages, reasons and other free text

# C0, DEL, C1; the line and paragraph separators; the bidirectional and zero-width
# format characters (text that reads otherwise than it is); lone surrogates (which no
# UTF-8 stream can write: a log line holding one would be lost).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069"
                       "\ufeff\ud800-\udfff]")


def check_id(field: str, value: object, *, optional: bool = False, empty: bool = False) -> str | None:
    """An identifier: a string (non-empty unless ``empty``), no NUL, at most :data:`MAX_ID_BYTES`."""
    return _check(field, value, MAX_ID_BYTES, optional=optional, empty=empty)


def check_text(field: str, value: object, *, optional: bool = True) -> str | None:
    """Free text: a string (or None when optional), no NUL, at most :data:`MAX_TEXT_BYTES`."""
    return _check(field, value, MAX_TEXT_BYTES, optional=optional, empty=True)


def _check(field: str, value: object, limit: int, *, optional: bool, empty: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidSetting(field, f"must be a string, got {type(value).__name__}")
    if not value and not empty:
        raise InvalidSetting(field, "must not be empty")
    if "\x00" in value:
        raise InvalidSetting(field, "must not contain a NUL character")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidSetting(field, f"must be at most {limit} bytes of UTF-8, got {size}")
    return value


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a control, separator, bidirectional or zero-width character."""
    return _CONTROLS.search(text) is not None


def escape_controls(text: str) -> str:
    """``text`` with every control character (see ``_CONTROLS``) written as a
    visible escape (``\\n``, ``\\x1b``, ``\\u202e``): one line, no terminal escape
    sequences, nothing that displays otherwise than it reads."""
    return _CONTROLS.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def sanitized(value: str | None, limit: int = 2000) -> str | None:
    """Hostile text kept for the record (a violation's detail, a refusal's
    reason): escaped, cut to ``limit`` characters. Never refused: the record
    of hostility must not be lost to the hostility."""
    if value is None:
        return None
    if not isinstance(value, str):
        value = repr(value)
    escaped = escape_controls(value[:limit])  # at most 6 characters for one
    return escaped[:limit] + "…" if len(value) > limit or len(escaped) > limit else escaped


def bytes_said(n: int) -> str:
    """A number of bytes as a person reads it: ``128 MiB`` (a whole number of the unit), else the
    bytes and the unit beside them, ``67,174,400 bytes (64.06 MiB)``; under a KiB, ``1,000 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            if n % scale == 0:
                return f"{n // scale} {unit}"
            return f"{n:,} bytes ({f'{n / scale:.2f}'.rstrip('0').rstrip('.')} {unit})"
    return f"{n:,} bytes"


def first_line(e: BaseException, limit: int = 200) -> str:
    """An error's first line, cut to ``limit`` characters: what a log line says of it (a driver's error
    goes on with its context and its statement on the lines after)."""
    return (str(e).splitlines() or [""])[0][:limit]
