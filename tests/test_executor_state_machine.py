"""The executor state machine is written in three places; this test pins them together.

1. the Executor aggregate's mutators (``relay_es.aggregates.executor``): the source;
2. the executors read model's pure fold, ``reduce`` (``relay_es.projections.executors``),
   which also builds the process manager's rows;
3. the process manager's indexes over those rows, kept in step one row at a time.

Random command sequences run against several executors of two applications on one
Relay (the in-memory store), while a process manager on a fake clock follows the log
and acts on it too (declares deaths, dispatches, fails unanswered recoveries, withdraws
them, disconnects the executors of a Relay that is gone). Commands are tried with random
arguments, legal or not; a refused one records nothing. After every step:

(a) for every executor stream, folding its stored events with ``reduce`` gives a row
    equal to the aggregate's own state, field by field, and the process manager's row
    is that same row;
(b) the process manager's indexes, kept in step one event at a time
    (``ProcessManager.derived_indexes``), equal the ones recomputed from its rows
    (``rebuilt_indexes``) and the ones computed here from the aggregates themselves;
    and the process manager met no bug (an exception other than a store error).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from relay_es.aggregates.application import SettingsPatch
from relay_es.aggregates.executor import DisconnectReason, Executor, ExecutorStatus, RecoveryPhase, executor_stream_id
from relay_es.domain.clock import FakeClock
from relay_es.domain.errors import IllegalTransition, UnknownExecutor
from relay_es.engine.process_manager import ProcessManager, RecoveryOutcome, RecoveryRequest, Timing, replay_bootstrap
from relay_es.engine.service import Relay
from relay_es.projections.executors import ExecutorRow, fold

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
ORG = "o"
APPS = ("a", "b")
EXECUTORS = [(app, f"e{i}") for app in APPS for i in range(3)]  # three per application
HERE, GONE = "relay-1", "relay-0"  # the process manager's Relay, and one that stopped
GRACE = timedelta(seconds=10)

# What the aggregate keeps and the row must equal, by the same name (the eventsourcing
# bookkeeping aside). A field added to the aggregate and not to the row fails here.
BOOKKEEPING = {"_id", "_version", "_created_on", "_modified_on", "_pending_events"}
ROW_FIELDS = {f.name for f in fields(ExecutorRow)}

executors = st.sampled_from(range(len(EXECUTORS)))
connections = st.sampled_from(["c1", "c2", "c3", "<current>", ""])
versions = st.sampled_from(["v1", "v1", "v1", "v2"])
owners = st.sampled_from([HERE, HERE, HERE, GONE])
graces = st.sampled_from([timedelta(0), timedelta(seconds=5), GRACE, timedelta(seconds=-1)])
steps = st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0, 31.0])


@dataclass
class Dispatcher:
    """The process manager's sockets: every request kept, answered by the machine's rules."""

    sent: list[RecoveryRequest] = field(default_factory=list)
    expired: set[str] = field(default_factory=set)

    def send_recovery(self, request: RecoveryRequest) -> None:
        self.sent.append(request)

    def is_connected(self, org: str, app: str, executor_id: str) -> bool:
        return False  # the store always knows as much as the sockets here

    def is_gone(self, org: str, app: str, executor_id: str) -> bool:
        return False  # nor does a socket close before the store hears of it

    def expire(self, request_id: str) -> None:
        self.expired.add(request_id)

    def send_retention(self, org: str, app: str, plan: Any) -> None:
        pass


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, (ExecutorStatus, RecoveryPhase)) else v


def assert_row_is_the_aggregate(row: ExecutorRow, agg: Executor) -> None:
    state = {k: v for k, v in vars(agg).items() if k not in BOOKKEEPING}
    assert set(state) <= ROW_FIELDS, f"aggregate fields missing from the row: {set(state) - ROW_FIELDS}"
    for name, value in state.items():
        assert getattr(row, name) == _plain(value), name
    assert row.stream_id == str(agg.id)
    assert row.version == agg.version
    assert row.updated_at == agg.modified_on


def assert_row_only_fields_follow_the_events(row: ExecutorRow, events: list[Any]) -> None:
    """What the row keeps and the aggregate does not, recomputed from the events by hand."""
    created_at = disconnect_reason = declared_dead_at = None
    incarnation = 0
    for e in events:
        if isinstance(e, Executor.Connected):
            if e.incarnation != incarnation or created_at is None:
                created_at = e.timestamp
            incarnation = e.incarnation
            disconnect_reason = None
        elif isinstance(e, Executor.Disconnected):
            disconnect_reason = e.reason
        elif isinstance(e, Executor.DeclaredDead):
            declared_dead_at = e.timestamp
    assert row.created_at == created_at
    assert row.disconnect_reason == disconnect_reason
    assert row.declared_dead_at == declared_dead_at
    if row.recovery_phase == RecoveryPhase.DISPATCHED:
        last = [e for e in events if isinstance(e, Executor.RecoveryDispatched)][-1]
        assert row.recovery_dispatched_at == last.timestamp


class ExecutorsAndProcessManager(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.relay = Relay(POPO, clock=self.clock)
        for app in APPS:
            self.relay.register_app(ORG, app)
            self.relay.update_app(ORG, app, SettingsPatch(executor_timeout=GRACE))
        self.dispatcher = Dispatcher()
        self.pm = ProcessManager(self.relay, self.clock, self.dispatcher, owner=HERE,
                                 timing=Timing(settle=timedelta(seconds=2), response_timeout=timedelta(seconds=30)),
                                 bootstrap=replay_bootstrap(self.relay), tie_key=b"k" * 16)
        self.pm.start()
        self.sids = [executor_stream_id(ORG, app, eid) for app, eid in EXECUTORS]  # in EXECUTORS' order
        self.recorded = 0

    # ------------------------------------------------------------ plumbing
    def load(self, i: int) -> Executor | None:
        """Executor ``i`` as the store holds it now (the process manager writes too)."""
        app, eid = EXECUTORS[i]
        try:
            return self.relay.get_executor(ORG, app, eid)
        except UnknownExecutor:
            return None

    def run(self, i: int, command: str, **kwargs: Any) -> bool:
        """One command on executor ``i`` as it is in the store; saved if it was allowed."""
        agg = self.load(i)
        if agg is None:
            return False
        try:
            getattr(agg, command)(**kwargs)
        except IllegalTransition:
            assert agg.pending_events == []
            return False
        self.relay.save(agg)
        self.recorded += 1
        return True

    def follow(self) -> None:
        self.pm.step()

    # --------------------------------------------------------------- rules
    @rule(i=executors, c=connections, version=versions, owner=owners)
    def connect(self, i: int, c: str, version: str, owner: str) -> None:
        agg = self.load(i)
        if agg is None:
            app, eid = EXECUTORS[i]
            agg = Executor(org=ORG, app=app, executor_id=eid, timestamp=self.clock.now())
        connection_id = (agg.connection_id or "c-none") if c == "<current>" else c
        try:
            agg.connect(connection_id=connection_id, owner=owner, app_version=version, hostname=f"h-{c}",
                        language="python", dbos_version="3.2.0", executor_metadata={"c": c} if c else None,
                        at=self.clock.now())
        except IllegalTransition:
            self.follow()
            return
        self.relay.save(agg)  # a new executor: Registered and Connected together, as the hub records them
        self.recorded += 1
        self.follow()

    @rule(i=executors, current=st.booleans(), grace=graces, reason=st.sampled_from(DisconnectReason))
    def disconnect(self, i: int, current: bool, grace: timedelta, reason: DisconnectReason) -> None:
        agg = self.load(i)
        connection_id = (agg.connection_id if agg is not None and current else None) or "stale"
        now = self.clock.now()
        self.run(i, "disconnect", connection_id=connection_id, reason=reason, deadline=now + grace, at=now)
        self.follow()

    @rule(i=executors, expected=st.booleans())
    def declare_dead(self, i: int, expected: bool) -> None:
        agg = self.load(i)
        deadline = agg.deadline if agg is not None and expected else None
        self.run(i, "declare_dead", now=self.clock.now(), expected_deadline=deadline)
        self.follow()

    @rule(i=executors)
    def defer(self, i: int) -> None:
        self.run(i, "defer_recovery", reason="no target", at=self.clock.now())
        self.follow()

    @rule(i=executors, to=st.sampled_from([e for _, e in EXECUTORS[:3]]))
    def dispatch(self, i: int, to: str) -> None:
        self.run(i, "dispatch_recovery", request_id=str(uuid.uuid4()), target_executor_id=to,
                 at=self.clock.now())
        self.follow()

    @rule(i=executors, ok=st.booleans(), stale=st.booleans())
    def answer_directly(self, i: int, ok: bool, stale: bool) -> None:
        agg = self.load(i)
        request_id = "r-stale" if stale or agg is None else (agg.recovery_request_id or "r-none")
        if ok:
            self.run(i, "confirm_recovery", request_id=request_id, pending_found=True, at=self.clock.now())
        else:
            self.run(i, "fail_recovery", request_id=request_id, reason="failed", at=self.clock.now())
        self.follow()

    @rule(i=executors)
    def withdraw(self, i: int) -> None:
        self.run(i, "withdraw_recovery", reason="back", at=self.clock.now())
        self.follow()

    @rule(i=executors)
    def delete(self, i: int) -> None:
        self.run(i, "delete", at=self.clock.now())
        self.follow()

    @rule(i=executors)
    def reorder(self, i: int) -> None:
        self.run(i, "reorder_recovery", at=self.clock.now())
        self.follow()

    @rule(seconds=steps)
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.follow()

    @precondition(lambda self: bool(self.dispatcher.sent))
    @rule(which=st.integers(min_value=0), ok=st.booleans())
    def target_answers(self, which: int, ok: bool) -> None:
        request = self.dispatcher.sent[which % len(self.dispatcher.sent)]
        self.pm.recovery_answered(RecoveryOutcome(request.request_id, ok=ok, pending_found=ok or None,
                                                  reason=None if ok else "boom"))
        self.follow()

    @rule(seconds=st.sampled_from([-30.0, 30.0]))
    def wall_clock_steps(self, seconds: float) -> None:
        self.clock.step_wall(seconds)
        self.follow()

    # ------------------------------------------------------- guided rules
    # The same commands, aimed at executors in the states where they matter: a uniform
    # choice over six executors rarely walks one from HEALTHY to DELETED.

    def in_state(self, k: int, status: str | None = None, phase: str | None = None) -> int | None:
        ids = [i for i, (app, eid) in enumerate(EXECUTORS)
               if (row := self.pm.rows.get(str(executor_stream_id(ORG, app, eid)))) is not None
               and (status is None or row.status == status) and (phase is None or row.recovery_phase == phase)]
        return ids[k % len(ids)] if ids else None

    @rule(k=st.integers(min_value=0), grace=graces, reason=st.sampled_from(DisconnectReason))
    def disconnect_a_healthy_one(self, k: int, grace: timedelta, reason: DisconnectReason) -> None:
        i = self.in_state(k, status=ExecutorStatus.HEALTHY)
        if i is not None:
            self.disconnect(i, True, max(grace, timedelta(0)), reason)

    @rule(k=st.integers(min_value=0), c=connections, owner=owners, version=versions)
    def a_dead_one_comes_back(self, k: int, c: str, owner: str, version: str) -> None:
        # A new incarnation, maybe while a recovery of the old one is on the wire (and, on another
        # version, to die again behind it: the process manager may then reorder the two).
        i = self.in_state(k, status=ExecutorStatus.DEAD)
        if i is not None:
            self.connect(i, c, version, owner)

    @rule(past=st.sampled_from([0.0, 0.0, 0.5, 5.0]))
    def time_runs_to_the_next_deadline(self, past: float) -> None:
        now = self.clock.now()
        deadlines = [r.deadline for r in self.pm.rows.values() if r.deadline is not None]
        wait = max([(min(deadlines) - now).total_seconds(), 0.0]) if deadlines else 3.0
        self.time_passes(wait + past)

    @rule(k=st.integers(min_value=0), to=st.sampled_from([e for _, e in EXECUTORS[:3]]))
    def dispatch_a_dead_one(self, k: int, to: str) -> None:
        i = self.in_state(k, status=ExecutorStatus.DEAD)
        if i is not None:
            self.dispatch(i, to)

    @rule(k=st.integers(min_value=0), ok=st.booleans())
    def answer_an_outstanding_one(self, k: int, ok: bool) -> None:
        i = self.in_state(k, phase=RecoveryPhase.DISPATCHED)
        if i is not None:
            self.answer_directly(i, ok, False)

    @rule(k=st.integers(min_value=0))
    def delete_a_confirmed_one(self, k: int) -> None:
        i = self.in_state(k, phase=RecoveryPhase.CONFIRMED)
        if i is not None:
            self.delete(i)

    # ---------------------------------------------------------- invariants
    @invariant()
    def a_the_fold_is_the_aggregate(self) -> None:
        for i, sid in enumerate(self.sids):
            agg = self.load(i)
            events = list(self.relay.stream(sid))
            if agg is None:
                assert events == []
                assert str(sid) not in self.pm.rows
                continue
            row = fold(events)
            assert row is not None
            assert_row_is_the_aggregate(row, agg)
            assert_row_only_fields_follow_the_events(row, events)
            assert self.pm.rows[str(sid)] == row  # the process manager follows the same fold, to the end

    @invariant()
    def b_the_process_manager_s_indexes_are_its_rows(self) -> None:
        derived = self.pm.derived_indexes()
        assert derived == self.pm.rebuilt_indexes()
        assert derived == self.indexes_from_the_aggregates()

    @invariant()
    def the_process_manager_met_no_bug(self) -> None:
        # Refused commands and races with the machine are ordinary; an exception that is
        # not a store error would be a disagreement between the three writers.
        assert self.pm.healthy, self.pm.last_bug
        assert self.pm.stats.bugs == 0

    def indexes_from_the_aggregates(self) -> dict[str, dict[Any, Any]]:
        """The indexes the rows should give, from the aggregates' own state (not the rows)."""
        healthy: dict[Any, set[str]] = {}
        apps_healthy: dict[Any, set[str]] = {}
        outstanding: dict[Any, set[str]] = {}
        listed: dict[Any, int] = {}
        for i, sid in enumerate(self.sids):
            agg = self.load(i)
            if agg is None:
                continue
            if agg.status == ExecutorStatus.HEALTHY and agg.owner in self.pm.live_owners:
                healthy.setdefault((agg.org, agg.app, agg.app_version), set()).add(str(sid))
                apps_healthy.setdefault((agg.org, agg.app), set()).add(str(sid))
            if agg.outstanding_request is not None:
                outstanding.setdefault((agg.org, agg.app, agg.recovery_target), set()).add(str(sid))
            if agg.status in (ExecutorStatus.HEALTHY, ExecutorStatus.DISCONNECTED, ExecutorStatus.DEAD):
                listed[(agg.org, agg.app)] = listed.get((agg.org, agg.app), 0) + 1
        frozen = lambda index: {k: frozenset(v) for k, v in index.items()}  # noqa: E731
        return {"healthy": frozen(healthy), "apps_healthy": frozen(apps_healthy),
                "outstanding": frozen(outstanding), "listed": listed}


ExecutorsAndProcessManager.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestExecutorsAndProcessManager = ExecutorsAndProcessManager.TestCase
