"""Strict body decoding (``relay_es/adapters/rest/bodies.py``, :func:`decoded`).

Called directly: no conversion between JSON types, an unknown field refused,
the refusal naming where in the body it was (a 422 once a problem), a body
nested too deeply refused rather than crashing. Then through the API from a
context of fakes: a refused body is a 422 problem naming the field, and the
service is never called. (A body's size is capped before it is read at all:
``app.py``, tested in ``test_app.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from litestar.exceptions import ValidationException
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.applications import PatchAppBody
from relay_es.adapters.rest.bodies import decoded
from tests.adapters.rest.fakes import ActionRecords, Calls, fake_context


class Item(msgspec.Struct, forbid_unknown_fields=True):
    n: int


class Order(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    items: list[Item]
    max_count: int = 0
    note: Any = None


def decode(raw: bytes, cls: type[Any]) -> Any:
    return decoded(raw, cls)


def refusal(raw: bytes, cls: type[Any]) -> tuple[str, str]:
    """``(where, message)`` of the refusal of ``raw`` as ``cls``."""
    with pytest.raises(ValidationException) as e:
        decode(raw, cls)
    (only,) = e.value.extra
    assert only["message"] in e.value.detail
    return only["key"], only["message"]


def test_a_body_of_the_right_types_decodes_to_the_class() -> None:
    assert decode(b'{"items": [{"n": 1}, {"n": 2}], "maxCount": 3}', Order) == Order([Item(1), Item(2)], 3)
    assert decode(b'{"executorTimeoutSecs": 60, "gcRowsThreshold": null}', PatchAppBody) == PatchAppBody(
        executor_timeout_secs=60, gc_rows_threshold=None)


@pytest.mark.parametrize("value, got", [('"60"', "str"), ("60.0", "float"), ("1.5", "float"), ("true", "bool"),
                                        ("[60]", "array"), ('{"s": 60}', "object")])
def test_no_conversion_between_json_types(value: str, got: str) -> None:
    """Litestar's own decoding turns ``"60"`` into 60; a string is not a number of seconds."""
    where, message = refusal(b'{"executorTimeoutSecs": %s}' % value.encode(), PatchAppBody)
    assert where == "executorTimeoutSecs"
    assert f"got `{got}`" in message


@pytest.mark.parametrize("raw, where, named", [
    (b'{"items": [{"n": 1}, {"n": "2"}]}', "items[1].n", "got `str`"),
    (b'{"items": [], "maxCount": "3"}', "maxCount", "got `str`"),  # the body's name for the field, not Python's
    (b'{"items": [{"n": 1, "m": 2}]}', "items[0]", "unknown field `m`"),
    (b'{"items": [], "maxcount": 3}', "body", "unknown field `maxcount`"),
    (b'{"maxCount": 3}', "body", "missing required field `items`"),
    (b'[]', "body", "Expected `object`, got `array`"),
])
def test_a_refusal_names_where_in_the_body_it_was(raw: bytes, where: str, named: str) -> None:
    got_where, message = refusal(raw, Order)
    assert got_where == where and named in message, (got_where, message)


@pytest.mark.parametrize("depth", [1_000, 40_000])
def test_json_nested_too_deeply_is_a_refusal_not_a_crash(depth: int) -> None:
    raw = b'{"items": [], "note": ' + b"[" * depth + b"]" * depth + b"}"
    assert refusal(raw, Order) == ("body", "JSON is nested too deeply")
    shallow = b'{"items": [], "note": ' + b"[" * 20 + b"]" * 20 + b"}"
    assert decode(shallow, Order).items == []


# ------------------------------------------------------------------ through the API


class FakeRelay(ActionRecords):
    def __init__(self, calls: Calls) -> None:
        self.update_app = calls("update_app")


@pytest.fixture
def api() -> Iterator[tuple[TestClient, Calls]]:
    calls = Calls()
    ctx = fake_context(relay=FakeRelay(calls), read_your_writes=calls("read_your_writes"))
    with TestClient(build_app(ctx), base_url="http://127.0.0.1") as client:
        yield client, calls


