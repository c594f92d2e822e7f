"""The route helper: a read asks one executor, an action is recorded before and after, and
each way a call can fail becomes its problem."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from litestar import Litestar, Request, get, post
from litestar.params import FromPath
from litestar.testing import TestClient

from relay_es.adapters.hub.calls import ReplyTooLarge
from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import models
from relay_es.adapters.rest.conductor.mapping import ExecutorReplyError
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.problems import EXCEPTION_HANDLERS
from relay_es.engine.calls import ExecutorFailed, ExecutorGone, ExecutorTimedOut, NoHealthyExecutor, ReplyRefused
from tests.adapters.rest.fakes import fake_context


class FakeRelay:
    def __init__(self) -> None:
        self.apps = {("local", "shop")}
        self.requested: list[dict[str, Any]] = []
        self.completed: list[dict[str, Any]] = []

    def app_exists(self, org: str, app: str) -> bool:
        return (org, app) in self.apps

    def record_action_requested(self, org: str, app: str, **kw: Any) -> Any:
        self.requested.append(dict(org=org, app=app, **kw))
        return uuid4()

    def record_action_completed(self, action_id: Any, **kw: Any) -> bool:
        self.completed.append(kw)
        return True


class Req(dict):  # type: ignore[type-arg]
    """A request as the catalogue's: it has a ``type``."""

    type = "get_queue"


class FakeCalls:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.sent: list[Any] = []

    async def call(self, org: str, app: str, make_request: Any, *, timeout: float, prefer_latest: bool = False,
                   latest_version: str | None = None, chosen: Any = None, only_executor: str | None = None) -> Any:
        if chosen is not None:
            chosen("e7")
        self.sent.append((make_request("rid-1"), timeout, prefer_latest))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@get("/read/{app:str}")
async def read(ctx: Context, app: FromPath[str]) -> dict[str, Any]:
    answer = await calling.ask(ctx, "local", app, lambda rid: Req(rid=rid),
                               failed_status=calling.not_found_or(500))
    return {"answer": answer}


@post("/act/{app:str}", status_code=200, opt=openapi.body(models.CancelWorkflowInputBody, required=False))
async def act(ctx: Context, request: Request[Any, Any, Any], app: FromPath[str]) -> dict[str, Any]:
    b = await calling.body(request)
    answer = await calling.act(ctx, request, "local", app, operation="cancelWorkflow", target_type="workflow",
                               target_ids=["wf-1"], parameters={"body": b is not None},
                               make_request=lambda rid: Req(rid=rid), result=lambda a: {"n": a})
    return {"answer": answer}


def client(calls: Any, relay: FakeRelay) -> TestClient[Litestar]:
    ctx: RestContext = fake_context(relay=relay, calls=calls)
    from litestar.di import Provide
    app = Litestar([read, act], dependencies={"ctx": Provide(lambda: ctx, use_cache=True, sync_to_thread=False)},
                   exception_handlers={**EXCEPTION_HANDLERS, **calling.EXCEPTION_HANDLERS})
    return TestClient(app)


def test_a_read_returns_the_executors_answer_within_the_call_timeout() -> None:
    calls = FakeCalls(7)
    with client(calls, FakeRelay()) as c:
        r = c.get("/read/shop")
    assert r.status_code == 200 and r.json() == {"answer": 7}
    assert calls.sent == [({"rid": "rid-1"}, 20.0, False)]


def test_an_unknown_application_is_404_and_nothing_is_sent() -> None:
    calls = FakeCalls(7)
    with client(calls, FakeRelay()) as c:
        r = c.get("/read/nope")
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
    assert calls.sent == []


def test_the_autoscaling_routes_executor_calls_do_not_read_the_application_again(monkeypatch) -> None:
    import asyncio

    from relay_es.adapters.rest import autoscaling

    asked: list[dict[str, Any]] = []

    async def ask(ctx: Any, org: str, app: str, make_request: Any, **kw: Any) -> Any:
        asked.append(kw)

    monkeypatch.setattr(calling, "ask", ask)
    asyncio.run(autoscaling._ask(fake_context(), "local", "shop", Req(rid="r")))
    assert asked == [{"failed_status": 500, "app_checked": True, "only_executor": None}]  # after _policy, which read it


