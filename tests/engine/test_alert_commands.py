"""The alerting commands (``relay_es/engine/alert_commands.py``), their logic on the in-memory store
and two writers and a restart on SQLite and Postgres: rules on the
application's stream, alerts and deliveries on each rule's own, the interval held across writers
and restarts."""

from __future__ import annotations

import uuid
from datetime import timedelta
from itertools import count
from typing import Any

import pytest

from relay_es.aggregates.alert import MAX_DETAIL, AlertFirings, firings_stream_id
from relay_es.aggregates.application import app_stream_id
from relay_es.aggregates.executor import DisconnectReason, executor_stream_id
from relay_es.domain.alerting import DEFAULT_MIN_INTERVAL, MAX_RULES, AlertingRule, SealedWebhook, Webhook, key_scope
from relay_es.domain.errors import InvalidSetting, UnknownAlertingRule, UnknownApplication
from relay_es.domain.sealing import MemoryKeys, Unsealable
from relay_es.engine.alert_commands import HISTORY_PAGE
from relay_es.engine.service import Relay
from tests.engine.support import kinds
from tests.support import POPO, info

ORG, APP, OPS = "acme", "shop", "ops"


@pytest.fixture
def relay(relay: Relay) -> Relay:
    """The in-memory Relay (conftest), with the watched and the receiving application registered."""
    relay.register_app(ORG, APP)
    relay.register_app(ORG, OPS)
    return relay


@pytest.fixture
def writers(two_relays: tuple[Relay, Relay]) -> tuple[Relay, Relay]:
    """Two Relays on one store (conftest's ``two_relays``), the watched application registered."""
    two_relays[0].register_app(ORG, APP)
    return two_relays


def create(relay: Relay, rule_type: str = "ExecutorDead", metadata: Any = None, *, app: str = APP,
           min_interval_secs: int = 60, receiving_app: str | None = None) -> AlertingRule:
    return relay.create_alerting_rule(ORG, app, rule_type=rule_type, metadata=metadata,
                                      min_interval_secs=min_interval_secs, receiving_app=receiving_app)


def fire(relay: Relay, rule: AlertingRule, alert_id: str = "a1", **kw: Any) -> bool:
    fields: dict[str, Any] = dict(message="executor A is dead", metadata={"executorId": "A"}, channels=["app"])
    fields.update(kw)
    return relay.fire_alert(rule, alert_id=alert_id, **fields)


def fired(relay: Relay, rule: AlertingRule) -> list[Any]:
    return [e for e in relay.stream(firings_stream_id(rule.org, rule.app, rule.id))
            if isinstance(e, AlertFirings.Fired)]


# -------------------------------------------------------------------- rules


def test_a_rule_is_created_on_the_applications_stream(relay: Relay) -> None:
    rule = create(relay, "WorkflowFailure", {"workflowName": "checkout",
                                             "webhooks": [{"url": "https://example.com/h", "secret": "s" * 16}]},
                  min_interval_secs=120, receiving_app=OPS)
    assert str(uuid.UUID(rule.id)) == rule.id  # ids are Relay's
    assert (rule.org, rule.app, rule.receiving_app, rule.rule_type, rule.min_interval_secs) == (
        ORG, APP, OPS, "WorkflowFailure", 120)
    assert rule.parameters == {"workflowName": "checkout", "threshold": 1, "windowSecs": 300}
    assert rule.webhooks == (SealedWebhook("https://example.com/…", "json", True, rule.webhooks[0].sealed),)
    assert relay.open_webhook(rule, 0) == Webhook("https://example.com/h", "json", "s" * 16)
    assert kinds(relay, app_stream_id(ORG, APP))[-1] == "AlertingRuleCreated"
    assert relay.get_app(ORG, APP).alerting_rules == [rule]
    assert relay.alerting_rules(ORG, OPS) == []  # the watched application's rule, not the receiver's


SLACK_URL = "https://hooks.slack.example/services/T000/B000/XXXXSECRETPATH"
SECRET = "topsecret-0123456789"


def hooks() -> dict[str, Any]:
    return {"webhooks": [{"url": "https://hooks.example/relay?token=QUERYSECRET", "secret": SECRET},
                         {"url": SLACK_URL, "format": "slack"}]}


