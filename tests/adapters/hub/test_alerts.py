"""The alert manager's sender (:class:`relay_es.adapters.hub.alerts.AlertSender`): probes and
deliveries run on an event loop in a thread of their own, asked from the test's thread as the
alert manager asks; executor calls go to a fake ``Calls`` that records the request it would
send, webhooks to a real HTTP server on 127.0.0.1. Whatever happens, the manager hears back."""

from __future__ import annotations

import asyncio
import gc
import json
import queue
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import msgspec
import pytest

from relay_es.adapters import webhooks
from relay_es.adapters.hub.alerts import IDS_IN_ALERT, AlertSender
from relay_es.adapters.webhooks import Egress, payload
from relay_es.domain.alerting import AlertingRule, Webhook
from relay_es.engine.alerting import AlertTiming, Delivered, Delivery, Probed
from relay_es.engine.calls import ExecutorFailed, ExecutorGone, ExecutorTimedOut, NoHealthyExecutor
from relay_es.protocol import catalogue as c
from tests.adapters.test_webhooks import Receiver, verify

NOW = datetime(2026, 11, 30, 12, 0, 0, 123457, tzinfo=timezone.utc)
CALL_TIMEOUT = 7.5
SECRET = "s3cret-of-sixteen-chars-or-more"
WAIT = 3.0  # seconds an answer may take at most (they come in milliseconds)


# ------------------------------------------------------------------ fakes


@dataclass
class Call:
    org: str
    app: str
    request: Any  # what make_request("rid") built
    timeout: float
    chosen: Any
    kw: dict[str, Any]


@dataclass
class FakeCalls:
    """Stands for the hub's ``Calls``: records the request ``make_request`` builds, tells
    ``chosen`` its executor (before "sending", as the real one does, and not when there is no
    executor), then answers ``answer``, or raises it when it is an exception."""

    answer: Any = None
    executor_id: str = "exec-1"
    calls: list[Call] = field(default_factory=list)

    async def call(self, org, app, make_request, *, timeout, chosen=None, **kw):
        self.calls.append(Call(org, app, make_request("rid"), timeout, chosen, kw))
        await asyncio.sleep(0)
        if isinstance(self.answer, NoHealthyExecutor):
            raise self.answer
        if chosen is not None:
            chosen(self.executor_id)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class FakeManager:
    """Records the sender's answers, from whichever thread they come."""

    def __init__(self) -> None:
        self.answers: queue.Queue[tuple[str, Probed | Delivered, str]] = queue.Queue()

    def probed(self, answer: Probed) -> None:
        self.answers.put(("probed", answer, threading.current_thread().name))

    def delivered(self, answer: Delivered) -> None:
        self.answers.put(("delivered", answer, threading.current_thread().name))


