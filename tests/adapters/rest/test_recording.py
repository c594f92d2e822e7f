"""Operator actions on record from the REST layer: a change and its record in one transaction,
refusals throttled.

The routes' own records are checked on a real ``relay serve`` in ``test_audit.py``; here the
helpers' rules: a change's on a real store (both), the refusals' with fakes and a fake clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, PersistenceError
from litestar.exceptions import NotFoundException

from relay_es.adapters.rest.recording import MAX_REFUSALS_PER_WINDOW, REFUSAL_WINDOW, Refusals, recorded
from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates.action import DEVELOPMENT_USER, Action
from relay_es.aggregates.application import SettingsPatch
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.action_commands import Actor
from relay_es.engine.service import Relay
from tests.adapters.rest.fakes import fake_context


class FakeRelay:
    def __init__(self, *, fail: bool = False) -> None:
        self.made: list[tuple[str, Any, dict[str, Any]]] = []
        self.fail = fail

    def record_action_refused(self, org: str, app: str | None, **kw: Any) -> str:
        if self.fail:
            raise ConnectionError("the store is away")
        self.made.append(("refused", (org, app), kw))
        return "action-2"


def request(token: str | None = "deploy", host: str = "10.0.0.7") -> Any:
    return SimpleNamespace(state=SimpleNamespace(principal=SimpleNamespace(token=token)),
                           client=SimpleNamespace(host=host))


@pytest.fixture
def relay(clock, store_url) -> Iterator[Relay]:
    r = Relay(event_store_env(parse_database_url(store_url)), clock=clock)
    r.register_app("acme", "orders")
    yield r
    r.close()


def saves_of(relay: Relay) -> list[list[str]]:
    """Each save's events from now on, by kind (``Action.Requested``...)."""
    saves: list[list[str]] = []
    relay.save_observers.append(lambda took, events: saves.append([type(e).__qualname__ for e in events]))
    return saves


def actions(relay: Relay) -> list[Action]:
    return [relay.repository.get(e.originator_id) for _, _, e in relay.notifications(0, 1000)
            if isinstance(e, Action.Requested)]


def completions(relay: Relay) -> list[Any]:
    """Every action's ``Completed`` event (its message and result), in the log's order."""
    return [e for _, _, e in relay.notifications(0, 1000) if isinstance(e, Action.Completed)]


def test_a_change_and_its_action_are_written_in_one_transaction(relay: Relay) -> None:
    saves = saves_of(relay)
    with recorded(fake_context(relay=relay), request(), "acme", "orders", operation="updateApp",
                  target_type="application", target_ids=["orders"], parameters={"privateMode": True}) as action_id:
        relay.update_app("acme", "orders", SettingsPatch(private_mode=True))
        assert relay.repository.get(action_id).outcome == "succeeded"  # already: with the change
    assert saves == [["Action.Requested", "Action.Completed", "Application.SettingsChanged"]]
    (action,) = actions(relay)
    assert (action.operation, action.actor_kind, action.actor, action.source) == (
        "updateApp", "token", "deploy", "10.0.0.7")
    assert action.parameters == {"privateMode": True} and completions(relay)[0].result == {}


def test_a_conflicting_save_is_retried_and_takes_its_record_along_once(relay: Relay) -> None:
    record = relay.reads.record
    calls = []

    def conflicting_once(objs: Any, **kw: Any) -> Any:
        calls.append([type(o).__name__ for o in objs])
        if len(calls) == 1:
            raise IntegrityError("another writer got there first")
        return record(objs, **kw)

    relay.reads.record = conflicting_once  # type: ignore[method-assign]
    with recorded(fake_context(relay=relay), request(), "acme", "orders", operation="updateApp",
                  target_type="application", target_ids=["orders"]) as action_id:
        relay.update_app("acme", "orders", SettingsPatch(private_mode=True))
    assert calls == [["Action", "Application"], ["Action", "Application"]]
    assert [type(e).__qualname__ for e in relay.stream(action_id)] == ["Action.Requested", "Action.Completed"]


