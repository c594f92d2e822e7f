"""Executors (``relay_es/adapters/rest/executors.py``) on a real ``relay serve``, both stores,
with fake executors connected over real WebSockets.

The REST layer's own job: the Conductor shape of the list, the app's executors
only, the as-of listing's parameters and its ``Link`` to the next page, the
history's pages, and refusals as problem documents (422 naming the parameter,
404 for an unknown application or executor). What the table was at an instant
and how streams are folded is ``tests/engine/test_queries.py``'s.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from relay_es.adapters import authz
from relay_es.engine.queries import AS_OF_LIMIT, HISTORY_LIMIT
from tests.fake_executor import FakeExecutor
from tests.rest_client import rest as call
from tests.server import RelayServer, TLS

L = "/v2/orgs/local"
ORDERS = L + "/apps/orders/executors"
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FUTURE = "2100-01-01T00:00:00Z"
PAST = "2000-01-01T00:00:00Z"


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


def listed(server: RelayServer, path: str = ORDERS) -> dict[str, dict[str, Any]]:
    r = call(server, "GET", path)
    assert r.status_code == 200, r.text
    return {e["executorId"]: e for e in r.json()}


def connect_and_leave(server: RelayServer, app: str, *ids: str) -> None:
    """Each executor connects, registers, and closes its socket (so it is DISCONNECTED, still listed)."""

    async def go() -> None:
        for x in ids:
            ex = await FakeExecutor(server.ws, app=app, executor_id=x).connect()
            await ex.close()

    asyncio.run(go())
    path = f"{L}/apps/{app}/executors"
    wait(lambda: all(listed(server, path).get(x, {}).get("status") == "DISCONNECTED" for x in ids),
         f"{ids} listed as disconnected")


def assert_problem(r: httpx.Response, status: int, location: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["detail"]
    if location is not None:
        assert [e["location"] for e in body["errors"]] == [location], body
    return body


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server for the refusals, which change nothing."""
    s = RelayServer(tmp_path_factory.mktemp("dev")).start()
    call(s, "PUT", L + "/apps/orders")
    yield s
    s.stop()


# ------------------------------------------------------------------ the list


def test_the_list_is_the_conductor_shape_of_this_app_s_executors_only(server: RelayServer) -> None:
    assert call(server, "PUT", L + "/apps/orders").status_code == 204
    assert call(server, "PUT", L + "/apps/billing").status_code == 204
    app_id = call(server, "GET", L + "/apps/orders").json()["id"]

    async def live() -> None:
        a = await FakeExecutor(server.ws, app="orders", executor_id="A", version="v7").connect()
        b = await FakeExecutor(server.ws, app="billing", executor_id="B").connect()
        try:
            got = await asyncio.to_thread(wait, lambda: listed(server), "A listed")
            (a_row,) = got.values()
            assert a_row == {
                "executorId": "A", "appId": app_id, "appVersion": "v7", "status": "HEALTHY", "hostId": None,
                "hostname": "fakehost", "language": "python", "dbosVersion": "3.2.0",
                "executorMetadata": {"fake": True}, "createdAt": a_row["createdAt"],
                "updatedAt": a_row["updatedAt"],
            }
            assert INSTANT.match(a_row["createdAt"]) and INSTANT.match(a_row["updatedAt"])
            billing = await asyncio.to_thread(wait, lambda: listed(server, L + "/apps/billing/executors"),
                                              "B listed")
            assert list(billing) == ["B"] and billing["B"]["appId"] != app_id
            # after and limit page the as-of listing only: the table as it stands is whole
            r = call(server, "GET", ORDERS, params={"after": "A", "limit": 1})
            assert r.status_code == 200 and [e["executorId"] for e in r.json()] == ["A"]
            assert "link" not in r.headers
        finally:
            await a.close()
            await b.close()

    asyncio.run(live())
    gone = wait(lambda: listed(server).get("A", {}).get("status") == "DISCONNECTED" and listed(server)["A"],
                "A disconnected")
    assert "deadline" not in gone  # Conductor's shape; Relay's extra only with ?relay=extended
    (ext,) = call(server, "GET", ORDERS, params={"relay": "extended"}).json()
    assert INSTANT.match(ext["deadline"]) and ext["deadline"] > ext["updatedAt"]


