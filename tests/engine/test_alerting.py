"""The alert manager (``relay_es/engine/alerting.py``) on a fake clock with a fake sender, beside
a real process manager (the executor events it is told of come from real commands), on the
in-memory, SQLite and Postgres stores. No sockets, no sleeps.

What is shown: each rule type fires from what it watches and only then; a rule fires at most
once per ``minIntervalSecs``, also through a restart; delivery follows the recorded alert on
every channel, retried with backoff up to the attempt limit, every attempt recorded; a final
refusal is not retried; an unfinished delivery is resumed by the next Relay; a deleted rule
stops being checked and its webhooks are not posted to.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from datetime import timedelta
from typing import Any

import pytest

from relay_es.aggregates.alert import AlertFirings, firings_stream_id
from relay_es.aggregates.application import app_stream_id
from relay_es.domain.alerting import AlertingRule, key_scope
from relay_es.engine.alerting import ALERT_TOPICS, AlertManager, AlertTiming, Delivered, Delivery, Probed
from tests.support import World

TIMING = AlertTiming(check_interval=10.0, retry_base=2.0, retry_max=8.0, max_attempts=4, lost_after=30.0)


class FakeSender:
    def __init__(self) -> None:
        self.probes: list[tuple[AlertingRule, Any]] = []
        self.since: list[Any] = []  # each probe's: where a WorkflowFailure probe looks back to at least
        self.deliveries: list[Delivery] = []

    def probe(self, rule: AlertingRule, now: Any, since: Any = None) -> None:
        self.probes.append((rule, now))
        self.since.append(since)

    def deliver(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)

    def take(self) -> list[Delivery]:
        out, self.deliveries = self.deliveries, []
        return out


class AlertWorld:
    """A :class:`World` with an alert manager stepped after its process manager, as the runtime does."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.clock = world.clock
        self.relay = world.relay
        world.relay.register_app("local", "ops")
        self._new_manager()

    def _new_manager(self) -> None:
        self.sender = FakeSender()
        self.alerts = AlertManager(self.w.relay, self.clock, self.sender, healthy=self.w.pm.has_healthy,
                                   untried=self.w.pm.untried_candidates, timing=TIMING)
        self.w.pm.on_event = self.alerts.executor_event
        self.alerts.start()
        self.w.steppers.append(self.alerts)  # the world's own actions step it too, as the runtime does
        self.sync()

    def sync(self) -> None:
        self.w.sync()

    def advance(self, seconds: float) -> None:
        self.w.advance(seconds)

    def restart(self, down_for: float = 0.0) -> None:
        self.w.steppers.remove(self.alerts)  # the old alert manager is gone with its Relay
        self.w.restart(down_for=down_for)
        self.relay = self.w.relay
        self._new_manager()

    def rule(self, rule_type: str, metadata: dict[str, Any] | None = None, *, interval: int = 60,
             receiver: str | None = "ops") -> AlertingRule:
        rule = self.relay.create_alerting_rule("local", "app", rule_type=rule_type, metadata=metadata or {},
                                               min_interval_secs=interval, receiving_app=receiver)
        self.sync()
        return rule

    def fired(self, rule: AlertingRule) -> list[Any]:
        return [e for e in self.relay.stream(firings_stream_id("local", "app", rule.id))
                if isinstance(e, AlertFirings.Fired)]

    def attempts(self, rule: AlertingRule) -> list[tuple[str, int, bool, bool]]:
        return [(e.channel, e.attempt, e.ok, e.final) for e in self.relay.stream(firings_stream_id("local", "app", rule.id))
                if isinstance(e, AlertFirings.DeliveryAttempted)]

    def answer(self, d: Delivery, ok: bool = True, *, retry: bool = True, detail: str = "done") -> None:
        self.alerts.delivered(Delivered(d, ok, detail, retry))
        self.sync()


def _world(request: pytest.FixtureRequest, clock: Any, tmp_path: Any) -> World:
    if request.param == "memory":
        url = None
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/relay.db"
    else:
        url = request.getfixturevalue("postgres_url")
    return World(clock, url, grace=10)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def aw(request: pytest.FixtureRequest, clock, tmp_path):
    w = _world(request, clock, tmp_path)
    yield AlertWorld(w)
    w.close()


@pytest.fixture
def in_memory(clock):
    """On the in-memory store alone: for what only the alert manager's own memory decides (a storm's
    thousand records would take seconds on the others)."""
    w = World(clock, None, grace=10)
    yield AlertWorld(w)
    w.close()


@pytest.fixture(params=["sqlite", "postgres"])
def stored(request: pytest.FixtureRequest, clock, tmp_path):
    """On a store that outlives its Relay (a restart)."""
    w = _world(request, clock, tmp_path)
    yield AlertWorld(w)
    w.close()