def test_what_the_command_noted_is_in_the_record_it_rides_with(relay: Relay) -> None:
    relay.create_role("acme", "ops", ["application.read"])
    ctx = fake_context(relay=relay)
    saves = saves_of(relay)
    with recorded(ctx, request(), "acme", None, operation="grantRole", target_type="user", target_ids=["ada"]):
        relay.grant_role("acme", "ada", "ops")
    with recorded(ctx, request(), "acme", None, operation="grantRole", target_type="user", target_ids=["ada"]):
        relay.grant_role("acme", "ada", "ops")  # nothing to change: no save carries it; written after
    assert saves == [["Action.Requested", "Action.Completed", "OrgMembers.Opened", "OrgMembers.RoleGranted"],
                     ["Action.Requested", "Action.Completed"]]
    assert [c.result for c in completions(relay)] == [{"changed": True}, {"changed": False}]


def test_a_change_that_makes_its_target_records_the_id_its_command_noted(relay: Relay) -> None:
    """createAlertingRule: the new rule's id is Relay's, known once made; it is the action's target, so
    ``target=<rule id>`` finds its making as well as its deletion. One that failed names none."""
    ctx = fake_context(relay=relay)

    def create(receiving_app: str | None = None) -> Any:
        with recorded(ctx, request(), "acme", "orders", operation="createAlertingRule", target_type="alerting_rule",
                      parameters={"ruleType": "ExecutorDead"}, target_noted="ruleId"):
            return relay.create_alerting_rule("acme", "orders", rule_type="ExecutorDead", metadata={},
                                              min_interval_secs=300, receiving_app=receiving_app)

    rule = create()
    with pytest.raises(InvalidSetting, match="receivingAppName"):
        create("ghost")
    made, failed = actions(relay)
    assert (made.target_type, made.target_ids, made.target_count) == ("alerting_rule", [rule.id], 1)
    assert (failed.target_ids, failed.target_count) == ([], 0)
    assert [c.outcome for c in completions(relay)] == ["succeeded", "failed"]
    assert completions(relay)[0].result == {"ruleId": rule.id}


@pytest.mark.parametrize(("error", "message"), [
    (InvalidSetting("executorTimeoutSecs", "must be at least 1"), "executorTimeoutSecs: must be at least 1"),
    (NotFoundException("no such application"), "no such application"),
    (KeyError("secret-looking text"), "relay: KeyError"),  # a bug's text is not recorded
])
def test_a_change_that_raises_before_saving_is_recorded_failed_with_what_was_wrong(
        relay: Relay, error: Exception, message: str) -> None:
    saves = saves_of(relay)
    with pytest.raises(type(error)), recorded(fake_context(relay=relay), request(token=None), "local", None,
                                              operation="deleteToken", target_type="token", target_ids=["ci"]):
        raise error
    assert saves == [["Action.Requested", "Action.Completed"]]
    (action,) = actions(relay)
    assert (action.actor_kind, action.actor) == ("user", DEVELOPMENT_USER)
    assert action.outcome == "failed" and message in completions(relay)[0].message


def test_a_block_that_raises_after_its_change_was_saved_leaves_it_succeeded(relay: Relay) -> None:
    with pytest.raises(RuntimeError), recorded(fake_context(relay=relay), request(), "acme", "orders",
                                               operation="deleteApp", target_type="application", target_ids=["orders"]):
        relay.delete_app("acme", "orders")
        raise RuntimeError("after the change")
    (action,) = actions(relay)
    assert action.outcome == "succeeded" and relay.app_deleted("acme", "orders")


