"""What a read model can hold, decided before the store sees it.

A read model refuses an event it cannot store by raising :class:`Unstorable`
in ``apply``, so the runner skips that event (ADR 16). Deciding here, per
event, rather than waiting for the store's own error makes the decision the
same on SQLite and Postgres, in a live batch and in a rebuild (whose tables
have no indexes until the end, so an oversized index entry would only fail
then), whatever the batch boundaries: a rebuild gives identical rows.

The rules: no NUL character in a string (Postgres ``TEXT`` refuses it), no
integer beyond 64 bits (``BIGINT``, SQLite's ``INTEGER``), an executor's
incarnation and recovery attempt within 0..2^31-1 (the executors read model's
``INTEGER`` columns: 32 bits on Postgres, 64 on SQLite), and the values of
indexed columns (org, app, executor id, name, an action's target) at most
:data:`~relay_es.domain.text.MAX_ID_BYTES` bytes each, the service's own cap, and
those indexed together at most :data:`MAX_KEYS_BYTES` in all, so that an index
entry stays within a b-tree page's third (Postgres refuses one over 2,704 bytes:
three keys of 1,024 bytes each did not fit, and a rebuild that met one failed at
its index build, and so did every start after it). The store's errors remain
the backstop for anything else.
"""

from __future__ import annotations

from typing import Any

from relay_es.aggregates.executor import Executor
from relay_es.domain.text import MAX_ID_BYTES

# The values of one index entry, UTF-8 bytes in all: under Postgres's 2,704 with room for the entry's
# headers and a BIGINT, and above what Relay's own names allow (org 128 ASCII characters, app 256
# characters, executor id 1,024 bytes: 2,176 bytes).
MAX_KEYS_BYTES = 2560
_INT64 = 2**63
_KEYS = frozenset({"org", "app", "executor_id", "name"})
_INT32 = 2**31
# The fields that fill a 32-bit column (Postgres ``INTEGER``), by event class.
_INT32_FIELDS = {Executor.Connected: "incarnation", Executor.RecoveryDispatched: "attempt"}


class Unstorable(ValueError):
    """An event (or a row made from it) a read model cannot hold."""


def check_event(e: Any) -> None:
    """Every top-level string of the event without NUL, every integer within 64 bits,
    those of 32-bit columns (:data:`_INT32_FIELDS`) within 0..2^31-1, and its key fields
    within :data:`MAX_ID_BYTES`. (About a microsecond an event: the loop is kept to type
    tests and C-level searches.)"""
    d = e.__dict__  # not vars(e): a builtin call per event
    small = _INT32_FIELDS.get(type(e))
    if small is not None:
        v = d.get(small)
        if type(v) is int and not 0 <= v < _INT32:
            raise Unstorable(f"{small} is outside 0..{_INT32 - 1} (a 32-bit column)")
    for v in d.values():
        t = type(v)
        if t is str:
            if "\x00" in v:
                raise Unstorable(f"{_field(d, v)} holds a NUL character")
        elif t is int and not -_INT64 <= v < _INT64:
            raise Unstorable(f"{_field(d, v)} is wider than 64 bits")
    if "org" in d:  # the events that name a stream's keys (Registered, Created)
        n = 0
        for k in _KEYS:
            v = d.get(k)
            if type(v) is str:
                n += len(v)
                if len(v) * 4 > MAX_ID_BYTES:
                    check_key(k, v)
        if n * 4 > MAX_KEYS_BYTES:
            check_keys(**{k: v for k in _KEYS if type(v := d.get(k)) is str})


def _field(d: dict[str, Any], value: Any) -> str:
    return next(k for k, v in d.items() if v is value)


def check_keys(**values: str | None) -> None:
    """Values indexed together: each as :func:`check_key`, and all of them within :data:`MAX_KEYS_BYTES`."""
    n = 0
    for field, value in values.items():
        check_key(field, value)
        if value is not None:
            n += len(value)
    if n * 4 > MAX_KEYS_BYTES:
        size = sum(len(v.encode("utf-8", "surrogatepass")) for v in values.values() if v is not None)
        if size > MAX_KEYS_BYTES:
            raise Unstorable(f"{' + '.join(values)} are {size} bytes together, more than an index entry holds "
                             f"({MAX_KEYS_BYTES})")


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