def stored_states(relay: Relay, stream_id: uuid.UUID) -> list[bytes]:
    """Every stored event and snapshot of a stream, as the store's tables hold them."""
    out = [e.state for e in relay.recorder.select_events(stream_id)]
    if relay.snapshots is not None:
        out += [e.state for e in relay.snapshots.recorder.select_events(stream_id)]
    return out


def test_a_rules_webhooks_are_stored_sealed_and_open_on_every_writer(writers: tuple[Relay, Relay]) -> None:
    mine, other = writers
    rule = create(mine, metadata=hooks())
    mine.take_snapshot(app_stream_id(ORG, APP))
    states = stored_states(mine, app_stream_id(ORG, APP))
    assert len(states) >= 3 and any(b"hooks.example" in s for s in states)
    for state in states:  # neither the secret nor a URL's credential part, in any event or snapshot
        assert b"topsecret" not in state and b"SECRETPATH" not in state and b"QUERYSECRET" not in state
    assert [w.public() for w in rule.webhooks] == [
        {"url": "https://hooks.example/…", "format": "json", "signed": True},
        {"url": "https://hooks.slack.example/…", "format": "slack", "signed": False}]
    (again, _), = other.alerting_rules(ORG, APP)  # another instance on the store opens them
    assert other.open_webhook(again, 0) == Webhook("https://hooks.example/relay?token=QUERYSECRET", "json", SECRET)
    assert other.open_webhook(again, 1) == Webhook(SLACK_URL, "slack", None)


def test_deleting_a_rule_erases_its_webhooks_from_the_history(writers: tuple[Relay, Relay]) -> None:
    mine, other = writers
    rule, kept = create(mine, metadata=hooks()), create(mine, metadata=hooks())
    mine.delete_alerting_rule(ORG, APP, rule.id)
    assert mine.keys.get(key_scope(rule.id)) is None and other.keys.get(key_scope(rule.id)) is None
    assert other.open_webhook(rule, 0) is None  # the sealed copy the history keeps opens no more
    with pytest.raises(Unsealable):  # nor with another rule's key
        rule.webhooks[0].opened(other.keys.get(key_scope(kept.id)), rule.id, 0)
    assert other.open_webhook(kept, 0) is not None  # the other rule's are untouched


def test_deleting_the_application_erases_its_rules_webhooks(relay: Relay) -> None:
    rule, plain = create(relay, metadata=hooks()), create(relay)
    relay.delete_app(ORG, APP)
    assert relay.keys.get(key_scope(rule.id)) is None
    assert relay.open_webhook(rule, 1) is None
    assert plain.webhooks == ()


def test_a_rule_made_while_its_application_is_deleted_has_its_key_erased_too(writers: tuple[Relay, Relay]) -> None:
    mine, other = writers
    other.register_app(ORG, OPS)
    made: list[AlertingRule] = []
    erase = mine.erase_rules_keys

    def then_another_writer_makes_a_rule(app: Any) -> None:
        erase(app)
        if not made:  # between this writer's read of the application and its save
            made.append(create(other, metadata=hooks()))

    mine.erase_rules_keys = then_another_writer_makes_a_rule  # type: ignore[method-assign]
    mine.delete_app(ORG, APP)  # its save conflicts; the retry reads the rule and erases its key
    assert made and other.keys.get(key_scope(made[0].id)) is None
    with pytest.raises(UnknownApplication):
        other.get_app(ORG, APP)


def test_a_rule_id_names_no_key_outside_its_application(relay: Relay) -> None:
    rule = create(relay, metadata=hooks())
    with pytest.raises(UnknownAlertingRule):
        relay.delete_alerting_rule(ORG, OPS, rule.id)  # a caller of another application cannot erase it
    with pytest.raises(UnknownApplication):
        relay.delete_alerting_rule("other", APP, rule.id)
    assert relay.open_webhook(relay.get_app(ORG, APP).alerting_rule(rule.id), 0) is not None


class CountedKeys(MemoryKeys):
    def __init__(self) -> None:
        super().__init__()
        self.made: list[str] = []

    def create(self, scope: str) -> bytes:
        self.made.append(scope)
        return super().create(scope)