def test_executor_dead_fires_once_and_is_delivered_to_the_receiving_app(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead")
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(9.9)
    assert aw.fired(rule) == []
    aw.advance(0.2)  # A is declared dead
    (alert,) = aw.fired(rule)
    assert alert.rule_type == "ExecutorDead" and alert.receiving_app == "ops" and alert.channels == ["app"]
    assert "A" in alert.message and alert.metadata["executorId"] == "A" and alert.metadata["ruleId"] == rule.id
    (d,) = aw.sender.take()
    assert (d.channel, d.attempt, d.receiving_app, d.alert_id) == ("app", 1, "ops", alert.alert_id)
    aw.answer(d)
    assert aw.attempts(rule) == [("app", 1, True, True)]
    assert aw.relay.alerting_rules("local", "app")[0][1] == alert.timestamp  # lastFiredAt


def test_a_rule_fires_at_most_once_per_interval_and_again_after_it(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=60)
    for name in "ABC":
        aw.w.connect(name)
    aw.w.drop("A")
    aw.advance(10.1)
    aw.w.drop("B")
    aw.advance(10.1)  # B dead 20 s after the first alert: inside the interval
    assert len(aw.fired(rule)) == 1
    assert aw.alerts.stats.suppressed == 1
    aw.advance(40)
    aw.w.drop("C")
    aw.advance(10.1)  # 60.3 s after the first: fires again
    assert len(aw.fired(rule)) == 2


def test_the_interval_holds_through_a_restart(stored: AlertWorld) -> None:
    aw = stored
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 5}, interval=300)
    aw.advance(10)  # first check: no executor since the rule was made, 10 s >= 5 s
    assert len(aw.fired(rule)) == 1
    aw.restart(down_for=30)
    aw.advance(100)  # checks every 10 s: all inside the interval
    assert len(aw.fired(rule)) == 1
    aw.advance(200)
    assert len(aw.fired(rule)) == 2


def test_unresponsive_application_needs_the_threshold_without_a_healthy_executor(aw: AlertWorld) -> None:
    aw.w.connect("A")
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 25}, interval=0)
    aw.advance(30)
    assert aw.fired(rule) == []  # A is healthy
    aw.w.drop("A")
    aw.advance(20)  # checks at 10 s steps; gone 20 s < 25 s
    assert aw.fired(rule) == []
    aw.advance(10)
    (alert,) = aw.fired(rule)
    assert "no HEALTHY executor" in alert.message
    aw.w.connect("A")
    aw.advance(30)
    assert len(aw.fired(rule)) == 1  # healthy again: nothing more, even with no interval


def test_polled_rules_ask_an_executor_and_fire_on_its_answer(aw: AlertWorld) -> None:
    rule = aw.rule("WorkflowFailure", {"threshold": 2, "windowSecs": 60}, interval=0)
    aw.advance(10)
    assert aw.sender.probes == []  # nobody to ask: no executor
    aw.w.connect("A")
    aw.advance(10)
    ((asked, now),) = aw.sender.probes
    assert asked.id == rule.id and now == aw.clock.now()
    aw.advance(10)
    assert len(aw.sender.probes) == 1  # not asked again while a probe is out
    aw.alerts.probed(Probed(rule.id, holds=False))
    aw.sync()
    assert aw.fired(rule) == []
    aw.advance(10)
    aw.alerts.probed(Probed(rule.id, error="no answer within 1s"))
    aw.advance(10)
    aw.alerts.probed(Probed(rule.id, holds=True, message="3 workflow(s) failed", metadata={"failedWorkflows": "3"}))
    aw.sync()
    (alert,) = aw.fired(rule)
    assert alert.message == "3 workflow(s) failed" and alert.metadata["failedWorkflows"] == "3"
    assert aw.alerts.stats.probe_failures == 1


def test_recovery_deferred_and_failed_and_flapping(aw: AlertWorld) -> None:
    deferred = aw.rule("RecoveryDeferred")
    failed = aw.rule("RecoveryFailed", {"attempts": 2})
    flapping = aw.rule("ExecutorFlapping", {"disconnects": 3, "windowSecs": 60})
    aw.w.connect("A", "v1")
    aw.w.connect("B", "v2")
    aw.w.drop("A")
    aw.advance(10.1)  # A dead; no executor of v1
    (alert,) = aw.fired(deferred)
    assert "v1" in alert.message and "operator intervention" in alert.message
    aw.w.connect("C", "v1")  # a candidate: dispatched
    aw.w.connect("E", "v1")  # and another
    aw.w.connect("F", "v1")  # and a third
    first = aw.w.dispatcher.last()
    aw.w.answer(first, ok=False, reason="boom")  # attempt 1 failed: below the rule's 2, two untried left
    assert aw.fired(failed) == []
    aw.advance(1.1)  # the backoff, then attempt 2 to an untried one
    second = aw.w.dispatcher.last()
    assert second.target_executor_id not in (first.target_executor_id, "A")
    aw.w.answer(second, ok=False, reason="boom again")  # the rule's 2nd: fires though one is untried
    (f,) = aw.fired(failed)
    assert f.metadata["attempt"] == "2" and f.metadata["untriedCandidates"] == "1" and "boom again" in f.message
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    assert aw.fired(flapping) == []
    aw.w.connect("D")
    aw.w.drop("D")  # the third disconnect within 60 s
    (flap,) = aw.fired(flapping)
    assert flap.metadata["disconnects"] == "3" and flap.metadata["executorId"] == "D"


