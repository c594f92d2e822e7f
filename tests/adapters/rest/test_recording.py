"""Operator actions on record from the REST layer: a change around its block, refusals throttled.

The routes' own records are checked on a real ``relay serve`` in ``test_audit.py``; here the
helpers' rules, with fakes and a fake clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from litestar.exceptions import NotFoundException

from relay_es.adapters.rest.recording import MAX_REFUSALS_PER_WINDOW, REFUSAL_WINDOW, Refusals, recorded
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.action_commands import Actor, Outcome
from tests.adapters.rest.fakes import fake_context


class FakeRelay:
    def __init__(self, *, fail: bool = False, fail_completion: bool = False) -> None:
        self.made: list[tuple[str, Any, dict[str, Any]]] = []
        self.fail = fail
        self.fail_completion = fail_completion

    def record_action_requested(self, org: str, app: str | None, **kw: Any) -> str:
        self.made.append(("requested", (org, app), kw))
        return "action-1"

    def record_action_completed(self, action_id: str, **kw: Any) -> bool:
        if self.fail_completion:
            raise ConnectionError("the store went away")
        self.made.append(("completed", action_id, kw))
        return True

    def record_action_refused(self, org: str, app: str | None, **kw: Any) -> str:
        if self.fail:
            raise ConnectionError("the store is away")
        self.made.append(("refused", (org, app), kw))
        return "action-2"


def request(token: str | None = "deploy", host: str = "10.0.0.7") -> Any:
    return SimpleNamespace(state=SimpleNamespace(principal=SimpleNamespace(token=token)),
                           client=SimpleNamespace(host=host))


def test_a_change_is_requested_before_its_block_and_completed_after_it() -> None:
    relay = FakeRelay()
    ctx = fake_context(relay=relay)
    with recorded(ctx, request(), "acme", "orders", operation="updateApp", target_type="application",
                  target_ids=["orders"], parameters={"privateMode": True}) as result:
        assert [m[0] for m in relay.made] == ["requested"]
        result["changed"] = 1
    (_, where, asked), (_, action_id, done) = relay.made
    assert where == ("acme", "orders") and asked["actor"] == Actor.token("deploy") and asked["source"] == "10.0.0.7"
    assert asked["operation"] == "updateApp" and asked["parameters"] == {"privateMode": True}
    assert action_id == "action-1" and done == {"outcome": Outcome.SUCCEEDED, "result": {"changed": 1}}


@pytest.mark.parametrize(("error", "message"), [
    (InvalidSetting("executorTimeoutSecs", "must be at least 1"), "executorTimeoutSecs: must be at least 1"),
    (NotFoundException("no such application"), "no such application"),
    (KeyError("secret-looking text"), "relay: KeyError"),  # a bug's text is not recorded
])
def test_a_change_that_raises_is_completed_failed_with_what_was_wrong(error: Exception, message: str) -> None:
    relay = FakeRelay()
    with pytest.raises(type(error)), recorded(fake_context(relay=relay), request(token=None), "local", None,
                                              operation="deleteToken", target_type="token", target_ids=["ci"]):
        raise error
    (_, _, asked), (_, _, done) = relay.made
    assert asked["actor"] == Actor.development()
    assert done["outcome"] == Outcome.FAILED and message in done["message"]


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


def test_a_completion_that_cannot_be_written_neither_fails_the_change_nor_hides_its_refusal(
        caplog: pytest.LogCaptureFixture) -> None:
    relay = FakeRelay(fail_completion=True)
    ctx = fake_context(relay=relay)
    with recorded(ctx, request(), "acme", None, operation="createToken", target_type="token", target_ids=["ci"]):
        pass  # the token is made: its secret must still be shown
    assert "stays pending in the audit log" in caplog.text
    with pytest.raises(InvalidSetting, match="appNames"), recorded(
            ctx, request(), "acme", None, operation="createToken", target_type="token", target_ids=["ci"]):
        raise InvalidSetting("appNames", "must name 1 to 100 applications")
