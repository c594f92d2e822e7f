"""What a read model can hold, decided per event before the store sees it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from relay_es.domain.text import MAX_ID_BYTES
from relay_es.projections.storable import Unstorable, check_event, check_key


def test_an_event_a_store_can_hold_passes() -> None:
    check_event(SimpleNamespace(org="acme", app="orders", executor_id="A", n=2**63 - 1, note="fine"))


@pytest.mark.parametrize("fields, message", [
    ({"hostname": "a\x00b"}, "hostname holds a NUL character"),
    ({"attempt": 2**63}, "attempt is wider than 64 bits"),
    ({"attempt": -2**63 - 1}, "attempt is wider than 64 bits"),
    ({"org": "acme", "executor_id": "é" * MAX_ID_BYTES}, "executor_id is"),
])
def test_what_a_store_cannot_hold_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(Unstorable, match=message):
        check_event(SimpleNamespace(**fields))


def test_keys() -> None:
    check_key("org", None)
    check_key("org", "x" * MAX_ID_BYTES)
    with pytest.raises(Unstorable):
        check_key("org", "x" * (MAX_ID_BYTES + 1))
    with pytest.raises(Unstorable):
        check_key("app", "\x00")


def test_keys_indexed_together() -> None:
    from relay_es.projections.storable import MAX_KEYS_BYTES, check_keys

    check_keys(org="o" * 128, app="é" * 256, executor_id="x" * MAX_ID_BYTES)  # the most Relay's names allow
    with pytest.raises(Unstorable, match="org \\+ app \\+ executor_id are 3000 bytes together"):
        check_keys(org="o" * 1000, app="a" * 1000, executor_id="x" * 1000)
    with pytest.raises(Unstorable, match="executor_id is"):
        check_keys(org="o", executor_id="x" * (MAX_ID_BYTES + 1))
    with pytest.raises(Unstorable, match="together"):  # an event's own keys, as the executors read model checks them
        check_event(SimpleNamespace(org="o" * 1000, app="a" * 1000, executor_id="x" * 1000))
    assert MAX_KEYS_BYTES < 2704 - 3 * 4 - 8 - 8  # Postgres's b-tree entry: headers and a BIGINT beside them


def executor_events() -> tuple[Any, Any]:
    """A real Connected and RecoveryDispatched event, as the executors read model gets them."""
    from datetime import datetime, timezone

    from relay_es.aggregates import Executor

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ex = Executor(org="local", app="app", executor_id="A", timestamp=at)
    ex.connect(connection_id="c", owner="relay-1", app_version="v1", hostname="h", language="python",
               dbos_version="3.2.0", executor_metadata=None, at=at)
    ex.trigger_event(Executor.RecoveryDispatched, request_id="r", target_executor_id="B", app_version="v1",
                     attempt=1, timestamp=at)
    _, connected, dispatched = ex.collect_events()
    return connected, dispatched


@pytest.mark.parametrize("value", [2**31, -1, 2**62])
def test_an_incarnation_or_attempt_beyond_a_32_bit_column_is_refused(value: int) -> None:
    connected, dispatched = executor_events()
    check_event(connected)
    check_event(dispatched)
    connected.__dict__["incarnation"] = 2**31 - 1  # the most Postgres's INTEGER holds
    check_event(connected)
    for event, field in ((connected, "incarnation"), (dispatched, "attempt")):
        event.__dict__[field] = value
        with pytest.raises(Unstorable, match=f"{field} is outside 0..2147483647"):
            check_event(event)