def test_a_deleted_executor_leaves_the_list_and_keeps_its_history(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    assert call(server, "PATCH", L + "/apps/orders", json={"executorTimeoutSecs": 1}).status_code == 204

    async def go() -> None:
        b = await FakeExecutor(server.ws, app="orders", executor_id="B").connect()
        try:
            a = await FakeExecutor(server.ws, app="orders", executor_id="A").connect()
            await a.close()  # declared dead after 1 s, recovered by B, then deleted
            def deleted() -> bool:  # its history is a 404 until the read model has A's first event
                r = call(server, "GET", ORDERS + "/A/history")
                return r.status_code == 200 and r.json()[-1]["type"] == "Deleted"

            await asyncio.to_thread(wait, deleted, "A deleted")
            await asyncio.to_thread(wait, lambda: list(listed(server)) == ["B"], "A gone from the list")
            assert [e["executorId"] for e in call(server, "GET", ORDERS, params={"asOf": FUTURE}).json()] == ["B"]
        finally:
            await b.close()

    asyncio.run(go())


def test_an_unknown_application_is_a_404_problem(server: RelayServer) -> None:
    body = assert_problem(call(server, "GET", L + "/apps/nope/executors"), 404)
    assert "nope" in body["detail"]
    call(server, "PUT", L + "/apps/orders")
    assert call(server, "GET", ORDERS).json() == []
    call(server, "DELETE", L + "/apps/orders")
    assert_problem(call(server, "GET", ORDERS), 404)


# ------------------------------------------------------------------ as of an instant


def test_as_of_an_application_never_registered_is_a_404_and_one_deleted_since_answers_its_past(
        server: RelayServer) -> None:
    body = assert_problem(call(server, "GET", L + "/apps/nope/executors", params={"asOf": FUTURE}), 404)
    assert "nope" in body["detail"]
    assert_problem(call(server, "GET", L + "/apps/nope/executors", params={"asOf": PAST}), 404)
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "A")
    at = wait(lambda: call(server, "GET", ORDERS + "/A/history").json(), "A's history")[-1]["at"]
    assert call(server, "DELETE", L + "/apps/orders").status_code == 204
    assert_problem(call(server, "GET", ORDERS), 404)
    r = call(server, "GET", ORDERS, params={"asOf": at})
    assert r.status_code == 200, r.text
    assert {e["executorId"]: e["status"] for e in r.json()} == {"A": "DISCONNECTED"}
    assert call(server, "GET", ORDERS, params={"asOf": PAST}).json() == []  # before it was registered


def test_as_of_pages_by_executor_id_with_a_link_to_the_next_page(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "C", "A", "B")
    now = listed(server)

    def page(**params: Any) -> httpx.Response:
        r = call(server, "GET", ORDERS, params=params)
        assert r.status_code == 200, r.text
        return r

    # far ahead: the table as it stands, in the same shape (the same appId)
    whole = page(asOf=FUTURE)
    assert whole.json() == [now["A"], now["B"], now["C"]] and "link" not in whole.headers
    assert page(asOf="2100-01-01T02:00:00+02:00").json() == whole.json()  # any UTC offset
    assert page(asOf=FUTURE, limit=AS_OF_LIMIT).json() == whole.json()

    # one at a time: each page links the next, after the last executor id examined, with asOf and limit kept
    first = page(asOf=FUTURE, limit=1)
    assert [e["executorId"] for e in first.json()] == ["A"]
    assert first.headers["link"] == f'<{ORDERS}?asOf={quote(FUTURE, safe="")}&after=A&limit=1>; rel="next"'
    second = httpx.get(server.http + first.links["next"]["url"], verify=TLS, timeout=10)
    assert [e["executorId"] for e in second.json()] == ["B"]
    assert second.links["next"]["url"] == f"{ORDERS}?asOf={quote(FUTURE, safe='')}&after=B&limit=1"
    third = httpx.get(server.http + second.links["next"]["url"], verify=TLS, timeout=10)
    assert [e["executorId"] for e in third.json()] == ["C"] and "link" not in third.headers

    last = page(asOf=FUTURE, after="A", limit=2)
    assert [e["executorId"] for e in last.json()] == ["B", "C"] and "link" not in last.headers
    assert page(asOf=FUTURE, after="C").json() == []

    before = page(asOf=PAST, limit=2)  # nobody was there yet: an empty page that still links the rest
    assert before.json() == []
    assert before.links["next"]["url"] == f"{ORDERS}?asOf={quote(PAST, safe='')}&after=B&limit=2"


