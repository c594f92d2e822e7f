"""What a read model can hold, decided per event before the store sees it."""

from __future__ import annotations

from types import SimpleNamespace

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