def test_a_route_that_read_the_application_already_does_not_read_it_again() -> None:
    """getAutoscale asks an executor three times after reading the policy from the application's
    stream: one read of it, not four."""
    import asyncio

    read: list[tuple[str, str]] = []

    class Counting(FakeRelay):
        def app_exists(self, org: str, app: str) -> bool:
            read.append((org, app))
            return super().app_exists(org, app)

    ctx = fake_context(relay=Counting(), calls=FakeCalls({"ok": 1}))
    assert asyncio.run(calling.ask(ctx, "local", "shop", lambda rid: Req(rid=rid))) == {"ok": 1}
    assert read == [("local", "shop")]
    assert asyncio.run(calling.ask(ctx, "local", "shop", lambda rid: Req(rid=rid), app_checked=True)) == {"ok": 1}
    assert read == [("local", "shop")]


@pytest.mark.parametrize("failure,status,title", [
    (NoHealthyExecutor("local", "shop"), 503, "no healthy executor"),
    (ExecutorTimedOut("e1", 20), 504, "executor did not answer"),
    (ExecutorGone("e1", "closed 1006"), 502, "executor disconnected"),
    (ReplyRefused("e1", "not a list"), 502, "executor reply refused"),
    (ReplyTooLarge("e1", 128 * 1024 * 1024), 502, "executor reply too large"),
    (ExecutorFailed("workflow wf-9 does not exist"), 404, "executor reported an error"),
    (ExecutorFailed("database is down"), 500, "executor reported an error"),
    # the executor's database, not the workflow: "does not exist" in it is no 404
    (ExecutorFailed('psycopg.errors.UndefinedTable: relation "dbos.workflow_queue" does not exist'), 500,
     "executor reported an error"),
    (ExecutorFailed('FATAL:  database "shop_dbos_sys" does not exist'), 500, "executor reported an error"),
    (ExecutorFailed("Unknown message type"), 501, "not supported by the executor"),
    (ExecutorReplyError("CreatedAt", "not a number"), 502, "executor reply refused"),
])
def test_each_failure_is_its_problem(failure: Exception, status: int, title: str) -> None:
    with client(FakeCalls(failure), FakeRelay()) as c:
        r = c.get("/read/shop")
    assert r.status_code == status, r.text
    body = r.json()
    assert body["title"] == title and body["status"] == status and body["detail"]
    assert (r.headers.get("retry-after") == "5") == (status == 503)


PYTHON_NO_WORKFLOW = ('Exception occurred while resuming workflow wf-9: Traceback (most recent call last):\n'
                      '  File "/app/.venv/lib/python3.12/site-packages/dbos/_conductor/conductor.py", line 140\n'
                      'dbos._error.DBOSNonExistentWorkflowError: Non-existent target workflow ID: wf-9\n')


@pytest.mark.parametrize("said", [PYTHON_NO_WORKFLOW, PYTHON_NO_WORKFLOW.replace(
    "line 140\n", "line 140\n" + '  File "/deep/frame.py", line 1, in f\n' * 400)], ids=["traceback", "long-traceback"])
def test_a_route_naming_its_workflow_reads_the_executor_s_text_as_sent(said: str) -> None:
    """Python dbos 3.2.0 ends its traceback with the exception's line and a newline, which the
    problem's detail shows escaped (``\\u000a``): read there, the id named was ``wf-9\\u000a``, not
    the route's, and a missing workflow was a 500 with a traceback (a helper's real-SDK hunt). A
    traceback longer than the detail shows is read to its end all the same."""
    import asyncio

    from relay_es.adapters.rest.calling import ExecutorProblem

    ctx = fake_context(relay=FakeRelay(), calls=FakeCalls(ExecutorFailed(said)))
    with pytest.raises(ExecutorProblem) as e:
        asyncio.run(calling.ask(ctx, "local", "shop", lambda rid: Req(rid=rid),
                                failed_status=calling.not_found_or(500, ["wf-9"])))
    assert e.value.status == 404 and "\n" not in e.value.detail  # shown escaped, read as sent


def test_no_hub_is_no_healthy_executor() -> None:
    with client(None, FakeRelay()) as c:
        assert c.get("/read/shop").status_code == 503