def test_a_refused_rule_leaves_no_key(relay: Relay) -> None:
    relay.keys = keys = CountedKeys()
    with pytest.raises(UnknownApplication):
        relay.create_alerting_rule(ORG, "nowhere", rule_type="ExecutorDead", metadata=hooks(), min_interval_secs=60,
                                   receiving_app=OPS)
    full = relay.get_app(ORG, APP)
    for i in range(MAX_RULES):
        full.create_alerting_rule(AlertingRule(id=f"r{i}", org=ORG, app=APP, receiving_app=APP,
                                               rule_type="ExecutorDead"), at=relay.now())
    relay.save(full)
    with pytest.raises(InvalidSetting):
        create(relay, metadata=hooks())
    assert len(keys.made) == 2 and all(keys.get(scope) is None for scope in keys.made)


def test_a_rule_whose_every_retry_met_another_writer_leaves_no_key(relay: Relay, monkeypatch) -> None:
    from eventsourcing.persistence import IntegrityError

    relay.keys = keys = CountedKeys()

    def conflicted(*args: Any, **kw: Any) -> bool:
        raise IntegrityError("another writer's event holds its place")

    monkeypatch.setattr(relay, "_change_app", conflicted)
    with pytest.raises(IntegrityError):
        create(relay, metadata=hooks())
    assert len(keys.made) == 1 and keys.get(keys.made[0]) is None


def test_a_rule_kept_in_the_clear_before_sealing_still_delivers(relay: Relay) -> None:
    """Rules made before 2026-12-05 hold their webhooks as they were given; they still open, and
    deleting them needs no key."""
    plain = AlertingRule(id=str(uuid.uuid4()), org=ORG, app=APP, receiving_app=APP, rule_type="ExecutorDead",
                         webhooks=(Webhook("https://hooks.example/old", "json", SECRET),))
    app = relay.get_app(ORG, APP)
    app.create_alerting_rule(plain, at=relay.now())
    relay.save(app)
    ((found, _),) = relay.alerting_rules(ORG, APP)
    assert found == plain and relay.open_webhook(found, 0) == plain.webhooks[0]
    relay.delete_alerting_rule(ORG, APP, plain.id)
    assert relay.alerting_rules(ORG, APP) == []


def test_the_receiving_application_is_the_watched_one_by_default(relay: Relay) -> None:
    rule = create(relay)
    assert rule.receiving_app == APP
    assert rule.min_interval_secs == 60 and create(relay, min_interval_secs=DEFAULT_MIN_INTERVAL).min_interval_secs \
        == DEFAULT_MIN_INTERVAL


def test_the_receiving_application_must_be_registered(relay: Relay) -> None:
    before = kinds(relay, app_stream_id(ORG, APP))
    with pytest.raises(InvalidSetting) as info:  # a field of the request: a 422, not the path's 404
        create(relay, receiving_app="nowhere")
    assert info.value.field == "receivingAppName" and "nowhere" in info.value.message
    relay.delete_app(ORG, OPS)
    with pytest.raises(InvalidSetting):
        create(relay, receiving_app=OPS)
    assert kinds(relay, app_stream_id(ORG, APP)) == before
    assert relay.alerting_rules(ORG, APP) == []


def test_the_watched_application_must_be_registered(relay: Relay) -> None:
    with pytest.raises(UnknownApplication) as info:
        create(relay, app="nowhere", receiving_app=OPS)
    assert info.value.app == "nowhere"
    with pytest.raises(UnknownApplication):
        relay.alerting_rules(ORG, "nowhere")


@pytest.mark.parametrize(("rule_type", "metadata", "kw", "field"), [
    ("Nope", None, {}, "ruleType"),
    ("WorkflowFailure", {"threshhold": 3}, {}, "ruleMetadata"),
    ("WorkflowFailure", {"threshold": 0}, {}, "ruleMetadata.threshold"),
    ("ExecutorDead", {"webhooks": [{"url": "ftp://example.com"}]}, {}, "ruleMetadata.webhooks[0].url"),
    ("ExecutorDead", None, {"min_interval_secs": -1}, "minIntervalSecs"),
    ("ExecutorDead", None, {"min_interval_secs": True}, "minIntervalSecs"),
    ("UnresponsiveApplication", None, {}, "receivingAppName"),  # the default receiver is itself
    ("UnresponsiveApplication", None, {"receiving_app": APP}, "receivingAppName"),
])
def test_an_invalid_rule_records_nothing(relay: Relay, rule_type: str, metadata: Any, kw: dict[str, Any],
                                         field: str) -> None:
    before = kinds(relay, app_stream_id(ORG, APP))
    with pytest.raises(InvalidSetting) as info:
        create(relay, rule_type, metadata, **kw)
    assert info.value.field == field
    assert kinds(relay, app_stream_id(ORG, APP)) == before