def test_deliveries_are_retried_with_backoff_until_the_limit(aw: AlertWorld) -> None:
    rule = aw.relay.create_alerting_rule(
        "local", "app", rule_type="ExecutorDead", min_interval_secs=0, receiving_app="ops",
        metadata={"webhooks": [{"url": "https://hooks.example/a", "secret": "s" * 16},
                               {"url": "https://hooks.slack.example/b", "format": "slack"}]})
    aw.sync()
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    first = {d.channel: d for d in aw.sender.take()}
    assert sorted(first) == ["app", "webhook:0", "webhook:1"]
    assert first["webhook:0"].webhook.secret == "s" * 16 and first["app"].webhook is None
    aw.answer(first["app"])  # delivered
    aw.answer(first["webhook:1"], ok=False, retry=False, detail="HTTP 404")  # final: not retried
    aw.answer(first["webhook:0"], ok=False, detail="HTTP 503")
    times = []
    for attempt in (2, 3, 4):
        start = aw.clock.monotonic()
        while not aw.sender.deliveries:
            aw.advance(0.5)
        (d,) = aw.sender.take()
        times.append(aw.clock.monotonic() - start)
        assert (d.channel, d.attempt) == ("webhook:0", attempt)
        aw.answer(d, ok=False, detail="HTTP 503")
    assert [round(t) for t in times] == [2, 4, 8]
    aw.advance(60)
    assert aw.sender.deliveries == []  # 4 attempts: the limit
    assert aw.attempts(rule) == [("app", 1, True, True), ("webhook:1", 1, False, True),
                                 ("webhook:0", 1, False, False), ("webhook:0", 2, False, False),
                                 ("webhook:0", 3, False, False), ("webhook:0", 4, False, True)]
    assert aw.alerts.pending == {}


def test_an_unfinished_delivery_is_resumed_after_a_restart(stored: AlertWorld) -> None:
    aw = stored
    rule = aw.rule("ExecutorDead", interval=0)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    (d,) = aw.sender.take()  # sent, never answered: Relay stops
    aw.restart(down_for=5)
    (again,) = aw.sender.take()
    assert (again.alert_id, again.channel, again.attempt) == (d.alert_id, "app", 1)  # at least once
    aw.answer(again, ok=False, detail="no executor")
    aw.restart(down_for=0.5)
    assert aw.sender.take() == []  # the backoff (2 s after the failed attempt) is kept
    aw.advance(2)
    (third,) = aw.sender.take()
    assert third.attempt == 2
    aw.answer(third)
    assert aw.attempts(rule)[-1] == ("app", 2, True, True)


def test_a_deleted_rule_is_no_longer_checked_and_its_webhooks_are_not_posted(aw: AlertWorld) -> None:
    rule = aw.relay.create_alerting_rule(
        "local", "app", rule_type="ExecutorDead", min_interval_secs=0, receiving_app="ops",
        metadata={"webhooks": [{"url": "https://hooks.example/a"}]})
    polled = aw.rule("SlowQueue", {"thresholdSecs": 30})
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(10.1)
    sent = {d.channel: d for d in aw.sender.take()}
    aw.answer(sent["webhook:0"], ok=False, detail="HTTP 500")
    aw.relay.delete_alerting_rule("local", "app", rule.id)
    aw.relay.delete_alerting_rule("local", "app", polled.id)
    aw.sync()
    aw.answer(sent["app"])  # the application still gets the alert it was fired for
    assert aw.attempts(rule)[-1] == ("app", 1, True, True)
    probes = len(aw.sender.probes)
    aw.advance(30)
    assert len(aw.sender.probes) == probes
    assert aw.sender.take() == []  # the webhook's retry is not posted
    assert aw.attempts(rule)[-1] == ("webhook:0", 2, False, True)


def test_a_webhook_whose_key_is_erased_is_not_posted(aw: AlertWorld) -> None:
    """The rule deleted by another instance (its key erased there) before this one folded the deletion:
    the webhook's attempt is recorded as final, with why, and nothing is posted."""
    rule = aw.relay.create_alerting_rule(
        "local", "app", rule_type="ExecutorDead", min_interval_secs=0, receiving_app="ops",
        metadata={"webhooks": [{"url": "https://hooks.example/a", "secret": "s" * 16}]})
    aw.sync()
    aw.relay.keys.delete(key_scope(rule.id))
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    assert [d.channel for d in aw.sender.take()] == ["app"]
    assert aw.attempts(rule) == [("webhook:0", 1, False, True)]
    (attempt,) = [e for e in aw.relay.stream(firings_stream_id("local", "app", rule.id))
                  if isinstance(e, AlertFirings.DeliveryAttempted)]
    assert "sealing key is missing" in attempt.detail and "relay_sealing_keys" in attempt.detail


def test_deleting_the_application_forgets_its_rules(aw: AlertWorld) -> None:
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 1})
    assert rule.id in aw.alerts.rules
    aw.relay.delete_app("local", "app")
    aw.sync()
    assert rule.id not in aw.alerts.rules and ("local", "app") not in aw.alerts.by_app
    aw.advance(60)
    assert aw.fired(rule) == []


def test_a_deleted_application_and_its_rules_leave_nothing_behind_but_the_deliveries_owed(aw: AlertWorld) -> None:
    """A rule deleted and its application deleted leave no entry in the alert manager's memory, also once its
    executors' sockets are closed (4007) after the deletion: not counted as an application without a
    HEALTHY executor. An alert fired before is still delivered, up to the attempt limit."""
    rule = aw.rule("ExecutorDead", interval=0)
    aw.rule("ExecutorFlapping", {"disconnects": 3, "windowSecs": 300})
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(10.1)  # A dead: an alert, its delivery out
    (d,) = aw.sender.take()
    aw.relay.delete_alerting_rule("local", "app", rule.id)
    aw.relay.delete_app("local", "app")
    aw.sync()
    aw.w.drop("B", reason="app_deleted")
    aw.sync()
    assert ("local", "app") not in aw.alerts._unhealthy_since
    assert (aw.alerts._firing_streams, aw.alerts._app_of_stream, aw.alerts.rules) == ({}, {}, {})
    for attempt in range(1, TIMING.max_attempts):
        aw.answer(d, ok=False, detail="no executor")
        aw.advance(TIMING.backoff(attempt))
        (d,) = aw.sender.take()
    aw.answer(d, ok=False, detail="no executor")
    assert aw.attempts(rule)[-1] == ("app", TIMING.max_attempts, False, True) and aw.alerts.pending == {}
    aw.restart()
    assert (aw.alerts._firing_streams, aw.alerts._app_of_stream, aw.alerts.pending) == ({}, {}, {})