@pytest.mark.parametrize("failure,outcome", [
    (None, "succeeded"),
    (NoHealthyExecutor("local", "shop"), "no_healthy_executor"),
    (ExecutorTimedOut("e1", 20), "timed_out"),
    (ExecutorFailed("boom"), "failed"),
    (ExecutorGone("e1"), "unknown"),  # it may have acted before it went
    (ReplyTooLarge("e1", 1024), "unknown"),  # a reply over the cap on its socket: it may have acted
])
def test_an_action_is_recorded_before_it_is_sent_and_completed_however_it_ends(failure: Any, outcome: str) -> None:
    relay = FakeRelay()
    with client(FakeCalls(failure if failure is not None else 3), relay) as c:
        r = c.post("/act/shop")
    assert (r.status_code == 200) == (failure is None)
    [req] = relay.requested
    assert req["operation"] == "cancelWorkflow" and req["target_ids"] == ["wf-1"]
    assert req["actor"].kind == "user" and req["source"] and req["parameters"] == {"body": False}
    [done] = relay.completed
    assert str(done["outcome"]) == outcome
    assert done["result"] == ({"n": 3} if failure is None else None)
    if failure is None or isinstance(failure, ExecutorFailed):
        assert done["executor_id"] == "e7"  # the executor the request went to
    if isinstance(failure, (ExecutorTimedOut, ExecutorGone, ReplyTooLarge)):
        assert done["executor_id"] == "e1"
    if str(done["outcome"]) == "unknown":  # the client is told as the log says
        assert r.json()["detail"] == done["message"] and "may have carried the action out" in done["message"]


class AwayOnCompletion(FakeRelay):
    def record_action_completed(self, action_id: Any, **kw: Any) -> bool:
        self.completed.append(kw)  # tried
        raise OSError("the store went away")


@pytest.mark.parametrize("failure,status", [(None, 200), (NoHealthyExecutor("local", "shop"), 503),
                                            (ExecutorTimedOut("e1", 20), 504)])
def test_an_action_whose_end_cannot_be_written_is_still_answered_as_it_ended(
        failure: Any, status: int) -> None:
    """What the executor did (or the refusal it met) is the answer whether or not the action's end
    can be written: a 500 instead would hide a change that happened, and a client retrying a fork
    or a trigger would make it twice. The action stays pending, logged."""
    relay = AwayOnCompletion()
    with client(FakeCalls(failure if failure is not None else 3), relay) as c:
        r = c.post("/act/shop")
    assert r.status_code == status, r.text
    assert len(relay.requested) == 1 and len(relay.completed) == 1  # its end was tried, once


def test_an_action_on_an_unknown_application_records_nothing() -> None:
    relay = FakeRelay()
    with client(FakeCalls(1), relay) as c:
        assert c.post("/act/nope").status_code == 404
    assert relay.requested == [] and relay.completed == []


@pytest.mark.parametrize("raw,status", [
    (b'{"unknown": 1}', 422),
    (b'{"cancelChildren": tru', 400),
    (b"[" * 5000 + b"]" * 5000, 422),
])
def test_a_bad_body_is_refused_and_nothing_is_recorded(raw: bytes, status: int) -> None:
    relay = FakeRelay()
    with client(FakeCalls(1), relay) as c:
        r = c.post("/act/shop", content=raw)
    assert r.status_code == status, r.text
    assert relay.requested == []


def test_a_latest_version_answer_older_than_a_change_made_meanwhile_is_not_kept() -> None:
    """A resume asks the registry which version is latest; while the answer is on its way the user
    makes v2 latest (setLatestAppVersion, done). The answer read before the change (v1) must not
    stand in the cache for 30 s: the next resume asks again and goes to v2."""
    import asyncio

    from relay_es.protocol import catalogue as c

    def versions(latest: str) -> Any:
        return c.ListApplicationVersionsResponse(type="list_application_versions", request_id="r", output=[
            c.ApplicationVersionOutput(version_id=v, version_name=v, version_timestamp=1 if v != latest else 2,
                                       created_at=1) for v in ("v1", "v2")])

    class SlowRegistry:
        def __init__(self) -> None:
            self.latest, self.asked = "v1", 0
            self.gate: asyncio.Event | None = None

        async def call(self, org: str, app: str, make_request: Any, **kw: Any) -> Any:
            self.asked += 1
            answer = versions(self.latest)  # read now, delivered later
            if self.gate is not None:
                await self.gate.wait()
            return answer

    async def go() -> None:
        reg = SlowRegistry()
        ctx: RestContext = fake_context(relay=FakeRelay(), calls=reg)
        reg.gate = asyncio.Event()
        first = asyncio.create_task(calling.latest_version(ctx, "local", "shop"))
        await asyncio.sleep(0)
        assert reg.asked == 1
        reg.latest = "v2"  # setLatestAppVersion reached the executor...
        calling.latest_changed(ctx, "local", "shop")  # ...and the route says so
        reg.gate.set()
        assert await first == "v1"  # its own answer: asked before the change
        reg.gate = None
        assert await calling.latest_version(ctx, "local", "shop") == "v2"  # asked again, not the stale v1
        assert reg.asked == 2
        assert await calling.latest_version(ctx, "local", "shop") == "v2" and reg.asked == 2  # kept now
        # nor is an answer kept that was asked for before the application was deleted
        ctx.latest_versions.clear()
        ctx.latest_changes.clear()  # never made latest here: no count of its own to tell the deletion by
        reg.gate = asyncio.Event()
        before = asyncio.create_task(calling.latest_version(ctx, "local", "shop"))
        await asyncio.sleep(0)
        calling.app_gone(ctx, "local", "shop")
        reg.gate.set()
        assert await before == "v2" and not ctx.latest_versions and not ctx.latest_changes

    asyncio.run(go())


