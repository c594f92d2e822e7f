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


class Held:
    """A command pool whose commands wait until ``release`` is set: questions in flight."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.ran: list[str] = []

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.ran.append(fn.__name__)
        await self.release.wait()
        return fn(*args, **kwargs)


def held_gate() -> tuple[Store, Held, Gate]:
    """A gate whose questions wait for ``pool.release``, on a store where the application exists."""
    store, pool = Store(), Held()
    store.apps.add(("local", "app"))
    return store, pool, Gate(store, pool.run)  # type: ignore[arg-type]


def test_handshakes_arriving_together_ask_the_store_once_per_application() -> None:
    """After a restart the executors come back at once: one read of the application, one
    registration, however many handshakes wait on them."""
    store, pool = Store(), Held()
    gate = Gate(store, pool.run)  # type: ignore[arg-type]

    async def main() -> None:
        waiting = [asyncio.ensure_future(gate.admit("app", "k", "127.0.0.1:1")) for _ in range(200)]
        await asyncio.sleep(0)
        pool.release.set()
        assert await asyncio.gather(*waiting) == [("local", None)] * 200
        assert pool.ran == ["app_exists", "register_app"] and store.asked == 1
        assert await gate.admit("app", "k", "127.0.0.1:1") == ("local", None)  # known now
        assert pool.ran == ["app_exists", "register_app"]

    asyncio.run(main())


def test_a_shared_question_s_failure_reaches_every_handshake_and_the_next_asks_again() -> None:
    store, pool, gate = held_gate()

    async def main() -> None:
        store.away = True
        waiting = [asyncio.ensure_future(gate.app_registered("local", "app")) for _ in range(3)]
        await asyncio.sleep(0)
        pool.release.set()
        got = await asyncio.gather(*waiting, return_exceptions=True)
        assert [type(g) for g in got] == [sqlite3.OperationalError] * 3 and store.asked == 1
        store.away = False
        assert await gate.app_registered("local", "app") and store.asked == 2

    asyncio.run(main())


def test_a_handshake_given_up_does_not_cancel_the_question_for_the_others() -> None:
    store, pool, gate = held_gate()

    async def main() -> None:
        first = asyncio.ensure_future(gate.app_registered("local", "app"))
        second = asyncio.ensure_future(gate.app_registered("local", "app"))
        await asyncio.sleep(0)
        first.cancel()  # its socket closed
        await asyncio.sleep(0)
        pool.release.set()
        assert await second is True and first.cancelled() and store.asked == 1

    asyncio.run(main())


def test_an_answer_asked_for_before_the_application_was_deleted_is_not_kept() -> None:
    store = Store()
    store.apps.add(("local", "app"))
    release = asyncio.Event()

    async def read_then_wait(fn: Any, *args: Any) -> Any:  # the store answers, the answer comes back late
        got = fn(*args)
        await release.wait()
        return got

    gate = Gate(store, read_then_wait)  # type: ignore[arg-type]

    async def main() -> None:
        before = asyncio.ensure_future(gate.app_registered("local", "app"))
        for _ in range(10):
            await asyncio.sleep(0)  # read: it exists
        assert store.asked == 1
        store.apps.clear()  # then deleted, and the gate told (Runtime.app_deleted)
        gate.forget("local", app="app")
        after = asyncio.ensure_future(gate.app_registered("local", "app"))  # asks again, not joined to the first
        for _ in range(10):
            await asyncio.sleep(0)
        assert store.asked == 2
        release.set()
        assert await before is True and await after is False and store.asked == 2
        assert ("local", "app") not in gate.known_apps  # the answer read before the deletion is not kept

    asyncio.run(main())


def test_a_registration_on_its_way_when_the_application_is_deleted_is_not_remembered() -> None:
    store = Store()
    release = asyncio.Event()

    async def run(fn: Any, *args: Any) -> Any:  # the registration is recorded, its answer comes back late
        got = fn(*args)
        if fn.__name__ == "register_app":
            await release.wait()
        return got

    gate = Gate(store, run)  # type: ignore[arg-type]

    async def main() -> None:
        admitting = asyncio.ensure_future(gate.admit("app", "k", "127.0.0.1:1"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert ("local", "app") in store.apps  # registered
        store.apps.clear()  # then deleted, and the gate told
        gate.forget("local", app="app")
        release.set()
        assert await admitting == ("local", None)
        assert ("local", "app") not in gate.known_apps  # the next handshake asks the store again

    asyncio.run(main())


@pytest.mark.parametrize("host", ["h" * 254, "10.0.0.1\x1b[2J", "bad\x00host"])
def test_a_client_address_that_is_not_an_address_is_refused_with_400_unaudited(host: str) -> None:
    """Behind a trusted proxy the client's address is what its X-Forwarded-For says; it is recorded
    with the connection, and one of 1,100 characters crashed the executor's registration."""
    store = Store()
    with pytest.raises(Refused) as r:
        asyncio.run(Gate(store, direct).admit("app", "any-key", f"{host}:0"))  # type: ignore[arg-type]
    assert r.value.status == 400 and not r.value.audit and not store.apps
    assert asyncio.run(Gate(store, direct).admit("app", "k", f"{'h' * 253}:0")) == ("local", None)  # type: ignore[arg-type]
    assert asyncio.run(Gate(store, direct).admit("app", "k", "[::1]:0")) == ("local", None)  # type: ignore[arg-type]
