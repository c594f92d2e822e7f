"""The text an executor's application chose -- workflow ids, workflow, queue, schedule and step names,
versions -- in a path, a query or a Conductor body: taken as the executor has it (ADR 15's amendment of
2026-12-07). Only what cannot be sent or stored is refused, with a 422 naming the parameter and the
rule: a NUL, a lone surrogate, more than ``models.MAX_TEXT_BYTES`` of UTF-8. Relay's own names keep
their alphabet. Then the import's failures: every one that is neither a conflict nor the executor's
database failing is the payload's, a 422.

The ids are a helper's hunt with real SDKs (DBOS 3.2.0 and @dbos-inc/dbos-sdk 5.x): each was accepted
by DBOS and listed by ``listWorkflows``, then refused by Relay's path check as "not a valid name".
The executors' messages are recorded from the SDKs' own code paths (see :data:`IMPORT_FAILURES`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote
from uuid import uuid4

import msgspec
import pytest
from litestar.exceptions import NotFoundException
from litestar.testing import TestClient

from relay_es.adapters import authz
from relay_es.adapters.rest import build_app
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.guard import check_path_names
from relay_es.adapters.rest.slashes import EncodedSlashes
from relay_es.adapters.rest.workflow_actions import failed_status
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.calls import ExecutorFailed
from relay_es.protocol import catalogue as c
from tests.adapters.rest.fakes import fake_context

MAX_BYTES = 8192  # UTF-8 bytes of one ID or name (models.MAX_TEXT_BYTES), as ADR 15 states it
RULE = f"at most {MAX_BYTES} bytes of UTF-8"  # how a refusal states the rule (in part)

# The hunt's workflow ids (/tmp/hunt_expimp/s10_ids.py): DBOS ran and listed each of them.
HUNTED = {"nbsp": "order\u00a042", "zwj-emoji": "fam-\U0001F468\u200d\U0001F469\u200d\U0001F467", "tab": "a\tb",
          "long": "L" * 5000}
# More an application may choose: a line break, a terminal escape, a bidirectional override, an
# unassigned code point, the most UTF-8 allowed.
ALSO = {"newline": "line\nbreak", "escape": "esc\x1b[31m", "bidi": "\u202eevil", "unassigned": "a\u0378b",
        "most": "\u00e9" * (MAX_BYTES // 2)}
TEXTS = {**HUNTED, **ALSO}
# What cannot be sent or stored: a NUL (Postgres text), a lone surrogate (no UTF-8 holds one), too long.
REFUSED = {"nul": "ok\x00id", "surrogate": "a\ud800b", "too long": "\u00e9" * (MAX_BYTES // 2) + "x"}
GET_WORKFLOW = authz.TABLE[("GET", "/v2/orgs/{org}/apps/{app}/workflows/{workflow_id}")]


# --- the rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_the_executors_own_ids_and_names_pass_the_path_check(name: str) -> None:
    text = TEXTS[name]
    check_path_names(GET_WORKFLOW, {"org": "acme", "app": "orders", "workflow_id": text, "queue_name": text,
                                    "schedule_name": text})


@pytest.mark.parametrize("key, field", [("workflow_id", "workflowId"), ("queue_name", "queueName"),
                                        ("schedule_name", "scheduleName")])
@pytest.mark.parametrize("why", sorted(REFUSED))
def test_an_id_outside_the_rule_is_a_422_naming_the_parameter_and_the_rule(key: str, field: str, why: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        check_path_names(GET_WORKFLOW, {"org": "acme", "app": "orders", key: REFUSED[why]})
    assert e.value.field == field and RULE in e.value.message, e.value
    assert REFUSED[why] not in str(e.value)  # the value is not echoed


def test_relay_s_own_names_keep_their_alphabet() -> None:
    for params in ({"app": "or ders"}, {"app": "a\tb"}, {"org": "ac\u00a0me"}):
        with pytest.raises(NotFoundException):
            check_path_names(GET_WORKFLOW, {"org": "acme", "app": "orders", "workflow_id": "w", **params})


def test_a_body_takes_the_same_text_as_the_path() -> None:
    for text in TEXTS.values():
        body = m.decode(msgspec.json.encode({"workflowIds": [text], "queueName": text}), m.BulkResumeInputBody)
        assert body.workflow_ids == [text] and body.queue_name == text
        search = m.decode(msgspec.json.encode({"workflowName": [text], "workflowIdPrefix": [text]}),
                          m.WorkflowSearchBody)
        assert search.workflow_name == [text]
    for why in ("nul", "too long"):  # a lone surrogate is not JSON msgspec reads at all (a 400)
        with pytest.raises(msgspec.ValidationError, match=r"at `\$\.workflowIds\[1\]`"):
            m.decode(msgspec.json.encode({"workflowIds": ["ok", REFUSED[why]]}), m.BulkCancelInputBody)


@pytest.mark.parametrize("field, kw", [("status", "status"), ("workflowName", "workflow_name")])
def test_a_nul_or_too_much_in_a_query_filter_is_a_422_naming_it(field: str, kw: str) -> None:
    for bad in ("S\x00", ["ok", "wf\x00"], REFUSED["too long"]):
        with pytest.raises(InvalidSetting) as e:
            mapping.list_workflows_request(request_id="r", **{kw: bad})
        assert e.value.field == field and RULE in e.value.message
    sent = mapping.list_workflows_request(request_id="r", **{kw: HUNTED["tab"]})
    assert getattr(sent.body, kw) == HUNTED["tab"]
    with pytest.raises(InvalidSetting) as e:
        mapping.list_schedules_request(request_id="r", schedule_name_prefix="p\x00")
    assert e.value.field == "scheduleNamePrefix"


# --- through the API, nothing sent when refused ------------------------------------------------------


class Relay:
    """The application exists; actions are recorded (here: kept)."""

    def __init__(self) -> None:
        self.requested: list[dict[str, Any]] = []

    def app_exists(self, org: str, app: str) -> bool:
        return True

    def record_action_requested(self, org: str, app: str, **kw: Any) -> Any:
        self.requested.append(kw)
        return uuid4()

    def record_action_completed(self, action_id: Any, **kw: Any) -> bool:
        return True


class Executor:
    """The hub's calls, answered as an SDK would: ``answers`` by request type, a dict (the wire's
    answer) or an error message (raised as the hub raises it)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.sent: list[Any] = []

    async def call(self, org: str, app: str, make_request: Any, **kw: Any) -> Any:
        request = make_request("rid-1")
        self.sent.append(request)
        answer = self.answers[request.type]
        if isinstance(answer, str):
            raise ExecutorFailed(answer)
        return c.decode_response_for(request.type, msgspec.json.encode(
            {"type": request.type, "request_id": "rid-1", **answer}))