@pytest.mark.parametrize("params, location", [
    ({"asOf": "yesterday"}, "asOf"),
    ({"asOf": "2026-13-01T00:00:00Z"}, "asOf"),
    ({"asOf": "2026-01-01T00:00:00"}, "asOf"),  # no offset: which instant?
    ({"asOf": FUTURE + "0" * 60}, "asOf"),  # over 64 characters
    ({"asOf": FUTURE, "limit": 0}, "limit"),
    ({"asOf": FUTURE, "limit": AS_OF_LIMIT + 1}, "limit"),
    ({"asOf": FUTURE, "limit": "ten"}, "limit"),
    ({"asOf": FUTURE, "after": "x" * (authz.MAX_EXECUTOR_ID + 1)}, "after"),
])
def test_bad_as_of_parameters_are_422_problems_naming_them(dev: RelayServer, params: dict[str, Any],
                                                           location: str) -> None:
    assert_problem(call(dev, "GET", ORDERS, params=params), 422, location)
    assert call(dev, "GET", ORDERS, params={**params, "asOf": FUTURE, "limit": 1, "after": "x"}).status_code == 200


# ------------------------------------------------------------------ history


def test_history_pages_by_version(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "A")
    connect_and_leave(server, "orders", "A")  # again: the same stream goes on
    history = ORDERS + "/A/history"

    def get(**params: Any) -> list[dict[str, Any]]:
        r = call(server, "GET", history, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    whole = wait(lambda: (h := get()) and h[-1]["type"] == "Disconnected" and len(h) == 5 and h, "five events")
    assert [e["version"] for e in whole] == [1, 2, 3, 4, 5]
    assert [e["type"] for e in whole] == ["Registered", "Connected", "Disconnected", "Connected", "Disconnected"]
    for e in whole:
        assert set(e) == {"version", "type", "at", "data"} and INSTANT.match(e["at"]) and isinstance(e["data"], dict)
    assert whole[0]["data"] == {"org": "local", "app": "orders", "executorId": "A"}  # camelCase, as the API's names
    assert whole[3]["data"]["previousStatus"] == "DISCONNECTED" and whole[3]["data"]["incarnation"] == 1
    assert {"connectionId", "appVersion", "dbosVersion", "executorMetadata"} <= set(whole[3]["data"])

    pages, after = [], 0
    while page := get(after=after, limit=2):
        assert len(page) <= 2 and len(pages) < 3, pages  # a page that ignores after would never end
        pages.append(page)
        after = page[-1]["version"]
    assert [len(p) for p in pages] == [2, 2, 1] and [e for p in pages for e in p] == whole
    assert get(after=3) == whole[3:]
    assert get(limit=HISTORY_LIMIT) == whole
    assert get(after=2**63 - 1) == []


def test_history_links_its_next_page_until_the_end(server: RelayServer) -> None:
    """As the as-of list does: ``Link: <...>; rel="next"`` (``after`` = the last version returned, ``limit``
    kept) while events follow; none on the last page, also one exactly full, nor on a whole history."""
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "A")
    connect_and_leave(server, "orders", "A")
    history = ORDERS + "/A/history"
    wait(lambda: len(call(server, "GET", history).json()) == 5, "five events")
    whole = call(server, "GET", history)
    assert len(whole.json()) == 5 and "link" not in whole.headers  # the default page holds them all
    first = call(server, "GET", history, params={"limit": 2})
    assert [e["version"] for e in first.json()] == [1, 2]
    assert first.headers["link"] == f'<{history}?after=2&limit=2>; rel="next"'
    got, r, pages = list(first.json()), first, 1
    while "next" in r.links:
        r = httpx.get(server.http + r.links["next"]["url"], verify=TLS, timeout=10)
        assert r.status_code == 200, r.text
        got += r.json()
        pages += 1
        assert pages <= 3, got
    assert got == whole.json() and pages == 3
    full_last = call(server, "GET", history, params={"after": 3, "limit": 2})
    assert [e["version"] for e in full_last.json()] == [4, 5] and "link" not in full_last.headers


def test_history_of_an_unknown_executor_or_application_is_a_404_problem(server: RelayServer) -> None:
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "A")
    for path in (ORDERS + "/Z/history", ORDERS + "/Z/history?after=3", L + "/apps/nope/executors/A/history"):
        assert_problem(call(server, "GET", path), 404)
    assert "'Z'" in call(server, "GET", ORDERS + "/Z/history").json()["detail"]


