"""The action commands on both stores: recorded once, retried on conflict, hostile input kept escaped."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import IntegrityError

from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates.action import (
    DEVELOPMENT_USER,
    ID_CHARS,
    MAX_TARGET_IDS,
    MESSAGE_CHARS,
    TARGET_IDS_BYTES,
    Action,
    action_stream_id,
)
from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.domain.text import escape_controls
from relay_es.engine.action_commands import Actor, Outcome
from relay_es.engine.service import Relay


@pytest.fixture
def relays(clock, store_url):
    env = event_store_env(parse_database_url(store_url))
    mine, other = Relay(env, clock=clock), Relay(env, clock=clock)
    yield mine, other
    mine.close()
    other.close()


def cancel(relay: Relay, request_id: str = "r1", **overrides):
    fields = dict(request_id=request_id, operation="cancelWorkflow", actor=Actor.token("deploy"),
                  source="10.0.0.7", target_type="workflow", target_ids=["wf-1"])
    fields.update(overrides)
    return relay.record_action_requested("acme", "orders", **fields)


def kinds(relay: Relay, action_id) -> list[str]:
    return [type(e).__qualname__ for e in relay.stream(action_id)]


def test_an_action_is_recorded_requested_then_completed(relays, clock) -> None:
    relay, other = relays
    action_id = cancel(relay)
    assert action_id == action_stream_id("acme", "r1")
    clock.advance(2)
    assert other.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="A")
    requested, completed = relay.stream(action_id)
    assert (requested.operation, requested.actor_kind, requested.actor, requested.source) == (
        "cancelWorkflow", "token", "deploy", "10.0.0.7")
    assert (requested.target_type, requested.target_ids, requested.target_count) == ("workflow", ["wf-1"], 1)
    assert (completed.outcome, completed.executor_id, completed.message) == ("succeeded", "A", None)
    assert completed.timestamp - requested.timestamp == clock.now() - requested.timestamp
    action = relay.repository.get(action_id)
    assert isinstance(action, Action) and action.outcome == "succeeded"


def test_development_mode_is_recorded_as_its_user() -> None:
    assert Actor.of(None) == Actor.development() == Actor("user", DEVELOPMENT_USER)
    assert Actor.of("deploy") == Actor.token("deploy") == Actor("token", "deploy")


def test_the_first_completion_stands(relays) -> None:
    relay, other = relays
    action_id = cancel(relay)
    assert relay.record_action_completed(action_id, outcome=Outcome.TIMED_OUT, executor_id="A",
                                         message="no answer within 30 s")
    assert not other.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="A")
    assert not relay.record_action_completed(action_id, outcome=Outcome.FAILED, message="late")
    assert kinds(relay, action_id) == ["Action.Requested", "Action.Completed"]
    assert relay.repository.get(action_id).outcome == "timed_out"


def test_completing_an_action_never_requested_is_refused(relays) -> None:
    relay, _ = relays
    with pytest.raises(IllegalTransition, match="never requested"):
        relay.record_action_completed(action_stream_id("acme", "nope"), outcome=Outcome.SUCCEEDED)


def test_a_request_recorded_again_is_the_same_action_and_another_under_its_id_is_refused(relays) -> None:
    relay, other = relays
    action_id = cancel(relay, parameters={"reason": "stuck"})
    assert cancel(other, parameters={"reason": "stuck"}) == action_id  # a retry after a lost answer
    assert kinds(relay, action_id) == ["Action.Requested"]
    with pytest.raises(IllegalTransition, match="another action"):
        cancel(other, target_ids=["wf-2"])
    with pytest.raises(IllegalTransition, match="another action"):
        cancel(other, actor=Actor.development(), parameters={"reason": "stuck"})
    assert kinds(relay, action_id) == ["Action.Requested"]


def test_a_conflicting_completion_is_retried_on_a_fresh_load(relays, monkeypatch) -> None:
    relay, _ = relays
    action_id = cancel(relay)
    real_save = relay.save
    calls = []

    def save_once_in_conflict(*aggregates, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("another writer got there first")
        return real_save(*aggregates, **kw)

    monkeypatch.setattr(relay, "save", save_once_in_conflict)
    assert relay.record_action_completed(action_id, outcome=Outcome.NO_HEALTHY_EXECUTOR)
    assert len(calls) == 2
    assert kinds(relay, action_id) == ["Action.Requested", "Action.Completed"]


def test_two_writers_requesting_the_same_action_record_it_once(relays, monkeypatch) -> None:
    relay, other = relays
    # ``relay`` reads the stream before ``other`` saves it: its own save conflicts, and the retry finds it.
    real_maybe = relay._maybe
    raced = []

    def maybe_then_other_saves(sid):
        found = real_maybe(sid)
        if not raced:
            raced.append(cancel(other))
        return found

    monkeypatch.setattr(relay, "_maybe", maybe_then_other_saves)
    assert cancel(relay) == raced[0]
    assert kinds(relay, raced[0]) == ["Action.Requested"]


def test_a_bulk_request_records_a_bounded_number_of_ids_and_the_count(relays) -> None:
    relay, _ = relays
    ids = [f"wf-{i:05}" for i in range(5000)]
    action_id = cancel(relay, operation="bulkCancelWorkflows", target_ids=ids)
    relay.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="A",
                                  result={"cancelled": 4990, "failed": 10})
    requested, completed = relay.stream(action_id)
    assert requested.target_ids == ids[:MAX_TARGET_IDS] and requested.target_count == 5000
    assert completed.result == {"cancelled": 4990, "failed": 10}


def test_a_bulk_request_of_long_ids_records_a_few_kilobytes_of_them_each_cut_and_marked(relays) -> None:
    """100 ids of 300 emoji: each cut to ID_CHARS with a "…", as many as fit in TARGET_IDS_BYTES (the
    hunter's 1,000 such requests made 300 MB of audit log), the count the true one."""
    relay, other = relays
    ids = [("\U0001F600" * 300) + f"{i:05d}" for i in range(100)]
    action_id = cancel(relay, operation="bulkCancelWorkflows", target_ids=ids)
    assert cancel(other, operation="bulkCancelWorkflows", target_ids=ids) == action_id  # a retry: the same
    (requested,) = relay.stream(action_id)
    assert requested.target_ids == ["\U0001F600" * ID_CHARS + "…"] * 4 and requested.target_count == 100
    assert sum(len(t.encode()) for t in requested.target_ids) <= TARGET_IDS_BYTES


HOSTILE = "wf\x00\n\x1b[2J\u202e\ud800" + "é" * 3000


def test_what_the_caller_sent_is_kept_escaped_and_cut_never_refused(relays) -> None:
    relay, other = relays
    action_id = relay.record_action_requested(
        "acme", "orders", request_id="r1", operation="forkWorkflow", actor=Actor("user", "sub|\x00" + "u" * 2000),
        source="10.0.0.7\r\nX-Injected: 1", target_type="workflow", target_ids=[HOSTILE, 42, ""],
        parameters={"startStep": 2**80, "version": HOSTILE, "list": [1, 2], "flag": True, "none": None})
    assert other.record_action_completed(action_id, outcome="failed", executor_id="A",
                                         message="executor says: " + HOSTILE * 3, result={"x": 1.5})
    requested, completed = relay.stream(action_id)  # read back from the store: it held everything
    strings = [requested.actor, requested.source, *requested.target_ids,
               *(v for v in requested.parameters.values() if isinstance(v, str)), completed.message,
               *(v for v in completed.result.values() if isinstance(v, str))]
    for s in strings:
        assert "\x00" not in s and escape_controls(s) == s  # no control characters left raw
        s.encode("utf-8")  # no lone surrogate
    assert requested.target_ids[0].startswith("wf\\x00\\n\\x1b[2J\\u202e\\ud800é") and requested.target_ids[0].endswith("…")
    assert len(requested.target_ids[0].encode()) <= 1024
    assert requested.target_ids[1:] == ["42", ""] and requested.target_count == 3
    assert requested.actor_kind == "user" and requested.actor.startswith("sub|\\x00")
    assert requested.source == "10.0.0.7\\r\\nX-Injected: 1"
    assert requested.parameters["startStep"] == repr(2**80)  # beyond 64 bits: recorded as text
    assert requested.parameters["list"] == "[1, 2]" and requested.parameters["flag"] is True
    assert requested.parameters["none"] is None
    assert len(completed.message) == MESSAGE_CHARS + 1 and completed.message.endswith("…")
    assert completed.result == {"x": "1.5"}


@pytest.mark.parametrize("field, value", [
    ("operation", "cancel workflow"), ("target_type", "Workflow"), ("actor", Actor("robot", "r2")),
    ("parameters", {f"k{i}": i for i in range(21)}), ("parameters", {"bad key": 1}),
])
def test_what_relay_itself_supplies_is_checked(relays, field, value) -> None:
    relay, _ = relays
    with pytest.raises(InvalidSetting):
        cancel(relay, **{field: value})
    with pytest.raises(InvalidSetting):
        relay.record_action_requested("not an org", "orders", request_id="r9", operation="cancelWorkflow",
                                      actor=Actor.token("deploy"), source=None, target_type="workflow")
    action_id = cancel(relay)
    with pytest.raises(InvalidSetting, match="outcome"):
        relay.record_action_completed(action_id, outcome="exploded")
    with pytest.raises(InvalidSetting, match="executorId"):
        relay.record_action_completed(action_id, outcome=Outcome.SUCCEEDED, executor_id="e\x00")
    assert kinds(relay, action_id) == ["Action.Requested"]


def test_a_refusal_is_recorded_requested_and_refused_in_one_transaction(relays) -> None:
    relay, _ = relays
    hostile = "evil\x1b[31m" + "x" * 5000
    action_id = relay.record_action_refused("acme", None, request_id="r9", operation="deleteApp",
                                            actor=Actor.anonymous(), source="203.0.113.9", target_type="application",
                                            target_ids=[hostile], status=401, detail="unknown or revoked token",
                                            suppressed=3)
    requested, refused = relay.stream(action_id)  # both, or neither: one save
    assert (requested.actor_kind, requested.actor, requested.source) == ("anonymous", "no valid token", "203.0.113.9")
    assert "\x1b" not in requested.target_ids[0] and len(requested.target_ids[0]) <= 256  # kept, escaped and cut
    assert (refused.outcome, refused.message, refused.result) == ("refused", "unknown or revoked token",
                                                                  {"status": 401, "suppressed": 3})
    # recorded again (a retry after a lost answer): the same action, nothing more
    assert relay.record_action_refused("acme", None, request_id="r9", operation="deleteApp",
                                       actor=Actor.anonymous(), source=None, target_type="application",
                                       status=401, detail="again") == action_id
    assert len(list(relay.stream(action_id))) == 2
