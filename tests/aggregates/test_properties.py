"""Random command sequences over the Executor aggregate.

Every command is tried with random arguments, legal or not. A refused command
(``IllegalTransition``) must leave the aggregate exactly as it was and record
nothing; after every step the invariants of both state machines hold, the
stream replays to an equal aggregate, and the pure executors fold agrees.
"""

from __future__ import annotations

import copy
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from relay_es.aggregates.executor import DisconnectReason, Executor, ExecutorStatus, RecoveryPhase
from relay_es.domain.errors import IllegalTransition, NotDue, StaleConnection
from tests.aggregates.support import T0, assert_fold_agrees, assert_replay_equal

S = ExecutorStatus
P = RecoveryPhase

CURRENT = "<current>"
OUTSTANDING = "<outstanding>"

# Small pools, weighted so that legal commands are common and every state is reached.
new_connections = st.sampled_from(["c1", "c2", "c3", CURRENT, ""])
named_connections = st.sampled_from([CURRENT, CURRENT, CURRENT, "c1", "c2"])
new_requests = st.sampled_from(["r1", "r2", "r3"])
answered_requests = st.sampled_from([OUTSTANDING, OUTSTANDING, OUTSTANDING, "r1", "r2"])
targets = st.sampled_from(["t1", "t2", "t1", "t2", "e"])
versions = st.sampled_from(["v1", "v2"])
# Time moves forward by random amounts, sometimes not at all.
steps = st.one_of(
    st.just(timedelta(0)),
    st.integers(min_value=1, max_value=90_000).map(lambda ms: timedelta(milliseconds=ms)),
)
graces = st.one_of(
    st.integers(min_value=0, max_value=60_000),
    st.integers(min_value=0, max_value=60_000),
    st.integers(min_value=-2_000, max_value=-1),
).map(lambda ms: timedelta(milliseconds=ms))
waits = st.sampled_from(["to the deadline", "past the deadline", "random", "random"])

RECOVERY_EVENTS = (
    Executor.RecoveryDeferred,
    Executor.RecoveryDispatched,
    Executor.RecoveryFailed,
    Executor.RecoveryConfirmed,
    Executor.RecoveryWithdrawn,
    Executor.RecoveryReordered,
)

# Filled while the machine runs; printed by hand when tuning the strategies.
REACHED: Counter[str] = Counter()


class ExecutorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now: datetime = T0
        self.agg = Executor(org="o", app="a", executor_id="e", timestamp=self.now)
        self.events: list[Any] = list(self.agg.collect_events())
        self.max_incarnation = 0

    # ------------------------------------------------------------ plumbing
    def advance(self, dt: timedelta) -> datetime:
        self.now += dt
        return self.now

    def conn(self, c: str) -> str:
        return (self.agg.connection_id or "c-none") if c == CURRENT else c

    def req(self, r: str) -> str:
        return (self.agg.recovery_request_id or "r-none") if r == OUTSTANDING else r

    def run(self, command: str, **kwargs: Any) -> Any:
        agg = self.agg
        before = copy.deepcopy(vars(agg))
        prev_status, prev_deadline, prev_phase = agg.status, agg.deadline, agg.recovery_phase
        try:
            getattr(agg, command)(**kwargs)
        except IllegalTransition as err:
            # A refusal changes nothing and records nothing.
            assert vars(agg) == before
            assert agg.pending_events == []
            assert "executor 'e'" in str(err)
            assert err.command in str(err)
            REACHED[f"refused {command}"] += 1
            return None
        new = agg.collect_events()
        version_changed = (command == "connect" and prev_status in (S.HEALTHY, S.DISCONNECTED)
                           and kwargs["app_version"] != before["app_version"])
        if version_changed:  # the earlier process's death, then the new incarnation's Connected
            assert [type(x) for x in new] == [Executor.DeclaredDead, Executor.Connected], new
            assert (new[0].app_version, new[0].reason) == (before["app_version"], "version_changed")
        else:
            assert len(new) == 1, new
        e = new[-1]
        self.events.extend(new)
        for x in new:
            REACHED[type(x).__name__] += 1

        # DEAD is entered only by declare_dead, from DISCONNECTED, at or after the deadline.
        if agg.status == S.DEAD and prev_status != S.DEAD:
            assert command == "declare_dead"
            assert prev_status == S.DISCONNECTED
            assert prev_deadline is not None and kwargs["now"] >= prev_deadline
            assert e.deadline == prev_deadline
        if command == "declare_dead":
            assert prev_status == S.DISCONNECTED and agg.status == S.DEAD
        # DELETED only from DEAD with a confirmed recovery, and the last recovery event was the confirmation.
        if agg.status == S.DELETED and prev_status != S.DELETED:
            assert command == "delete"
            assert prev_status == S.DEAD and prev_phase == P.CONFIRMED
            last_recovery = [x for x in self.events[:-1] if isinstance(x, RECOVERY_EVENTS)][-1]
            assert isinstance(last_recovery, Executor.RecoveryConfirmed)
        # A dispatch never starts while another is outstanding.
        if command == "dispatch_recovery":
            assert prev_phase in (P.PENDING, P.DEFERRED)
            assert prev_status == S.DEAD or before["recovery_version"] != before["app_version"]
            assert e.target_executor_id != "e"
        if command in ("fail_recovery", "confirm_recovery"):
            assert prev_phase == P.DISPATCHED and before["recovery_request_id"] == e.request_id
        if command == "withdraw_recovery":
            assert prev_status != S.DEAD and prev_phase in (P.PENDING, P.DEFERRED)
            assert before["recovery_version"] == before["app_version"]  # back on the recovery's version
        if command == "reorder_recovery":
            # Only a death kept behind an unfinished recovery, which then goes first: the two swap.
            assert prev_phase in (P.PENDING, P.DEFERRED)
            assert prev_status == S.DEAD or before["recovery_version"] != before["app_version"]
            assert (e.app_version, e.postponed_version) == (before["recovery_redo_version"],
                                                            before["recovery_version"])
            assert agg.recovery_phase == P.PENDING and agg.recovery_attempt == 0
        if command == "connect":
            expect_new = prev_status in (None, S.DEAD, S.DELETED) or version_changed
            assert e.incarnation == before["incarnation"] + (1 if expect_new else 0)
            assert e.superseded_connection == (before["connection_id"] if prev_status == S.HEALTHY else None)
            assert e.connection_id != before["connection_id"] or prev_status != S.HEALTHY
        return e

    # --------------------------------------------------------------- rules
    @initialize(connected=st.sampled_from([True, True, True, False]))
    def start(self, connected: bool) -> None:
        if connected:
            self.connect("c1", "v1", timedelta(seconds=1))

    @rule(c=new_connections, version=versions, dt=steps)
    def connect(self, c: str, version: str, dt: timedelta) -> None:
        self.run(
            "connect",
            connection_id=self.conn(c),
            owner="relay-1",
            app_version=version,
            hostname="h",
            language="python",
            dbos_version="3",
            executor_metadata=None,
            at=self.advance(dt),
        )

    @rule(c=named_connections, grace=graces, reason=st.sampled_from(DisconnectReason), dt=steps)
    def disconnect(self, c: str, grace: timedelta, reason: DisconnectReason, dt: timedelta) -> None:
        at = self.advance(dt)
        connection_id = self.conn(c)
        stale = self.agg.status == S.HEALTHY and connection_id != self.agg.connection_id
        e = self.run("disconnect", connection_id=connection_id, reason=reason, deadline=at + grace, at=at)
        if stale:
            assert e is None
        if e is not None:
            assert grace >= timedelta(0)

    @rule(wait=waits, dt=steps, expected=st.sampled_from(["none", "current", "current", "other"]))
    def declare_dead(self, wait: str, dt: timedelta, expected: str) -> None:
        deadline = self.agg.deadline
        exp = {"none": None, "current": deadline,
               "other": (deadline or T0) - timedelta(seconds=1)}[expected]
        if deadline is not None and wait == "to the deadline":
            self.now = max(self.now, deadline)
        elif deadline is not None and wait == "past the deadline":
            self.now = max(self.now, deadline + dt)
        else:
            self.advance(dt)
        e = self.run("declare_dead", now=self.now, expected_deadline=exp)
        if e is not None:
            assert expected != "other"

    @rule(dt=steps)
    def defer(self, dt: timedelta) -> None:
        self.run("defer_recovery", reason="no target", at=self.advance(dt))

    @rule(r=new_requests, to=targets, dt=steps)
    def dispatch(self, r: str, to: str, dt: timedelta) -> None:
        self.run("dispatch_recovery", request_id=self.req(r), target_executor_id=to, at=self.advance(dt))

    @rule(r=answered_requests, dt=steps)
    def fail(self, r: str, dt: timedelta) -> None:
        self.run("fail_recovery", request_id=self.req(r), reason="failed", at=self.advance(dt))

    @rule(r=answered_requests, found=st.sampled_from([True, False, None]), dt=steps)
    def confirm(self, r: str, found: bool | None, dt: timedelta) -> None:
        self.run("confirm_recovery", request_id=self.req(r), pending_found=found, at=self.advance(dt))

    @rule(dt=steps)
    def withdraw(self, dt: timedelta) -> None:
        self.run("withdraw_recovery", reason="back", at=self.advance(dt))

    @rule(dt=steps)
    def delete(self, dt: timedelta) -> None:
        self.run("delete", at=self.advance(dt))

    @rule(dt=steps)
    def reorder(self, dt: timedelta) -> None:
        self.run("reorder_recovery", at=self.advance(dt))

    # ------------------------------------------------------- guided rules
    # The same commands, with the same random arguments, offered more often in
    # the states where they can matter: without them a uniform choice of nine
    # commands rarely walks all the way from HEALTHY to DELETED.

    @precondition(lambda self: self.agg.status == S.HEALTHY)
    @rule(c=named_connections, grace=graces, reason=st.sampled_from(DisconnectReason), dt=steps)
    def disconnect_when_healthy(self, c: str, grace: timedelta, reason: DisconnectReason, dt: timedelta) -> None:
        self.disconnect(c, grace, reason, dt)

    @precondition(lambda self: self.agg.status == S.DISCONNECTED)
    @rule(wait=waits, dt=steps, expected=st.sampled_from(["none", "current", "current", "other"]))
    def declare_dead_when_disconnected(self, wait: str, dt: timedelta, expected: str) -> None:
        self.declare_dead(wait, dt, expected)

    @precondition(lambda self: self.agg.status == S.DEAD)
    @rule(r=new_requests, to=targets, dt=steps)
    def dispatch_when_dead(self, r: str, to: str, dt: timedelta) -> None:
        self.dispatch(r, to, dt)

    @precondition(lambda self: self.agg.recovery_phase == P.DISPATCHED)
    @rule(r=answered_requests, found=st.sampled_from([True, False, None]), ok=st.booleans(), dt=steps)
    def answer_when_dispatched(self, r: str, found: bool | None, ok: bool, dt: timedelta) -> None:
        if ok:
            self.confirm(r, found, dt)
        else:
            self.fail(r, dt)

    @precondition(lambda self: self.agg.status == S.DEAD and self.agg.recovery_phase == P.DISPATCHED)
    @rule(c=new_connections, version=versions, dt=steps)
    def connect_when_dispatched(self, c: str, version: str, dt: timedelta) -> None:
        # Back while its recovery is out: dying again then leaves a later death behind it.
        self.connect(c, version, dt)

    @precondition(lambda self: self.agg.recovery_phase == P.CONFIRMED)
    @rule(dt=steps)
    def delete_when_confirmed(self, dt: timedelta) -> None:
        self.delete(dt)

    @precondition(lambda self: self.agg.recovery_redo_version is not None and self.agg.status == S.DEAD
                  and self.agg.recovery_phase in (P.PENDING, P.DEFERRED))
    @rule(dt=steps)
    def reorder_when_a_later_death_waits(self, dt: timedelta) -> None:
        self.reorder(dt)

    # ---------------------------------------------------------- invariants
    @invariant()
    def status_and_incarnation(self) -> None:
        agg = self.agg
        assert agg.incarnation >= self.max_incarnation
        self.max_incarnation = agg.incarnation
        assert (agg.status is None) == (agg.incarnation == 0)
        assert (agg.connection_id is not None) == (agg.status == S.HEALTHY)
        assert (agg.owner is not None) == (agg.status == S.HEALTHY)
        REACHED[f"status {agg.status}"] += 1
        REACHED[f"phase {agg.recovery_phase}"] += 1

    @invariant()
    def a_later_death_waits_only_behind_an_unfinished_recovery(self) -> None:
        if self.agg.recovery_redo_version is not None:
            REACHED["a later death waits"] += 1
            assert self.agg.recovery_phase in (P.DISPATCHED, P.PENDING, P.DEFERRED)

    @invariant()
    def deadline_iff_disconnected(self) -> None:
        assert (self.agg.deadline is not None) == (self.agg.status == S.DISCONNECTED)

    @invariant()
    def at_most_one_outstanding_request(self) -> None:
        agg = self.agg
        dispatched = agg.recovery_phase == P.DISPATCHED
        assert (agg.outstanding_request is not None) == dispatched
        if dispatched:
            assert agg.recovery_request_id is not None and agg.recovery_target is not None
            assert agg.recovery_attempt >= 1
        if agg.recovery_phase in (None, P.PENDING, P.DEFERRED):
            assert agg.recovery_request_id is None
        if agg.recovery_request_id is not None:
            # Set while outstanding, and kept as the record of the confirmed request.
            assert agg.recovery_phase in (P.DISPATCHED, P.CONFIRMED)
        # In the stream: every RecoveryDispatched is answered before the next one.
        open_request = None
        for e in self.events:
            if isinstance(e, Executor.RecoveryDispatched):
                assert open_request is None
                open_request = e.request_id
            elif isinstance(e, (Executor.RecoveryFailed, Executor.RecoveryConfirmed)):
                assert e.request_id == open_request
                open_request = None
        assert open_request == agg.outstanding_request

    @invariant()
    def deleted_only_after_confirmed_recovery(self) -> None:
        agg = self.agg
        if agg.status == S.DELETED:
            assert agg.recovery_phase is None and agg.recovery_request_id is None
            assert isinstance(self.events[-1], Executor.Deleted)
            assert isinstance(self.events[-2], Executor.RecoveryConfirmed)
        if agg.status == S.DEAD:
            assert agg.recovery_phase is not None

    @invariant()
    def dead_only_after_the_deadline(self) -> None:
        status = None
        deadline = None
        for e in self.events:
            if isinstance(e, Executor.DeclaredDead) and e.reason == "version_changed":
                # At a connect under another version: from HEALTHY (no deadline) or DISCONNECTED, at once.
                assert status in (S.HEALTHY, S.DISCONNECTED)
                assert e.deadline == (deadline if status == S.DISCONNECTED else None)
                status = S.DEAD
            elif isinstance(e, Executor.DeclaredDead):
                assert status == S.DISCONNECTED
                assert e.deadline == deadline and e.timestamp >= deadline
                status = S.DEAD
            elif isinstance(e, Executor.Disconnected):
                assert status == S.HEALTHY
                deadline = e.deadline
                status = S.DISCONNECTED
            elif isinstance(e, Executor.Connected):
                status = S.HEALTHY
            elif isinstance(e, Executor.Deleted):
                assert status == S.DEAD
                status = S.DELETED
        assert status == self.agg.status

    @invariant()
    def replay_and_fold_agree(self) -> None:
        assert self.agg.version == len(self.events)
        assert_replay_equal(self.agg, self.events)
        assert_fold_agrees(self.agg, self.events)


ExecutorMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestExecutorMachine = ExecutorMachine.TestCase


def test_refusal_kinds_are_distinct() -> None:
    # The machine counts on these being IllegalTransitions; callers rely on telling them apart.
    assert issubclass(StaleConnection, IllegalTransition) and issubclass(NotDue, IllegalTransition)
    assert not issubclass(StaleConnection, NotDue) and not issubclass(NotDue, StaleConnection)
