"""Stranded work (``relay_es/engine/stranded.py``): the reason of each executor state, the fixes
that apply, the queues blocked, the executors listed, and "recover now"'s plan. Pure: rows are
built by hand, the time is given."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from relay_es.engine.stranded import (
    BlockedQueue,
    Fix,
    Reason,
    WorkflowSummary,
    classify,
    fixes_for,
    plan_recovery,
    reason_of,
    recovery_version,
)
from relay_es.projections.executors import ExecutorRow

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)
EARLIER = NOW - timedelta(seconds=30)
ALL = (Fix.RECOVER, Fix.RESUME, Fix.FORK, Fix.CANCEL)
NO_RECOVER = (Fix.RESUME, Fix.FORK, Fix.CANCEL)  # its version is here: resume runs it
FORK = (Fix.FORK, Fix.CANCEL)  # nothing of its version is left


def row(executor_id: str = "A", status: str | None = "HEALTHY", version: str | None = "v1", **kw: object) -> ExecutorRow:
    return ExecutorRow(stream_id=f"s-{executor_id}", org="local", app="app", executor_id=executor_id, version=3,
                       status=status, app_version=version, **kw)  # type: ignore[arg-type]


def healthy(executor_id: str = "H", version: str = "v1") -> ExecutorRow:
    return row(executor_id, "HEALTHY", version)


def dead(executor_id: str = "A", phase: str | None = "pending", attempt: int = 0, version: str = "v1",
         recovery_version_: str | None = "v1", **kw: object) -> ExecutorRow:
    return row(executor_id, "DEAD", version, recovery_phase=phase, recovery_attempt=attempt,
               recovery_version=recovery_version_, declared_dead_at=EARLIER, **kw)


def disconnected(executor_id: str = "A", reason: str = "clean_close", deadline: datetime | None = LATER,
                 version: str = "v1") -> ExecutorRow:
    return row(executor_id, "DISCONNECTED", version, disconnect_reason=reason, deadline=deadline)


def wf(workflow_id: str, executor_id: str | None = "A", status: str = "PENDING", queue: str | None = None) -> WorkflowSummary:
    return WorkflowSummary(workflow_id=workflow_id, status=status, executor_id=executor_id, name="w", queue_name=queue,
                           app_version="v1", created_at="2026-12-01T11:00:00.000Z")


# ------------------------------------------------------------------ reasons


@pytest.mark.parametrize("r, reason", [
    (None, Reason.EXECUTOR_UNKNOWN),
    (row(status=None), Reason.EXECUTOR_UNKNOWN),  # registered, never connected
    (row(status="HEALTHY"), None),
    (row(status="DELETED"), Reason.EXECUTOR_DELETED),
    (disconnected(reason="clean_close"), Reason.STOPPED_POLITELY),
    (disconnected(reason="socket_closed"), Reason.DISCONNECTED),  # dropped, or killed: not polite
    (disconnected(reason="ping_timeout"), Reason.DISCONNECTED),
    (disconnected(reason="relay_restarted"), Reason.DISCONNECTED),
    (disconnected(reason="token_revoked"), Reason.DISCONNECTED),
    (disconnected(deadline=NOW), Reason.DECLARATION_OVERDUE),  # the deadline has come
    (disconnected(reason="ping_timeout", deadline=EARLIER), Reason.DECLARATION_OVERDUE),
    (dead(phase="pending"), Reason.RECOVERY_PENDING),
    (dead(phase="pending", attempt=2), Reason.RECOVERY_FAILED),
    (dead(phase="dispatched", attempt=1), Reason.RECOVERY_DISPATCHED),
    (dead(phase="deferred"), Reason.RECOVERY_DEFERRED),
    (dead(phase="deferred", attempt=3), Reason.RECOVERY_DEFERRED),
    (dead(phase="confirmed"), Reason.DEAD_UNRECOVERED),
    (dead(phase=None), Reason.DEAD_UNRECOVERED),
])
def test_the_reason_of_each_executor_state(r: ExecutorRow | None, reason: Reason | None) -> None:
    assert reason_of(r, NOW) == reason


@pytest.mark.parametrize("r, versions, workflow_version, fixes", [
    (dead(phase="pending"), {"v1"}, None, ALL),
    (dead(phase="pending", attempt=1), {"v1"}, None, ALL),
    (dead(phase="deferred"), {"v1"}, None, ALL),  # one of its version is here now
    (dead(phase="deferred"), {"v2"}, None, FORK),  # none of its version: fork is the fix
    (dead(phase="pending"), set(), None, FORK),
    (dead(phase="dispatched"), {"v1"}, None, NO_RECOVER),  # in flight
    (dead(phase="confirmed"), {"v1"}, None, NO_RECOVER),
    (dead(version="v2", recovery_version_="v1"), {"v1"}, None, ALL),  # the version recorded at its death counts
    (dead(version="v2", recovery_version_="v1"), {"v2"}, None, FORK),
    (disconnected(), {"v1"}, None, ALL),
    (disconnected(), {"v9"}, None, FORK),
    # the workflow's own version decides resume (an executor dequeues only its own version's) and
    # recover (an executor recovers only its own version's: v1's leaves a v0 workflow PENDING)
    (disconnected(), {"v1"}, "v0", (Fix.FORK, Fix.CANCEL)),
    (disconnected(), {"v1"}, "v1", ALL),
    (dead(version="v2", recovery_version_="v2"), {"v2"}, "v1", (Fix.FORK, Fix.CANCEL)),
    (disconnected(), {"v9"}, "v9", (Fix.RESUME, Fix.FORK, Fix.CANCEL)),
    (row(status="DELETED"), {"v1"}, None, NO_RECOVER),
    (row(status="DELETED"), {"v2"}, None, FORK),
    (None, {"v1", None}, None, FORK),
    (None, {"v1"}, "v1", NO_RECOVER),
    (None, {"v1"}, "v2", FORK),
])
def test_the_fixes_that_apply(r: ExecutorRow | None, versions: set[str | None], workflow_version: str | None,
                              fixes: tuple[Fix, ...]) -> None:
    assert fixes_for(r, versions, workflow_version) == fixes


def test_the_recovery_version_is_the_one_recorded_at_death_else_the_running_one() -> None:
    assert recovery_version(dead(version="v2", recovery_version_="v1")) == "v1"
    assert recovery_version(dead(version="v2", recovery_version_=None)) == "v2"
    assert recovery_version(disconnected(version="v3")) == "v3"


# ------------------------------------------------------------------ classify


def test_only_pending_workflows_of_executors_not_alive_are_stranded_in_the_order_given() -> None:
    rows = [healthy("H"), dead("A"), disconnected("B", reason="ping_timeout")]
    got = classify([
        wf("w1", "H"),  # alive
        wf("w2", "A"),
        wf("w3", "A", status="ENQUEUED"),  # not PENDING: not asked about
        wf("w4", "B"),
        wf("w5", "local"),  # never seen by Relay
        wf("w6", None),  # no executor at all
        wf("w7", "A", status="SUCCESS"),
    ], rows, NOW)
    assert [(s.workflow.workflow_id, s.reason, s.fixes) for s in got.workflows] == [
        ("w2", Reason.RECOVERY_PENDING, ALL),
        ("w4", Reason.DISCONNECTED, ALL),
        ("w5", Reason.EXECUTOR_UNKNOWN, NO_RECOVER),  # its version v1 is here: resume runs it
        ("w6", Reason.EXECUTOR_UNKNOWN, NO_RECOVER),
    ]
    assert got.workflows[0].executor == rows[1] and got.workflows[2].executor is None


def test_the_queues_blocked_most_blocked_first_then_by_name() -> None:
    got = classify([wf("1", "A", queue="q2"), wf("2", "A", queue="q1"), wf("3", "B", queue="q2"),
                    wf("4", "A"), wf("5", "H", queue="q3"), wf("6", "A", queue="q0")],
                   [healthy("H"), dead("A"), dead("B", phase="deferred")], NOW)
    assert got.queues == [BlockedQueue("q2", 2), BlockedQueue("q0", 1), BlockedQueue("q1", 1)]


def test_the_executors_waited_on_and_every_other_not_alive_one_relay_knows() -> None:
    rows = [healthy("H"), dead("A"), disconnected("B"), dead("C", phase="deferred"), dead("D", phase="dispatched"),
            dead("E", phase="confirmed"), row("F", "DELETED"), healthy("G")]
    got = classify([wf("1", "A"), wf("2", "A"), wf("3", "F"), wf("4", "zz-unknown"), wf("5", "G")], rows, NOW)
    assert [(e.executor_id, e.reason, e.stranded) for e in got.executors] == [
        ("A", Reason.RECOVERY_PENDING, 2),
        ("B", Reason.STOPPED_POLITELY, 0),
        ("C", Reason.RECOVERY_DEFERRED, 0),
        ("D", Reason.RECOVERY_DISPATCHED, 0),
        # E: DEAD with no obligation and nothing listed on it: not listed
        ("F", Reason.EXECUTOR_DELETED, 1),
        ("zz-unknown", Reason.EXECUTOR_UNKNOWN, 1),
    ]
    assert got.executors[0].fixes == ALL and got.executors[0].row == rows[1]


def test_relay_alone_lists_its_not_alive_executors_with_no_workflows() -> None:
    got = classify([], [healthy("H", "v2"), dead("A", phase="deferred"), disconnected("B", deadline=EARLIER)], NOW)
    assert got.workflows == [] and got.queues == []
    assert [(e.executor_id, e.reason, e.fixes) for e in got.executors] == [
        ("A", Reason.RECOVERY_DEFERRED, FORK),  # nothing of v1 is HEALTHY
        ("B", Reason.DECLARATION_OVERDUE, FORK),
    ]


def test_an_executor_back_alive_leaves_the_listing() -> None:
    back = replace(dead("A"), status="HEALTHY")  # reconnected, its recovery about to be withdrawn
    got = classify([wf("1", "A")], [back], NOW)
    assert got.workflows == [] and got.executors == []


# ------------------------------------------------------------------ recover now


def test_recover_groups_recoverable_executors_by_version() -> None:
    rows = [healthy("H1", "v1"), healthy("H2", "v2"), dead("A"), dead("B", phase="deferred", version="v2",
                                                                      recovery_version_="v2"),
            dead("C", attempt=3), disconnected("D")]
    plan = plan_recovery(["A", "B", "C", "D", "A"], rows, force=True)
    assert plan.refused == {} and not plan.fork_instead
    assert plan.groups == {"v1": ["A", "C", "D"], "v2": ["B"]}


@pytest.mark.parametrize("r, words, fork", [
    (None, "no live record", False),
    (row("A", "DELETED"), "no live record", False),
    (row("A", None), "no live record", False),
    (row("A", "HEALTHY"), "HEALTHY", False),
    (dead(phase="dispatched", attempt=1, recovery_target="H"), "in flight (sent to H, attempt 1)", False),
    (dead(phase="confirmed"), "no recovery to do", False),
    (dead(phase=None), "no recovery to do", False),
    (disconnected(), "force=true", False),
    (dead(version="v9", recovery_version_="v9"), "no HEALTHY executor of application version 'v9'", True),
    (dead(phase="deferred", version="v9", recovery_version_="v9"), "fork its workflows", True),
])
def test_recover_refuses_what_it_cannot_do_now_and_says_why(r: ExecutorRow | None, words: str, fork: bool) -> None:
    rows = [healthy("H", "v1")] + ([r] if r is not None else [])
    plan = plan_recovery(["A"], rows)
    assert plan.groups == {} and words in plan.refused["A"], plan.refused
    assert plan.fork_instead is fork


def test_force_recovers_a_disconnected_executor_only_with_one_of_its_version() -> None:
    assert plan_recovery(["A"], [healthy("H", "v1"), disconnected("A")], force=True).groups == {"v1": ["A"]}
    plan = plan_recovery(["A"], [healthy("H", "v2"), disconnected("A")], force=True)
    assert plan.groups == {} and plan.fork_instead


def test_one_refusal_is_reported_beside_what_could_be_done() -> None:
    plan = plan_recovery(["A", "B"], [healthy("H", "v1"), dead("A"), dead("B", phase="dispatched")])
    assert plan.groups == {"v1": ["A"]} and list(plan.refused) == ["B"]


def test_an_earlier_incarnations_workflows_of_another_version_are_stranded_on_a_healthy_executor() -> None:
    """A HEALTHY executor back on v2: its v1 workflows are an earlier process's, which the v2 one does
    not recover; listed with the reason of the recovery under way for them, else dead_unrecovered."""
    owed = row("A", "HEALTHY", "v2", recovery_phase="deferred", recovery_version="v1")
    assert reason_of(owed, NOW, "v1") == Reason.RECOVERY_DEFERRED
    assert reason_of(owed, NOW, "v2") is None and reason_of(owed, NOW) is None
    assert reason_of(row("A", "HEALTHY", "v2"), NOW, "v1") == Reason.DEAD_UNRECOVERED
    assert recovery_version(owed) == "v1"
    out = classify([wf("w1"), replace(wf("w2"), app_version="v2")], [owed, healthy("H", "v2")], NOW)
    assert [(s.workflow.workflow_id, s.reason, s.fixes) for s in out.workflows] == [
        ("w1", Reason.RECOVERY_DEFERRED, FORK)]
    assert [(x.executor_id, x.reason, x.stranded) for x in out.executors] == [("A", Reason.RECOVERY_DEFERRED, 1)]
    # Relay alone (no workflows examined) lists the executor whose recovery is under way too.
    assert [(x.executor_id, x.reason) for x in classify([], [replace(owed, recovery_phase="pending")], NOW).executors] \
        == [("A", Reason.RECOVERY_PENDING)]
    unowed = row("A", "HEALTHY", "v2")
    assert [(x.executor_id, x.reason) for x in classify([wf("w1")], [unowed], NOW).executors] == [
        ("A", Reason.DEAD_UNRECOVERED)]


def test_an_earlier_incarnations_workflows_stay_owed_once_the_executor_drops_again() -> None:
    """Back on v2, then DISCONNECTED: its v1 workflows are still the recovery's (the process manager
    goes on with it), not waiting for the executor, which will never recover them; "recover now" of a
    HEALTHY one says whose they are."""
    owed = row("A", "DISCONNECTED", "v2", recovery_phase="deferred", recovery_version="v1",
               disconnect_reason="clean_close")
    assert reason_of(owed, NOW, "v1") == Reason.RECOVERY_DEFERRED
    assert reason_of(owed, NOW, "v2") == Reason.STOPPED_POLITELY  # its own: it may come back
    # "recover now" (forced) of it recovers its own version's, by a peer of v2; the v1 ones are the recovery's
    assert recovery_version(owed) == "v2"
    assert plan_recovery(["A"], [owed, healthy("H", "v2")], force=True).groups == {"v2": ["A"]}
    assert fixes_for(owed, {"v1", "v2"}, "v2")[0] == Fix.RECOVER and Fix.RECOVER not in fixes_for(owed, {"v1", "v2"}, "v1")
    back = replace(owed, status="HEALTHY")
    refused = plan_recovery(["A"], [back, healthy("H", "v1")]).refused["A"]
    assert "version v1 workflows are Relay's to recover" in refused, refused
