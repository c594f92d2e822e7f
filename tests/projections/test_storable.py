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