def test_an_unresponsive_application_alerts_another(relay: Relay) -> None:
    rule = create(relay, "UnresponsiveApplication", {"thresholdSecs": 30}, receiving_app=OPS)
    assert rule.receiving_app == OPS and rule.parameters == {"thresholdSecs": 30}


def test_rules_are_listed_oldest_first_with_when_each_last_fired(relay: Relay, clock) -> None:
    first = create(relay, "ExecutorDead")
    second = create(relay, "RecoveryFailed", {"attempts": 2})
    third = create(relay, "SlowQueue", {"queueName": "orders"})
    assert relay.alerting_rules(ORG, APP) == [(first, None), (second, None), (third, None)]
    assert fire(relay, second)
    fired_at = clock.now()
    clock.advance(5)
    assert fire(relay, third, at=clock.now() - timedelta(seconds=2))  # the time given, not the clock's
    assert relay.alerting_rules(ORG, APP) == [(first, None), (second, fired_at),
                                              (third, clock.now() - timedelta(seconds=2))]


def test_deleting_a_rule(relay: Relay) -> None:
    keep, gone = create(relay), create(relay, "RecoveryDeferred")
    relay.delete_alerting_rule(ORG, APP, gone.id)
    assert kinds(relay, app_stream_id(ORG, APP))[-1] == "AlertingRuleDeleted"
    assert relay.alerting_rules(ORG, APP) == [(keep, None)]
    with pytest.raises(UnknownAlertingRule) as info:
        relay.delete_alerting_rule(ORG, APP, gone.id)
    assert gone.id in str(info.value) and APP in str(info.value)


def test_deleting_an_unknown_rule_or_a_rule_of_an_unknown_application(relay: Relay) -> None:
    before = kinds(relay, app_stream_id(ORG, APP))
    with pytest.raises(UnknownAlertingRule):
        relay.delete_alerting_rule(ORG, APP, "no-such-rule")
    assert kinds(relay, app_stream_id(ORG, APP)) == before
    rule = create(relay)
    with pytest.raises(UnknownApplication):
        relay.delete_alerting_rule(ORG, "nowhere", rule.id)
    with pytest.raises(UnknownAlertingRule):
        relay.delete_alerting_rule(ORG, OPS, rule.id)  # another application's rule


def test_rules_go_with_the_application(relay: Relay) -> None:
    create(relay)
    relay.delete_app(ORG, APP)
    with pytest.raises(UnknownApplication):
        relay.alerting_rules(ORG, APP)
    relay.register_app(ORG, APP)
    assert relay.alerting_rules(ORG, APP) == []


# ------------------------------------------------------------------- alerts


def test_an_alert_is_recorded_on_the_rules_own_stream(relay: Relay, clock) -> None:
    rule = create(relay, receiving_app=OPS)
    assert fire(relay, rule, channels=["app", "webhook:0"], cause="stream@7") is True
    sid = firings_stream_id(ORG, APP, rule.id)
    assert kinds(relay, sid) == ["Opened", "Fired"]
    (e,) = fired(relay, rule)
    assert (e.alert_id, e.rule_type, e.receiving_app, e.message, e.cause) == (
        "a1", "ExecutorDead", OPS, "executor A is dead", "stream@7")
    assert e.metadata == {"executorId": "A"} and e.channels == ["app", "webhook:0"]
    assert e.timestamp == clock.now()


def test_an_alert_within_the_interval_is_refused_and_one_after_it_recorded(relay: Relay, clock) -> None:
    rule = create(relay, min_interval_secs=60)
    assert fire(relay, rule, "a1")
    clock.advance(59.999999)
    assert fire(relay, rule, "a2") is False
    clock.advance(0.000001)  # exactly the interval
    assert fire(relay, rule, "a3") is True
    assert fire(relay, rule, "a4") is False
    assert [e.alert_id for e in fired(relay, rule)] == ["a1", "a3"]