def test_timing_backoff_is_capped() -> None:
    t = AlertTiming(retry_base=5, retry_max=300)
    assert [t.backoff(n) for n in (1, 2, 3, 7, 8, 20)] == [5, 10, 20, 300, 300, 300]
    assert t.backoff(0) == 5
    assert timedelta(seconds=t.backoff(6)) == timedelta(seconds=160)


def test_an_attempt_the_sender_never_answers_counts_as_failed_and_its_late_answer_is_ignored(aw: AlertWorld) -> None:
    """A lost hand-over (its task died) was handed to the sender again under the same attempt number, and
    whichever answer came first was recorded: 283 attempts recorded twice in a helper's storm. It is
    recorded as a failed attempt now; the next one follows the backoff, and only its answer is taken."""
    rule = aw.rule("ExecutorDead", interval=0)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    (d,) = aw.sender.take()  # lost: never answered
    aw.advance(TIMING.lost_after - 1)
    assert aw.sender.take() == [] and aw.attempts(rule) == []
    aw.advance(1.1)
    assert aw.attempts(rule) == [("app", 1, False, False)]  # counted
    assert aw.sender.take() == []  # not at once: after the backoff, as any failed attempt
    aw.advance(TIMING.backoff(1))
    (again,) = aw.sender.take()
    assert (again.alert_id, again.attempt) == (d.alert_id, 2) and again.token != d.token
    aw.answer(d, ok=True, detail="late")  # the lost one's answer comes after all: ignored
    assert aw.attempts(rule) == [("app", 1, False, False)]
    aw.answer(again)
    assert aw.attempts(rule) == [("app", 1, False, False), ("app", 2, True, True)]
    assert aw.alerts.pending == {} and aw.alerts._inflight == {}


def test_hand_overs_never_answered_end_at_the_attempt_limit(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=0)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    handed = aw.sender.take()
    for _ in range(3 * TIMING.max_attempts):  # never answered
        aw.advance(TIMING.lost_after + TIMING.retry_max)
        handed += aw.sender.take()
    assert [d.attempt for d in handed] == list(range(1, TIMING.max_attempts + 1))
    assert aw.attempts(rule) == [("app", n, False, n == TIMING.max_attempts) for n in range(1, TIMING.max_attempts + 1)]
    assert aw.alerts.pending == {} and aw.alerts._inflight == {}


def test_a_sender_that_fails_to_take_an_attempt_does_not_leave_it_stuck(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=0)
    calls = {"n": 0}
    real = aw.sender.deliver

    def broken(d: Delivery) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the loop is closed")
        real(d)

    aw.sender.deliver = broken  # type: ignore[method-assign]
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    assert aw.sender.take() == []
    aw.advance(1.1)  # retried a second later
    (d,) = aw.sender.take()
    aw.answer(d)
    assert aw.attempts(rule) == [("app", 1, True, True)]


def test_a_check_the_sender_never_answers_is_asked_again(aw: AlertWorld) -> None:
    aw.w.connect("A")
    aw.rule("SlowQueue", {"thresholdSecs": 30})
    aw.advance(10)
    assert len(aw.sender.probes) == 1
    aw.advance(TIMING.lost_after - 10)
    assert len(aw.sender.probes) == 1  # still out
    aw.advance(10)
    assert len(aw.sender.probes) == 2


def test_recovery_failed_fires_once_every_candidate_has_failed_it(aw: AlertWorld) -> None:
    failed = aw.rule("RecoveryFailed", {"attempts": 5}, interval=0)
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(10.1)
    req = aw.w.dispatcher.last()
    assert req.target_executor_id == "B"
    aw.w.answer(req, ok=False, reason="boom")  # attempt 1 of 5, but B was the only candidate
    aw.sync()
    (f,) = aw.fired(failed)
    assert "every HEALTHY executor of its version has failed it" in f.message
    assert f.metadata["untriedCandidates"] == "0"


def test_unresponsive_is_not_counted_until_executors_had_their_chance(aw: AlertWorld) -> None:
    ready = {"now": False}
    aw.alerts.ready = lambda: ready["now"]
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 5}, interval=0)
    aw.advance(30)  # the settle window after a restart: executors still coming back
    assert aw.fired(rule) == []
    ready["now"] = True
    aw.advance(10)  # counted from the first check after it: 0 s
    assert aw.fired(rule) == []
    aw.advance(10)
    assert len(aw.fired(rule)) == 1


def test_relays_own_restart_is_not_flapping_and_only_watched_apps_are_tracked(aw: AlertWorld) -> None:
    aw.rule("ExecutorDead")
    aw.w.connect("A")
    aw.w.drop("A")
    assert aw.alerts._flaps == {}  # no flapping rule: nothing kept
    aw.w.connect("A")
    aw.advance(61)  # that disconnect leaves the window (inside it, it would count: it is in A's history)
    flapping = aw.rule("ExecutorFlapping", {"disconnects": 2, "windowSecs": 60})
    aw.w.connect("A")
    aw.w.drop("A", reason="relay_restarted")
    aw.w.connect("A")
    aw.w.drop("A", reason="relay_restarted")
    assert aw.fired(flapping) == []
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(61)  # the first real one leaves the window
    aw.w.connect("A")
    aw.w.drop("A")
    assert aw.fired(flapping) == []
    aw.w.connect("A")
    aw.w.drop("A")
    assert len(aw.fired(flapping)) == 1
    assert len(aw.alerts._flaps[("local", "app", "A")]) == 2  # pruned to the window


