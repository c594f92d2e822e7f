"""The Application aggregate: registration, restore, settings, deletion."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.application import (
    AppSettings,
    Application,
    SettingsPatch,
    app_stream_id,
    check_app_name,
    check_org_name,
)
from relay_es.domain.errors import IllegalTransition, InvalidSetting

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_app(private_mode: bool = False) -> Application:
    app = Application(org="o", name="shop", private_mode=private_mode, timestamp=T0)
    return app


def replay(events: list[Any]) -> Application:
    agg = None
    for e in events:
        agg = e.mutate(agg)
    assert isinstance(agg, Application)
    return agg


def refused(app: Application, command: str, **kwargs: Any) -> IllegalTransition:
    before = copy.deepcopy(vars(app))
    with pytest.raises(IllegalTransition) as info:
        getattr(app, command)(**kwargs)
    assert vars(app) == before
    return info.value


# ---------------------------------------------------------------- register


def test_register() -> None:
    app = new_app(private_mode=True)
    assert app.id == app_stream_id("o", "shop") == Application.create_id("o", "shop")
    assert app.id != app_stream_id("o", "shop2") != app_stream_id("p", "shop")
    assert (app.org, app.name, app.deleted) == ("o", "shop", False)
    assert app.settings == AppSettings(private_mode=True)
    (e,) = app.collect_events()
    assert isinstance(e, Application.Registered)
    assert e.timestamp == T0 and e.private_mode is True


@pytest.mark.parametrize("private_mode", [None, False])
def test_register_again_with_nothing_new_records_nothing(private_mode: bool | None) -> None:
    app = new_app(private_mode=False)
    app.collect_events()
    assert app.register_again(private_mode=private_mode, at=at(1)) is False
    assert app.collect_events() == []


def test_register_again_keeps_other_settings_when_private_mode_is_not_given() -> None:
    app = new_app(private_mode=True)
    app.change_settings(SettingsPatch(executor_timeout=timedelta(seconds=60)), at=at(1))
    app.collect_events()
    assert app.register_again(private_mode=None, at=at(2)) is False
    assert app.settings.private_mode is True and app.settings.executor_timeout == timedelta(seconds=60)


def test_register_again_with_another_private_mode_changes_only_that() -> None:
    app = new_app(private_mode=False)
    app.change_settings(SettingsPatch(executor_timeout=timedelta(seconds=60)), at=at(1))
    app.collect_events()
    assert app.register_again(private_mode=True, at=at(2)) is True
    (e,) = app.collect_events()
    assert isinstance(e, Application.SettingsChanged)
    assert e.changed == ["private_mode"]
    assert app.settings == AppSettings(executor_timeout=timedelta(seconds=60), private_mode=True)


@pytest.mark.parametrize(("given", "expected"), [(None, False), (False, False), (True, True)])
def test_register_again_restores_a_deleted_application_with_default_settings(
    given: bool | None, expected: bool
) -> None:
    app = new_app(private_mode=True)
    app.change_settings(SettingsPatch(gc_rows_threshold=10), at=at(1))
    app.delete(at=at(2))
    app.collect_events()
    assert app.register_again(private_mode=given, at=at(3)) is True
    (e,) = app.collect_events()
    assert isinstance(e, Application.Restored)
    assert e.private_mode is expected and e.timestamp == at(3)
    assert app.deleted is False
    assert app.settings == AppSettings(private_mode=expected)
    # Restored, it behaves like a registered application again.
    assert app.change_settings(SettingsPatch(gc_rows_threshold=5), at=at(4)) is True


# ---------------------------------------------------------------- settings


def test_change_settings_records_only_the_changed_fields() -> None:
    app = new_app()
    app.collect_events()
    patch = SettingsPatch(executor_timeout=timedelta(seconds=90), gc_rows_threshold=1000, private_mode=False)
    assert app.change_settings(patch, at=at(1)) is True
    (e,) = app.collect_events()
    assert isinstance(e, Application.SettingsChanged)
    assert e.changed == ["executor_timeout", "gc_rows_threshold"]
    # The event carries the full new settings, so a replay needs no earlier state.
    assert (e.executor_timeout, e.gc_time_threshold, e.gc_rows_threshold, e.global_timeout, e.private_mode) == (
        timedelta(seconds=90), None, 1000, None, False
    )
    assert app.settings == AppSettings(executor_timeout=timedelta(seconds=90), gc_rows_threshold=1000)


def test_change_settings_without_a_change_records_nothing() -> None:
    app = new_app()
    app.change_settings(SettingsPatch(global_timeout=timedelta(hours=1)), at=at(1))
    app.collect_events()
    version = app.version
    assert app.change_settings(SettingsPatch(global_timeout=timedelta(hours=1)), at=at(2)) is False
    assert app.change_settings(SettingsPatch(), at=at(3)) is False
    assert app.change_settings(SettingsPatch(gc_time_threshold=None, private_mode=False), at=at(4)) is False
    assert app.collect_events() == []
    assert app.version == version


def test_equal_durations_in_other_units_are_no_change() -> None:
    app = new_app()
    app.change_settings(SettingsPatch(executor_timeout=timedelta(seconds=60)), at=at(1))
    app.collect_events()
    assert app.change_settings(SettingsPatch(executor_timeout=timedelta(minutes=1)), at=at(2)) is False
    assert app.collect_events() == []


def test_none_in_a_patch_clears_the_setting() -> None:
    app = new_app()
    app.change_settings(
        SettingsPatch(executor_timeout=timedelta(seconds=10), gc_time_threshold=timedelta(days=1),
                      gc_rows_threshold=100, global_timeout=timedelta(hours=2)),
        at=at(1),
    )
    assert app.settings.wants_retention
    app.collect_events()
    assert app.change_settings(SettingsPatch(gc_time_threshold=None, gc_rows_threshold=None), at=at(2)) is True
    (e,) = app.collect_events()
    assert e.changed == ["gc_time_threshold", "gc_rows_threshold"]
    assert app.settings == AppSettings(executor_timeout=timedelta(seconds=10), global_timeout=timedelta(hours=2))
    app.change_settings(SettingsPatch(global_timeout=None, executor_timeout=None), at=at(3))
    assert app.settings == AppSettings()
    assert not app.settings.wants_retention


def test_change_settings_is_refused_when_deleted() -> None:
    app = new_app()
    app.delete(at=at(1))
    app.collect_events()
    err = refused(app, "change_settings", patch=SettingsPatch(gc_rows_threshold=1), at=at(2))
    assert "application 'shop'" in str(err)
    assert "cannot change settings while deleted" in str(err)
    assert app.collect_events() == []


def test_settings_survive_replay() -> None:
    app = new_app(private_mode=True)
    app.change_settings(SettingsPatch(executor_timeout=timedelta(seconds=5)), at=at(1))
    app.change_settings(SettingsPatch(gc_rows_threshold=7, private_mode=False), at=at(2))
    app.delete(at=at(3))
    app.register_again(private_mode=True, at=at(4))
    app.change_settings(SettingsPatch(global_timeout=timedelta(milliseconds=1500)), at=at(5))
    events = app.collect_events()
    assert vars(replay(events)) == vars(app)
    assert app.modified_on == at(5) and app.version == 6


# ------------------------------------------------------------ SettingsPatch


def test_settings_patch_given_only_lists_the_fields_given() -> None:
    assert SettingsPatch().given() == {}
    assert SettingsPatch(executor_timeout=None).given() == {"executor_timeout": None}
    assert SettingsPatch(gc_rows_threshold=5, private_mode=True).given() == {"gc_rows_threshold": 5,
                                                                              "private_mode": True}


def test_settings_patch_apply_to() -> None:
    base = AppSettings(executor_timeout=timedelta(seconds=30), gc_rows_threshold=10, private_mode=True)
    assert SettingsPatch().apply_to(base) == base
    assert SettingsPatch(executor_timeout=None).apply_to(base) == AppSettings(gc_rows_threshold=10,
                                                                               private_mode=True)
    assert SettingsPatch(gc_rows_threshold=20).apply_to(base) == AppSettings(
        executor_timeout=timedelta(seconds=30), gc_rows_threshold=20, private_mode=True
    )
    assert base.gc_rows_threshold == 10  # frozen: the base is not mutated


def test_app_settings_grace_and_wants_retention() -> None:
    default = timedelta(seconds=30)
    assert AppSettings().grace(default) == default
    assert AppSettings(executor_timeout=timedelta(seconds=5)).grace(default) == timedelta(seconds=5)
    assert not AppSettings().wants_retention
    assert not AppSettings(executor_timeout=timedelta(seconds=5), private_mode=True).wants_retention
    assert AppSettings(gc_time_threshold=timedelta(days=1)).wants_retention
    assert AppSettings(gc_rows_threshold=1).wants_retention
    assert AppSettings(global_timeout=timedelta(hours=1)).wants_retention


# ------------------------------------------------------------------ delete


def test_delete_then_delete_again_is_refused() -> None:
    app = new_app()
    app.delete(at=at(1))
    (_, e) = app.collect_events()
    assert isinstance(e, Application.Deleted) and app.deleted is True
    err = refused(app, "delete", at=at(2))
    assert str(err) == "application 'shop': cannot delete while deleted (it is already deleted)"
    assert err.command == "delete" and err.state == "deleted"
    assert app.collect_events() == []


def test_retention_dispatch_is_refused_when_deleted_and_recorded_otherwise() -> None:
    app = new_app()
    app.record_retention_dispatched(request_id="q1", target_executor_id="e1", gc_cutoff=at(-100),
                                    gc_rows_threshold=None, timeout_cutoff=None, at=at(1))
    app.record_retention_answered(request_id="q1", success=True, error=None, at=at(2))
    app.delete(at=at(3))
    app.collect_events()
    err = refused(app, "record_retention_dispatched", request_id="q2", target_executor_id="e1", gc_cutoff=None,
                  gc_rows_threshold=5, timeout_cutoff=None, at=at(4))
    assert "application 'shop'" in str(err) and "send retention" in str(err)


def test_protocol_violation_detail_is_truncated() -> None:
    app = new_app()
    app.record_violation(kind="oversized", detail="x" * 2000, executor_id="e1", peer="10.0.0.1:5",
                         suppressed=3, at=at(1))
    e = app.collect_events()[-1]
    assert isinstance(e, Application.ProtocolViolated)
    assert len(e.detail) == 500 and e.suppressed == 3


# ------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["a", "shop", "my-app_1.v2~x", "A" * 256, "0abc"])
def test_valid_app_names(name: str) -> None:
    assert check_app_name(name) == name


@pytest.mark.parametrize("name", ["", "-app", ".app", "a/b", "a b", "a?b", "é", "A" * 257, None, 5])
def test_invalid_app_names(name: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_app_name(name)
    assert info.value.field == "appName"
    assert str(info.value).startswith("appName: ")


@pytest.mark.parametrize("name", ["", "-org", "o/rg", "O" * 129, None])
def test_invalid_org_names(name: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_org_name(name)
    assert info.value.field == "orgName"


def test_valid_org_names() -> None:
    assert check_org_name("local") == "local"
    assert check_org_name("O" * 128) == "O" * 128


# ------------------------------------------------------------------ autoscaling


def test_an_autoscaling_policy_is_set_changed_cleared_and_replayed() -> None:
    from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout

    app = new_app()
    assert app.autoscaling is None
    p = AutoscalingPolicy("orders", Rollout(max_old_versions=1, max_old_executors=None))
    assert app.set_autoscaling_policy(p, at=at(1)) is True
    assert app.set_autoscaling_policy(p, at=at(2)) is False  # the same policy: nothing recorded
    assert app.set_autoscaling_policy(AutoscalingPolicy("orders"), at=at(3)) is True
    assert app.autoscaling == AutoscalingPolicy("orders") and app.autoscaling.rollout is None
    events = app.collect_events()
    assert [type(e).__name__ for e in events] == ["Registered", "AutoscalingPolicySet", "AutoscalingPolicySet"]
    assert replay(events).autoscaling == AutoscalingPolicy("orders")
    assert replay(events[:2]).autoscaling == p
    assert app.clear_autoscaling_policy(at=at(4)) is True
    assert app.clear_autoscaling_policy(at=at(5)) is False  # none: nothing recorded
    assert app.autoscaling is None


def test_a_policy_goes_with_the_application_and_a_deleted_one_takes_none() -> None:
    from relay_es.domain.autoscaling import AutoscalingPolicy

    app = new_app()
    app.set_autoscaling_policy(AutoscalingPolicy("orders"), at=at(1))
    app.delete(at=at(2))
    assert app.autoscaling is None
    with pytest.raises(IllegalTransition):
        app.set_autoscaling_policy(AutoscalingPolicy("orders"), at=at(3))
    with pytest.raises(IllegalTransition):
        app.clear_autoscaling_policy(at=at(3))
    app.register_again(private_mode=None, at=at(4))
    assert app.autoscaling is None
    assert replay(app.collect_events()).autoscaling is None


def test_a_refused_policy_records_nothing_and_a_snapshot_holds_only_primitives() -> None:
    from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout

    app = new_app()
    with pytest.raises(InvalidSetting):
        app.set_autoscaling_policy(AutoscalingPolicy("bad\nqueue"), at=at(1))
    assert [type(e).__name__ for e in app.collect_events()] == ["Registered"]
    app.set_autoscaling_policy(AutoscalingPolicy("orders", Rollout(1, None)), at=at(2))
    assert app._autoscaling == {"queue": "orders", "rollout": {"max_old_versions": 1, "max_old_executors": None}}


# ------------------------------------------------------------------ alerting rules


def alert_rule(rule_id: str = "r1", **overrides: Any) -> Any:
    from relay_es.domain.alerting import AlertingRule, parse_metadata

    rule_type = overrides.pop("rule_type", "WorkflowFailure")
    params, webhooks = parse_metadata(rule_type, overrides.pop("metadata", {
        "workflowName": "checkout", "webhooks": [{"url": "https://example.com/hook?k=v", "secret": "s" * 16}]}))
    fields: dict[str, Any] = dict(id=rule_id, org="o", app="shop", receiving_app="ops", rule_type=rule_type,
                                  parameters=params, webhooks=webhooks, min_interval_secs=60)
    fields.update(overrides)
    return AlertingRule(**fields)


def test_an_alerting_rule_is_created_and_read_back() -> None:
    app = new_app()
    app.collect_events()
    assert app.alerting_rules == [] and app.alerting_rule("r1") is None
    rule = alert_rule()
    assert app.create_alerting_rule(rule, at=at(1)) is None
    (e,) = app.collect_events()
    assert isinstance(e, Application.AlertingRuleCreated)
    assert e.rule == rule.as_dict() and e.timestamp == at(1)
    assert app.alerting_rules == [rule]
    assert app.alerting_rule("r1") == rule and app.alerting_rule("r2") is None
    # what is read back is a copy: changing it changes nothing held
    app.alerting_rules[0].parameters["threshold"] = 99
    assert app.alerting_rule("r1") == rule


def test_alerting_rules_are_listed_oldest_first() -> None:
    app = new_app()
    for i, rid in enumerate(["c", "a", "b", "d"]):
        app.create_alerting_rule(alert_rule(rid), at=at(i))
    assert [r.id for r in app.alerting_rules] == ["c", "a", "b", "d"]
    assert app.delete_alerting_rule("a", at=at(10)) is True
    app.create_alerting_rule(alert_rule("a"), at=at(11))  # made again: now the newest
    assert [r.id for r in app.alerting_rules] == ["c", "b", "d", "a"]
    assert [r.id for r in replay(app.collect_events()).alerting_rules] == ["c", "b", "d", "a"]


def test_a_rule_of_an_existing_id_is_refused() -> None:
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app.collect_events()
    with pytest.raises(InvalidSetting) as info:
        app.create_alerting_rule(alert_rule("r1", rule_type="ExecutorDead", metadata={}), at=at(2))
    assert info.value.field == "id"
    assert app.collect_events() == []
    assert app.alerting_rules == [alert_rule("r1")]


@pytest.mark.parametrize(("overrides", "field"), [
    ({"org": "p"}, "rule"),
    ({"app": "other"}, "rule"),
    ({"min_interval_secs": -1}, "minIntervalSecs"),
    ({"min_interval_secs": True}, "minIntervalSecs"),
    ({"rule_type": "UnresponsiveApplication", "metadata": {}, "receiving_app": "shop"}, "receivingAppName"),
])
def test_a_rule_that_is_not_the_applications_or_not_valid_is_refused(overrides: dict[str, Any], field: str) -> None:
    app = new_app()
    app.collect_events()
    with pytest.raises(InvalidSetting) as info:
        app.create_alerting_rule(alert_rule(**overrides), at=at(1))
    assert info.value.field == field
    assert app.collect_events() == [] and app.alerting_rules == []


def test_an_application_holds_at_most_max_rules() -> None:
    from relay_es.domain.alerting import MAX_RULES

    app = new_app()
    for i in range(MAX_RULES):
        app.create_alerting_rule(alert_rule(f"r{i}"), at=at(i))
    app.collect_events()
    with pytest.raises(InvalidSetting) as info:
        app.create_alerting_rule(alert_rule("one-too-many"), at=at(MAX_RULES))
    assert str(MAX_RULES) in info.value.message
    assert app.collect_events() == [] and len(app.alerting_rules) == MAX_RULES
    assert app.delete_alerting_rule("r0", at=at(MAX_RULES + 1))
    app.create_alerting_rule(alert_rule("one-too-many"), at=at(MAX_RULES + 2))  # room again
    assert len(app.alerting_rules) == MAX_RULES and app.alerting_rules[-1].id == "one-too-many"


def test_deleting_a_rule() -> None:
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app.create_alerting_rule(alert_rule("r2"), at=at(2))
    app.collect_events()
    assert app.delete_alerting_rule("nope", at=at(3)) is False
    assert app.collect_events() == []
    assert app.delete_alerting_rule("r1", at=at(4)) is True
    (e,) = app.collect_events()
    assert isinstance(e, Application.AlertingRuleDeleted)
    assert e.rule_id == "r1" and e.timestamp == at(4)
    assert [r.id for r in app.alerting_rules] == ["r2"] and app.alerting_rule("r1") is None
    assert app.delete_alerting_rule("r1", at=at(5)) is False  # deleted already: nothing recorded
    assert app.collect_events() == []


def test_a_deleted_application_refuses_rule_commands() -> None:
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app.delete(at=at(2))
    app.collect_events()
    err = refused(app, "create_alerting_rule", rule=alert_rule("r2"), at=at(3))
    assert "cannot create an alerting rule while deleted" in str(err)
    err = refused(app, "delete_alerting_rule", rule_id="r1", at=at(3))
    assert "cannot delete an alerting rule while deleted" in str(err)
    assert app.collect_events() == []


def test_deleting_the_application_clears_its_rules_and_restoring_it_brings_none_back() -> None:
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app.delete(at=at(2))
    assert app.alerting_rules == [] and app.alerting_rule("r1") is None
    assert app.register_again(private_mode=None, at=at(3)) is True
    assert app.alerting_rules == []
    app.create_alerting_rule(alert_rule("r1"), at=at(4))  # the old id is free again
    events = app.collect_events()
    assert [type(e).__name__ for e in events] == ["Registered", "AlertingRuleCreated", "Deleted", "Restored",
                                                  "AlertingRuleCreated"]
    assert replay(events[:3]).alerting_rules == []
    assert replay(events[:4]).alerting_rules == []
    assert replay(events).alerting_rules == [alert_rule("r1")]


def test_the_restored_event_clears_rules_on_its_own() -> None:
    # Deleted clears them first today; Restored must not depend on it (a stream's Deleted may
    # predate rules, or a snapshot hold them).
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app._restored(private_mode=False, timestamp=at(2))
    assert app.alerting_rules == []
    assert replay(app.collect_events()).alerting_rules == []


def test_alerting_rules_survive_replay() -> None:
    app = new_app()
    app.create_alerting_rule(alert_rule("r1"), at=at(1))
    app.create_alerting_rule(alert_rule("r2", rule_type="SlowQueue", metadata={"queueName": "q"}), at=at(2))
    app.create_alerting_rule(alert_rule("r3", rule_type="ExecutorFlapping", metadata=None), at=at(3))
    app.delete_alerting_rule("r2", at=at(4))
    events = app.collect_events()
    rebuilt = replay(events)
    assert vars(rebuilt) == vars(app)
    assert rebuilt.alerting_rules == [alert_rule("r1"), alert_rule("r3", rule_type="ExecutorFlapping", metadata=None)]


def _primitives_only(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _primitives_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_primitives_only(v) for v in value)
    return value is None or type(value) in (str, int, bool)


def test_a_snapshot_of_an_application_with_rules_round_trips() -> None:
    from eventsourcing.domain import Snapshot

    from relay_es.domain.autoscaling import AutoscalingPolicy
    from relay_es.domain.clock import FakeClock
    from relay_es.engine.service import Relay
    from tests.support import POPO

    app = new_app(private_mode=True)
    app.set_autoscaling_policy(AutoscalingPolicy("orders"), at=at(1))
    app.create_alerting_rule(alert_rule("r1"), at=at(2))
    app.create_alerting_rule(alert_rule("r2", rule_type="RecoveryFailed", metadata={"attempts": 2}), at=at(3))
    app.collect_events()
    assert _primitives_only(app._alert_rules)  # a snapshot holds only what the transcoder knows
    assert list(app._alert_rules) == ["r1", "r2"]

    mapper = Relay(POPO, clock=FakeClock(T0)).mapper
    stored = mapper.to_stored_event(Snapshot.take(app))
    loaded = mapper.to_domain_event(stored).mutate(None)
    assert isinstance(loaded, Application)
    assert vars(loaded) == vars(app)
    assert loaded.alerting_rules == app.alerting_rules
    assert loaded.alerting_rule("r1").webhooks[0].secret == "s" * 16  # kept; never answered back
    # and it goes on from there
    assert loaded.delete_alerting_rule("r1", at=at(4)) is True
    assert [r.id for r in loaded.alerting_rules] == ["r2"]


def test_a_snapshot_from_before_rules_has_none() -> None:
    from eventsourcing.domain import Snapshot

    app = new_app()
    snapshot = Snapshot.take(app)
    state = {k: v for k, v in snapshot.state.items() if k != "_alert_rules"}
    old = Snapshot(originator_id=snapshot.originator_id, originator_version=snapshot.originator_version,
                   timestamp=snapshot.timestamp, topic=snapshot.topic, state=state)
    loaded = old.mutate(None)
    assert loaded.alerting_rules == [] and loaded.alerting_rule("r1") is None
    loaded.create_alerting_rule(alert_rule("r1"), at=at(1))
    assert [r.id for r in loaded.alerting_rules] == ["r1"]