class Harness:
    """An :class:`AlertSender` started on a loop running in a thread named ``alert-loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls = FakeCalls()
        self.manager = FakeManager()
        self.sender = AlertSender(self.calls, timeout=CALL_TIMEOUT,  # type: ignore[arg-type]
                                  egress=Egress.parse("127.0.0.0/8"))  # the receivers here are on loopback
        self.sender.manager = self.manager  # type: ignore[assignment]
        self.sender.start(loop)

    def answer(self, kind: str) -> Any:
        got, answer, thread = self.manager.answers.get(timeout=WAIT)
        assert got == kind
        assert thread == "alert-loop"  # answered from the loop, not from the asking thread
        return answer

    def probe(self, rule: AlertingRule, answer: Any, now: datetime = NOW, since: datetime | None = None) -> Probed:
        self.calls.answer = answer
        self.sender.probe(rule, now) if since is None else self.sender.probe(rule, now, since)
        return self.answer("probed")

    def deliver(self, d: Delivery, answer: Any = None) -> Delivered:
        self.calls.answer = answer
        self.sender.deliver(d)
        return self.answer("delivered")

    def nothing_more(self) -> None:
        assert self.manager.answers.empty()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, name="alert-loop", daemon=True)
    t.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    t.join(WAIT)
    loop.close()


@pytest.fixture
def h(loop) -> Iterator[Harness]:
    harness = Harness(loop)
    yield harness
    asyncio.run_coroutine_threadsafe(harness.sender.stop(), loop).result(WAIT)
    harness.nothing_more()  # one answer per question, never two


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.close()


# ------------------------------------------------------------------ builders


def failure_rule(threshold: int = 3, window: int = 600, workflow: str | None = None) -> AlertingRule:
    return AlertingRule(id="rule-wf", org="acme", app="shop", receiving_app="ops", rule_type="WorkflowFailure",
                        parameters={"workflowName": workflow, "threshold": threshold, "windowSecs": window})


def queue_rule(threshold: int = 300, queue_name: str | None = "emails") -> AlertingRule:
    return AlertingRule(id="rule-q", org="acme", app="shop", receiving_app="ops", rule_type="SlowQueue",
                        parameters={"queueName": queue_name, "thresholdSecs": threshold})


def workflows(n: int, **kw: Any) -> c.ListWorkflowsResponse:
    return c.ListWorkflowsResponse(type="list_workflows", request_id="rid",
                                   output=[c.WorkflowsOutput(WorkflowUUID=f"wf-{i}", Status="ERROR", **kw)
                                           for i in range(n)])


def queued(*rows: c.WorkflowsOutput) -> c.ListWorkflowsResponse:
    return c.ListWorkflowsResponse(type="list_queued_workflows", request_id="rid", output=list(rows))


def ms(t: datetime) -> str:
    return str(int(t.timestamp() * 1000))


def delivery(**kw: Any) -> Delivery:
    base = Delivery(org="acme", app="shop", rule_id="rule-wf", alert_id="alert-1", channel="app", attempt=1,
                    rule_type="WorkflowFailure", receiving_app="ops", message="3 workflow(s) of shop failed",
                    metadata={"failedWorkflows": "3", "workflowIds": "wf-0,wf-1,wf-2"},
                    fired_at=NOW, webhook=None)
    return replace(base, **kw)


def alert_ok() -> c.SuccessResponse:
    return c.SuccessResponse(type="alert", request_id="rid", success=True)


# ------------------------------------------------------------------ WorkflowFailure probes


def test_workflow_failure_asks_for_errored_workflows_completed_in_the_window(h):
    h.probe(failure_rule(threshold=3, window=600), workflows(0))
    [call] = h.calls.calls
    assert (call.org, call.app, call.timeout) == ("acme", "shop", CALL_TIMEOUT)
    r = call.request
    assert isinstance(r, c.ListWorkflowsRequest) and r.type == "list_workflows" and r.request_id == "rid"
    b = r.body
    assert b.status == ["ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]  # ended without its result, either way
    assert b.completed_after == "2026-11-30T11:50:00.123457+00:00"
    assert datetime.fromisoformat(b.completed_after) == NOW - timedelta(seconds=600)
    assert b.limit == 3
    assert b.load_input is False and b.load_output is False
    assert b.workflow_name is None
    assert b.sort_desc is True
    # on the wire, as the SDKs read it: every key there, the timestamp with +00:00 (never Z)
    wire = json.loads(msgspec.json.encode(r))
    assert wire["type"] == "list_workflows"
    assert wire["body"]["completed_after"].endswith("+00:00")
    assert wire["body"]["status"] == ["ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"] and wire["body"]["limit"] == 3
    assert wire["body"]["load_input"] is False and wire["body"]["load_output"] is False


def failed_at(*seconds_ago: float) -> c.ListWorkflowsResponse:
    """Failures completed so many seconds before NOW, latest first (as the probe asks for them)."""
    return c.ListWorkflowsResponse(type="list_workflows", request_id="rid", output=[
        c.WorkflowsOutput(WorkflowUUID=f"wf-{s:g}", Status="ERROR", CompletedAt=ms(NOW - timedelta(seconds=s)))
        for s in sorted(seconds_ago)])


def test_workflow_failure_looks_back_to_the_last_probe_answered_when_that_is_further(h):
    # windowSecs 10, checked every 60 s: each probe reads the failures since the start of the last one
    # answered, so none falls between two probes (it looked back 10 s only: 50 s of every minute unseen),
    # and fires on threshold failures within windowSecs of one another anywhere in that span.
    rule = failure_rule(threshold=2, window=10)
    got = h.probe(rule, failed_at(65, 58), since=NOW - timedelta(seconds=70))
    call = h.calls.calls[0]
    assert datetime.fromisoformat(call.request.body.completed_after) == NOW - timedelta(seconds=70)
    assert call.request.body.limit == 1000  # the span's failures, not the threshold's most recent
    assert got.holds and got.metadata["windowSecs"] == "10" and got.metadata["workflowIds"] == "wf-58,wf-65"
    assert got.message == "2 workflow(s) of shop failed within 10 s of one another"
    assert not h.probe(rule, failed_at(65, 50, 35, 20, 5), since=NOW - timedelta(seconds=70)).holds  # 15 s apart
    assert h.probe(rule, failed_at(65, 50, 35, 30, 5), since=NOW - timedelta(seconds=70)).holds


def test_failures_before_the_window_do_not_count_whatever_the_executor_answers(h):
    """An SDK that ignores ``completed_after`` (Python dbos 1.x and early 2.x) answers the newest
    failures of all time: those completed before the window are left out, so an application that once
    had ``threshold`` failures is not alerted on for ever (a helper's review of the probe)."""
    rule = failure_rule(threshold=2, window=600)
    assert not h.probe(rule, failed_at(86_400, 700, 30)).holds  # a day and 700 s ago: outside
    assert h.probe(rule, failed_at(86_400, 500, 30)).holds
    got = h.probe(rule, failed_at(3_600, 500, 30))
    assert got.metadata["workflowIds"] == "wf-30,wf-500" and got.metadata["failedWorkflows"] == "2"
    untimed = c.ListWorkflowsResponse(type="list_workflows", request_id="rid", output=[
        c.WorkflowsOutput(WorkflowUUID=f"wf-{i}", Status="ERROR") for i in range(2)])
    assert h.probe(rule, untimed).holds  # no time to judge by: the executor's filter is trusted


def test_workflow_failure_looks_back_its_window_at_least(h):
    h.probe(failure_rule(window=600), workflows(0), since=NOW - timedelta(seconds=60))
    h.probe(failure_rule(window=600), workflows(0), since=None)  # no probe answered yet (a new rule, a restart)
    assert [datetime.fromisoformat(c.request.body.completed_after) for c in h.calls.calls] == [
        NOW - timedelta(seconds=600)] * 2
    assert [c.request.body.limit for c in h.calls.calls] == [3, 3]  # the threshold's most recent: enough


def test_workflow_failure_names_the_rules_workflow(h):
    h.probe(failure_rule(workflow="checkout"), workflows(0))
    assert h.calls.calls[0].request.body.workflow_name == "checkout"


@pytest.mark.parametrize("rows", [0, 1, 2])
def test_fewer_failures_than_the_threshold_do_not_hold(h, rows):
    assert h.probe(failure_rule(threshold=3), workflows(rows)) == Probed("rule-wf")


def test_no_output_at_all_does_not_hold(h):
    """Go answers an empty list as null."""
    got = h.probe(failure_rule(threshold=1), c.ListWorkflowsResponse(type="list_workflows", request_id="rid"))
    assert got == Probed("rule-wf")


def test_threshold_failures_hold_with_their_count_and_ids(h):
    got = h.probe(failure_rule(threshold=3, window=600), workflows(3))
    assert got.rule_id == "rule-wf" and got.holds and got.error is None
    assert got.message == "3 workflow(s) of shop failed in the last 600 s"
    assert got.metadata == {"failedWorkflows": "3", "windowSecs": "600", "workflowName": "",
                            "workflowIds": "wf-0,wf-1,wf-2"}
    assert all(isinstance(v, str) for v in got.metadata.values())


def test_the_message_names_the_rules_workflow(h):
    got = h.probe(failure_rule(threshold=1, window=60, workflow="checkout"), workflows(2))
    assert got.holds
    assert got.message == "2 workflow(s) of checkout of shop failed in the last 60 s"
    assert got.metadata["workflowName"] == "checkout"


def test_at_most_ten_ids_are_named(h):
    got = h.probe(failure_rule(threshold=3), workflows(15))
    assert got.holds
    assert got.metadata["failedWorkflows"] == "15"
    ids = got.metadata["workflowIds"].split(",")
    assert ids == [f"wf-{i}" for i in range(IDS_IN_ALERT)] and IDS_IN_ALERT == 10


def test_executor_text_in_ids_is_escaped(h):
    resp = c.ListWorkflowsResponse(type="list_workflows", request_id="rid",
                                   output=[c.WorkflowsOutput(WorkflowUUID="evil\x1b[31m\nid")])
    got = h.probe(failure_rule(threshold=1), resp)
    assert got.holds
    assert "\x1b" not in got.metadata["workflowIds"] and "\n" not in got.metadata["workflowIds"]


# ------------------------------------------------------------------ SlowQueue probes


def test_slow_queue_asks_for_the_oldest_enqueued_workflow_created_before_the_threshold(h):
    h.probe(queue_rule(threshold=300, queue_name="emails"), queued())
    [call] = h.calls.calls
    assert (call.org, call.app, call.timeout) == ("acme", "shop", CALL_TIMEOUT)
    r = call.request
    assert isinstance(r, c.ListQueuedWorkflowsRequest) and r.type == "list_queued_workflows"
    b = r.body
    assert b.status == "ENQUEUED"
    assert b.end_time == "2026-11-30T11:55:00.123457+00:00"
    assert datetime.fromisoformat(b.end_time) == NOW - timedelta(seconds=300)
    assert b.limit == 1
    assert b.sort_desc is False  # the oldest first
    assert b.queue_name == "emails"
    assert b.load_input is False and b.load_output is False
    assert json.loads(msgspec.json.encode(r))["body"]["end_time"].endswith("+00:00")


def test_slow_queue_on_any_queue(h):
    h.probe(queue_rule(queue_name=None), queued())
    assert h.calls.calls[0].request.body.queue_name is None


def test_an_empty_queue_does_not_hold(h):
    assert h.probe(queue_rule(), queued()) == Probed("rule-q")
    assert h.probe(queue_rule(), c.ListWorkflowsResponse(type="list_queued_workflows", request_id="rid")) \
        == Probed("rule-q")


def test_a_workflow_waiting_too_long_holds_and_is_named(h):
    row = c.WorkflowsOutput(WorkflowUUID="wf-old", Status="ENQUEUED", QueueName="emails",
                            CreatedAt=ms(NOW - timedelta(seconds=1000)))
    got = h.probe(queue_rule(threshold=300), queued(row))
    assert got.holds and got.error is None
    assert "wf-old" in got.message and "'emails'" in got.message and "shop" in got.message
    assert got.message == "workflow wf-old has been ENQUEUED on queue 'emails' of shop for 1000 s (threshold 300 s)"
    assert got.metadata == {"queueName": "emails", "workflowId": "wf-old", "thresholdSecs": "300",
                            "enqueuedFor": "1000 s"}


def test_the_queue_is_the_rules_when_the_row_does_not_say(h):
    row = c.WorkflowsOutput(WorkflowUUID="wf-old", CreatedAt="not a number")
    got = h.probe(queue_rule(queue_name="emails"), queued(row))
    assert got.holds
    assert got.metadata["queueName"] == "emails"
    assert got.metadata["enqueuedFor"] == "longer than the threshold"


# ------------------------------------------------------------------ probes that fail


@pytest.mark.parametrize("error", [
    NoHealthyExecutor("acme", "shop"),
    ExecutorTimedOut("exec-1", CALL_TIMEOUT),
    ExecutorFailed("Traceback: boom"),
    ExecutorGone("exec-1", "closed"),
], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("rule", [failure_rule(), queue_rule()], ids=["WorkflowFailure", "SlowQueue"])
def test_a_failed_call_is_a_probe_error(h, rule, error):
    got = h.probe(rule, error)
    assert got == Probed(rule.id, error=str(error))
    assert not got.holds


def test_an_unexpected_exception_in_a_probe_still_answers(h, caplog):
    got = h.probe(failure_rule(), RuntimeError("boom"))
    assert got == Probed("rule-wf", error="relay: RuntimeError")
    assert "rule-wf" in caplog.text


def test_a_malformed_rule_still_answers(h):
    broken = replace(failure_rule(), parameters={})  # no threshold: KeyError before any call
    assert h.probe(broken, workflows(1)) == Probed("rule-wf", error="relay: KeyError")
    assert h.calls.calls == []


def test_a_rule_type_that_is_not_polled_is_an_error(h):
    rule = AlertingRule(id="rule-d", org="acme", app="shop", receiving_app="ops", rule_type="ExecutorDead")
    got = h.probe(rule, workflows(1))
    assert got == Probed("rule-d", error="ExecutorDead is not a checked rule")
    assert h.calls.calls == []


def test_probes_run_concurrently_each_answered_once(h):
    h.calls.answer = workflows(3)
    rules = [replace(failure_rule(), id=f"rule-{i}") for i in range(5)]
    for r in rules:
        h.sender.probe(r, NOW)
    got = sorted((h.answer("probed") for _ in rules), key=lambda p: p.rule_id)
    assert [p.rule_id for p in got] == [r.id for r in rules]
    assert all(p.holds for p in got)


# ------------------------------------------------------------------ deliveries to the receiving app


def test_delivery_to_the_app_sends_the_alert_message(h):
    d = delivery()
    got = h.deliver(d, alert_ok())
    assert got == Delivered(d, True, "executor exec-1 handled it", True) and got.ok
    [call] = h.calls.calls
    assert (call.org, call.app, call.timeout) == ("acme", "ops", CALL_TIMEOUT)  # the receiving app
    r = call.request
    assert isinstance(r, c.AlertRequest)
    assert r.type == "alert" and r.request_id == "rid"
    assert r.name == "WorkflowFailure"
    assert r.message == "3 workflow(s) of shop failed"
    assert r.metadata == {"failedWorkflows": "3", "workflowIds": "wf-0,wf-1,wf-2"}
    assert type(r.metadata) is dict and all(isinstance(v, str) for v in r.metadata.values())
    assert r.metadata is not d.metadata  # a copy: the request never shares the manager's dict
    assert json.loads(msgspec.json.encode(r)) == {
        "type": "alert", "request_id": "rid", "name": "WorkflowFailure", "message": "3 workflow(s) of shop failed",
        "metadata": {"failedWorkflows": "3", "workflowIds": "wf-0,wf-1,wf-2"}}
    assert call.chosen is not None  # it learns which executor took it


def test_no_healthy_executor_is_a_failure_worth_retrying(h):
    d = delivery()
    got = h.deliver(d, NoHealthyExecutor("acme", "ops"))
    assert not got.ok and got.retry
    assert got.delivery == d
    assert got.detail == "application ops has no HEALTHY executor"


def test_an_executor_error_is_a_failure_worth_retrying_naming_the_executor(h):
    got = h.deliver(delivery(), ExecutorFailed("alert handler raised ValueError"))
    assert not got.ok and got.retry
    assert got.detail == "executor exec-1: alert handler raised ValueError"


def test_an_executor_timeout_is_a_failure_worth_retrying(h):
    got = h.deliver(delivery(), ExecutorTimedOut("exec-1", CALL_TIMEOUT))
    assert not got.ok and got.retry
    assert got.detail.startswith("executor exec-1: ")


def test_an_unexpected_exception_in_a_delivery_still_answers(h, caplog):
    d = delivery()
    got = h.deliver(d, RuntimeError("boom"))
    assert got.delivery == d
    assert not got.ok
    assert got.detail == "relay: RuntimeError"
    assert "alert-1" in caplog.text


# ------------------------------------------------------------------ deliveries to a webhook


def test_delivery_to_a_webhook_posts_the_signed_alert(h, receiver):
    d = delivery(channel="webhook:0", attempt=2, webhook=Webhook(receiver.url("/status/204"), "json", SECRET))
    got = h.deliver(d)
    assert got == Delivered(d, True, "HTTP 204", False)
    assert h.calls.calls == []  # no executor involved
    [r] = receiver.requests
    assert r.method == "POST" and r.path == "/status/204"
    assert json.loads(r.body) == payload(d)
    assert r.headers["x-relay-alert-id"] == "alert-1"
    assert r.headers["x-relay-delivery-attempt"] == "2"
    assert verify(SECRET, r.headers["x-relay-signature"], r.body)


def test_a_webhook_answering_500_is_a_failure_worth_retrying(h, receiver):
    d = delivery(channel="webhook:0", webhook=Webhook(receiver.url("/status/500"), "json", SECRET))
    got = h.deliver(d)
    assert got == Delivered(d, False, "HTTP 500", True)
    assert len(receiver.requests) == 1


def test_a_webhook_answering_404_is_a_final_failure(h, receiver):
    d = delivery(channel="webhook:0", webhook=Webhook(receiver.url("/status/404")))
    assert h.deliver(d) == Delivered(d, False, "HTTP 404", False)


def test_a_webhook_redirect_is_not_followed(h, receiver):
    d = delivery(channel="webhook:0", webhook=Webhook(receiver.url("/redirect")))
    assert h.deliver(d) == Delivered(d, False, "HTTP 302", False)
    assert receiver.to("/target") == []


def test_a_slack_webhook_gets_slacks_body(h, receiver):
    d = delivery(channel="webhook:1", message="a < b", webhook=Webhook(receiver.url("/status/200"), "slack"))
    assert h.deliver(d).ok
    [r] = receiver.requests
    assert json.loads(r.body) == {"text": "*WorkflowFailure* on `acme/shop`: a &lt; b"}


def test_the_webhook_client_is_shared_across_deliveries(h, receiver):
    hook = Webhook(receiver.url("/status/200"), "json", SECRET)
    for i in range(3):
        assert h.deliver(delivery(channel="webhook:0", attempt=i + 1, webhook=hook)).ok
    client = h.sender._client
    assert client is not None and not client.is_closed
    assert client.follow_redirects is False and client.trust_env is False
    assert [r.headers["x-relay-delivery-attempt"] for r in receiver.requests] == ["1", "2", "3"]


def test_webhook_posts_at_once_are_bounded_and_each_is_sent_before_its_clock_runs(h, receiver, monkeypatch):
    """More attempts than httpx's pool (100) to a receiver that never answers: those past the pool waited in
    it with their clock running and were answered "no answer" without ever being sent (a helper's
    t_starve.py), and on the event loop httpcore's queue cost O(queue) at every event. At most
    ``in_flight`` posts run at once now, with as many connections, and an attempt's clock starts once it
    holds a slot: every one reaches the receiver."""
    monkeypatch.setattr(webhooks, "TIMEOUT", 0.5)
    active = peak = 0
    real = webhooks.post

    async def counting(*args: Any, **kw: Any) -> Any:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await real(*args, **kw)
        finally:
            active -= 1

    monkeypatch.setattr(webhooks, "post", counting)
    n = 110
    for i in range(n):
        h.sender.deliver(delivery(channel="webhook:0", alert_id=f"alert-{i}", webhook=Webhook(receiver.url("/hang"))))
    answers = [h.answer("delivered") for _ in range(n)]
    assert {a.detail for a in answers} == {"no answer within 0.5s"}
    assert peak <= 32, peak  # AlertTiming.max_in_flight
    assert len(receiver.to("/hang")) == n  # each was sent: none ran out of time waiting for a connection
    assert peak == AlertTiming.max_in_flight == h.sender.in_flight == 32


# ------------------------------------------------------------------ webhook hosts whose lookup hangs


class HungDns:
    """Stands for ``socket.getaddrinfo``: a name under ``.hung.test`` is looked up until :attr:`release`
    (then fails, as a resolver giving up on servers that never answer); ``good.test`` at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: queue.Queue[str] = queue.Queue()

    def __call__(self, host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        if host.endswith(".hung.test"):
            self.started.put(host)
            self.release.wait()
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if host == "good.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.fixture
def hung_dns(h, monkeypatch) -> Iterator[HungDns]:
    dns = HungDns()
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    h.sender._client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204)))
    yield dns
    dns.release.set()


def test_hung_lookups_do_not_hold_up_another_hosts_webhook(h, hung_dns):
    """The loop's resolver threads (uvloop's: libuv's 4, as here) ran every lookup: 4 webhook hosts whose
    DNS never answers held them, and a webhook to a receiver that answers was never resolved (a helper's
    dnsstarve.py). The sender resolves in threads of its own, one for each post at once: with all but one
    of its slots held by hung lookups, the last still reaches its receiver."""
    h.loop.set_default_executor(ThreadPoolExecutor(4))
    hung = [delivery(channel="webhook:0", alert_id=f"alert-{i}", webhook=Webhook(f"https://h{i}.hung.test/x"))
            for i in range(h.sender.in_flight - 1)]
    for d in hung:
        h.sender.deliver(d)
    assert {hung_dns.started.get(timeout=WAIT) for _ in hung} == {f"h{i}.hung.test" for i in range(len(hung))}
    good = delivery(channel="webhook:1", webhook=Webhook("https://good.test/x"))
    h.sender.deliver(good)
    assert h.answer("delivered") == Delivered(good, True, "HTTP 204", False)
    hung_dns.release.set()
    answers = [h.answer("delivered") for _ in hung]
    assert {(a.ok, a.detail, a.retry) for a in answers} == {(False, "could not resolve the webhook's host", True)}


def test_a_hung_lookup_keeps_its_slot_until_it_returns(h, hung_dns, monkeypatch, caplog):
    """Its attempt's time is up, but its thread is not free: the manager hears of the attempt (and frees
    its slot, to the receiver's next attempt) only once the lookup has returned, so a host whose DNS
    hangs takes turns like a receiver that hangs instead of piling lookups up."""
    monkeypatch.setattr(webhooks, "TIMEOUT", 0)  # the attempt's time is up at its first wait
    d = delivery(channel="webhook:0", webhook=Webhook("https://h0.hung.test/x"))
    h.sender.deliver(d)
    assert hung_dns.started.get(timeout=WAIT) == "h0.hung.test"

    async def turns() -> None:  # the time-out (at once: call_soon) fires and is handled within a few
        for _ in range(50):
            await asyncio.sleep(0)

    asyncio.run_coroutine_threadsafe(turns(), h.loop).result(WAIT)
    h.nothing_more()
    hung_dns.release.set()
    assert h.answer("delivered") == Delivered(d, False, "no answer within 0s", True)
    gc.collect()
    assert "never retrieved" not in caplog.text  # the lookup's error, come after the attempt's end, is taken
