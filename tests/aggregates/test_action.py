"""The Action aggregate: requested, completed at most once, every string and list bounded."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.action import (
    MAX_SUMMARY_KEYS,
    MAX_TARGET_IDS,
    MESSAGE_CHARS,
    TARGET_IDS_BYTES,
    Action,
    Outcome,
    action_stream_id,
    recorded_target_ids,
)
from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.domain.text import MAX_ID_BYTES
from tests.aggregates.support import replay_any

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def request(**overrides: Any) -> Action:
    fields: dict[str, Any] = dict(org="acme", app="orders", request_id="r1", operation="cancelWorkflow",
                                  actor_kind="token", actor="deploy", source="10.0.0.7", target_type="workflow",
                                  target_ids=["wf-1"], parameters=None, at=T0)
    fields.update(overrides)
    return Action.request(**fields)


def test_an_action_is_requested_then_completed_and_replays_to_the_same_state() -> None:
    a = request(parameters={"startStep": 3, "applicationVersion": "v2", "deleteChildren": False, "note": None})
    assert a.id == action_stream_id("acme", "r1")
    assert not a.completed
    a.complete(outcome=Outcome.SUCCEEDED, executor_id="A", result={"newWorkflowId": "wf-2"},
               at=T0 + timedelta(seconds=1))
    events = list(a.collect_events())
    assert [type(e).__qualname__ for e in events] == ["Action.Requested", "Action.Completed"]
    requested, completed = events
    assert (requested.org, requested.app, requested.operation, requested.actor_kind, requested.actor) == (
        "acme", "orders", "cancelWorkflow", "token", "deploy")
    assert (requested.target_type, requested.target_ids, requested.target_count) == ("workflow", ["wf-1"], 1)
    assert requested.parameters == {"startStep": 3, "applicationVersion": "v2", "deleteChildren": False, "note": None}
    assert (completed.outcome, completed.executor_id, completed.result, completed.message) == (
        "succeeded", "A", {"newWorkflowId": "wf-2"}, None)
    assert completed.timestamp == T0 + timedelta(seconds=1)
    assert vars(replay_any(events)) == vars(a)


def test_the_stream_is_keyed_by_org_and_request_id() -> None:
    assert action_stream_id("acme", "r1") == action_stream_id("acme", "r1")
    assert len({action_stream_id("acme", "r1"), action_stream_id("acme", "r2"), action_stream_id("other", "r1")}) == 3


@pytest.mark.parametrize("outcome", list(Outcome))
def test_an_action_completes_at_most_once(outcome: Outcome) -> None:
    a = request()
    a.complete(outcome=outcome, message="why" if outcome is not Outcome.SUCCEEDED else None, at=T0)
    a.collect_events()
    before = copy.deepcopy(vars(a))
    for again in Outcome:
        with pytest.raises(IllegalTransition, match="completes once"):
            a.complete(outcome=again, at=T0)
    assert vars(a) == before and a.pending_events == []
    assert a.outcome == outcome.value


def test_the_outcomes_are_the_six_named() -> None:
    assert [o.value for o in Outcome] == ["succeeded", "failed", "timed_out", "no_healthy_executor", "refused",
                                          "unknown"]
    a = request()
    with pytest.raises(InvalidSetting, match="outcome"):
        a.complete(outcome="exploded", at=T0)
    a.complete(outcome="timed_out", executor_id="B", at=T0)  # the value is as good as the member
    assert a.outcome == "timed_out" and type(a.pending_events[-1].outcome) is str  # stored as its value


def test_a_bulk_target_records_the_first_ids_and_the_count() -> None:
    ids = [f"wf-{i}" for i in range(10_000)]
    a = request(operation="bulkCancelWorkflows", target_ids=ids)
    (e,) = a.collect_events()
    assert e.target_ids == ids[:MAX_TARGET_IDS] and e.target_count == 10_000
    b = request(operation="bulkCancelWorkflows", target_ids=[])
    assert b.target_ids == [] and b.target_count == 0


def test_the_target_ids_recorded_fit_a_budget_and_the_count_says_how_many_were_named() -> None:
    """A hunter's bulk cancel of 100 ids of 250 emoji each made every audit entry 100 KB: the ids
    recorded are the first that fit in TARGET_IDS_BYTES, the first always, 100 UUIDs all."""
    wide = [("\U0001F600" * 250) + f"{i:05d}" for i in range(100)]  # 1,005 bytes each
    (e,) = request(operation="bulkCancelWorkflows", target_ids=wide).collect_events()
    assert e.target_ids == wide[:4] and e.target_count == 100
    assert sum(len(t.encode()) for t in e.target_ids) <= TARGET_IDS_BYTES
    uuids = [str(action_stream_id("acme", f"r{i}")) for i in range(MAX_TARGET_IDS)]  # 36 characters each
    assert request(target_ids=uuids).target_ids == uuids
    assert request(target_ids=["é" * 255 + "…"] * 3).target_ids == ["é" * 255 + "…"] * 3  # 3 x 513 bytes
    assert recorded_target_ids(["x" * 5000, "y"]) == ["x" * 5000]  # the first always (Conductor's target)
    assert recorded_target_ids(iter(["a"] * 10_000)) == ["a"] * MAX_TARGET_IDS and recorded_target_ids([]) == []


def test_an_event_recorded_before_the_budget_replays_as_it_was() -> None:
    """Stores hold Requested events with 100 ids of 255 characters: they replay unchanged."""
    wide = ["\U0001F600" * 255] * MAX_TARGET_IDS
    old = Action(org="acme", app="orders", request_id="r1", operation="bulkCancelWorkflows", actor_kind="token",
                 actor="ci", source=None, target_type="workflow", target_ids=wide, target_count=100, parameters={},
                 timestamp=T0)  # the event as it was recorded, not through request()
    events = list(old.collect_events())
    replayed = replay_any(events)
    assert replayed.target_ids == wide and replayed.target_count == 100
    replayed.complete(outcome=Outcome.SUCCEEDED, at=T0)
    assert replayed.completed


def test_a_single_string_is_not_taken_for_a_list_of_ids() -> None:
    with pytest.raises(InvalidSetting, match="targetIds"):
        request(target_ids="wf-1")


@pytest.mark.parametrize("field, value", [
    ("org", "bad org"), ("org", "acme\n"), ("app", "x" * 300), ("app", ""),
    ("request_id", ""), ("request_id", "r\x00"), ("request_id", "r" * (MAX_ID_BYTES + 1)),
    ("operation", "CancelWorkflow"), ("operation", "cancel workflow"), ("operation", "cancelWorkflow\n"),
    ("operation", "c" * 101), ("operation", None),
    ("actor_kind", "api_key"), ("actor_kind", None),
    ("actor", ""), ("actor", "a\x00"), ("actor", "é" * MAX_ID_BYTES), ("actor", None),
    ("source", "s\x00"), ("source", "s" * (MAX_ID_BYTES + 1)),
    ("target_type", "Workflow"), ("target_type", "work flow"), ("target_type", ""),
    ("target_ids", ["ok", "x\x00"]), ("target_ids", ["x" * (MAX_ID_BYTES + 1)]), ("target_ids", [3]),
    ("target_ids", None),
])
def test_requests_the_stores_cannot_hold_or_that_are_unbounded_are_refused(field: str, value: Any) -> None:
    with pytest.raises(InvalidSetting):
        request(**{field: value})


@pytest.mark.parametrize("summary", [
    {f"k{i}": i for i in range(MAX_SUMMARY_KEYS + 1)},
    {"bad key": 1}, {"": 1}, {"k\n": 1}, {3: 1},
    {"k": 2**63}, {"k": -(2**63) - 1}, {"k": 1.5}, {"k": [1]}, {"k": {"nested": 1}}, {"k": b"x"},
    {"k": "v\x00"}, {"k": "v" * 5000},
    ["not", "a", "mapping"],
])
def test_parameter_and_result_summaries_are_flat_bounded_scalars(summary: Any) -> None:
    with pytest.raises(InvalidSetting):
        request(parameters=summary)
    a = request()
    with pytest.raises(InvalidSetting):
        a.complete(outcome=Outcome.SUCCEEDED, result=summary, at=T0)
    assert not a.completed


def test_summary_edges_are_accepted() -> None:
    summary = {f"k{i}": i for i in range(MAX_SUMMARY_KEYS - 3)} | {"lo": -(2**63), "hi": 2**63 - 1, "b": True}
    assert request(parameters=summary).parameters == summary


@pytest.mark.parametrize("message", ["line\nbreak", "nul\x00", "\x1b[31mred", "rtl\u202eevil", "m" * (MESSAGE_CHARS + 2)])
def test_a_completion_message_must_arrive_escaped_and_cut(message: str) -> None:
    a = request()
    with pytest.raises(InvalidSetting, match="message"):
        a.complete(outcome=Outcome.FAILED, message=message, at=T0)
    assert not a.completed and len(a.pending_events) == 1


def test_the_executor_that_answered_is_an_identifier() -> None:
    for bad in ("e\x00", "e" * (MAX_ID_BYTES + 1), "", 7):
        with pytest.raises(InvalidSetting, match="executorId"):
            request().complete(outcome=Outcome.SUCCEEDED, executor_id=bad, at=T0)


def test_hostile_strings_that_are_storable_are_recorded_as_given() -> None:
    """The aggregate checks bounds; escaping is the service's (what the caller sent is kept escaped there)."""
    odd = "wf\n\x1b[2J\u202e'; DROP TABLE relay_events; --"
    a = request(target_ids=[odd, ""], source="::ffff:10.0.0.7", actor="ci-bot",
                parameters={"note": "é" * 50})
    assert a.target_ids == [odd, ""] and a.target_count == 2
    a.complete(outcome=Outcome.FAILED, message="escaped \\n already …", at=T0)
    assert vars(replay_any(list(a.collect_events()))) == vars(a)


def test_an_application_is_optional_for_org_wide_actions() -> None:
    a = request(app=None, operation="createRole", target_type="role", target_ids=["operators"])
    assert a.app is None
