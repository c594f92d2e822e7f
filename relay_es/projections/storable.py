"""What a read model can hold, decided before the store sees it.

A read model refuses an event it cannot store by raising :class:`Unstorable`
in ``apply``, so the runner skips that event (ADR 16). Deciding here, per
event, rather than waiting for the store's own error makes the decision the
same on SQLite and Postgres, in a live batch and in a rebuild (whose tables
have no indexes until the end, so an oversized index entry would only fail
then), whatever the batch boundaries: a rebuild gives identical rows.

The rules: no NUL character in a string (Postgres ``TEXT`` refuses it), no
integer beyond 64 bits (``BIGINT``, SQLite's ``INTEGER``), and the values of
indexed columns (org, app, executor id, name) at most
:data:`~relay_es.domain.text.MAX_ID_BYTES` bytes, the service's own cap, so
that ``org + app + executor_id`` stays under a b-tree page's third. The
store's errors remain the backstop for anything else.
"""

from __future__ import annotations

from typing import Any

from relay_es.domain.text import MAX_ID_BYTES

_INT64 = 2**63
_KEYS = frozenset({"org", "app", "executor_id", "name"})


class Unstorable(ValueError):
    """An event (or a row made from it) a read model cannot hold."""


def check_event(e: Any) -> None:
    """Every top-level string of the event without NUL, every integer within 64 bits,
    and its key fields within :data:`MAX_ID_BYTES`. (About a microsecond an event: the
    loop is kept to type tests and C-level searches.)"""
    d = e.__dict__  # not vars(e): a builtin call per event
    for v in d.values():
        t = type(v)
        if t is str:
            if "\x00" in v:
                raise Unstorable(f"{_field(d, v)} holds a NUL character")
        elif t is int and not -_INT64 <= v < _INT64:
            raise Unstorable(f"{_field(d, v)} is wider than 64 bits")
    if "org" in d:  # the events that name a stream's keys (Registered, Created)
        for k in _KEYS:
            v = d.get(k)
            if type(v) is str and len(v) * 4 > MAX_ID_BYTES:
                check_key(k, v)


def _field(d: dict[str, Any], value: Any) -> str:
    return next(k for k, v in d.items() if v is value)


def check_key(field: str, value: str | None) -> None:
    """An indexed column's value: no NUL, at most :data:`MAX_ID_BYTES` bytes of UTF-8."""
    if value is None:
        return
    if "\x00" in value:
        raise Unstorable(f"{field} holds a NUL character")
    if len(value) * 4 > MAX_ID_BYTES:
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_ID_BYTES:
            raise Unstorable(f"{field} is {size} bytes, more than an index entry holds ({MAX_ID_BYTES})")