@pytest.mark.parametrize("body, location", [
    ({"executorTimeoutSecs": "60"}, "executorTimeoutSecs"),
    ({"gcTimeThresholdMs": 60_000.0}, "gcTimeThresholdMs"),
    ({"gcRowsThreshold": True}, "gcRowsThreshold"),
    ({"privateMode": "false"}, "privateMode"),
    ({"privateMode": 0}, "privateMode"),
])
def test_a_body_litestar_would_convert_is_refused_with_a_422_problem(api: tuple[TestClient, Calls],
                                                                      body: dict[str, Any], location: str) -> None:
    client, calls = api
    r = client.patch("/v2/orgs/local/apps/orders", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == 422 and location in problem["detail"]
    assert [e["location"] for e in problem["errors"]] == [location]
    assert calls.made == []


@pytest.mark.parametrize("method, path, body, location", [
    ("PUT", "/v2/orgs/local/apps/orders", {"privateMode": "true"}, "privateMode"),  # registerApp
    ("POST", "/v2/orgs/local/tokens/ci", {"appNames": "orders"}, "appNames"),  # createToken
    ("POST", "/v2/orgs/local/tokens/ci", {"appNames": ["orders"], "wat": 1}, "wat"),
])
def test_every_route_s_body_is_decoded_strictly(api: tuple[TestClient, Calls], method: str, path: str,
                                                body: dict[str, Any], location: str) -> None:
    """Also those Litestar decoded until 2026-12-03 (a ``data`` parameter): ``"true"`` was true."""
    client, calls = api
    r = client.request(method, path, json=body)
    assert r.status_code == 422, r.text
    assert location in r.json()["detail"] and calls.made == []


def test_an_unknown_field_is_refused_and_named(api: tuple[TestClient, Calls]) -> None:
    client, calls = api
    r = client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 60, "executorTimeoutSec": 60})
    assert r.status_code == 422, r.text
    assert "executorTimeoutSec`" in r.json()["detail"]
    assert calls.made == []


def test_the_same_body_with_the_right_types_reaches_the_service(api: tuple[TestClient, Calls]) -> None:
    client, calls = api
    r = client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 60, "privateMode": False})
    assert r.status_code == 204, r.text
    assert [c[0] for c in calls.made] == ["update_app", "read_your_writes"]
    _, org, app, patch = calls.made[0]
    assert (org, app) == ("local", "orders")
    assert patch.executor_timeout.total_seconds() == 60 and patch.private_mode is False


@pytest.mark.parametrize("raw", [b"{nope", b'{"executorTimeoutSecs": 60} trailing', b'{"executorTimeoutSecs": 6'])
def test_a_body_that_is_not_json_is_a_400_problem(api: tuple[TestClient, Calls], raw: bytes) -> None:
    """Refused as a 400 problem by :func:`decoded` (``msgspec.DecodeError`` never gets through)."""
    client, calls = api
    r = client.patch("/v2/orgs/local/apps/orders", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json" and r.json()["status"] == 400 and r.json()["detail"]
    assert calls.made == []


class NoApps(FakeRelay):
    def __init__(self, calls: Calls) -> None:
        super().__init__(calls)
        self.app_exists = lambda org, app: calls("app_exists")(org, app) or False


@pytest.fixture
def conductor() -> Iterator[tuple[TestClient, Calls]]:
    calls = Calls()
    with TestClient(build_app(fake_context(relay=NoApps(calls))), base_url="http://127.0.0.1") as client:
        yield client, calls


W = "/v2/orgs/local/apps/orders/workflows"


@pytest.mark.parametrize("path, body, location", [
    # the hunter's: sent on to the executor as they were, where a NUL makes its Postgres fail (a 500)
    ("/bulk-cancel", {"workflowIds": ["ok\u0000id", "\u202e\u0007"]}, "workflowIds[0]"),
    ("/bulk-cancel", {"workflowIds": ["ok", "\u202e\u0007\u0000"]}, "workflowIds[1]"),
    ("/bulk-resume", {"workflowIds": ["ok"], "queueName": "q\x1b[2J\x00"}, "queueName"),
    ("/wf-1/fork", {"newWorkflowId": "new\u0000"}, "newWorkflowId"),
    ("/wf-1/resume", {"queueName": "q" * 8193}, "queueName"),
    ("/search", {"workflowName": ["probe", "pro\u0000be"]}, "workflowName[1]"),
    ("/aggregates", {"queueName": ["\u00e9" * 4097]}, "queueName[0]"),
])
def test_an_id_or_a_name_in_a_body_that_cannot_be_sent_is_a_422_naming_it(
        conductor: tuple[TestClient, Calls], path: str, body: dict[str, Any], location: str) -> None:
    """As the same ID in the path is refused (``guard.valid_text``), before anything is looked up: a NUL,
    or more than 8 KiB of UTF-8."""
    client, calls = conductor
    r = client.post(W + path, json=body)
    assert r.status_code == 422, r.text
    assert [e["location"] for e in r.json()["errors"]] == [location]
    assert "8192" in r.json()["detail"]
    assert calls.made == []


def test_the_executors_ids_and_payloads_go_on(conductor: tuple[TestClient, Calls]) -> None:
    """A scheduled workflow's id, a space, any script, a tab or a bidirectional mark DBOS took: the body
    reaches the service (here: no such app)."""
    client, calls = conductor
    scheduled = "sched-nightly-2026-12-01T11:00:00+00:00"
    for path, body in (("/bulk-cancel", {"workflowIds": [scheduled, "a b", "工作流", "a\tb", "\u202e\u0007"]}),
                       ("/search", {"attributes": {"note": "line\nbreak"}, "workflowName": ["pro\u200bbe"]}),
                       ("/import", {"serializedWorkflow": "H4sI\nAAAA\u0000"})):
        assert client.post(W + path, json=body).status_code == 404
    assert [c[0] for c in calls.made] == ["app_exists"] * 3
