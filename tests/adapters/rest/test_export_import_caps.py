"""What an export and an import may carry, and how Relay says so.

The hunt (real TypeScript SDK 5.2.11 executors, /tmp/hunt_tsx/exp3.py): an 80 MiB export was answered
200, and importing that very blob was a 413 whose detail was Litestar's "Request Entity Too Large",
naming no cap. An executor may reply with up to 128 MiB (``limits.MAX_FRAME``); an import is carried
to the executor in one message, which the TypeScript SDK takes up to 100 MiB (``limits.SDK_MAX_MESSAGE``).
Relay answers an export only if its import would take it back, and a body past its cap is a 413 naming
the cap. Then ``importWorkflow``'s 201: no content, so no content type (the reference declares none).
In process (no 64 MiB payload): the export's caps made small for the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from litestar.testing import TestClient

from relay_es.adapters.rest import build_app, workflow_actions
from relay_es.adapters.rest.app import MAX_BODY
from relay_es.adapters.rest.conductor import models as m
from relay_es.domain.text import bytes_said
from relay_es.adapters.rest.workflow_actions import BULK_BODY, IMPORT_BODY
from relay_es.protocol import catalogue as c
from relay_es.protocol.limits import MAX_FRAME, SDK_MAX_MESSAGE
from relay_es.protocol.messages import encode
from tests.adapters.rest.fakes import ActionRecords, fake_context
from tests.conductor_schema import check_response

W = "/v2/orgs/local/apps/orders/workflows"


class Relay(ActionRecords):
    def app_exists(self, org: str, app: str) -> bool:
        return True


class Executor:
    """The hub's calls: an export answers ``exported``, an import succeeds; what was sent is kept."""

    def __init__(self) -> None:
        self.exported = "H4sI"
        self.sent: list[Any] = []

    async def call(self, org: str, app: str, make_request: Any, **kw: Any) -> Any:
        request = make_request("rid-1")
        self.sent.append(request)
        answer = {"serialized_workflow": self.exported} if request.type == "export_workflow" else {"success": True}
        return c.decode_response_for(request.type, msgspec.json.encode(
            {"type": request.type, "request_id": "rid-1", **answer}))


@pytest.fixture
def api() -> Iterator[tuple[TestClient, Executor]]:
    ex = Executor()
    with TestClient(build_app(fake_context(relay=Relay(), calls=ex)), base_url="http://127.0.0.1") as client:
        yield client, ex


# --- every export Relay answers imports back -----------------------------------------------------------


def test_the_largest_import_fits_one_message_of_every_sdk_and_the_largest_export_an_import() -> None:
    """An import's message is its serialized workflow (msgspec writes a string's JSON in no more bytes
    than the client's body held it) in an envelope; the body cap bounds both. And an export of the
    most characters an import takes is a body the import's cap takes."""
    envelope = len(encode(c.ImportWorkflowRequest(request_id=str(uuid4()), serialized_workflow="")).encode())
    assert IMPORT_BODY + envelope <= SDK_MAX_MESSAGE < MAX_FRAME
    answer = msgspec.json.encode(m.ExportWorkflowOutputBody(serialized_workflow=""))
    assert len(answer) + m.MAX_SERIALIZED_WORKFLOW <= IMPORT_BODY
    for text in ("\x01\n\"\\/", "\u00e9\U0001F600\u2028\x7f"):  # escapes, then UTF-8 that needs none
        assert len(msgspec.json.encode(text)) == len(json.dumps(text, ensure_ascii=False).encode())