def test_a_condition_inside_the_interval_is_suppressed_without_a_store_read(aw: AlertWorld) -> None:
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 1}, interval=3600)
    aw.advance(10)
    assert len(aw.fired(rule)) == 1
    reads = {"n": 0}
    real = aw.relay.fire_alert

    def counted(*a: Any, **kw: Any) -> bool:
        reads["n"] += 1
        return real(*a, **kw)

    aw.relay.fire_alert = counted  # type: ignore[method-assign]
    aw.advance(100)
    assert reads["n"] == 0 and aw.alerts.stats.suppressed == 10


def test_an_answer_that_hits_a_bug_is_dropped_and_another_attempt_made(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=0)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    (d,) = aw.sender.take()
    real = aw.relay.record_alert_delivery
    aw.relay.record_alert_delivery = lambda *a, **kw: (_ for _ in ()).throw(KeyError("bug"))  # type: ignore[method-assign]
    aw.answer(d)
    assert aw.alerts.stats.errors == 1 and aw.alerts._inbox == deque()
    aw.relay.record_alert_delivery = real  # type: ignore[method-assign]
    aw.advance(TIMING.lost_after + 1)  # given up for lost: a failed attempt
    aw.advance(TIMING.backoff(1))
    (again,) = aw.sender.take()
    aw.answer(again)
    assert aw.attempts(rule) == [("app", 1, False, False), ("app", 2, True, True)]


def test_the_log_is_read_once_whatever_its_events_were(aw: AlertWorld) -> None:
    """The alert manager follows the log to its head even where none of the events are alerting
    ones: the next step reads only what was recorded since. It read everything after the last
    alerting event at every step (a scan of the whole log on the process manager's thread)."""
    rule = aw.rule("ExecutorDead")
    for name in "ABCDEFGH":
        aw.w.connect(name)  # executor events only: none of them the alert manager's
    assert aw.alerts.position == aw.relay.head() > 8
    reads: list[tuple[int, int]] = []
    real = aw.relay.notifications

    def counted(after: int, limit: int, topics: Any = (), **kw: Any) -> Any:
        if topics == ALERT_TOPICS:  # the alert manager's reads, not the process manager's
            reads.append((after, kw.get("until")))
        return real(after, limit, topics, **kw)

    aw.relay.notifications = counted  # type: ignore[method-assign]
    head = aw.relay.head()
    aw.alerts.step()
    assert reads == []  # nothing new: the log is not read at all
    aw.w.drop("A")
    aw.alerts.step()
    assert reads == [(head, aw.relay.head())]  # from where it was to the new head, once
    aw.advance(10.1)  # A is declared dead: the rule fires, its alert is followed like any event
    assert len(aw.fired(rule)) == 1 and aw.alerts.position == aw.relay.head()
    assert all(after >= head for after, _ in reads)


def test_a_batch_of_alerting_events_longer_than_a_read_is_followed_whole(aw: AlertWorld) -> None:
    # Five rules recorded before the alert manager steps, other topics after them: reads of 2 take the
    # rules in three reads and then pass the rest (a catch-up that jumped to the head after one read lost 3).
    aw.alerts.batch_size = 2
    rules = [aw.relay.create_alerting_rule("local", "app", rule_type="ExecutorDead", metadata={},
                                           min_interval_secs=60, receiving_app="ops") for _ in range(5)]
    aw.w.connect("X")
    aw.sync()
    assert set(aw.alerts.rules) >= {r.id for r in rules} and aw.alerts.position == aw.relay.head()


# ------------------------------------------------------- the time without an executor


def test_unresponsive_counts_from_when_the_last_executor_went_not_from_an_earlier_outage(aw: AlertWorld) -> None:
    # An outage a deleted rule saw, a day of health no rule watched: the start of the old outage was kept,
    # and a new 3600 s rule fired 10 s after it was made ("no HEALTHY executor for 86455 s").
    old = aw.rule("UnresponsiveApplication", {"thresholdSecs": 3600}, interval=0)
    aw.advance(30)
    aw.relay.delete_alerting_rule("local", "app", old.id)
    aw.sync()
    aw.w.connect("A")
    aw.advance(86_400)
    aw.w.drop("A")
    went = aw.clock.now()
    aw.advance(15)  # A dead
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 3600}, interval=0)
    aw.advance(3580)  # checked every 10 s from the rule: the last one 3595 s after A went
    assert aw.fired(rule) == []
    aw.advance(10)
    (alert,) = aw.fired(rule)
    assert alert.metadata["unresponsiveSecs"] == "3605" and alert.metadata["since"] == went.isoformat()


def test_a_rule_made_after_the_last_executor_went_counts_from_when_it_went(aw: AlertWorld) -> None:
    aw.w.connect("A")
    aw.w.drop("A")
    went = aw.clock.now()
    aw.advance(100)  # no rule watches the application yet
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 60}, interval=0)
    aw.advance(10)  # the first check: 110 s without one (it counted from the rule: 60 s more)
    (alert,) = aw.fired(rule)
    assert alert.metadata["unresponsiveSecs"] == "110" and alert.metadata["since"] == went.isoformat()