def test_an_interval_of_zero_records_every_alert(relay: Relay) -> None:
    rule = create(relay, min_interval_secs=0)
    assert all(fire(relay, rule, f"a{i}") for i in range(3))
    assert len(fired(relay, rule)) == 3


def test_each_rule_has_its_own_interval(relay: Relay) -> None:
    one, two = create(relay), create(relay)
    assert fire(relay, one) and fire(relay, two)
    assert not fire(relay, one) and not fire(relay, two)


def test_the_interval_holds_across_two_writers_and_a_restart(writers: tuple[Relay, Relay], store_env, clock) -> None:
    mine, other = writers
    rule = create(mine, min_interval_secs=300)
    assert other.alerting_rules(ORG, APP) == [(rule, None)]  # the rule is in the store, not in memory
    assert fire(mine, rule, "a1")
    fired_at = clock.now()
    clock.advance(299)
    assert fire(other, rule, "a2") is False  # the other writer reads the last alert from the store
    mine.close()  # a restart: nothing of the first Relay is left in memory
    restarted = Relay(store_env, clock=clock)
    try:
        assert restarted.alerting_rules(ORG, APP) == [(rule, fired_at)]
        assert fire(restarted, rule, "a3") is False
        clock.advance(1)
        assert fire(restarted, rule, "a4") is True
        assert fire(other, rule, "a5") is False
        clock.advance(300)
        assert fire(other, rule, "a6") is True
        assert [e.alert_id for e in fired(restarted, rule)] == ["a1", "a4", "a6"]
        assert restarted.alerting_rules(ORG, APP) == [(rule, clock.now())]
    finally:
        restarted.close()


def test_two_writers_racing_on_a_first_alert_record_one(writers: tuple[Relay, Relay]) -> None:
    mine, other = writers
    rule = create(mine, min_interval_secs=60)
    sid = firings_stream_id(ORG, APP, rule.id)
    # mine read the stream (none yet) just before the other recorded the first alert: its save
    # conflicts on the stream's version, and the command, run again on what the store holds, is refused
    real_maybe, reads = mine._maybe, []

    def stale_first_read(stream_id: uuid.UUID) -> Any:
        reads.append(stream_id)
        if stream_id == sid and len(reads) == 1:
            assert fire(other, rule, "theirs")
            return None
        return real_maybe(stream_id)

    mine._maybe = stale_first_read  # type: ignore[method-assign]
    assert fire(mine, rule, "mine") is False
    assert reads == [sid, sid]
    assert [e.alert_id for e in fired(mine, rule)] == ["theirs"]
    assert kinds(mine, sid) == ["Opened", "Fired"]


def test_alert_metadata_and_message_are_sanitised(relay: Relay) -> None:
    rule = create(relay, min_interval_secs=0)
    metadata: dict[Any, Any] = {"evil\x1b[31m": "line\nbreak\x00nul\u202e", "long": "v" * 5000, "k" * 500: "x",
                                7: 8, "none": None}
    metadata.update({f"extra{i:02d}": str(i) for i in range(40)})
    assert fire(relay, rule, metadata=metadata, message="boom\r\n\x07" + "m" * 10_000)
    (e,) = fired(relay, rule)
    assert len(e.metadata) == 32  # the first 32 given
    assert e.metadata["evil\\x1b[31m"] == "line\\nbreak\\x00nul\\u202e"
    assert e.metadata["long"] == "v" * 1024 + "…"
    assert e.metadata["k" * 128 + "…"] == "x"
    assert e.metadata["7"] == "8" and e.metadata["none"] == "None"
    assert list(e.metadata)[5:] == [f"extra{i:02d}" for i in range(27)]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in e.metadata.items())
    assert e.message.startswith("boom\\r\\n\\x07m") and e.message.endswith("…") and len(e.message) == 4097


def test_the_callers_metadata_is_left_alone(relay: Relay) -> None:
    rule = create(relay)
    metadata = {"k\n": "v\n"}
    fire(relay, rule, metadata=metadata)
    assert metadata == {"k\n": "v\n"}


# --------------------------------------------------------------- deliveries