def test_an_export_an_import_would_refuse_is_a_502_naming_the_caps(
        api: tuple[TestClient, Executor], monkeypatch: pytest.MonkeyPatch) -> None:
    client, ex = api
    monkeypatch.setattr(m, "MAX_SERIALIZED_WORKFLOW", 1000)
    monkeypatch.setattr(workflow_actions, "IMPORT_BODY", 1000 + 64)
    ex.exported = "A" * 1000  # at the caps: answered, and it imports back
    r = client.get(W + "/wf-1/export")
    assert r.status_code == 200, r.text[:300]
    check_response("exportWorkflow", 200, r.json())
    assert len(r.content) <= 1064
    back = client.post(W + "/import", content=r.content, headers={"content-type": "application/json"})
    assert back.status_code == 201, back.text[:300]
    assert ex.sent[-1].serialized_workflow == ex.exported

    for exported, said in (("A" * 1001, "a workflow of 1,001 characters"),  # too many characters
                           ("\x01" * 1000, "an answer of 6,025 bytes (5.88 KiB)")):  # its JSON too long
        ex.exported = exported
        r = client.get(W + "/wf-1/export")
        assert r.status_code == 502, r.text[:300]
        assert r.headers["content-type"] == "application/problem+json"
        body = r.json()
        check_response("exportWorkflow", 502, body)
        assert body["title"] == "export too large to import"
        assert said in body["detail"], body
        assert "importWorkflow takes at most 1,000 characters in a body of at most 1,064 bytes (1.04 KiB)" \
            in body["detail"], body
        assert "TypeScript SDK takes at most 100 MiB" in body["detail"], body


# --- a body past its cap: the cap named --------------------------------------------------------------


def test_a_body_past_its_cap_is_a_413_naming_the_cap_and_the_operation(api: tuple[TestClient, Executor]) -> None:
    client, ex = api
    typed = {"content-type": "application/json"}
    cases = [
        # the import's: refused from its Content-Length (the body itself is not sent: no 64 MiB here)
        ("POST", W + "/import", b"{}", {**typed, "content-length": str(IMPORT_BODY + 1)},
         "the request body is larger than 67,174,400 bytes (64.06 MiB), the most importWorkflow takes"),
        ("POST", W + "/bulk-cancel", b" " * (BULK_BODY + 1), typed,
         "the request body is larger than 4 MiB, the most bulkCancelWorkflows takes"),
        ("PATCH", "/v2/orgs/local/apps/orders", b"{" + b" " * MAX_BODY + b"}", typed,  # the app-wide cap
         "the request body is larger than 64 KiB, the most updateApp takes"),
    ]
    for method, path, content, headers, detail in cases:
        r = client.request(method, path, content=content, headers=headers)
        assert r.status_code == 413, r.text[:300]
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json() == {"type": "about:blank", "title": "Request entity too large", "status": 413,
                            "detail": detail}
    assert ex.sent == []


def test_a_size_is_said_in_bytes_and_in_the_unit_a_reader_takes_in() -> None:
    assert bytes_said(100) == "100 bytes" and bytes_said(1000) == "1,000 bytes"
    assert bytes_said(MAX_BODY) == "64 KiB"
    assert bytes_said(IMPORT_BODY) == "67,174,400 bytes (64.06 MiB)"
    assert bytes_said(SDK_MAX_MESSAGE) == "100 MiB"


# --- importWorkflow's answer ------------------------------------------------------------------------


def test_an_import_answers_201_with_no_content_and_no_content_type(api: tuple[TestClient, Executor]) -> None:
    """Conductor's reference declares importWorkflow's 201 "Created" with no content; Relay's 204s send
    no content type either."""
    client, ex = api
    r = client.post(W + "/import", json={"serializedWorkflow": "H4sI"})
    assert r.status_code == 201, r.text[:300]
    assert r.content == b"" and "content-type" not in r.headers, r.headers
    check_response("importWorkflow", 201, None)
    assert [q.type for q in ex.sent] == ["import_workflow"]
    # and Relay's own OpenAPI document says so
    doc = client.get("/openapi.json").json()
    assert "content" not in doc["paths"]["/v2/orgs/{org}/apps/{app}/workflows/import"]["post"]["responses"]["201"]