def test_an_application_registered_again_does_not_inherit_the_old_ones_outage(aw: AlertWorld) -> None:
    aw.rule("UnresponsiveApplication", {"thresholdSecs": 600}, interval=0)  # no executor: counted from here
    aw.advance(30)
    aw.relay.delete_app("local", "app")
    aw.sync()
    aw.advance(7 * 86_400)
    aw.relay.register_app("local", "app")  # another application of that name, no executor ever
    aw.sync()
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 600}, interval=0)
    aw.advance(590)
    assert aw.fired(rule) == []  # it fired at the first check: "for 604855 s"
    aw.advance(10)
    (alert,) = aw.fired(rule)
    assert alert.metadata["unresponsiveSecs"] == "600"  # unknown before: from when the rule watched it


def test_disconnects_before_a_death_do_not_count_for_the_next_incarnation(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorFlapping", {"disconnects": 3, "windowSecs": 300}, interval=0)
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    aw.advance(10.1)  # D declared DEAD: that incarnation ends with its disconnects
    assert aw.w.status("D") == "DEAD"
    aw.w.connect("D")  # a new incarnation
    aw.w.drop("D")
    assert aw.fired(rule) == []  # it fired here: "3 times", two of them the dead one's
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "3"


def test_disconnects_before_the_application_was_deleted_do_not_count_for_the_one_registered_again(
        aw: AlertWorld) -> None:
    """An application registered again is another one: its executors' disconnects before the deletion,
    and the close of their sockets by the deletion itself (4007), are not its executors' flapping."""
    aw.rule("ExecutorFlapping", {"disconnects": 2, "windowSecs": 300}, interval=0)
    aw.w.connect("E")
    aw.w.drop("E")
    aw.w.connect("E")
    aw.relay.delete_app("local", "app")
    aw.sync()
    aw.w.drop("E", reason="app_deleted")  # as the hub records the sockets it closes
    aw.relay.register_app("local", "app")
    rule = aw.rule("ExecutorFlapping", {"disconnects": 2, "windowSecs": 300}, interval=0)
    aw.w.connect("E")
    aw.w.drop("E")  # its only disconnect in this application
    assert aw.fired(rule) == []  # it fired here: "disconnected 3 times"
    aw.w.connect("E")
    aw.w.drop("E")
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "2"


def test_a_socket_closed_by_a_token_revocation_is_not_flapping(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorFlapping", {"disconnects": 2, "windowSecs": 300}, interval=0)
    aw.w.connect("E")
    aw.w.drop("E", reason="token_revoked")  # Relay closed it (4003)
    aw.w.connect("E")  # with another token
    aw.w.drop("E")
    assert aw.fired(rule) == []  # it fired here: "disconnected 2 times"
    aw.w.connect("E")
    aw.w.drop("E")
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "2"


# --------------------------------------------------------------- wall-clock steps


def test_a_wall_clock_step_forward_does_not_shorten_the_time_without_an_executor(aw: AlertWorld) -> None:
    aw.w.connect("A")
    rule = aw.rule("UnresponsiveApplication", {"thresholdSecs": 3600}, interval=0)
    aw.w.drop("A")
    aw.advance(15)
    aw.clock.step_wall(3600)  # it fired 35 s after A went, "for 3635 s"
    aw.advance(3575)
    assert aw.fired(rule) == []
    aw.advance(10)
    (alert,) = aw.fired(rule)
    assert alert.metadata["unresponsiveSecs"] == "3600"


def test_a_wall_clock_step_back_does_not_silence_a_rule_beyond_its_interval(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=60)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    assert len(aw.fired(rule)) == 1
    aw.clock.step_wall(-6 * 3600)  # every death was suppressed for 6 h
    aw.advance(60)
    aw.w.connect("B")
    aw.w.drop("B")
    aw.advance(10.1)  # 70 s after the first alert
    assert len(aw.fired(rule)) == 2 and aw.alerts.stats.suppressed == 0


def test_a_wall_clock_step_forward_does_not_end_a_rules_interval_early(aw: AlertWorld) -> None:
    rule = aw.rule("ExecutorDead", interval=300)
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(10.1)
    aw.clock.step_wall(3600)
    aw.w.drop("B")
    aw.advance(10.1)  # 10 s after the first alert, whatever the wall clock says
    assert len(aw.fired(rule)) == 1 and aw.alerts.stats.suppressed == 1


def test_a_wall_clock_set_back_does_not_stretch_a_deliverys_backoff(stored: AlertWorld) -> None:
    aw = stored
    rule = aw.rule("ExecutorDead", interval=0)
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    (d,) = aw.sender.take()
    aw.answer(d, ok=False, detail="no executor")  # the next attempt 2 s after this one
    aw.clock.step_wall(-3600)
    aw.restart(down_for=0.5)
    aw.advance(2)  # at most the whole backoff (it waited an hour and 2 s)
    (again,) = aw.sender.take()
    assert (again.alert_id, again.attempt) == (d.alert_id, 2)
    aw.answer(again)
    assert aw.attempts(rule)[-1] == ("app", 2, True, True)


# ------------------------------------------------------- WorkflowFailure: no gaps


def test_a_workflow_failure_probe_looks_back_to_the_start_of_the_last_one_answered(aw: AlertWorld) -> None:
    # windowSecs 1, checked every 10 s: each probe looked back 1 s, so 9 s of every 10 went unseen.
    aw.w.connect("A")
    rule = aw.rule("WorkflowFailure", {"windowSecs": 1}, interval=0)
    aw.advance(10)
    first = aw.clock.now()
    assert aw.sender.since == [None]  # the rule's first: its window
    aw.alerts.probed(Probed(rule.id, holds=False))
    aw.sync()
    aw.advance(10)
    assert aw.sender.since == [None, first]
    aw.alerts.probed(Probed(rule.id, error="no answer within 1s"))  # counted nothing
    aw.sync()
    aw.advance(10)
    third = aw.clock.now()
    assert aw.sender.since[-1] == first
    aw.advance(10)  # still out: not asked again
    assert len(aw.sender.since) == 3
    aw.alerts.probed(Probed(rule.id, holds=False))
    aw.sync()
    aw.w.drop("A")
    aw.advance(30)  # nobody to ask: the checks skipped
    aw.w.connect("B")
    aw.advance(10)
    assert len(aw.sender.since) == 4 and aw.sender.since[-1] == third


IN_FLIGHT, PER_RECEIVER = 32, 4  # AlertTiming's defaults (TIMING's)


def _receiver(d: Delivery) -> str:
    return "app" if d.webhook is None else d.webhook.url.split("/")[2]


def test_an_alert_storm_hands_over_a_bounded_number_of_attempts_and_receivers_take_turns(in_memory: AlertWorld) -> None:
    """50 ExecutorDead rules of 5 webhooks each, to receivers that never answer in time, and one
    executor's death: 250 webhook attempts and 50 to the receiving application were handed to the sender
    at once, each its own task on the event loop (a helper's storm: /healthz took 8.8 s, another
    application's webhook got no request in 40 s). At most ``max_in_flight`` are out at once, at most
    ``per_receiver`` to one receiver (here ten hung hosts and a good one); an attempt waiting its turn,
    however long, is never given up for lost."""
    aw = in_memory
    good = "https://good.example/hook"
    rules = [aw.relay.create_alerting_rule(
        "local", "app", rule_type="ExecutorDead", min_interval_secs=0, receiving_app="ops",
        metadata={"webhooks": [{"url": good if (i, j) == (49, 4) else f"https://hung{i % 10}.example/{i}/{j}"}
                               for j in range(5)]}) for i in range(50)]
    aw.sync()
    aw.w.connect("A")
    aw.w.drop("A")
    aw.advance(10.1)
    out = aw.sender.take()
    assert good in [d.webhook.url for d in out if d.webhook]  # its turn came at once, in the storm
    handed, peak = len(out), 0
    while out:
        peak = max(peak, len(out))
        assert len(out) <= IN_FLIGHT
        per = Counter(_receiver(d) for d in out)
        assert max(per.values()) <= PER_RECEIVER, per
        aw.advance(10)  # the hung receiver's timeout
        for d in out:
            hung = d.webhook is not None and "hung" in d.webhook.url
            aw.alerts.delivered(Delivered(d, not hung, "no answer within 10s" if hung else "HTTP 200"))
        aw.sync()
        out = aw.sender.take()
        handed += len(out)
    assert peak == IN_FLIGHT == TIMING.max_in_flight  # the bound was reached (ten hung hosts could take 40)
    assert PER_RECEIVER == TIMING.per_receiver
    recorded = [a for r in rules for a in aw.attempts(r)]
    assert handed == len(recorded) == 50 + 1 + 249 * TIMING.max_attempts  # nothing given up for lost, nor twice
    assert not [e for r in rules for e in aw.relay.stream(firings_stream_id("local", "app", r.id))
                if isinstance(e, AlertFirings.DeliveryAttempted) and "no outcome" in (e.detail or "")]
    assert aw.alerts.pending == {} and aw.alerts._inflight == {} and aw.alerts._waiting == {}
    assert aw.alerts._queued == {} and aw.alerts._busy == {}


def test_rules_whose_sealing_key_is_missing_are_counted_in_one_error_at_start(aw: AlertWorld, caplog) -> None:
    """A store restored without relay_sealing_keys: nothing said the rules' webhooks could not be posted to
    until an alert's attempt was recorded as failed, blaming a deletion."""
    hooks = {"webhooks": [{"url": "https://hooks.example/a", "secret": "s" * 16}]}
    made = [aw.relay.create_alerting_rule("local", "app", rule_type="ExecutorDead", min_interval_secs=0,
                                          receiving_app="ops", metadata=hooks) for _ in range(3)]
    aw.rule("ExecutorDead")  # no webhooks: no key
    caplog.set_level(logging.ERROR, logger="relay_es.engine.alerting")
    start = lambda: AlertManager(aw.relay, aw.clock, FakeSender(), healthy=aw.w.pm.has_healthy,  # noqa: E731
                                 timing=TIMING).start()
    start()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    for rule in made[:2]:
        aw.relay.keys.delete(key_scope(rule.id))
    start()
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.getMessage().startswith("2 alerting rule(s) have webhooks whose sealing key is missing")
    assert "relay_sealing_keys" in error.getMessage()


# ---------------------------------------------------- a receiving application deleted


def details(aw: AlertWorld, rule: AlertingRule) -> list[tuple[str, int, bool, bool, str | None]]:
    return [(e.channel, e.attempt, e.ok, e.final, e.detail)
            for e in aw.relay.stream(firings_stream_id("local", "app", rule.id))
            if isinstance(e, AlertFirings.DeliveryAttempted)]


def test_a_deleted_receiving_application_gets_no_more_alerts_nor_does_one_registered_again(aw: AlertWorld) -> None:
    """The rules of ``app`` that send to ``ops`` kept firing to it once ``ops`` was deleted: each alert handed to
    the sender for ten attempts (no HEALTHY executor), and an ``ops`` registered again got them. Their ``app``
    channel ends at once, unsent, saying why; the webhooks still get the alert; a rule made after ``ops`` is
    registered again sends to it."""
    plain = aw.rule("ExecutorDead", interval=0)
    hooked = aw.relay.create_alerting_rule("local", "app", rule_type="ExecutorDead", min_interval_secs=0,
                                           receiving_app="ops",
                                           metadata={"webhooks": [{"url": "https://hooks.example/a"}]})
    aw.sync()
    for name in "ABCD":
        aw.w.connect(name)
    aw.w.drop("A")
    aw.advance(10.1)
    for d in aw.sender.take():
        aw.answer(d, ok=d.channel != "app", detail="application ops has no HEALTHY executor")  # app: retried
    aw.relay.delete_app("local", "ops")
    aw.sync()  # the retries owed to ops end at once, not after their backoff
    assert aw.sender.take() == []
    gone = ("app", 2, False, True, "not sent: the receiving application was deleted")
    assert details(aw, plain)[-1] == gone and details(aw, hooked)[-1] == gone

    aw.w.drop("B")
    aw.advance(10.1)  # both fire again: recorded, the webhook posted, nothing to ops
    assert [d.channel for d in aw.sender.take()] == ["webhook:0"]
    assert len(aw.fired(plain)) == 2 and details(aw, plain)[-1] == ("app", 1, False, True, gone[-1])
    assert ("app", 1, False, True, gone[-1]) in details(aw, hooked)

    aw.relay.register_app("local", "ops")  # another application of that name
    aw.sync()
    later = aw.rule("ExecutorDead", interval=0)
    aw.w.drop("C")
    aw.advance(10.1)
    sent = aw.sender.take()
    assert [(d.rule_id, d.channel) for d in sent if d.channel == "app"] == [(later.id, "app")]
    assert details(aw, plain)[-1] == ("app", 1, False, True, gone[-1]) and len(aw.fired(plain)) == 3
    assert aw.alerts._receiver_gone == {plain.id, hooked.id}

    aw.relay.delete_alerting_rule("local", "app", plain.id)
    aw.relay.delete_alerting_rule("local", "app", hooked.id)
    aw.sync()
    assert aw.alerts._receiver_gone == set()
    assert aw.alerts._receivers == {app_stream_id("local", "ops"): {later.id}}  # the live rule's alone


def test_a_deleted_receiving_application_stays_deleted_for_the_rule_after_a_restart(stored: AlertWorld) -> None:
    aw = stored
    rule = aw.rule("ExecutorDead", interval=0)
    aw.relay.delete_app("local", "ops")
    aw.relay.register_app("local", "ops")
    aw.restart(down_for=1)
    aw.advance(6)  # the settle window
    aw.w.connect("A")
    aw.w.connect("B")
    aw.w.drop("A")
    aw.advance(10.1)
    assert len(aw.fired(rule)) == 1 and aw.sender.take() == []
    assert details(aw, rule) == [("app", 1, False, True, "not sent: the receiving application was deleted")]


# ----------------------------------------------------- flapping through a restart


def test_flapping_counts_the_disconnects_before_a_restart(stored: AlertWorld) -> None:
    """Two disconnects, Relay restarts, a third inside the window: no alert (the count lived in memory alone).
    The executor's earlier disconnects are read from its stream the first time it disconnects again."""
    aw = stored
    rule = aw.rule("ExecutorFlapping", {"disconnects": 3, "windowSecs": 300}, interval=0)
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    aw.w.connect("D")
    aw.w.drop("D", reason="relay_restarted")  # as the Relay that stops records it: not counted
    aw.restart(down_for=1)
    aw.advance(6)  # the settle window
    aw.w.connect("D")
    assert aw.fired(rule) == []
    aw.w.drop("D")
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "3" and flap.metadata["executorId"] == "D"
    assert list(aw.alerts._flaps) == [("local", "app", "D")] and aw.alerts._unread == {}


def test_after_a_restart_a_dead_incarnations_disconnects_do_not_count(stored: AlertWorld) -> None:
    aw = stored
    rule = aw.rule("ExecutorFlapping", {"disconnects": 3, "windowSecs": 300}, interval=0)
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    aw.advance(10.1)  # D declared DEAD
    aw.restart(down_for=1)
    aw.advance(6)
    aw.w.connect("D")  # a new incarnation
    aw.w.drop("D")
    assert aw.fired(rule) == []
    for _ in range(2):
        aw.w.connect("D")
        aw.w.drop("D")
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "3"


def test_a_death_told_before_the_history_is_read_still_ends_the_count(in_memory: AlertWorld) -> None:
    """A disconnect waiting for its executor's history and the executor's death, told in one fold: the
    disconnect is counted first, then the death forgets the count."""
    aw = in_memory
    rule = aw.rule("ExecutorFlapping", {"disconnects": 2, "windowSecs": 300}, interval=0)
    aw.w.connect("D")
    aw.w.drop("D")
    aw.w.connect("D")
    aw.alerts._flaps.clear()  # as after a restart: D's count is not in memory
    aw.w.steppers.remove(aw.alerts)  # the process manager folds the next events before the alert manager steps
    aw.w.drop("D")
    aw.advance(10.1)  # D declared DEAD
    assert len(aw.alerts._flap_queue) == 2
    aw.w.steppers.append(aw.alerts)
    aw.sync()
    (flap,) = aw.fired(rule)
    assert flap.metadata["disconnects"] == "2"
    assert aw.alerts._flaps == {} and aw.alerts._unread == {} and not aw.alerts._flap_queue
