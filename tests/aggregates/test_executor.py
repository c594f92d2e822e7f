"""The Executor aggregate: every legal transition and every refused one.

Each test drives one aggregate through ``Driver`` (explicit times, events
collected after every command). At teardown the ``h`` fixture checks that
replaying the recorded events gives an equal aggregate and that the pure
executors fold agrees with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta

import pytest

from relay_es.aggregates.executor import (
    DisconnectReason,
    Executor,
    ExecutorStatus,
    RecoveryPhase,
    executor_stream_id,
)
from relay_es.domain.errors import DomainError, IllegalTransition, NotDue, StaleConnection
from relay_es.projections.executors import fold
from tests.aggregates.support import GRACE, T0, Driver, assert_fold_agrees, assert_replay_equal, replay

S = ExecutorStatus
P = RecoveryPhase


@pytest.fixture
def h() -> Iterator[Driver]:
    d = Driver("e")
    yield d
    d.check()


def assert_clear(err: Exception, command: str, state: str) -> None:
    """Refusals name the executor, the command and the state they were refused in."""
    msg = str(err)
    assert "executor 'e'" in msg, msg
    assert f"cannot {command}" in msg, msg
    assert f"while {state}" in msg, msg
    assert isinstance(err, IllegalTransition) and isinstance(err, DomainError)
    assert err.command == command
    assert err.entity == "executor 'e'"


# ---------------------------------------------------------------- creation


def test_registered_executor_is_new_and_has_a_deterministic_stream_id(h: Driver) -> None:
    agg = h.agg
    assert agg.id == executor_stream_id("o", "a", "e") == Executor.create_id("o", "a", "e")
    assert agg.status is None
    assert agg.incarnation == 0
    assert agg.deadline is None and agg.connection_id is None
    assert agg.recovery_phase is None and agg.recovery_request_id is None and agg.recovery_attempt == 0
    assert [type(e).__name__ for e in h.events] == ["Registered"]
    assert agg.created_on == T0


def test_stream_ids_differ_per_org_app_and_executor() -> None:
    ids = {executor_stream_id(*k) for k in [("o", "a", "e"), ("o", "a", "f"), ("o", "b", "e"), ("p", "a", "e")]}
    assert len(ids) == 4


# ----------------------------------------------------------------- connect


def test_connect_from_new_starts_incarnation_one(h: Driver) -> None:
    e = h.connect("c1", owner="relay-1", app_version="v1")
    agg = h.agg
    assert agg.status == S.HEALTHY
    assert agg.incarnation == 1
    assert (agg.connection_id, agg.owner, agg.app_version) == ("c1", "relay-1", "v1")
    assert (agg.hostname, agg.language, agg.dbos_version, agg.executor_metadata) == (
        "host", "python", "3.2.0", {"k": "v"}
    )
    assert isinstance(e, Executor.Connected)
    assert e.previous_status is None
    assert e.superseded_connection is None
    assert e.incarnation == 1
    assert e.timestamp == h.now == agg.modified_on


def test_connect_while_healthy_supersedes_the_current_connection(h: Driver) -> None:
    h.connect("c1", owner="relay-1", app_version="v1")
    e = h.connect("c2", owner="relay-2", app_version="v1")
    agg = h.agg
    assert e.superseded_connection == "c1"
    assert e.previous_status == "HEALTHY"
    assert e.incarnation == 1
    assert agg.status == S.HEALTHY and agg.incarnation == 1
    assert (agg.connection_id, agg.owner, agg.app_version) == ("c2", "relay-2", "v1")
    assert agg.recovery_phase is None


def connect_v2(h: Driver, connection_id: str = "c2", app_version: str = "v2") -> list:
    return h.do("connect", connection_id=connection_id, owner="relay-1", app_version=app_version,
                hostname="host", language="python", dbos_version="3.2.0", executor_metadata=None, at=h.tick())


@pytest.mark.parametrize("status", ["HEALTHY", "DISCONNECTED"])
def test_connect_under_another_version_recorded_the_earlier_process_dead(h: Driver, status: str) -> None:
    h.connect("c1", app_version="v1")
    if status == "DISCONNECTED":
        h.disconnect("c1")
    dead, connected = connect_v2(h)
    assert isinstance(dead, Executor.DeclaredDead) and isinstance(connected, Executor.Connected)
    assert (dead.app_version, dead.reason) == ("v1", "version_changed")
    assert dead.deadline == (None if status == "HEALTHY" else h.now - timedelta(seconds=1) + GRACE)
    assert connected.incarnation == 2 and connected.previous_status == "DEAD"
    assert connected.superseded_connection == ("c1" if status == "HEALTHY" else None)
    agg = h.agg
    assert (agg.status, agg.incarnation, agg.app_version, agg.deadline) == (S.HEALTHY, 2, "v2", None)
    # v1's workflows are a peer's to recover: the v2 process recovers only its own version's.
    assert (agg.recovery_phase, agg.recovery_version) == (P.PENDING, "v1")
    assert_clear(h.refused("withdraw_recovery", reason="x", at=h.tick()), "withdraw recovery", "HEALTHY")
    h.dispatch("r1", "peer-v1")
    h.confirm("r1")
    assert (agg.status, agg.recovery_phase) == (S.HEALTHY, P.CONFIRMED)


def test_a_recovery_pending_went_on_when_the_executor_came_back_on_another_version(h: Driver) -> None:
    h.to_dead()  # v1's death: recovery pending
    h.defer()
    (connected,) = connect_v2(h)  # a new incarnation, on v2
    agg = h.agg
    assert (agg.status, agg.incarnation) == (S.HEALTHY, 2)
    assert (agg.recovery_phase, agg.recovery_version) == (P.DEFERRED, "v1")
    err = h.refused("withdraw_recovery", reason="x", at=h.tick())
    assert "back on version 'v2', not the recovery's 'v1'" in str(err)
    h.refused("dispatch_recovery", request_id="r1", target_executor_id="e", at=h.tick())  # never itself
    h.dispatch("r1", "peer-v1")
    h.confirm("r1")
    assert (agg.status, agg.recovery_phase) == (S.HEALTHY, P.CONFIRMED)  # the live executor is not deleted


def test_a_recovery_came_back_on_its_own_version_is_withdrawn_as_before(h: Driver) -> None:
    h.to_dead()
    h.connect("c2", app_version="v1")
    assert (h.agg.recovery_phase, h.agg.recovery_version) == (P.PENDING, "v1")
    h.refused("dispatch_recovery", request_id="r1", target_executor_id="peer", at=h.tick())
    h.refused("defer_recovery", reason="x", at=h.tick())
    h.withdraw()
    assert h.agg.recovery_phase is None


def test_a_death_of_another_version_behind_a_dispatch_was_recovered_after_it_while_healthy(h: Driver) -> None:
    h.to_dispatched()  # v1's death; r1 out
    h.connect("c2", app_version="v2")  # incarnation 2, on v2
    dead, _ = connect_v2(h, "c3", "v3")  # incarnation 3, on v3: incarnation 2 (v2) is gone
    assert dead.app_version == "v2"
    assert h.agg.recovery_redo_version == "v2"
    h.confirm("r1")
    agg = h.agg
    assert (agg.status, agg.recovery_phase, agg.recovery_version, agg.recovery_redo_version) == (
        S.HEALTHY, P.PENDING, "v2", None)
    h.dispatch("r2", "peer-v2")
    h.confirm("r2")
    assert agg.recovery_phase == P.CONFIRMED


def test_a_death_behind_a_dispatch_was_dropped_once_back_on_its_version(h: Driver) -> None:
    h.to_dispatched()
    h.connect("c2", app_version="v2")
    h.disconnect("c2")
    h.declare_dead()  # v2 behind r1
    h.connect("c3", app_version="v2")  # back on v2: that process recovered v2's own
    h.confirm("r1")
    assert (h.agg.recovery_phase, h.agg.recovery_redo_version) == (P.CONFIRMED, None)


def test_a_pending_recovery_kept_another_versions_death_behind_it(h: Driver) -> None:
    h.to_dead()  # v1 pending
    connect_v2(h)  # v2, v1 still owed
    connect_v2(h, "c3", "v3")  # v2's process gone too
    agg = h.agg
    assert (agg.recovery_phase, agg.recovery_version, agg.recovery_redo_version) == (P.PENDING, "v1", "v2")


def test_connect_with_the_current_connection_id_is_refused(h: Driver) -> None:
    h.connect("c1")
    err = h.refused(
        "connect",
        connection_id="c1",
        owner="relay-9",
        app_version="v9",
        hostname=None,
        language=None,
        dbos_version=None,
        executor_metadata=None,
        at=h.tick(),
    )
    assert_clear(err, "connect", "HEALTHY")
    assert "'c1'" in str(err) and "already current" in str(err)


@pytest.mark.parametrize("bad", ["", None])
def test_connect_without_a_connection_id_is_refused(h: Driver, bad: str | None) -> None:
    err = h.refused(
        "connect",
        connection_id=bad,
        owner="relay-1",
        app_version="v1",
        hostname=None,
        language=None,
        dbos_version=None,
        executor_metadata=None,
        at=h.tick(),
    )
    assert_clear(err, "connect", "new")
    assert "connection id is required" in str(err)


def test_reconnect_while_disconnected_cancels_the_deadline_and_recovers_nothing(h: Driver) -> None:
    h.to_disconnected()
    assert h.agg.deadline is not None
    e = h.connect("c2")
    agg = h.agg
    assert agg.status == S.HEALTHY
    assert agg.deadline is None
    assert agg.incarnation == 1
    assert agg.recovery_phase is None and agg.recovery_request_id is None and agg.recovery_attempt == 0
    assert e.previous_status == "DISCONNECTED"
    assert e.superseded_connection is None
    # The deadline is gone: declaring it dead later is refused, whatever the clock says.
    err = h.refused("declare_dead", now=h.now + timedelta(days=1))
    assert_clear(err, "declare dead", "HEALTHY")
    assert not isinstance(err, NotDue)


def test_reconnect_while_disconnected_may_reuse_the_old_connection_id(h: Driver) -> None:
    h.connect("c1")
    h.disconnect("c1")
    h.connect("c1")
    assert h.agg.status == S.HEALTHY and h.agg.connection_id == "c1" and h.agg.incarnation == 1


def test_connect_while_dead_starts_a_new_incarnation(h: Driver) -> None:
    h.to_dead()
    e = h.connect("c2", app_version="v2")
    agg = h.agg
    assert agg.status == S.HEALTHY
    assert agg.incarnation == 2 and e.incarnation == 2
    assert e.previous_status == "DEAD"
    assert e.superseded_connection is None
    assert agg.deadline is None
    # The obligation is not dropped by the connect itself; it is withdrawn explicitly.
    assert agg.recovery_phase == P.PENDING
    assert agg.recovery_version == "v1"


def test_connect_while_deleted_starts_a_new_incarnation_with_recovery_cleared(h: Driver) -> None:
    h.to_deleted()
    assert h.agg.status == S.DELETED
    e = h.connect("c9")
    agg = h.agg
    assert agg.status == S.HEALTHY
    assert agg.incarnation == 2 and e.incarnation == 2
    assert e.previous_status == "DELETED"
    assert agg.recovery_phase is None
    assert agg.recovery_request_id is None
    assert agg.recovery_target is None
    assert agg.outstanding_request is None
    # Nothing to withdraw, defer, dispatch, fail or confirm for the new incarnation.
    assert_clear(h.refused("withdraw_recovery", reason="x", at=h.tick()), "withdraw recovery", "HEALTHY")
    assert_clear(h.refused("confirm_recovery", request_id="r1", pending_found=True, at=h.tick()),
                 "confirm recovery", "HEALTHY")


def test_each_death_and_rebirth_increments_the_incarnation(h: Driver) -> None:
    h.connect("c1")
    seen = [h.agg.incarnation]
    for n in range(3):
        h.disconnect()
        h.declare_dead()
        h.connect(f"c{n + 2}")
        h.withdraw()
        seen.append(h.agg.incarnation)
    assert seen == [1, 2, 3, 4]


# -------------------------------------------------------------- disconnect


def test_disconnect_arms_the_deadline(h: Driver) -> None:
    h.connect("c1")
    e = h.disconnect("c1", reason=DisconnectReason.PING_TIMEOUT)
    agg = h.agg
    assert agg.status == S.DISCONNECTED
    assert agg.deadline == h.now + GRACE == e.deadline
    assert agg.connection_id is None and agg.owner is None
    assert isinstance(e, Executor.Disconnected)
    assert e.connection_id == "c1"
    assert e.reason == "ping_timeout" and type(e.reason) is str
    assert fold(h.events).disconnect_reason == "ping_timeout"


def test_disconnect_of_a_stale_connection_raises_stale_connection(h: Driver) -> None:
    h.connect("c1")
    h.connect("c2")
    err = h.refused(
        "disconnect", StaleConnection, connection_id="c1", reason="socket_closed", deadline=h.now + GRACE, at=h.now
    )
    assert_clear(err, "disconnect", "HEALTHY")
    assert "'c1'" in str(err) and "'c2'" in str(err)


@pytest.mark.parametrize("state", ["new", "DISCONNECTED", "DEAD", "DELETED"])
def test_disconnect_is_refused_unless_healthy(h: Driver, state: str) -> None:
    {"new": lambda: h, "DISCONNECTED": h.to_disconnected, "DEAD": h.to_dead, "DELETED": h.to_deleted}[state]()
    err = h.refused("disconnect", connection_id="c1", reason="socket_closed", deadline=h.now + GRACE, at=h.now)
    assert_clear(err, "disconnect", state)
    assert not isinstance(err, StaleConnection)
    assert "only a HEALTHY executor can disconnect" in str(err)


def test_disconnect_with_a_deadline_before_the_disconnect_is_refused(h: Driver) -> None:
    h.connect("c1")
    at = h.tick()
    err = h.refused(
        "disconnect", connection_id="c1", reason="socket_closed", deadline=at - timedelta(milliseconds=1), at=at
    )
    assert_clear(err, "disconnect", "HEALTHY")
    assert "deadline is before the disconnect" in str(err)


def test_disconnect_with_a_deadline_equal_to_the_disconnect_is_allowed(h: Driver) -> None:
    h.connect("c1")
    h.disconnect("c1", grace=timedelta(0))
    assert h.agg.deadline == h.now
    h.do("declare_dead", now=h.now)
    assert h.agg.status == S.DEAD


# ------------------------------------------------------------ declare_dead


def test_declare_dead_at_the_deadline(h: Driver) -> None:
    h.to_disconnected()
    deadline = h.agg.deadline
    (e,) = h.do("declare_dead", now=deadline, expected_deadline=deadline)
    agg = h.agg
    assert agg.status == S.DEAD
    assert agg.deadline is None
    assert agg.recovery_phase == P.PENDING
    assert agg.recovery_version == "v1"
    assert agg.recovery_attempt == 0
    assert agg.recovery_request_id is None and agg.recovery_target is None
    assert isinstance(e, Executor.DeclaredDead)
    assert e.deadline == deadline and e.app_version == "v1" and e.timestamp == deadline


def test_declare_dead_after_the_deadline(h: Driver) -> None:
    h.to_disconnected()
    late = h.agg.deadline + timedelta(hours=3)
    h.do("declare_dead", now=late)
    assert h.agg.status == S.DEAD and h.agg.modified_on == late


def test_declare_dead_before_the_deadline_is_not_due(h: Driver) -> None:
    h.to_disconnected()
    deadline = h.agg.deadline
    err = h.refused("declare_dead", NotDue, now=deadline - timedelta(microseconds=1))
    assert_clear(err, "declare dead", "DISCONNECTED")
    assert "has not come" in str(err) and deadline.isoformat() in str(err)


def test_declare_dead_with_a_different_expected_deadline_is_not_due(h: Driver) -> None:
    h.to_disconnected()
    deadline = h.agg.deadline
    # Due by the clock, but the caller's timer was armed for an older deadline.
    err = h.refused(
        "declare_dead", NotDue, now=deadline + timedelta(hours=1), expected_deadline=deadline - timedelta(seconds=5)
    )
    assert_clear(err, "declare dead", "DISCONNECTED")
    assert f"the deadline is now {deadline.isoformat()}" in str(err)


def test_a_timer_for_an_older_deadline_cannot_kill_a_reconnected_and_redisconnected_executor(h: Driver) -> None:
    h.to_disconnected()
    old = h.agg.deadline
    h.connect("c2")
    h.disconnect("c2", grace=timedelta(minutes=10))
    assert h.agg.deadline != old
    h.refused("declare_dead", NotDue, now=old, expected_deadline=old)
    h.refused("declare_dead", NotDue, now=old)
    assert h.agg.status == S.DISCONNECTED


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DEAD", "DELETED"])
def test_declare_dead_is_refused_unless_disconnected(h: Driver, state: str) -> None:
    {"new": lambda: h, "HEALTHY": h.to_healthy, "DEAD": h.to_dead, "DELETED": h.to_deleted}[state]()
    err = h.refused("declare_dead", now=h.now + timedelta(days=365))
    assert_clear(err, "declare dead", state)
    assert not isinstance(err, NotDue)
    assert "only a DISCONNECTED executor can be declared dead" in str(err)


# ---------------------------------------------------------------- defer


def test_defer_a_pending_recovery(h: Driver) -> None:
    h.to_dead()
    e = h.defer("no live executor on v1")
    assert h.agg.recovery_phase == P.DEFERRED
    assert h.agg.status == S.DEAD
    assert isinstance(e, Executor.RecoveryDeferred) and e.reason == "no live executor on v1"


def test_defer_is_refused_when_already_deferred(h: Driver) -> None:
    h.to_dead()
    h.defer()
    err = h.refused("defer_recovery", reason="x", at=h.tick())
    assert_clear(err, "defer recovery", "DEAD")
    assert "recovery is deferred" in str(err)


def test_defer_is_refused_while_dispatched(h: Driver) -> None:
    h.to_dispatched()
    err = h.refused("defer_recovery", reason="x", at=h.tick())
    assert_clear(err, "defer recovery", "DEAD")
    assert "recovery is dispatched" in str(err)


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DISCONNECTED", "DELETED"])
def test_defer_is_refused_without_an_obligation(h: Driver, state: str) -> None:
    {"new": lambda: h, "HEALTHY": h.to_healthy, "DISCONNECTED": h.to_disconnected, "DELETED": h.to_deleted}[state]()
    err = h.refused("defer_recovery", reason="x", at=h.tick())
    assert_clear(err, "defer recovery", state)
    assert "recovery is not needed" in str(err)


def test_defer_is_refused_once_the_executor_came_back(h: Driver) -> None:
    h.to_dead()
    h.connect("c2")
    assert h.agg.recovery_phase == P.PENDING
    assert_clear(h.refused("defer_recovery", reason="x", at=h.tick()), "defer recovery", "HEALTHY")


# -------------------------------------------------------------- dispatch


def test_dispatch_a_pending_recovery(h: Driver) -> None:
    h.to_dead()
    e = h.dispatch("r1", "t1")
    agg = h.agg
    assert agg.status == S.DEAD
    assert agg.recovery_phase == P.DISPATCHED
    assert agg.recovery_request_id == "r1" == agg.outstanding_request
    assert agg.recovery_target == "t1"
    assert agg.recovery_attempt == 1
    assert isinstance(e, Executor.RecoveryDispatched)
    assert (e.request_id, e.target_executor_id, e.app_version, e.attempt) == ("r1", "t1", "v1", 1)
    assert fold(h.events).recovery_dispatched_at == h.now


def test_dispatch_a_deferred_recovery(h: Driver) -> None:
    h.to_dead()
    h.defer()
    h.dispatch("r1", "t1")
    assert h.agg.recovery_phase == P.DISPATCHED and h.agg.recovery_attempt == 1


def test_a_second_dispatch_is_refused_while_one_is_outstanding(h: Driver) -> None:
    h.to_dispatched()
    err = h.refused("dispatch_recovery", request_id="r2", target_executor_id="t2", at=h.tick())
    assert_clear(err, "dispatch recovery", "DEAD")
    assert "request r1 outstanding" in str(err)
    assert h.agg.outstanding_request == "r1"


def test_dispatch_to_itself_is_refused(h: Driver) -> None:
    h.to_dead()
    err = h.refused("dispatch_recovery", request_id="r1", target_executor_id="e", at=h.tick())
    assert_clear(err, "dispatch recovery", "DEAD")
    assert "cannot recover itself" in str(err)


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DISCONNECTED", "DELETED"])
def test_dispatch_is_refused_unless_dead(h: Driver, state: str) -> None:
    {"new": lambda: h, "HEALTHY": h.to_healthy, "DISCONNECTED": h.to_disconnected, "DELETED": h.to_deleted}[state]()
    err = h.refused("dispatch_recovery", request_id="r1", target_executor_id="t1", at=h.tick())
    assert_clear(err, "dispatch recovery", state)
    assert "only a DEAD executor, or one back on another version than the recovery's, is recovered" in str(err)


def test_dispatch_is_refused_once_the_executor_came_back_with_recovery_pending(h: Driver) -> None:
    h.to_dead()
    h.connect("c2")
    err = h.refused("dispatch_recovery", request_id="r1", target_executor_id="t1", at=h.tick())
    assert_clear(err, "dispatch recovery", "HEALTHY")


def test_dispatch_is_refused_after_confirmation(h: Driver) -> None:
    h.to_confirmed()
    err = h.refused("dispatch_recovery", request_id="r2", target_executor_id="t1", at=h.tick())
    assert_clear(err, "dispatch recovery", "DEAD")
    assert "recovery is confirmed" in str(err)


# ------------------------------------------------------------ fail/confirm


def test_fail_returns_to_pending_and_the_next_dispatch_is_the_next_attempt(h: Driver) -> None:
    h.to_dispatched()
    e = h.fail("r1", reason="target disconnected")
    agg = h.agg
    assert agg.recovery_phase == P.PENDING
    assert agg.recovery_request_id is None and agg.outstanding_request is None
    assert agg.recovery_attempt == 1
    assert isinstance(e, Executor.RecoveryFailed)
    assert (e.request_id, e.target_executor_id, e.reason) == ("r1", "t1", "target disconnected")
    e2 = h.dispatch("r2", "t2")
    assert e2.attempt == 2 and h.agg.recovery_attempt == 2
    assert h.agg.recovery_request_id == "r2" and h.agg.recovery_target == "t2"
    h.fail("r2")
    h.defer()
    assert h.dispatch("r3", "t1").attempt == 3


def test_confirm_the_outstanding_request(h: Driver) -> None:
    h.to_dispatched()
    e = h.confirm("r1", pending_found=False)
    agg = h.agg
    assert agg.recovery_phase == P.CONFIRMED
    assert agg.outstanding_request is None
    assert agg.status == S.DEAD
    assert isinstance(e, Executor.RecoveryConfirmed)
    assert (e.request_id, e.target_executor_id, e.pending_found) == ("r1", "t1", False)


@pytest.mark.parametrize(("command", "phrase"), [("fail_recovery", "fail recovery"),
                                                  ("confirm_recovery", "confirm recovery")])
def test_fail_and_confirm_are_refused_for_another_request(h: Driver, command: str, phrase: str) -> None:
    h.to_dispatched()
    extra = {"reason": "x"} if command == "fail_recovery" else {"pending_found": True}
    err = h.refused(command, request_id="r-other", at=h.tick(), **extra)
    assert_clear(err, phrase, "DEAD")
    assert "'r-other' is not the outstanding one ('r1')" in str(err)


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DISCONNECTED", "DEAD", "DEFERRED", "FAILED", "CONFIRMED",
                                   "DELETED"])
@pytest.mark.parametrize(("command", "phrase"), [("fail_recovery", "fail recovery"),
                                                  ("confirm_recovery", "confirm recovery")])
def test_fail_and_confirm_are_refused_with_nothing_outstanding(h: Driver, state: str, command: str,
                                                               phrase: str) -> None:
    setup = {
        "new": lambda: h,
        "HEALTHY": h.to_healthy,
        "DISCONNECTED": h.to_disconnected,
        "DEAD": h.to_dead,
        "DEFERRED": lambda: (h.to_dead(), h.defer()),
        "FAILED": lambda: (h.to_dispatched(), h.fail("r1")),
        "CONFIRMED": h.to_confirmed,
        "DELETED": h.to_deleted,
    }
    setup[state]()
    shown = {"DEFERRED": "DEAD", "FAILED": "DEAD", "CONFIRMED": "DEAD"}.get(state, state)
    extra = {"reason": "x"} if command == "fail_recovery" else {"pending_found": True}
    err = h.refused(command, request_id="r1", at=h.tick(), **extra)
    assert_clear(err, phrase, shown)
    assert "no recovery request is outstanding" in str(err)


def test_a_confirmed_request_cannot_be_confirmed_or_failed_again(h: Driver) -> None:
    h.to_confirmed()
    h.refused("confirm_recovery", request_id="r1", pending_found=True, at=h.tick())
    h.refused("fail_recovery", request_id="r1", reason="late", at=h.tick())
    assert h.agg.recovery_phase == P.CONFIRMED


def test_a_failed_request_cannot_be_answered_again(h: Driver) -> None:
    h.to_dispatched()
    h.fail("r1")
    h.dispatch("r2")
    h.refused("confirm_recovery", request_id="r1", pending_found=True, at=h.tick())
    h.refused("fail_recovery", request_id="r1", reason="late", at=h.tick())
    assert h.agg.outstanding_request == "r2"


# ---------------------------------------------------------------- delete


def test_delete_after_a_confirmed_recovery(h: Driver) -> None:
    h.to_confirmed()
    e = h.delete()
    agg = h.agg
    assert agg.status == S.DELETED
    assert agg.recovery_phase is None and agg.recovery_request_id is None and agg.recovery_target is None
    assert isinstance(e, Executor.Deleted)
    assert fold(h.events).visible is False


@pytest.mark.parametrize("state", ["PENDING", "DEFERRED", "DISPATCHED", "FAILED"])
def test_delete_is_refused_while_dead_without_a_confirmed_recovery(h: Driver, state: str) -> None:
    {
        "PENDING": h.to_dead,
        "DEFERRED": lambda: (h.to_dead(), h.defer()),
        "DISPATCHED": h.to_dispatched,
        "FAILED": lambda: (h.to_dispatched(), h.fail("r1")),
    }[state]()
    err = h.refused("delete", at=h.tick())
    assert_clear(err, "delete", "DEAD")
    assert "recovery has not been confirmed" in str(err)


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DISCONNECTED", "DELETED"])
def test_delete_is_refused_unless_dead(h: Driver, state: str) -> None:
    {"new": lambda: h, "HEALTHY": h.to_healthy, "DISCONNECTED": h.to_disconnected, "DELETED": h.to_deleted}[state]()
    err = h.refused("delete", at=h.tick())
    assert_clear(err, "delete", state)
    assert "only a DEAD executor is deleted" in str(err)


# -------------------------------------------------------------- withdraw


@pytest.mark.parametrize("deferred", [False, True])
def test_withdraw_once_the_executor_came_back(h: Driver, deferred: bool) -> None:
    h.to_dead()
    if deferred:
        h.defer()
    h.connect("c2")
    e = h.withdraw("executor reconnected")
    agg = h.agg
    assert agg.status == S.HEALTHY
    assert agg.recovery_phase is None and agg.recovery_request_id is None and agg.recovery_target is None
    assert isinstance(e, Executor.RecoveryWithdrawn) and e.reason == "executor reconnected"


def test_withdraw_while_disconnected_again(h: Driver) -> None:
    h.to_dead()
    h.connect("c2")
    h.disconnect("c2")
    h.withdraw()
    assert h.agg.status == S.DISCONNECTED and h.agg.recovery_phase is None


def test_withdraw_after_a_failed_dispatch_once_back(h: Driver) -> None:
    h.to_dispatched()
    h.connect("c2")
    h.fail("r1")
    assert h.agg.recovery_phase == P.PENDING and h.agg.status == S.HEALTHY
    h.withdraw()
    assert h.agg.recovery_phase is None


@pytest.mark.parametrize("deferred", [False, True])
def test_withdraw_is_refused_while_still_dead(h: Driver, deferred: bool) -> None:
    h.to_dead()
    if deferred:
        h.defer()
    err = h.refused("withdraw_recovery", reason="x", at=h.tick())
    assert_clear(err, "withdraw recovery", "DEAD")
    assert "still dead" in str(err)


@pytest.mark.parametrize("state", ["new", "HEALTHY", "DISCONNECTED", "DISPATCHED", "CONFIRMED", "DELETED",
                                   "BACK_DISPATCHED", "BACK_CONFIRMED"])
def test_withdraw_is_refused_unless_pending_or_deferred(h: Driver, state: str) -> None:
    setup = {
        "new": lambda: h,
        "HEALTHY": h.to_healthy,
        "DISCONNECTED": h.to_disconnected,
        "DISPATCHED": h.to_dispatched,
        "CONFIRMED": h.to_confirmed,
        "DELETED": h.to_deleted,
        "BACK_DISPATCHED": lambda: (h.to_dispatched(), h.connect("c2")),
        "BACK_CONFIRMED": lambda: (h.to_dispatched(), h.connect("c2"), h.confirm("r1")),
    }
    setup[state]()
    shown = {"DISPATCHED": "DEAD", "CONFIRMED": "DEAD", "BACK_DISPATCHED": "HEALTHY",
             "BACK_CONFIRMED": "HEALTHY"}.get(state, state)
    err = h.refused("withdraw_recovery", reason="x", at=h.tick())
    assert_clear(err, "withdraw recovery", shown)
    assert "recovery is" in str(err)


# ----------------------------------------- a dispatch under way still completes


def test_reconnect_while_a_dispatch_is_outstanding_keeps_the_dispatch(h: Driver) -> None:
    h.to_dispatched()
    e = h.connect("c2")
    agg = h.agg
    assert e.incarnation == 2
    assert agg.status == S.HEALTHY
    assert agg.recovery_phase == P.DISPATCHED and agg.outstanding_request == "r1"
    assert agg.recovery_target == "t1" and agg.recovery_attempt == 1
    h.confirm("r1")
    assert agg.recovery_phase == P.CONFIRMED
    assert agg.status == S.HEALTHY  # confirmation does not kill or delete a live executor
    err = h.refused("delete", at=h.tick())
    assert_clear(err, "delete", "HEALTHY")
    assert agg.incarnation == 2


def test_a_confirmed_obligation_is_replaced_by_the_next_death(h: Driver) -> None:
    h.to_dispatched()
    h.connect("c2", app_version="v2")
    h.confirm("r1")
    h.disconnect("c2")
    h.declare_dead()
    agg = h.agg
    assert agg.status == S.DEAD and agg.incarnation == 2
    assert agg.recovery_phase == P.PENDING
    assert agg.recovery_version == "v2"
    assert agg.recovery_attempt == 0
    assert agg.recovery_request_id is None and agg.recovery_target is None
    assert h.dispatch("r2").attempt == 1


def test_an_unfinished_pending_obligation_survives_a_second_death(h: Driver) -> None:
    h.to_dead()
    h.connect("c2")  # came back, not (yet) withdrawn
    h.disconnect("c2")
    h.declare_dead()
    agg = h.agg
    assert agg.status == S.DEAD and agg.incarnation == 2
    assert agg.recovery_phase == P.PENDING and agg.recovery_attempt == 0
    h.dispatch("r1")
    h.confirm("r1")
    h.delete()


def test_an_outstanding_dispatch_survives_a_second_death_and_can_be_confirmed(h: Driver) -> None:
    h.to_dispatched()
    h.connect("c2")
    h.disconnect("c2")
    h.declare_dead()
    agg = h.agg
    assert agg.status == S.DEAD
    assert agg.recovery_phase == P.DISPATCHED and agg.outstanding_request == "r1" and agg.recovery_attempt == 1
    h.refused("dispatch_recovery", request_id="r2", target_executor_id="t1", at=h.tick())
    e = h.confirm("r1")
    assert isinstance(e, Executor.RecoveryConfirmed) and e.request_id == "r1"
    assert agg.outstanding_request is None


def test_a_second_death_while_a_dispatch_is_outstanding_is_not_discharged_by_that_dispatch(h: Driver) -> None:
    """Crash loop: incarnation 2 dies while r1 (sent for incarnation 1's death) is still out.

    r1 was sent for application version v1 (the SDK recovers only workflows of
    that version) and the target may have run it before incarnation 2 started
    any workflow, so its confirmation says nothing about what incarnation 2 (v2)
    left pending. ADR 0009 lets a dispatch under way complete and keeps a *live*
    executor; it does not make that old dispatch discharge a newer death. The
    executor must not be deletable until a recovery dispatched after the second
    death has been confirmed.
    """
    h.to_dispatched()  # death of incarnation 1 (v1); r1 goes out for v1
    h.connect("c2", app_version="v2")  # incarnation 2 runs workflows of its own, on v2
    h.disconnect("c2")
    e = h.declare_dead()  # incarnation 2 dies; r1 still unanswered
    assert e.app_version == "v2"
    assert h.agg.status == S.DEAD and h.agg.incarnation == 2
    h.confirm("r1")  # the answer to the old request arrives
    err = h.refused("delete", at=h.tick())
    assert_clear(err, "delete", "DEAD")


def a_later_death_behind_a_failed_one(h: Driver) -> None:
    h.to_dispatched()  # death of incarnation 1 (v1); r1 goes out for v1
    h.connect("c2", app_version="v2")
    h.disconnect("c2")
    h.declare_dead()  # incarnation 2 (v2) dies while r1 is out: kept behind it
    h.fail("r1")  # v1's recovery is pending again, v2's still behind it
    assert (h.agg.recovery_phase, h.agg.recovery_version, h.agg.recovery_redo_version) == (P.PENDING, "v1", "v2")


def test_a_later_death_is_recovered_first_when_reordered_then_the_earlier_one(h: Driver) -> None:
    a_later_death_behind_a_failed_one(h)
    h.defer()  # no v1 executor left
    (e,) = h.do("reorder_recovery", at=h.tick())
    assert isinstance(e, Executor.RecoveryReordered)
    assert (e.app_version, e.postponed_version) == ("v2", "v1")
    agg = h.agg
    assert (agg.recovery_phase, agg.recovery_version, agg.recovery_redo_version) == (P.PENDING, "v2", "v1")
    assert agg.recovery_attempt == 0 and agg.recovery_request_id is None and agg.recovery_target is None
    d = h.dispatch("r2", "t2")
    assert d.app_version == "v2" and d.attempt == 1
    h.confirm("r2")  # v2's workflows recovered; v1's still wait: not deletable
    assert (agg.recovery_phase, agg.recovery_version, agg.recovery_redo_version) == (P.PENDING, "v1", None)
    h.refused("delete", at=h.tick())
    h.dispatch("r3", "t3")
    h.confirm("r3")
    h.delete()
    assert agg.status == S.DELETED


@pytest.mark.parametrize("setup", ["healthy", "dead, nothing behind", "dispatched, a death behind", "came back"])
def test_reorder_is_refused_unless_a_later_death_waits_behind_an_unfinished_recovery(h: Driver, setup: str) -> None:
    if setup == "healthy":
        h.to_healthy()
    elif setup == "dead, nothing behind":
        h.to_dead()
    elif setup == "dispatched, a death behind":
        h.to_dispatched()
        h.connect("c2", app_version="v2")
        h.disconnect("c2")
        h.declare_dead()
    else:
        a_later_death_behind_a_failed_one(h)
        h.connect("c3", app_version="v1")  # back on the recovery's version
    err = h.refused("reorder_recovery", at=h.tick())
    assert "reorder recovery" in str(err)


def test_full_life_cycle_through_deletion_and_rebirth(h: Driver) -> None:
    h.connect("c1")
    h.connect("c2")
    h.disconnect("c2")
    h.connect("c3")
    h.disconnect("c3")
    h.declare_dead()
    h.defer()
    h.dispatch("r1", "t1")
    h.fail("r1")
    h.dispatch("r2", "t2")
    h.confirm("r2")
    h.delete()
    h.connect("c4")
    assert h.agg.status == S.HEALTHY and h.agg.incarnation == 2
    assert [type(e).__name__ for e in h.events] == [
        "Registered", "Connected", "Connected", "Disconnected", "Connected", "Disconnected", "DeclaredDead",
        "RecoveryDeferred", "RecoveryDispatched", "RecoveryFailed", "RecoveryDispatched", "RecoveryConfirmed",
        "Deleted", "Connected",
    ]
    assert [e.originator_version for e in h.events] == list(range(1, len(h.events) + 1))


# ------------------------------------------------------------ replay, fold


def test_replay_after_every_command_gives_equal_state() -> None:
    d = Driver("e")
    steps = [
        lambda: d.connect("c1"), lambda: d.connect("c2"), lambda: d.disconnect("c2"), d.declare_dead, d.defer,
        lambda: d.dispatch("r1"), lambda: d.connect("c3"), lambda: d.fail("r1"), d.withdraw,
        lambda: d.disconnect("c3"), d.declare_dead, lambda: d.dispatch("r2"), lambda: d.confirm("r2"), d.delete,
        lambda: d.connect("c4"),
    ]
    for step in steps:
        step()
        assert_replay_equal(d.agg, d.events)
        assert_fold_agrees(d.agg, d.events)
        # A prefix of the stream replays to the aggregate as it then stood.
        assert replay(d.events).version == len(d.events)


def test_fold_until_gives_the_row_as_it_stood() -> None:
    d = Driver("e")
    d.connect("c1")
    d.disconnect("c1")
    before_death = d.now
    d.declare_dead()
    row = fold(d.events, until=before_death)
    assert row is not None and row.status == "DISCONNECTED" and row.deadline is not None
    assert fold(d.events).status == "DEAD"
    assert fold([]) is None
    with pytest.raises(ValueError, match="before Registered"):
        fold(d.events[1:])


def test_replay_uses_the_event_timestamps_not_the_clock() -> None:
    d = Driver("e")
    d.connect("c1")
    rebuilt = replay(d.events)
    assert rebuilt.created_on == T0
    assert rebuilt.modified_on == d.now


# ------------------------------------------------------------------ stamps


LATE = timedelta(milliseconds=45)  # how long before the stream's last stamp a command's instant was taken


def _info(app_version: str = "v1") -> dict:
    return dict(owner="relay-1", app_version=app_version, hostname="host", language="python",
                dbos_version="3.2.0", executor_metadata=None)


def _declare_dead_behind_a_later_confirmation(h: Driver) -> None:
    """DISCONNECTED, its deadline come a second before the stream's last event (the confirmation of
    an earlier death's recovery, still outstanding when it came back)."""
    h.to_dispatched()
    h.connect("c2")  # back on its version: r1 still outstanding
    h.disconnect("c2", grace=timedelta(0))
    h.confirm("r1")


# Each command that takes an instant, from a state it is legal in, given an instant before the
# stream's last stamp (what the hub saw before the process manager recorded, or a clock read
# before another writer recorded): name -> (setup, command given the instant).
LATE_COMMANDS = {
    "connect back while dispatched": (Driver.to_dispatched, lambda h, at: h.do(
        "connect", connection_id="c2", at=at, **_info())),
    "connect under another version": (Driver.to_healthy, lambda h, at: h.do(
        "connect", connection_id="c2", at=at, **_info("v2"))),
    "disconnect": (Driver.to_healthy, lambda h, at: h.do(
        "disconnect", connection_id="c1", reason="socket_closed", deadline=h.agg.stamp(at) + GRACE, at=at)),
    "declare dead": (_declare_dead_behind_a_later_confirmation, lambda h, at: h.do("declare_dead", now=at)),
    "defer": (Driver.to_dead, lambda h, at: h.do("defer_recovery", reason="no target", at=at)),
    "dispatch": (Driver.to_dead, lambda h, at: h.do(
        "dispatch_recovery", request_id="r1", target_executor_id="t1", at=at)),
    "fail": (Driver.to_dispatched, lambda h, at: h.do("fail_recovery", request_id="r1", reason="x", at=at)),
    "confirm": (Driver.to_dispatched, lambda h, at: h.do(
        "confirm_recovery", request_id="r1", pending_found=True, at=at)),
    "reorder": (lambda h: (a_later_death_behind_a_failed_one(h), h.defer()),
                lambda h, at: h.do("reorder_recovery", at=at)),
    "withdraw": (lambda h: (h.to_dead(), h.connect("c2")), lambda h, at: h.do(
        "withdraw_recovery", reason="came back", at=at)),
    "delete": (Driver.to_confirmed, lambda h, at: h.do("delete", at=at)),
}


@pytest.mark.parametrize("name", LATE_COMMANDS)
def test_an_instant_before_the_stream_s_last_stamp_is_stamped_at_it(h: Driver, name: str) -> None:
    setup, command = LATE_COMMANDS[name]
    setup(h)
    last = h.events[-1].timestamp
    at = last - LATE  # declare dead: its deadline has come by this clock reading, still before the confirmation
    new = command(h, at)
    assert new and all(e.timestamp == last for e in new), [(type(e).__name__, e.timestamp) for e in new]
    stamps = [e.timestamp for e in h.events]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("name", LATE_COMMANDS)
def test_an_instant_at_or_after_the_stream_s_last_stamp_is_kept(h: Driver, name: str) -> None:
    setup, command = LATE_COMMANDS[name]
    setup(h)
    at = h.tick()
    assert all(e.timestamp == at for e in command(h, at))


def test_a_reconnect_seen_before_a_dispatch_recorded_folds_as_of_any_instant_as_its_stamps_say(h: Driver) -> None:
    """The hunter's stream: RecoveryDispatched recorded at 25.851, then a Connected the hub saw at 25.806.
    As of 25.828 the fold said DEAD while the events stamped at or before it said HEALTHY."""
    h.to_dead()
    dispatched = h.dispatch()
    seen = dispatched.timestamp - LATE
    (connected,) = h.do("connect", connection_id="c2", at=seen, **_info())
    assert connected.timestamp == dispatched.timestamp
    between = seen + LATE / 2
    row = fold(h.events, until=between)
    assert row is not None and row.status == "DEAD"  # the Connected is stamped after it, as recorded
    assert row == fold([e for e in h.events if e.timestamp <= between])
    assert fold(h.events, until=dispatched.timestamp).status == "HEALTHY"


def test_a_disconnect_s_deadline_must_not_be_before_its_stamp(h: Driver) -> None:
    h.to_dispatched()
    h.connect("c2")
    last = h.events[-1].timestamp  # the Connected's
    seen = last - LATE
    err = h.refused("disconnect", connection_id="c2", reason="socket_closed", deadline=seen + LATE / 2, at=seen)
    assert "deadline is before the disconnect" in str(err)
    (e,) = h.do("disconnect", connection_id="c2", reason="socket_closed", deadline=last, at=seen)
    assert e.timestamp == e.deadline == last


def test_a_stream_recorded_with_stamps_going_backwards_replays_and_goes_on_from_its_last() -> None:
    """Streams recorded before stamps were kept in order replay as they are; a command stamps from
    their last event's timestamp (not the highest)."""
    d = Driver("e")
    d.to_dispatched()
    high = d.events[-1].timestamp
    (connected,) = d.do("connect", connection_id="c2", at=d.tick(), **_info())
    d.events[-1] = dataclasses.replace(connected, timestamp=high - LATE)  # as recorded before
    old = replay(d.events)
    assert old.status == S.HEALTHY and old.modified_on == high - LATE
    assert old.stamp(high - 2 * LATE) == high - LATE and old.stamp(high) == high
    assert fold(d.events).status == "HEALTHY"
    assert fold(d.events, until=high - LATE / 2).status == "DEAD"  # the fold stops at the first later stamp
    d.agg = old
    (confirmed,) = d.do("confirm_recovery", request_id="r1", pending_found=True, at=high - 2 * LATE)
    assert confirmed.timestamp == high - LATE


@pytest.mark.parametrize("name", [n for n in LATE_COMMANDS if n != "declare dead"])
def test_a_wall_clock_stepped_back_further_than_a_recording_s_lag_is_followed(h: Driver, name: str) -> None:
    """A last stamp more than MAX_STAMP_RAISE ahead of the instant is the clock stepped back (NTP), not a
    recording's lag: raised to it, a drop's deadline would come as late as the step. (A death is not due
    by a clock stepped back before its deadline: refused as before.)"""
    from relay_es.aggregates.executor import MAX_STAMP_RAISE

    setup, command = LATE_COMMANDS[name]
    setup(h)
    last = h.events[-1].timestamp
    assert h.agg.stamp(last - MAX_STAMP_RAISE) == last  # at the bound: still a lag
    at = last - MAX_STAMP_RAISE - timedelta(microseconds=1)
    new = command(h, at)
    assert new and all(e.timestamp == at for e in new), [(type(e).__name__, e.timestamp) for e in new]
