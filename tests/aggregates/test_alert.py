"""The AlertFirings aggregate: conditional firing on ``min_interval``, delivery attempts, replay."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.alert import MAX_DETAIL, AlertFirings, firings_stream_id
from relay_es.domain.clock import FakeClock
from relay_es.engine.service import Relay
from tests.aggregates.support import replay_any
from tests.support import POPO

T0 = datetime(2026, 11, 30, 12, 0, 0, 123457, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_firings(rule_id: str = "r1") -> AlertFirings:
    return AlertFirings(org="o", app="shop", rule_id=rule_id, timestamp=T0)


def fire(f: AlertFirings, when: datetime, *, interval: timedelta = MINUTE, alert_id: str = "a1", **kw: Any) -> bool:
    fields: dict[str, Any] = dict(alert_id=alert_id, rule_type="ExecutorDead", receiving_app="ops",
                                  message="executor A is dead", metadata={"executorId": "A"},
                                  channels=["app", "webhook:0"], cause="stream@3")
    fields.update(kw)
    return f.fire(min_interval=interval, at=when, **fields)


def refused_fire(f: AlertFirings, when: datetime, **kw: Any) -> None:
    before, pending = copy.deepcopy(vars(f)), len(f.pending_events)
    assert fire(f, when, **kw) is False
    assert vars(f) == before
    assert len(f.pending_events) == pending  # no event


# ------------------------------------------------------------------ identity


def test_one_stream_per_rule() -> None:
    f = new_firings()
    assert f.id == firings_stream_id("o", "shop", "r1") == AlertFirings.create_id("o", "shop", "r1")
    others = {firings_stream_id("o", "shop", "r2"), firings_stream_id("o", "shop2", "r1"),
              firings_stream_id("p", "shop", "r1")}
    assert f.id not in others and len(others) == 3
    (opened,) = f.collect_events()
    assert isinstance(opened, AlertFirings.Opened) and opened.timestamp == T0
    assert (f.org, f.app, f.rule_id, f.last_fired_at, f.fired) == ("o", "shop", "r1", None, 0)


# -------------------------------------------------------------------- firing


def test_the_first_alert_is_recorded_with_everything_it_was_given() -> None:
    f = new_firings()
    f.collect_events()
    assert fire(f, at(5), metadata={"executorId": "A", "reason": "gone"}) is True
    (e,) = f.collect_events()
    assert isinstance(e, AlertFirings.Fired)
    assert (e.alert_id, e.rule_type, e.receiving_app, e.message, e.cause) == (
        "a1", "ExecutorDead", "ops", "executor A is dead", "stream@3")
    assert e.metadata == {"executorId": "A", "reason": "gone"}
    assert e.channels == ["app", "webhook:0"]
    assert e.timestamp == at(5)
    assert f.last_fired_at == at(5) and f.fired == 1


def test_the_event_holds_copies_of_what_it_was_given() -> None:
    f = new_firings()
    metadata, channels = {"k": "v"}, ["app"]
    fire(f, at(1), metadata=metadata, channels=channels)
    metadata["k"], channels[0] = "changed", "changed"
    e = f.collect_events()[-1]
    assert e.metadata == {"k": "v"} and e.channels == ["app"]


@pytest.mark.parametrize("after", [0, 0.000001, 1, 59, 59.999999])
def test_a_second_alert_within_the_interval_is_refused(after: float) -> None:
    f = new_firings()
    assert fire(f, at(10))
    f.collect_events()
    refused_fire(f, at(10 + after), alert_id="a2")
    assert f.last_fired_at == at(10) and f.fired == 1


def test_an_alert_at_exactly_the_end_of_the_interval_is_recorded() -> None:
    f = new_firings()
    assert fire(f, at(10))
    refused_fire(f, at(10) + MINUTE - timedelta(microseconds=1), alert_id="a2")
    assert fire(f, at(10) + MINUTE, alert_id="a3") is True
    assert f.last_fired_at == at(70) and f.fired == 2
    # and the interval runs from the last alert recorded, not from the refused one
    refused_fire(f, at(129), alert_id="a4")
    assert fire(f, at(130), alert_id="a5") is True
    assert [e.alert_id for e in f.collect_events() if isinstance(e, AlertFirings.Fired)] == ["a1", "a3", "a5"]


def test_the_interval_is_the_one_given_at_each_fire() -> None:
    f = new_firings()
    assert fire(f, at(0), interval=timedelta(hours=1))
    assert fire(f, at(30), interval=timedelta(seconds=30))  # a rule whose interval was shortened since
    refused_fire(f, at(31), interval=timedelta(seconds=30))


def test_an_interval_of_zero_records_every_alert() -> None:
    f = new_firings()
    for i in range(5):
        assert fire(f, at(1), interval=timedelta(0), alert_id=f"a{i}") is True  # the same instant too
    assert fire(f, at(2), interval=timedelta(0)) is True
    assert f.fired == 6 and f.last_fired_at == at(2)


def test_an_alert_timed_before_the_last_one_by_less_than_the_interval_is_refused() -> None:
    # Another writer's alert, its clock a little ahead or its command a little later, or a small step back:
    # the last alert is "in the future", but less than the interval away.
    f = new_firings()
    assert fire(f, at(100))
    refused_fire(f, at(50))
    refused_fire(f, at(40) + timedelta(microseconds=1))
    assert fire(f, at(50), interval=timedelta(0)) is True  # no interval: every alert


def test_a_wall_clock_set_back_by_the_interval_or_more_does_not_silence_the_rule() -> None:
    # The last alert "in the future" by hours: the wall clock went back since. It refused every alert
    # until the clock caught up (6 h for a 1 min interval).
    f = new_firings()
    assert fire(f, at(6 * 3600))
    assert fire(f, at(600), alert_id="a2") is True
    assert f.last_fired_at == at(600) and f.fired == 2
    refused_fire(f, at(659), alert_id="a3")  # and the interval runs from that one, either way
    refused_fire(f, at(540) + timedelta(microseconds=1), alert_id="a3")
    assert fire(f, at(540), alert_id="a4") is True  # a whole interval before it


# ---------------------------------------------------------------- deliveries


def test_a_delivery_attempt_is_recorded_with_its_outcome() -> None:
    f = new_firings()
    fire(f, at(1))
    f.collect_events()
    f.record_delivery(alert_id="a1", channel="webhook:0", attempt=2, ok=False, detail="HTTP 503", final=False,
                      at=at(2))
    f.record_delivery(alert_id="a1", channel="app", attempt=1, ok=True, detail=None, final=True, at=at(3))
    first, second = f.collect_events()
    assert isinstance(first, AlertFirings.DeliveryAttempted)
    assert (first.alert_id, first.channel, first.attempt, first.ok, first.detail, first.final, first.timestamp) == (
        "a1", "webhook:0", 2, False, "HTTP 503", False, at(2))
    assert (second.channel, second.ok, second.detail, second.final) == ("app", True, None, True)
    assert f.fired == 1 and f.last_fired_at == at(1)  # a delivery is no alert


@pytest.mark.parametrize(("length", "kept"), [(0, 0), (MAX_DETAIL - 1, MAX_DETAIL - 1), (MAX_DETAIL, MAX_DETAIL),
                                              (MAX_DETAIL + 1, MAX_DETAIL), (100_000, MAX_DETAIL)])
def test_a_delivery_detail_is_cut(length: int, kept: int) -> None:
    f = new_firings()
    f.record_delivery(alert_id="a1", channel="app", attempt=1, ok=False, detail="x" * length, final=True, at=at(1))
    e = f.collect_events()[-1]
    assert e.detail == "x" * kept


# -------------------------------------------------------------------- replay


def history() -> tuple[AlertFirings, list[Any]]:
    f = new_firings()
    fire(f, at(1), metadata={"a": "1", "b": "\\n"}, channels=["app"], cause=None)
    f.record_delivery(alert_id="a1", channel="app", attempt=1, ok=False, detail="é" * 600, final=False, at=at(2))
    f.record_delivery(alert_id="a1", channel="app", attempt=2, ok=True, detail=None, final=True, at=at(3))
    fire(f, at(61), alert_id="a2", channels=[])
    return f, f.collect_events()


def test_replay_rebuilds_the_same_firings() -> None:
    f, events = history()
    rebuilt = replay_any(events)
    assert isinstance(rebuilt, AlertFirings)
    assert vars(rebuilt) == vars(f)
    assert rebuilt.version == 5 and rebuilt.fired == 2 and rebuilt.last_fired_at == at(61)


def test_events_round_trip_through_a_real_event_store() -> None:
    relay = Relay(POPO, clock=FakeClock(T0))
    f, events = history()
    for e in events:  # an aggregate saved with its events pending, as the commands do
        f.pending_events.append(e)
    relay.save(f)
    stored = list(relay.stream(f.id))
    assert [type(e).__name__ for e in stored] == ["Opened", "Fired", "DeliveryAttempted", "DeliveryAttempted",
                                                  "Fired"]
    for mine, theirs in zip(events, stored):
        assert type(mine) is type(theirs)
        assert vars(mine) == vars(theirs)
    loaded = relay.repository.get(f.id)
    assert isinstance(loaded, AlertFirings)
    assert vars(loaded) == vars(f)
    # and the loaded copy keeps the interval: what a restarted Relay would find
    refused_fire(loaded, at(62), alert_id="a3")
    assert fire(loaded, at(121), alert_id="a3")
    relay.save(loaded)
    assert relay.repository.get(f.id).fired == 3