def workflow(wid: str) -> dict[str, Any]:
    return {"WorkflowUUID": wid, "Status": "SUCCESS", "WorkflowName": "echo", "CreatedAt": "1765000000000"}


@pytest.fixture
def api() -> Iterator[tuple[TestClient, Executor]]:
    ex = Executor({
        "get_workflow": {"output": None}, "list_steps": {"output": []}, "export_workflow": {"serialized_workflow": "H4sI"},
        "cancel": {"success": True}, "list_workflows": {"output": []}, "list_queued_workflows": {"output": []},
        "import_workflow": {"success": True},
    })
    relay = EncodedSlashes(build_app(fake_context(relay=Relay(), calls=ex)))  # as relay serve has it (composition.asgi)

    async def served(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":  # the path's raw bytes as uvicorn gives them: without the query (TestClient's have it)
            scope = {**scope, "raw_path": scope["raw_path"].partition(b"?")[0]}
        await relay(scope, receive, send)

    with TestClient(served, base_url="http://127.0.0.1") as client:
        yield client, ex


W = "/v2/orgs/local/apps/orders/workflows"


@pytest.mark.parametrize("name", sorted(HUNTED))
def test_a_workflow_list_workflows_shows_can_be_read_and_acted_on(api: tuple[TestClient, Executor], name: str) -> None:
    client, ex = api
    wid = HUNTED[name]
    ex.answers["get_workflow"] = {"output": workflow(wid)}
    path = f"{W}/{quote(wid, safe='')}"
    r = client.get(path)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["workflowId"] == wid  # JSON carries it as it is
    for sub in ("/steps", "/export"):
        assert client.get(path + sub).status_code == 200
    assert client.post(path + "/cancel").status_code == 204
    assert [(q.type, q.workflow_id) for q in ex.sent] == [
        ("get_workflow", wid), ("list_steps", wid), ("export_workflow", wid), ("cancel", wid)]
    assert client.post(W + "/bulk-cancel", json={"workflowIds": list(HUNTED.values())}).status_code == 204
    assert ex.sent[-1].workflow_ids == list(HUNTED.values())
    r = client.post(W + "/search", json={"workflowIds": [wid], "workflowName": ["a\tb"], "queueName": ["slow\u00a0lane"]})
    assert r.status_code == 200 and ex.sent[-1].body.workflow_uuids == [wid]


@pytest.mark.parametrize("raw, field", ids=["nul", "nul and slash", "too long"], argvalues=[
    ("/a%00b", "workflowId"),  # the client's NUL (slashes.SENT_NUL stands for it), never another character
    ("/a%00b%2Fc/steps", "workflowId"),
    ("/" + "%C3%A9" * (MAX_BYTES // 2) + "x/cancel", "workflowId"),
])
def test_an_id_in_the_path_outside_the_rule_is_a_422_and_nothing_is_sent(api: tuple[TestClient, Executor], raw: str,
                                                                         field: str) -> None:
    client, ex = api
    r = client.request("POST" if raw.endswith("cancel") else "GET", W + raw)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["errors"] == [{"location": field, "message": r.json()["errors"][0]["message"]}]
    assert RULE in r.json()["detail"]
    assert ex.sent == []


@pytest.mark.parametrize("query, field", [("workflowName=wf%00", "workflowName"), ("status=S%00", "status"),
                                          ("workflowName=" + "%C3%A9" * 4097, "workflowName")],
                         ids=["name", "status", "too long"])
def test_a_nul_in_list_workflows_query_is_a_422_and_nothing_is_sent(api: tuple[TestClient, Executor], query: str,
                                                                    field: str) -> None:
    """The hunt: ``?workflowName=wf%00`` reached the executor, whose answer was a 500 with a Python
    traceback (host paths) or Postgres' 'invalid byte sequence for encoding "UTF8": 0x00'."""
    client, ex = api
    r = client.get(f"{W}?{query}")
    assert r.status_code == 422, r.text[:300]
    assert [e["location"] for e in r.json()["errors"]] == [field]
    assert ex.sent == []


def test_a_nul_in_a_body_is_a_422_naming_the_field_and_nothing_is_sent(api: tuple[TestClient, Executor]) -> None:
    client, ex = api
    for path, body, where in (("/bulk-cancel", {"workflowIds": ["ok", "ok\x00id"]}, "workflowIds[1]"),
                              ("/search", {"workflowName": ["wf\x00"]}, "workflowName[0]")):
        r = client.post(W + path, json=body)
        assert r.status_code == 422 and [e["location"] for e in r.json()["errors"]] == [where], r.text
        assert RULE in r.json()["detail"]
    assert ex.sent == []


# --- import: what is not a conflict nor the executor's database is the payload's -------------------------

PY = "Exception encountered when importing workflow: Traceback (most recent call last):\n"
SITE = "/tmp/hunt_expimp/dbos-venv/lib/python3.11/site-packages/"
# DBOS 3.2.0 (its conductor's IMPORT_WORKFLOW: pickle.loads, _sys_db.import_workflow, _report_exception's
# f"{context}: {traceback.format_exc()}") and @dbos-inc/dbos-sdk 5.x (conductor.js: importWorkflow,
# reportException's `${context}: ${e.message}`). The first from the hunt's executor log
# (/tmp/hunt_expimp/s10-appf.err), the TypeScript ones as the hunt's executor answered them
# (s10-appg.err); the rest recorded by running the SDKs' import_workflow / importWorkflow against a
# system database away (a closed port), without its schema, and with payloads of other shapes.
PAYLOAD_FAULTS = [
    (PY + f'  File "{SITE}dbos/_conductor/conductor.py", line 810, in run\n'
          "    self.dbos._sys_db.import_workflow(workflow)\n"
          f'  File "{SITE}dbos/_sys_db.py", line 6531, in import_workflow\n'
          "    for workflow in workflows:\n"
          "TypeError: 'int' object is not iterable\n"),  # gzip+base64 of pickle.dumps(5)
    (PY + f'  File "{SITE}dbos/_sys_db.py", line 6532, in import_workflow\n'
          '    status = workflow["workflow_status"]\n'
          "             ~~~~~~~~^^^^^^^^^^^^^^^^^^^\n"
          "TypeError: string indices must be integers, not 'str'\n"),  # {"a": 1}
    (PY + f'  File "{SITE}dbos/_sys_db.py", line 6532, in import_workflow\n'
          '    status = workflow["workflow_status"]\n'
          "             ~~~~~~~~^^^^^^^^^^^^^^^^^^^\n"
          "KeyError: 'workflow_status'\n"),  # [{"x": 1}]
    (PY + f'  File "{SITE}psycopg/cursor.py", line 117, in execute\n'
          "    raise ex.with_traceback(None)\n"
          "psycopg.DataError: PostgreSQL text fields cannot contain NUL (0x00) bytes\n\n"
          "The above exception was the direct cause of the following exception:\n\n"
          "Traceback (most recent call last):\n"
          f'  File "{SITE}dbos/_sys_db.py", line 6535, in import_workflow\n'
          "    c.execute(\n"
          "sqlalchemy.exc.DataError: (psycopg.DataError) PostgreSQL text fields cannot contain NUL (0x00) bytes\n"
          "[SQL: INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, workflow_timeout_ms) "
          "VALUES (%(workflow_uuid)s::VARCHAR, %(status)s::VARCHAR, %(name)s::VARCHAR, %(queue_name)s::VARCHAR, "
          "%(workflow_timeout_ms)s::BIGINT)]\n"
          "[parameters: {'workflow_uuid': 'w\\x00', 'status': 'SUCCESS', 'name': 'the connection refused "
          "does not exist', 'queue_name': None, 'workflow_timeout_ms': None}]\n"
          "(Background on this error at: https://sqlalche.me/e/20/9h9h)\n"),  # a NUL in the exported workflow
    "Exception encountered when importing workflow: workflows is not iterable",  # TypeScript: {"a": 1}
    "Exception encountered when importing workflow: Cannot read properties of undefined (reading 'workflow_uuid')",
    'Exception encountered when importing workflow: invalid byte sequence for encoding "UTF8": 0x00',
]
TS = "Exception encountered when importing workflow: "
# A payload whose own value holds STORE_FAILURE's words, quoted by what refused it (the hunt of
# /tmp/hunt_tsx/exp10_py_and_words.py: created_at "does not exist" and "deadlock detected" were 500s):
# PostgreSQL quotes the value as it is (quotes, line breaks), Node's JSON.parse an excerpt (its messages
# as Node 20 writes them), Python's pickle the name it was given.
QUOTED_PAYLOAD_FAULTS = [
    TS + 'invalid input syntax for type bigint: "does not exist"',
    TS + 'invalid input syntax for type bigint: "deadlock detected"',
    TS + 'invalid input syntax for type bigint: "a" deadlock detected "b"',
    TS + 'invalid input syntax for type bigint: "a\ndeadlock detected"',
    TS + "Unexpected token 'd', \"does not exist\" is not valid JSON",
    TS + "Unexpected token 'd', \"d' deadlock detected\" is not valid JSON",
    TS + "Unexpected token 'd', \"[\ndeadlock detected]\" is not valid JSON",
    TS + "Unexpected token 'd', ...\": 1, \"b\": deadlock d\"... is not valid JSON",
    (PY + f'  File "{SITE}psycopg/cursor.py", line 117, in execute\n'
          "    raise ex.with_traceback(None)\n"
          'psycopg.errors.InvalidTextRepresentation: invalid input syntax for type bigint: "too many clients"\n\n'
          "The above exception was the direct cause of the following exception:\n\n"
          "Traceback (most recent call last):\n"
          f'  File "{SITE}dbos/_sys_db.py", line 6535, in import_workflow\n'
          "    c.execute(\n"
          "sqlalchemy.exc.DataError: (psycopg.errors.InvalidTextRepresentation) invalid input syntax for type "
          'bigint: "too many clients"\n'
          "[SQL: INSERT INTO dbos.workflow_status (workflow_uuid) VALUES (%(workflow_uuid)s::VARCHAR)]\n"
          "[parameters: {'workflow_uuid': 'w'}]\n"
          "(Background on this error at: https://sqlalche.me/e/20/9h9h)\n"),
    (PY + f'  File "{SITE}dbos/_conductor/conductor.py", line 803, in run\n'
          "    workflow = pickle.loads(\n"
          "ModuleNotFoundError: No module named 'deadlock detected'\n"),
    (PY + f'  File "{SITE}dbos/_conductor/conductor.py", line 803, in run\n'
          "    workflow = pickle.loads(\n"
          "AttributeError: Can't get attribute 'does not exist' on <module 'os' (frozen)>\n"),
]
STORE_FAILURES = [
    (PY + f'  File "{SITE}psycopg/connection.py", line 126, in connect\n'
          "    raise last_ex.with_traceback(None)\n"
          'psycopg.OperationalError: connection failed: connection to server at "127.0.0.1", port 22599 failed: '
          "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n\n"
          "The above exception was the direct cause of the following exception:\n\n"
          "Traceback (most recent call last):\n"
          f'  File "{SITE}dbos/_sys_db.py", line 6530, in import_workflow\n'
          "    with self.engine.begin() as c:\n"
          "sqlalchemy.exc.OperationalError: (psycopg.OperationalError) connection failed: connection to server at "
          '"127.0.0.1", port 22599 failed: Connection refused\n'
          "\tIs the server running on that host and accepting TCP/IP connections?\n"
          "(Background on this error at: https://sqlalche.me/e/20/e3q8)\n"),
    (PY + f'  File "{SITE}psycopg/cursor.py", line 117, in execute\n'
          "    raise ex.with_traceback(None)\n"
          'psycopg.errors.UndefinedTable: relation "dbos.workflow_status" does not exist\n'
          "LINE 1: INSERT INTO dbos.workflow_status (workflow_uuid,...\n"
          "                    ^\n"),
    "Exception encountered when importing workflow: connect ECONNREFUSED 127.0.0.1:22599",
    'Exception encountered when importing workflow: relation "dbos.workflow_status" does not exist',
    # what the store's failures quote (its names, never the payload's) leaves the failure said
    TS + 'column "x" of relation "workflow_status" does not exist',
    TS + 'database "shop_dbos_sys" does not exist',
    TS + 'could not extend file "base/16384/16385": No space left on device',
    (PY + f'  File "{SITE}psycopg/connection.py", line 126, in connect\n'
          "    raise last_ex.with_traceback(None)\n"
          "sqlalchemy.exc.OperationalError: (psycopg.OperationalError) connection failed: connection to server at "
          '"127.0.0.1", port 5432 failed: FATAL:  the database system is shutting down\n'),
]


@pytest.mark.parametrize("message", PAYLOAD_FAULTS, ids=range(len(PAYLOAD_FAULTS)))
def test_an_import_the_executor_cannot_take_is_the_payloads_fault(message: str) -> None:
    assert failed_status(payload=True, workflow_ids=())(message) == 422


@pytest.mark.parametrize("message", QUOTED_PAYLOAD_FAULTS, ids=range(len(QUOTED_PAYLOAD_FAULTS)))
def test_a_store_s_words_in_what_the_error_quotes_of_the_payload_are_the_payload_s(message: str) -> None:
    assert failed_status(payload=True, workflow_ids=())(message) == 422


@pytest.mark.parametrize("message", STORE_FAILURES, ids=range(len(STORE_FAILURES)))
def test_an_import_its_database_failed_is_a_500(message: str) -> None:
    assert failed_status(payload=True, workflow_ids=())(message) == 500


def test_an_import_of_the_wrong_shape_is_a_422_through_the_api(api: tuple[TestClient, Executor]) -> None:
    client, ex = api
    for message in PAYLOAD_FAULTS[:1] + PAYLOAD_FAULTS[4:6]:
        ex.answers["import_workflow"] = message
        r = client.post(W + "/import", json={"serializedWorkflow": "H4sIAAAAAAAA/2tgAQA="})
        assert r.status_code == 422, r.text[:300]
    ex.answers["import_workflow"] = STORE_FAILURES[2]
    assert client.post(W + "/import", json={"serializedWorkflow": "H4sI"}).status_code == 500


# --- the audit log: an id as recorded, found by the id as the executor has it ----------------------------


class AuditDb:
    """The read models' database, as the audit log route asks it: the filters it was given kept."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def action_rows(self, **kw: Any) -> list[Any]:
        self.asked.append(kw)
        return []


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_the_audit_log_s_target_filter_finds_an_id_as_it_was_recorded(name: str) -> None:
    """An action records its target ids escaped and cut (``engine.action_commands``: a tab as ``\\t``,
    5,000 characters as 255 and an ellipsis); the ``target`` filter given the id itself asks for that."""
    from relay_es.engine.action_commands import Actor, _request_fields

    wid = TEXTS[name]
    recorded = _request_fields("local", "orders", "rid", "cancelWorkflow", Actor.development(), None, "workflow",
                               [wid])["target_ids"][0]
    db = AuditDb()
    with TestClient(build_app(fake_context(db=db)), base_url="http://127.0.0.1") as client:
        for target in (wid, recorded):  # the id, or the recorded form copied from the log
            r = client.get("/v2/orgs/local/audit-logs", params={"target": target})
            assert r.status_code == 200, r.text[:300]
        r = client.get("/v2/orgs/local/audit-logs", params={"target": "a\x00b"})
        assert r.status_code == 422 and [e["location"] for e in r.json()["errors"]] == ["target"]
    assert [a["target"] for a in db.asked] == [recorded, recorded]