# --- what an executor's message says -----------------------------------------------------------

# The executor's database or infrastructure failing, in the words Postgres, its drivers and the SDKs'
# context put around them: none is an SDK saying it has no such workflow or schedule.
DATABASE_ERRORS = [
    'relation "dbos.workflow_queue" does not exist',
    'psycopg.errors.UndefinedTable: relation "dbos.workflow_status" does not exist\nLINE 1: SELECT ...',
    'connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  database "shop_dbos_sys" does not exist',
    "psycopg.errors.UndefinedFunction: function json_not_found() does not exist",
    'psycopg.errors.UndefinedColumn: column "workflow_uuid" does not exist',
    "Exception encountered when cancelling workflow wf-1: Traceback (most recent call last):\n"
    '  File "dbos/_sys_db.py", line 9, in cancel_workflow\n'
    'psycopg.errors.UndefinedTable: relation "dbos.workflow_status" does not exist',
    "Error: getaddrinfo ENOTFOUND db.internal",
    "sqlite3.OperationalError: no such table: workflow_status",
    "schema \"dbos\" does not exist",
    "Exception encountered when triggering schedule tick: role \"dbos\" does not exist",
]


@pytest.mark.parametrize("message", DATABASE_ERRORS)
def test_a_database_error_is_no_such_workflow_or_schedule(message: str) -> None:
    assert not calling.no_such_workflow(message, ["wf-1"])
    assert not calling.no_such_workflow(message)  # a route that cannot name the ids
    assert not calling.no_such_schedule(message, "tick")
    assert calling.not_found_or(500, ["wf-1"])(message) == 500
    assert calling.schedule_not_found_or(500, "tick")(message) == 500
    assert calling.refused_or(500)(message) == 500


@pytest.mark.parametrize("message", [
    "Workflow wf-1 does not exist",  # TypeScript
    "Exception encountered when forking workflow wf-1: DBOSNonExistentWorkflowError: Workflow wf-1 does not exist",
    "Exception encountered when resuming workflow wf-1: Traceback (most recent call last):\n  File \"x.py\", "
    "line 1, in f\ndbos._error.DBOSNonExistentWorkflowError: DBOS Error 5: Non-existent target workflow ID: wf-1\n",
    "DBOS Error 5: Sent to non-existent destination workflow ID: wf-1",  # Python before 2.x
    "Sent to non-existent destination workflow UUID: wf-1",  # TypeScript 1.x
    "Workflow does not exist wf-1",  # Java
    # metadata-only mode names the class and withholds the rest (the id too)
    "Exception encountered when resuming workflow(s) ['wf-1']: DBOSNonExistentWorkflowError (details withheld "
    "in metadata-only mode)",
])
def test_an_sdk_saying_it_has_no_such_workflow_is_a_404_for_that_workflow_only(message: str) -> None:
    assert calling.no_such_workflow(message, ["wf-1"]) and calling.no_such_workflow(message, {"a", "wf-1"})
    assert calling.no_such_workflow(message)  # an id without spaces, where the route cannot name them
    assert calling.not_found_or(500, ["wf-1"])(message) == 404
    if "withheld" not in message:
        assert not calling.no_such_workflow(message, ["wf-10"]) and not calling.no_such_workflow(message, ["wf"])
        assert calling.not_found_or(500, ["wf-2"])(message) == 500  # another workflow: a child, a fork's original
    assert calling.refused_or(500)(message) == 500  # a list, or a thing the executor answers as null: never 404


