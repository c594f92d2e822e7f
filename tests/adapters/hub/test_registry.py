"""The open connections by id, executor and application (``relay_es.adapters.hub.registry``)."""

from __future__ import annotations

from typing import Any

from relay_es.adapters.hub import Registry
from tests.adapters.hub.support import registered


async def _nowhere(message: dict[str, Any]) -> None:
    pass


def test_an_executor_keeps_its_newest_connection_when_an_older_one_goes() -> None:
    registry = Registry()
    old, new = registered(_nowhere, "A", id="c1"), registered(_nowhere, "A", id="c2")
    key = ("local", "app", "A")
    for conn in (old, new):
        registry.add(conn)
    assert registry.claim(key, old) is None
    assert registry.claim(key, new) is old
    registry.remove(old)  # the superseded socket closes after the takeover
    assert registry.executor(key) is new and len(registry) == 1
    registry.remove(new)
    assert registry.executor(key) is None and len(registry) == 0 and not registry._by_app
    assert registry.admitted == 2  # every socket admitted counts (the settle window's pace), for good


def test_the_newest_registered_open_connection_of_an_application() -> None:
    registry = Registry()
    a, b, c = (registered(_nowhere, eid, id=eid) for eid in "ABC")
    other = registered(_nowhere, "O", id="O", app="other")
    a.connected_at, b.connected_at, c.connected_at, other.connected_at = 1.0, 3.0, 2.0, 9.0
    for conn in (a, b, c, other):
        registry.add(conn)
    assert registry.newest("local", "app") is b
    b.closed = True
    assert registry.newest("local", "app") is c
    assert registry.newest("local", "nobody") is None


def test_the_registered_open_connections_of_an_application_are_the_ones_a_call_may_go_to() -> None:
    from relay_es.adapters.hub.connection import Connection

    registry = Registry()
    a, b = registered(_nowhere, "A", id="a"), registered(_nowhere, "B", id="b")
    fresh = Connection(id="f", org="local", app="app", peer="p", token=None, send_message=_nowhere)  # no executor_info yet
    other = registered(_nowhere, "O", id="o", app="other")
    for conn in (a, b, fresh, other):
        registry.add(conn)
    assert {c.id for c in registry.registered("local", "app")} == {"a", "b"}
    b.closed = True
    assert [c.id for c in registry.registered("local", "app")] == ["a"]
    assert registry.registered("local", "nobody") == []
