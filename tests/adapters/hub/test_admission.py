"""Admission of executor handshakes in development mode (``relay_es.adapters.hub.admission``);
auth mode's keys are tested with the checker they share with the REST API
(``tests/adapters/test_authz.py``)."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from relay_es.adapters.hub import Gate, Refused


class Store:
    def __init__(self) -> None:
        self.apps: set[tuple[str, str]] = set()
        self.asked = 0
        self.away = False

    def app_exists(self, org: str, app: str) -> bool:
        self.asked += 1
        if self.away:
            raise sqlite3.OperationalError("the store is away")
        return (org, app) in self.apps

    def register_app(self, org: str, app: str) -> None:
        if self.away:
            raise sqlite3.OperationalError("the store is away")
        self.apps.add((org, app))


async def direct(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def admit(gate: Gate, app: str = "app", headers: list[tuple[bytes, bytes]] = ()) -> tuple[str, str | None]:  # type: ignore[assignment]
    return asyncio.run(gate.admit(app, "any-key", "127.0.0.1:1", headers=list(headers)))


def test_development_mode_admits_any_key_into_org_local_and_registers_the_application() -> None:
    store = Store()
    gate = Gate(store, direct)  # type: ignore[arg-type]
    assert admit(gate) == ("local", None)
    assert ("local", "app") in store.apps
    asked = store.asked
    assert admit(gate) == ("local", None)
    assert store.asked == asked  # known: not asked again
    gate.forget("local", app="app")  # deleted: asked again
    admit(gate)
    assert store.asked == asked + 1


def test_development_mode_admits_while_the_store_is_away() -> None:
    store = Store()
    store.away = True
    assert admit(Gate(store, direct)) == ("local", None)  # type: ignore[arg-type]


@pytest.mark.parametrize("headers", [[(b"origin", b"https://evil.example")], [(b"x-forwarded-for", b"10.0.0.1")],
                                     [(b"forwarded", b"for=10.0.0.1")]])
def test_development_mode_refuses_a_web_page_or_a_proxy_with_403(headers: list[tuple[bytes, bytes]]) -> None:
    store = Store()
    with pytest.raises(Refused) as r:
        admit(Gate(store, direct), headers=headers)  # type: ignore[arg-type]
    assert r.value.status == 403 and r.value.org == "local" and r.value.audit
    assert not store.apps


def test_a_local_page_is_admitted() -> None:
    assert admit(Gate(Store(), direct), headers=[(b"origin", b"http://localhost:3000")]) == ("local", None)  # type: ignore[arg-type]


def test_an_invalid_application_name_is_refused_with_404_unaudited() -> None:
    with pytest.raises(Refused) as r:
        admit(Gate(Store(), direct), app="no/slash")  # type: ignore[arg-type]
    assert r.value.status == 404 and not r.value.audit
