"""Queues (``relay_es/adapters/rest/queues.py``) on a real ``relay serve``, both stores, with fake
executors answering like each SDK over real WebSockets.

``listQueues`` and ``getQueue`` send ``list_queues`` / ``get_queue`` (protocol section 5.21) to a
healthy executor and answer Conductor's ``Queue`` (validated against the reference): Python's
nulls and TypeScript's omitted keys both map; an unknown queue is 404; an SDK that predates the
message is 501 saying so; no executor 503, no answer 504, an executor's error 500 with its text,
a hostile reply 502. Also the helpers the schedule and version tests share.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from relay_es.adapters.rest import queues
from tests.conductor_schema import check_response
from tests.fake_executor import FakeExecutor
from tests.rest_client import as_records, audit_log, listing
from tests.rest_client import rest as call
from tests.server import RelayServer

L = "/v2/orgs/local"
CALL_TIMEOUT_SECS = "1"  # the servers here: an executor that does not answer is a 504 within a second

PY_QUEUE = {"name": "orders_queue", "concurrency": 1, "worker_concurrency": None, "rate_limit_max": 10,
            "rate_limit_period_sec": 1.5, "priority_enabled": True, "partition_queue": False,
            "polling_interval_sec": 1.0, "application_name": "shop"}
TS_QUEUE = {"name": "ts_queue", "concurrency": 2, "priority_enabled": False, "partition_queue": True,
            "polling_interval_sec": 2}  # TypeScript omits what it has not (and Go writes 2.0 as 2)


@pytest.fixture
def relay(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env={"RELAY_CALL_TIMEOUT_SECS": CALL_TIMEOUT_SECS})
    s.start()
    yield s
    s.stop()


def wait(pred: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return value


@contextmanager
def executors(server: RelayServer, *specs: dict[str, Any], org: str = "local",
              token: str | None = None) -> Iterator[list[FakeExecutor]]:
    """Fake executors (each spec: FakeExecutor's fields), connected on their own event loop in a
    thread and HEALTHY in Relay while the block runs; closed after it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(20)

    fakes = [FakeExecutor(server.ws, **spec) for spec in specs]
    try:
        for f in fakes:
            run(f.connect())
        for f in fakes:
            wait(lambda f=f: listing(server, f.app, org, token).get(f.executor_id, {}).get("status") == "HEALTHY",
                 f"{f.executor_id} healthy")
        yield fakes
    finally:
        for f in fakes:
            run(f.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def sent(ex: FakeExecutor, type_: str) -> list[dict[str, Any]]:
    return [r for r in ex.requests if r.get("type") == type_]


def conforms(operation: str, r: Any, status: int) -> Any:
    """``r`` has ``status`` and a body the reference allows ``operation`` with it; its body."""
    assert r.status_code == status, r.text
    body = r.json() if r.content else None
    if status >= 400:
        assert r.headers["content-type"].startswith("application/problem+json"), r.headers
        assert body["status"] == status and body["detail"], body
    check_response(operation, status, body)
    return body


def actions(server: RelayServer, app: str, operation: str, org: str = "local", token: str | None = None, *,
            refused: bool = False, wait: bool = True) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """The (requested, completed) halves of ``operation``'s actions on ``app``, from the audit
    log: those Relay carried out, or (``refused``) the calls it refused. The log is a read model,
    brought up to date in the background: this waits (up to 15 s; not at all without ``wait``,
    for a caller that expects none) until there is an action and every one has its completion,
    then answers what it has (a completion may still be None)."""
    deadline = time.monotonic() + (15 if wait else 0)
    while True:
        pairs = as_records(audit_log(server, org, token, operation=operation), app)
        if (pairs and all(d is not None for _, d in pairs)) or time.monotonic() > deadline:
            return [(r, d) for r, d in pairs if (d is not None and d["outcome"] == "refused") == refused]
        time.sleep(0.05)


def test_queues_round_trip_in_both_dialects(relay: RelayServer) -> None:
    by_name = {"orders_queue": PY_QUEUE, "ts_queue": TS_QUEUE}
    with executors(relay,
                   {"app": "shop", "answers": {
                       "list_queues": lambda req: {"output": [PY_QUEUE]},
                       "get_queue": lambda req: {"output": by_name.get(req["name"])}}},
                   {"app": "tshop", "style": "typescript", "answers": {
                       "list_queues": lambda req: {"output": [TS_QUEUE]},
                       "get_queue": lambda req: {"output": by_name.get(req["name"])}}}) as (py, ts):
        listed = conforms("listQueues", call(relay, "GET", L + "/apps/shop/queues"), 200)
        assert listed == [{"name": "orders_queue", "concurrency": 1, "workerConcurrency": None, "rateLimitMax": 10,
                           "rateLimitPeriodSecs": 1.5, "priorityEnabled": True, "partitionQueue": False,
                           "pollingIntervalSecs": 1.0, "applicationName": "shop"}]
        [req] = sent(py, "list_queues")
        assert req["body"] == {"application_name": None} and req["request_id"]

        one = conforms("getQueue", call(relay, "GET", L + "/apps/tshop/queues/ts_queue"), 200)
        assert one == {"name": "ts_queue", "concurrency": 2, "workerConcurrency": None, "rateLimitMax": None,
                       "rateLimitPeriodSecs": None, "priorityEnabled": False, "partitionQueue": True,
                       "pollingIntervalSecs": 2.0, "applicationName": None}
        assert [r["name"] for r in sent(ts, "get_queue")] == ["ts_queue"]
        assert conforms("listQueues", call(relay, "GET", L + "/apps/tshop/queues"), 200)[0]["name"] == "ts_queue"

        missing = conforms("getQueue", call(relay, "GET", L + "/apps/shop/queues/no.such~queue"), 404)
        assert "no.such~queue" in missing["detail"]
        assert sent(py, "get_queue")[-1]["name"] == "no.such~queue"
        r = call(relay, "GET", L + "/apps/shop/queues/" + "q" * 8193)  # past the 8 KiB of an executor's name
        assert r.status_code in (404, 422), r.text  # refused before the handler (the guard) or by it
        assert sent(py, "get_queue")[-1]["name"] == "no.such~queue"  # the long one was never sent
        conforms("listQueues", call(relay, "GET", L + "/apps/unknown/queues"), 404)


def test_an_sdk_without_the_message_is_a_501_naming_it(relay: RelayServer) -> None:
    with executors(relay, {"app": "old"}):  # answers every type it was given no handler for as unknown
        for op, path, type_ in (("listQueues", "/queues", "list_queues"), ("getQueue", "/queues/q", "get_queue")):
            body = conforms(op, call(relay, "GET", L + "/apps/old" + path), 501)
            assert type_ in body["detail"] and "Unknown message type" in body["detail"], body
            assert body["title"] == "not supported by the executor"


def test_failed_calls_are_their_problems(relay: RelayServer) -> None:
    assert call(relay, "PUT", L + "/apps/idle").status_code == 204
    r = call(relay, "GET", L + "/apps/idle/queues")
    conforms("listQueues", r, 503)
    assert r.headers["retry-after"] == "5"
    with executors(relay,
                   {"app": "mute", "answers": {"list_queues": lambda req: None}},
                   {"app": "broken", "answers": {
                       "list_queues": lambda req: {"output": [], "error_message": "Traceback: db down"},
                       "get_queue": lambda req: {"output": {"name": 5}}}}):
        started = time.monotonic()
        conforms("listQueues", call(relay, "GET", L + "/apps/mute/queues"), 504)
        assert time.monotonic() - started < 5
        assert "db down" in conforms("listQueues", call(relay, "GET", L + "/apps/broken/queues"), 500)["detail"]
        conforms("getQueue", call(relay, "GET", L + "/apps/broken/queues/q"), 502)


def test_a_queue_of_another_name_or_with_numbers_out_of_bounds_is_a_502(relay: RelayServer) -> None:
    huge = PY_QUEUE | {"concurrency": 2**40, "worker_concurrency": 2**35}
    negative = PY_QUEUE | {"rate_limit_max": -7, "rate_limit_period_sec": -1.5}
    with executors(relay,
                   {"app": "other", "answers": {
                       "get_queue": lambda req: {"output": PY_QUEUE | {"name": "not-what-you-asked"}}}},
                   {"app": "huge", "answers": {"list_queues": lambda req: {"output": [huge]},
                                               "get_queue": lambda req: {"output": huge}}},
                   {"app": "negative", "answers": {"list_queues": lambda req: {"output": [negative]},
                                                   "get_queue": lambda req: {"output": negative}}}):
        body = conforms("getQueue", call(relay, "GET", L + "/apps/other/queues/orders_queue"), 502)
        assert "not-what-you-asked" in body["detail"] and body["title"] == "executor reply refused", body
        for app, field in (("huge", "concurrency"), ("negative", "rate_limit_max")):
            for op, path in (("listQueues", "/queues"), ("getQueue", "/queues/orders_queue")):
                body = conforms(op, call(relay, "GET", L + f"/apps/{app}" + path), 502)
                assert field in body["detail"], (app, op, body)


def test_failed_status_is_a_500_whatever_the_executor_says() -> None:
    """A list has nothing to be missing, and an unknown queue is the executor's null: no error
    message makes a 404 here (a database's "does not exist" least of all)."""
    for message in ("Traceback ... OperationalError", 'relation "dbos.workflow_queue" does not exist',
                    'FATAL:  database "shop_dbos_sys" does not exist', "Queue 'q' not found",
                    "Exception: Schedule 'x' does not exist"):
        assert queues.failed_status(message) == 500, message
    assert queues.failed_status("list_queues is not allowed in conductor metadata-only mode") == 403


def test_the_executor_s_database_failing_is_a_500_not_a_404(relay: RelayServer) -> None:
    no_table = 'psycopg.errors.UndefinedTable: relation "dbos.workflow_queue" does not exist'
    with executors(relay, {"app": "shop", "answers": {
            "list_queues": lambda req: {"output": [], "error_message": no_table},
            "get_queue": lambda req: {"output": None, "error_message": no_table}}}):
        for op, path in (("listQueues", "/queues"), ("getQueue", "/queues/orders_queue")):
            body = conforms(op, call(relay, "GET", L + "/apps/shop" + path), 500)
            assert body["title"] == "executor reported an error" and "dbos.workflow_queue" in body["detail"], body