def test_a_workflow_id_is_matched_exactly_spaces_and_all() -> None:
    message = "Exception encountered when forking workflow a b: Workflow a b does not exist"
    assert calling.no_such_workflow(message, ["a b"]) and not calling.no_such_workflow(message, ["b"])
    assert not calling.no_such_workflow(message)  # unnamed, only an id without spaces is taken for one
    # the words around the id are the SDK's, not a name in quotes that ends with them
    assert not calling.no_such_workflow('Exception encountered when listing steps of workflow wf-1: relation '
                                        '"workflow wf-1" does not exist', ["wf-1"])
    assert calling.no_such_workflow("Non-existent target workflow ID: Wf-1", ["Wf-1"])
    assert not calling.no_such_workflow("Non-existent target workflow ID: Wf-1", ["wf-1"])  # ids are exact


@pytest.mark.parametrize("message", [
    "Exception encountered when resuming workflow(s) a-1,a-2: Workflow a-1, a-2 does not exist",  # TypeScript
    "Exception encountered when resuming workflow(s) ['a-1', 'a-2']: Traceback (most recent call last):\n"
    "dbos._error.DBOSNonExistentWorkflowError: DBOS Error 5: Non-existent target workflow ID: a-1, a-2\n",  # Python
])
def test_a_bulk_action_naming_several_missing_workflows_is_a_404_when_each_is_named(message: str) -> None:
    """Both SDKs name every missing workflow of a bulk action together, ", " between them (TypeScript
    5.2.11, Python dbos 3.2.0): a bulk resume of two unknown workflows was a 500."""
    assert calling.no_such_workflow(message, ["a-1", "a-2"]) and calling.no_such_workflow(message, {"a-2", "a-1", "b"})
    assert calling.not_found_or(500, ["a-1", "a-2"])(message) == 404
    assert calling.no_such_workflow(message)  # ids without spaces, where the route cannot name them
    assert not calling.no_such_workflow(message, ["a-1"])  # a-2 is not the route's
    assert not calling.no_such_workflow(message, ["a-1, a"]) and not calling.no_such_workflow(message, ["a-"])
    # an id holding ", " itself, missing alone
    assert calling.no_such_workflow("Workflow a, b does not exist", ["a, b"])


@pytest.mark.parametrize("wid", ["a\nb", "wf-1 ", "x\n"])
def test_a_workflow_id_with_a_line_break_or_a_trailing_space_is_matched_whole(wid: str) -> None:
    for message in (f"Exception encountered when getting workflow {wid}: Workflow {wid} does not exist",
                    f"Traceback (most recent call last):\ndbos._error.DBOSNonExistentWorkflowError: DBOS Error 5: "
                    f"Non-existent target workflow ID: {wid}\n",
                    f"Workflow does not exist {wid}"):
        assert calling.no_such_workflow(message, [wid]), message
        assert calling.not_found_or(500, ["other", wid])(message) == 404
        assert not calling.no_such_workflow(message, [wid + "x"]) and not calling.no_such_workflow(message, ["b"])
    assert not calling.no_such_workflow(f"Non-existent target workflow ID: {wid}x", [wid])


@pytest.mark.parametrize("message,name,found", [
    ("Exception: Schedule 'tick' does not exist", "tick", True),  # Python
    ('Error: Schedule "tick" not found', "tick", True),  # TypeScript
    ("Schedule 'tick' does not exist", "tic", False),
    ("Schedule 'tick' does not exist", "tick2", False),
    ('Schedule "a b" not found', "a b", True),
])
def test_an_sdk_saying_it_has_no_such_schedule_names_it(message: str, name: str, found: bool) -> None:
    assert calling.no_such_schedule(message, name) is found
    assert calling.schedule_not_found_or(500, name)(message) == (404 if found else 500)


def test_the_metadata_only_refusal_is_a_403_on_every_route() -> None:
    message = "get_workflow_events is not allowed in conductor metadata-only mode"
    assert calling.refused_or(500)(message) == 403
    assert calling.not_found_or(500, ["wf-1"])(message) == 403
    assert calling.schedule_not_found_or(500, "tick")(message) == 403
