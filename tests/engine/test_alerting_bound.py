"""What the alert manager holds undelivered is bounded (``MAX_UNDELIVERED`` in
``relay_es/engine/alerting.py``), on a fake clock with the fake sender of ``test_alerting.py``.

Receivers that hang (every attempt answered only after its timeout, 4 at a time to one receiver)
while rules keep firing made ``AlertManager.pending`` grow for as long as the hang lasted: 20 rules
of 3 webhooks firing every minute held 80 channels more every minute, none finished in three
hours. Past the bound the oldest channel of the receiver holding the most, not one under way, is
dropped: recorded as a final attempt not made (so a restart does not bring it back, and the
lifecycle feed says so), counted, and reported in one WARNING a minute at most. The alert's
``Fired`` stays. Also: how long a hung receiver is tried, as docs/alerting.md says.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

import relay_es.engine.alerting as alerting
import tests.engine.test_alerting as base
from relay_es.aggregates.alert import AlertFirings, firings_stream_id
from relay_es.domain.alerting import AlertingRule
from relay_es.engine.alerting import AlertTiming, Delivered, Delivery
from tests.engine.test_alerting import TIMING, AlertWorld
from tests.support import World


@pytest.fixture
def in_memory(clock):
    w = World(clock, None, grace=10)
    yield AlertWorld(w)
    w.close()


@pytest.fixture
def on_sqlite(clock, tmp_path):
    """A store that outlives its Relay (a restart); the bound is the alert manager's memory, not the store's."""
    w = World(clock, f"sqlite:///{tmp_path}/relay.db", grace=10)
    yield AlertWorld(w)
    w.close()


def cap(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(alerting, "MAX_UNDELIVERED", n, raising=False)  # raising=False: the test runs before the fix


def hooked(aw: AlertWorld, app: str, hosts: list[str], *, rule_type: str = "UnresponsiveApplication",
           receiver: str = "ops") -> AlertingRule:
    metadata: dict[str, Any] = {"webhooks": [{"url": f"https://{h}/{app}/{i}"} for i, h in enumerate(hosts)]}
    if rule_type == "UnresponsiveApplication":
        metadata["thresholdSecs"] = 1
    return aw.relay.create_alerting_rule("local", app, rule_type=rule_type, min_interval_secs=0,
                                         receiving_app=receiver, metadata=metadata)


def records(aw: AlertWorld, rule: AlertingRule) -> list[Any]:
    return list(aw.relay.stream(firings_stream_id("local", rule.app, rule.id)))


def dropped(aw: AlertWorld, rules: list[AlertingRule]) -> list[tuple[str, str]]:
    return [(e.alert_id, e.channel) for r in rules for e in records(aw, r)
            if isinstance(e, AlertFirings.DeliveryAttempted) and (e.detail or "").startswith("not sent: dropped")]


def consistent(am: Any, bound: int) -> None:
    """The bound, and the indexes that find what to drop agree with pending."""
    assert len(am.pending) <= bound
    assert {k for held in am._held.values() for k in held} == set(am.pending)
    assert all(am.pending[k].receiver == r for r, held in am._held.items() for k in held)
    assert set(am._queued) <= set(am.pending)
    assert sorted(k for q in am._waiting.values() for k in q) == sorted(am._queued)
    assert {(r, n) for n, rs in am._sizes.items() for r in rs} == {(r, len(h)) for r, h in am._held.items()}
    assert am._largest == max(am._sizes, default=0)


def hang(aw: AlertWorld, out: list[Delivery]) -> list[Delivery]:
    """The receivers' timeout passes: webhooks answer no answer in time, the app channel never answers (it is
    given up for lost). Returns what was handed over meanwhile."""
    aw.advance(10)
    for d in out:
        if d.webhook is not None:
            aw.alerts.delivered(Delivered(d, False, "no answer within 10s", True))
    aw.sync()
    return aw.sender.take()


def test_what_is_held_undelivered_is_bounded_through_rules_apps_and_receivers_changing(
        in_memory: AlertWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    aw = in_memory
    bound = 30
    cap(monkeypatch, bound)
    for app in ("a1", "a2"):
        aw.relay.register_app("local", app)
    rules = [hooked(aw, app, hosts) for app in ("app", "a1", "a2")
             for hosts in (["hung0.example", "hung1.example"], ["hung1.example", "hung2.example"])]
    aw.sync()
    out = aw.sender.take()
    peak = 0
    for step in range(36):  # six minutes: six rules fire every 10 s, 18 channels each time, to hung receivers
        out = hang(aw, out)
        peak = max(peak, len(aw.alerts.pending))
        assert len(aw.alerts.pending) <= bound, step
        if step % 3 == 2:
            consistent(aw.alerts, bound)
        if step == 6:
            aw.relay.delete_alerting_rule("local", "app", rules[0].id)  # its webhook channels end as their turn comes
        elif step == 12:
            aw.relay.delete_app("local", "a1")  # its rules go with it
        elif step == 18:
            rules.append(hooked(aw, "a2", ["other0.example", "other1.example", "other2.example"]))  # new receivers
            aw.relay.delete_app("local", "ops")  # the receiving application: its app channels end at once
        elif step == 24:
            aw.relay.register_app("local", "ops")
            rules.append(hooked(aw, "app", ["hung0.example"], receiver="ops"))
        aw.sync()
        assert len(aw.alerts.pending) <= bound, step
    consistent(aw.alerts, bound)
    assert peak == bound  # reached, and held to
    fired = [(e.alert_id, c) for r in rules for e in records(aw, r) if isinstance(e, AlertFirings.Fired)
             for c in e.channels]
    assert len({k[0] for k in fired}) == aw.alerts.stats.fired > 100  # every alert is still in the log
    finals = {(e.alert_id, e.channel) for r in rules for e in records(aw, r)
              if isinstance(e, AlertFirings.DeliveryAttempted) and e.final}
    assert set(fired) == finals | set(aw.alerts.pending)  # nothing lost silently: finished, dropped, or held
    drops = dropped(aw, rules)
    assert len(drops) == len(set(drops)) == aw.alerts.stats.dropped > 60
    assert aw.alerts.stats.delivery_failures >= aw.alerts.stats.dropped  # in relay_alert_deliveries_total{failed}

    for r in list(aw.alerts.rules.values()):  # the rules go; the receivers come back and answer
        aw.relay.delete_alerting_rule("local", r.app, r.id)
    aw.sync()
    for _ in range(200):
        if not aw.alerts.pending:
            break
        for d in out:
            aw.alerts.delivered(Delivered(d, True, "HTTP 200"))
        aw.advance(10)
        out = aw.sender.take()
    assert aw.alerts.pending == {} and aw.alerts._held == {} and aw.alerts._sizes == {}
    assert aw.alerts._queued == {} and aw.alerts._waiting == {} and aw.alerts._largest == 0


def test_the_oldest_of_the_receiver_holding_the_most_are_dropped_never_one_under_way(
        in_memory: AlertWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that hangs pays for its own backlog: another receiver's channels waiting for their retry
    are kept, and so are the hung receiver's attempts under way (their answers are still awaited)."""
    aw = in_memory
    bound = 10
    cap(monkeypatch, bound)
    hung = hooked(aw, "app", ["hung.example"] * 3, rule_type="ExecutorDead")
    failing = hooked(aw, "app", ["failing.example"], rule_type="ExecutorDead")
    aw.sync()
    for name in "ABCD":
        aw.w.connect(name)
    handed: list[Delivery] = []
    for name in "ABC":  # three deaths: each rule fires three times
        aw.w.drop(name)
        aw.advance(10.1)
        for d in aw.sender.take():
            handed.append(d)
            if d.webhook is None:
                aw.alerts.delivered(Delivered(d, True, "handled"))
            elif "failing" in d.webhook.url:
                aw.alerts.delivered(Delivered(d, False, "HTTP 503", True))  # waits for its retry
        aw.sync()
    under_way = {(d.alert_id, d.channel) for d in handed if d.webhook is not None and "hung" in d.webhook.url}
    assert len(under_way) == TIMING.per_receiver  # never answered (within lost_after)
    alerts = [e.alert_id for e in records(aw, hung) if isinstance(e, AlertFirings.Fired)]
    waiting = [(a, f"webhook:{i}") for a in alerts for i in range(3) if (a, f"webhook:{i}") not in under_way]
    drops = dropped(aw, [hung, failing])
    # Held at the third alerts: 9 of hung.example, 3 of failing.example, 2 to ops (answered after) = 14.
    assert drops == waiting[:4]  # the hung receiver's oldest waiting, oldest first
    assert set(aw.alerts.pending) == under_way | set(waiting[4:]) | {
        (a, "webhook:0") for a in (e.alert_id for e in records(aw, failing) if isinstance(e, AlertFirings.Fired))}
    assert len([p for p in aw.alerts.pending.values() if p.rule_id == failing.id]) == 3
    assert {p.receiver for p in aw.alerts.pending.values()} == {"https://hung.example", "https://failing.example"}
    (first, *_) = [e for e in records(aw, hung) if isinstance(e, AlertFirings.DeliveryAttempted)
                   and (e.alert_id, e.channel) in drops]
    assert (first.attempt, first.ok, first.final) == (1, False, True)
    assert first.detail.startswith("not sent: dropped") and "at most 10 alert deliveries" in first.detail
    assert aw.alerts.stats.dropped == 4