def test_a_delivery_attempt_is_recorded_on_the_rules_stream(relay: Relay, clock) -> None:
    rule = create(relay)
    fire(relay, rule)
    clock.advance(3)
    relay.record_alert_delivery(ORG, APP, rule.id, alert_id="a1", channel="webhook:0", attempt=1, ok=False,
                                detail="HTTP 503\n\x1b[2J" + "d" * 2000, final=False)
    relay.record_alert_delivery(ORG, APP, rule.id, alert_id="a1", channel="webhook:0", attempt=2, ok=True,
                                detail=None, final=True)
    sid = firings_stream_id(ORG, APP, rule.id)
    assert kinds(relay, sid) == ["Opened", "Fired", "DeliveryAttempted", "DeliveryAttempted"]
    failed, ok = list(relay.stream(sid))[2:]
    assert (failed.alert_id, failed.channel, failed.attempt, failed.ok, failed.final) == ("a1", "webhook:0", 1,
                                                                                          False, False)
    assert failed.detail.startswith("HTTP 503\\n\\x1b[2Jd") and len(failed.detail) == MAX_DETAIL
    assert failed.timestamp == clock.now()
    assert (ok.attempt, ok.ok, ok.detail, ok.final) == (2, True, None, True)
    # a delivery is no alert: the interval still runs from the alert
    assert relay.alerting_rules(ORG, APP)[0][1] == clock.now() - timedelta(seconds=3)


def test_a_delivery_for_an_unknown_rule_is_refused(relay: Relay) -> None:
    with pytest.raises(UnknownAlertingRule):
        relay.record_alert_delivery(ORG, APP, "no-such-rule", alert_id="a1", channel="app", attempt=1, ok=True,
                                    detail=None, final=True)
    rule = create(relay)  # a rule that never fired has no stream of alerts either
    with pytest.raises(UnknownAlertingRule):
        relay.record_alert_delivery(ORG, APP, rule.id, alert_id="a1", channel="app", attempt=1, ok=True,
                                    detail=None, final=True)
    assert kinds(relay, firings_stream_id(ORG, APP, rule.id)) == []


# ------------------------------------------------------- an executor's disconnects


def test_an_executors_disconnects_are_read_back_to_the_window_or_its_incarnation(clock) -> None:
    """What an ExecutorFlapping rule counts of an executor's past (the alert manager reads it once per executor,
    the first time it is told of a disconnect): from the stream's end back, a page at a time, down to the
    window's start or the executor's last death (or its application's deletion), Relay's own restarts and
    superseded sockets left out."""
    relay = Relay(POPO, clock=clock, default_grace=timedelta(seconds=5))
    sid = executor_stream_id(ORG, APP, "A")
    n = count()

    def cycle(reason: str = "socket_closed") -> None:
        conn = f"c{next(n)}"
        assert relay.executor_connected(ORG, APP, info("A"), connection_id=conn, owner="o")
        assert relay.executor_disconnected(sid, connection_id=conn, reason=reason)

    def read(since_secs: float, **kw: Any) -> list[Any]:
        last = [e for e in relay.stream(sid)][-1]
        return relay.disconnects(sid, before=last.originator_version + 1,
                                 since=clock.now() - timedelta(seconds=since_secs),
                                 excluding=(DisconnectReason.RELAY_RESTARTED, DisconnectReason.SUPERSEDED), **kw)

    cycle()
    clock.advance(5)
    assert relay.declare_dead_if_due(sid, relay.get_executor(ORG, APP, "A").deadline)  # an earlier incarnation
    clock.advance(100)
    cycle()  # out of a 30 s window
    clock.advance(50)
    times = []
    for reason in ("socket_closed", "relay_restarted", "ping_timeout", "superseded", "clean_close"):
        cycle(reason)
        if reason not in ("relay_restarted", "superseded"):
            times.append(clock.now())
        clock.advance(1)
    assert read(30) == times
    assert read(30, limit=2) == times[1:]  # the latest
    assert read(1000) == [times[0] - timedelta(seconds=50), *times]  # not the dead incarnation's
    for _ in range(HISTORY_PAGE):  # more than a page of events
        cycle()
    assert len(read(1000)) == HISTORY_PAGE + 4
    assert read(0) == []
    relay.register_app(ORG, APP)
    relay.delete_app(ORG, APP)
    cycle("app_deleted")  # its socket closed by its application's deletion: that application's end
    relay.register_app(ORG, APP)
    clock.advance(1)
    cycle()
    assert read(1000) == [clock.now()]