def test_with_the_store_away_neither_the_change_nor_its_record_is_written(
        relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    record = relay.reads.record

    def away(objs: Any, **kw: Any) -> Any:
        raise PersistenceError("the store went away")

    relay.reads.record = away  # type: ignore[method-assign]
    with pytest.raises(PersistenceError), recorded(fake_context(relay=relay), request(), "acme", "orders",
                                                   operation="deleteApp", target_type="application",
                                                   target_ids=["orders"]):
        relay.delete_app("acme", "orders")
    relay.reads.record = record  # type: ignore[method-assign]
    assert "deleteApp" in caplog.text and "not in the audit log" in caplog.text
    assert actions(relay) == [] and not relay.app_deleted("acme", "orders")


def test_another_thread_s_saves_do_not_carry_the_record(relay: Relay) -> None:
    saves = saves_of(relay)
    with recorded(fake_context(relay=relay), request(), "acme", None, operation="registerApp",
                  target_type="application", target_ids=["billing"]):
        elsewhere = threading.Thread(target=relay.register_app, args=("acme", "other"))
        elsewhere.start()
        elsewhere.join()
        relay.register_app("acme", "billing")
    assert saves == [["Application.Registered"], ["Action.Requested", "Action.Completed", "Application.Registered"]]


def test_blocks_do_not_nest(relay: Relay) -> None:
    with recorded(fake_context(relay=relay), request(), "acme", None, operation="registerApp",
                  target_type="application", target_ids=["billing"]):
        with pytest.raises(RuntimeError, match="within another"), relay.riding(lambda objs, noted: []):
            pass


def test_refusals_are_recorded_once_a_window_per_client_status_operation_and_org() -> None:
    now = [0.0]
    refusals = Refusals(fake_context(relay=FakeRelay()), clock=lambda: now[0])
    assert refusals.should_record("10.0.0.7", 401, "deleteApp", "acme") == 0
    assert refusals.should_record("10.0.0.7", 401, "deleteApp", "acme") is None
    assert refusals.should_record("10.0.0.7", 401, "deleteApp", "acme") is None
    assert refusals.should_record("10.0.0.7", 403, "deleteApp", "acme") == 0  # another status
    assert refusals.should_record("10.0.0.8", 401, "deleteApp", "acme") == 0  # another client
    assert refusals.should_record("10.0.0.7", 401, "listApps", "acme") == 0  # another operation
    assert refusals.should_record("10.0.0.7", 401, "deleteApp", "decoy") == 0  # another org: no cover for acme's
    now[0] = REFUSAL_WINDOW
    assert refusals.should_record("10.0.0.7", 401, "deleteApp", "acme") == 2  # and says how many it held back


def test_a_client_rotating_addresses_gets_a_bounded_number_of_records() -> None:
    now = [0.0]
    refusals = Refusals(fake_context(relay=FakeRelay()), clock=lambda: now[0], per_window=MAX_REFUSALS_PER_WINDOW)
    passed = sum(refusals.should_record(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 401, "deleteApp", "acme")
                 is not None for i in range(20_000))
    assert passed == MAX_REFUSALS_PER_WINDOW  # in this window, whatever the keys
    now[0] = REFUSAL_WINDOW
    assert refusals.should_record("192.0.2.1", 401, "deleteApp", "acme") == 0  # the next window has its own


def test_another_org_s_tokens_do_not_use_up_an_org_s_record_of_refusals() -> None:
    refusals = Refusals(fake_context(relay=FakeRelay()), clock=lambda: 0.0, per_window=MAX_REFUSALS_PER_WINDOW)
    passed = sum(refusals.should_record(f"10.0.{i // 256}.{i % 256}", 403, "deleteToken", "other") is not None
                 for i in range(1_000))
    assert passed == MAX_REFUSALS_PER_WINDOW  # the other org's budget is spent...
    assert refusals.should_record("192.0.2.1", 403, "deleteToken", "acme") == 0  # ...not acme's
    assert refusals.should_record("192.0.2.2", 401, "listApps", "acme", anonymous=True) == 0  # nor anonymous ones'


def test_a_refusal_s_record_never_fails_the_refusal(caplog: pytest.LogCaptureFixture) -> None:
    relay = FakeRelay(fail=True)
    Refusals(fake_context(relay=relay)).record(org="acme", app=None, operation="listApps", actor=Actor.anonymous(),
                                               source="10.0.0.7", status=401, detail="unknown or revoked token",
                                               target=None, suppressed=0)
    assert "could not record a refused listApps call" in caplog.text

    ok = FakeRelay()
    Refusals(fake_context(relay=ok)).record(org="acme", app="orders", operation="cancelWorkflow",
                                            actor=Actor.token("billing-only"), source=None, status=403,
                                            detail="this token does not cover application 'orders'",
                                            target=("workflow", "wf-1"), suppressed=4)
    ((_, where, kw),) = ok.made
    assert where == ("acme", "orders") and kw["target_type"] == "workflow" and kw["target_ids"] == ["wf-1"]
    assert kw["status"] == 403 and kw["suppressed"] == 4