def test_drops_are_reported_in_one_warning_a_minute_at_most(in_memory: AlertWorld, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    aw = in_memory
    cap(monkeypatch, 5)
    told: list[tuple[float, int]] = []  # (the fake clock when logged, how many it reports)

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING and "dropped unsent" in record.getMessage():
                told.append((aw.clock.monotonic(), record.args[0]))

    handler = Stamp()
    logging.getLogger("relay_es.engine.alerting").addHandler(handler)
    try:
        rule = hooked(aw, "app", ["hung.example"] * 3)
        aw.sync()
        out = aw.sender.take()
        for _ in range(30):  # five minutes of drops, several every 10 s
            out = hang(aw, out)
        aw.relay.delete_alerting_rule("local", "app", rule.id)
        aw.sync()
        aw.advance(60)  # no more drops: the last minute's are reported all the same
    finally:
        logging.getLogger("relay_es.engine.alerting").removeHandler(handler)
    assert 5 <= len(told) <= 6
    assert all(b - a >= alerting.REPORT_EVERY for (a, _), (b, _) in zip(told, told[1:]))
    assert sum(n for _, n in told) == aw.alerts.stats.dropped == len(dropped(aw, [rule])) > 30


def test_dropped_channels_stay_dropped_through_a_restart_and_a_log_from_before_is_shed_at_start(
        on_sqlite: AlertWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drop is recorded, so the next Relay does not hold it again; and a log written by a Relay without
    the bound (a backlog of unfinished channels) is shed once read whole at start: a channel finished later
    in the log is never dropped."""
    aw = on_sqlite
    rule = hooked(aw, "app", ["hung.example", "slow.example"], rule_type="ExecutorDead")
    aw.sync()
    for name in "ABCDEFG":
        aw.w.connect(name)
    for name in "ABCDEF":
        aw.w.drop(name)
    aw.advance(10.1)  # six deaths, six alerts, 18 channels; no bound yet
    assert len(aw.alerts.pending) == 18
    while any(p.channel == "app" for p in aw.alerts.pending.values()):  # delivered, after every alert was recorded
        for d in aw.sender.take():
            if d.webhook is None:
                aw.alerts.delivered(Delivered(d, True, "handled"))
        aw.sync()
    assert len(aw.alerts.pending) == 12
    finished = {(e.alert_id, e.channel) for e in records(aw, rule)
                if isinstance(e, AlertFirings.DeliveryAttempted) and e.final}
    assert len(finished) == 6

    cap(monkeypatch, 8)
    aw.restart(down_for=1)
    drops = dropped(aw, [rule])
    assert len(drops) == 4 and not set(drops) & finished  # 12 unfinished, 8 kept
    assert len(aw.alerts.pending) == 8 and not set(drops) & set(aw.alerts.pending)
    kept = set(aw.alerts.pending)

    aw.restart(down_for=1)
    assert set(aw.alerts.pending) == kept and aw.alerts.stats.dropped == 0  # nothing comes back, nothing dropped
    aw.advance(1)
    assert {(d.alert_id, d.channel) for d in aw.sender.take()} <= kept


def test_a_hung_receiver_is_tried_four_attempts_at_a_time(clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/alerting.md's numbers, with the defaults (the runtime's lost_after: the call timeout plus 30 s):
    one rule's 5 webhooks to a receiver that hangs (10 s an attempt) are given up after 10 attempts each, 22
    minutes on; 10 rules' 50 after 31 min, 4 at a time (the storm's 250 after 1 h 44 min: 25 s each), each
    still with its 10 attempts."""
    monkeypatch.setattr(base, "TIMING", AlertTiming(lost_after=50.0))
    assert sum(base.TIMING.backoff(n) for n in range(1, 10)) == 1215
    w = World(clock, None, grace=10)
    aw = AlertWorld(w)  # a manager with the default timing

    def storm(rules: int) -> float:
        made = [hooked(aw, "app", [f"hung.example/{i}"] * 5, rule_type="ExecutorDead") for i in range(rules)]
        aw.sync()
        aw.w.connect(f"X{rules}")
        aw.w.drop(f"X{rules}")
        aw.advance(10.1)
        start = aw.clock.monotonic()
        out = aw.sender.take()
        while aw.alerts.pending:
            aw.advance(10)
            for d in out:
                aw.alerts.delivered(Delivered(d, d.webhook is None, "no answer within 10s", True))
            aw.sync()
            out = aw.sender.take()
        finals = [e for r in made for e in records(aw, r) if isinstance(e, AlertFirings.DeliveryAttempted) and e.final]
        assert len(finals) == 6 * rules and {e.attempt for e in finals if e.channel != "app"} == {10}
        for r in made:
            aw.relay.delete_alerting_rule("local", "app", r.id)
        aw.sync()
        return aw.clock.monotonic() - start

    try:
        assert storm(1) == pytest.approx(1330)  # 22 min: 1,215 s of backoff, 10 attempts of 10 s, one waits its turn
        assert storm(10) == pytest.approx(1850)  # 50 channels: 31 min (more than their backoff: 4 at a time)
    finally:
        w.close()