def test_every_executor_id_the_handshake_accepts_has_a_history(server: RelayServer) -> None:
    """A slash (sent encoded), a no-break space, an ideographic space, a private-use character: ids
    an executor registers with are read back by id; what the handshake refuses is no executor's."""
    call(server, "PUT", L + "/apps/orders")
    odd = ["host/1", "nb\u00a0sp", "ideo\u3000gap", "pua\ue000x", "/", "\u00e9" * 128]
    connect_and_leave(server, "orders", *odd)
    for x in odd:
        r = call(server, "GET", f"{ORDERS}/{quote(x, safe='')}/history")
        assert r.status_code == 200, (x, r.text)
        assert [e["type"] for e in r.json()] == ["Registered", "Connected", "Disconnected"], x
        assert r.json()[0]["data"]["executorId"] == x
        one = call(server, "GET", f"{ORDERS}/{quote(x, safe='')}/history", params={"limit": 1})
        nxt = one.links["next"]["url"]  # names the same executor: its id encoded again, "/" as %2F
        assert nxt == f"{ORDERS}/{quote(x, safe='')}/history?after=1&limit=1", (x, nxt)
        assert [e["version"] for e in httpx.get(server.http + nxt, verify=TLS, timeout=10).json()] == [2], x
    assert_problem(call(server, "GET", ORDERS + "/host/1/history"), 404)  # a bare slash separates segments
    for bad in ("a\nb", "a\u202eb", "a\x00b", "\u00e9" * 129):  # a control, a format character, NUL, 258 bytes
        body = assert_problem(call(server, "GET", f"{ORDERS}/{quote(bad, safe='')}/history"), 404)
        assert bad not in body["detail"]


@pytest.mark.parametrize("params, location", [
    ({"limit": 0}, "limit"),
    ({"limit": HISTORY_LIMIT + 1}, "limit"),
    ({"limit": "all"}, "limit"),
    ({"after": -1}, "after"),
    ({"after": 2**63}, "after"),
    ({"after": "v3"}, "after"),
])
def test_bad_history_parameters_are_422_problems_naming_them(dev: RelayServer, params: dict[str, Any],
                                                             location: str) -> None:
    assert_problem(call(dev, "GET", ORDERS + "/A/history", params=params), 422, location)


# ------------------------------------------------------------------ expensive reads, a few at a time


class BlockingStore:
    """An event store whose reads wait to be let go, counting how many are inside at once."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0

    def get(self, *args: Any, **kwargs: Any) -> list[Any]:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.go.wait(10)
        with self.lock:
            self.inside -= 1
        return []


def test_at_most_two_expensive_reads_run_at_once() -> None:
    from relay_es.adapters.rest import build_app
    from relay_es.adapters.rest.executors import EXPENSIVE_READS
    from tests.adapters.rest.fakes import fake_context

    store = BlockingStore()
    relay = SimpleNamespace(repository=SimpleNamespace(event_store=store))

    async def go() -> list[int]:
        transport = httpx.ASGITransport(app=build_app(fake_context(relay=relay)))  # requests served at once
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            calls = [asyncio.ensure_future(client.get(f"{ORDERS}/{x}/history")) for x in "ABCDE"]
            deadline = time.monotonic() + 10
            while store.inside < EXPENSIVE_READS:
                assert time.monotonic() < deadline, "two reads started"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # time for a third to start, were it let in
            assert store.inside == EXPENSIVE_READS and not any(c.done() for c in calls)
            store.go.set()
            return [r.status_code for r in await asyncio.gather(*calls)]

    assert asyncio.run(go()) == [404] * 5  # nothing in the store: unknown executors, each answered
    assert EXPENSIVE_READS == 2 and store.most == 2


def test_an_entry_s_own_at_as_of_shows_the_table_with_that_entry(server: RelayServer) -> None:
    """History prints ``at`` to the millisecond: given back as ``asOf`` (as the README's workflow
    does) it includes the entry, whatever the microseconds it was stamped at."""
    call(server, "PUT", L + "/apps/orders")
    connect_and_leave(server, "orders", "A")
    history = wait(lambda: call(server, "GET", ORDERS + "/A/history").json(), "A's history")
    first, last = history[0]["at"], history[-1]["at"]

    def as_of(at: str) -> dict[str, str]:
        r = call(server, "GET", ORDERS, params={"asOf": at})
        assert r.status_code == 200, r.text
        return {e["executorId"]: e["status"] for e in r.json()}

    assert "A" in as_of(first)  # listed from its first event on
    assert as_of(last) == {"A": "DISCONNECTED"} == {x: e["status"] for x, e in listed(server).items()}


@pytest.mark.parametrize("as_of", ["2026-12-06 14:00:00Z", "20261206T140000Z", "2026-12-06T14Z",
                                   "2026-12-06T14:00:00\x00Z", "2026-W49-7T14:00:00Z", "2100-01-01T00:00:00+0000"])
def test_an_as_of_not_in_rfc_3339_is_a_422_problem(dev: RelayServer, as_of: str) -> None:
    body = assert_problem(call(dev, "GET", ORDERS, params={"asOf": as_of}), 422, "asOf")
    assert "RFC 3339" in body["detail"]
