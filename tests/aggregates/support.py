"""Helpers shared by the aggregate tests: a driver for one Executor, replay, and
the agreement between the aggregate and the pure executors fold."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.executor import Executor, ExecutorStatus, RecoveryPhase
from relay_es.domain.errors import IllegalTransition
from relay_es.projections.executors import fold

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
GRACE = timedelta(seconds=30)


def replay_any(events: list[Any]) -> Any:
    """Rebuilds an aggregate of any kind from its events, in order, as a repository would."""
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    assert aggregate is not None
    return aggregate


def replay(events: list[Any]) -> Executor:
    """Rebuilds an Executor from its events."""
    aggregate = replay_any(events)
    assert isinstance(aggregate, Executor)
    return aggregate


def _value(v: Any) -> Any:
    return v.value if isinstance(v, (ExecutorStatus, RecoveryPhase)) else v


def assert_replay_equal(agg: Executor, events: list[Any]) -> None:
    assert agg.pending_events == [], "collect the events before comparing"
    rebuilt = replay(events)
    assert vars(rebuilt) == vars(agg)


def assert_fold_agrees(agg: Executor, events: list[Any]) -> None:
    row = fold(events)
    assert row is not None
    assert row.stream_id == str(agg.id)
    assert (row.org, row.app, row.executor_id) == (agg.org, agg.app, agg.executor_id)
    assert row.version == agg.version
    assert row.status == _value(agg.status)
    assert row.incarnation == agg.incarnation
    assert row.deadline == agg.deadline
    assert row.recovery_phase == _value(agg.recovery_phase)
    assert row.recovery_request_id == agg.recovery_request_id
    assert row.recovery_attempt == agg.recovery_attempt
    assert row.recovery_target == agg.recovery_target
    assert row.recovery_version == agg.recovery_version
    assert row.recovery_redo_version == agg.recovery_redo_version
    assert row.connection_id == agg.connection_id
    assert row.owner == agg.owner
    assert row.app_version == agg.app_version
    assert row.updated_at == agg.modified_on


class Driver:
    """One Executor, a hand-moved clock, and every event it has recorded so far."""

    def __init__(self, executor_id: str = "e", *, org: str = "o", app: str = "a") -> None:
        self.now = T0
        self.agg = Executor(org=org, app=app, executor_id=executor_id, timestamp=self.now)
        self.events: list[Any] = list(self.agg.collect_events())

    # ------------------------------------------------------------------ clock
    def tick(self, seconds: float = 1) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now

    # --------------------------------------------------------------- commands
    def do(self, command: str, **kwargs: Any) -> list[Any]:
        """Runs a command that must succeed; returns the events it recorded."""
        getattr(self.agg, command)(**kwargs)
        new = list(self.agg.collect_events())
        self.events += new
        return new

    def refused(self, command: str, exc: type[Exception] = IllegalTransition, **kwargs: Any) -> Exception:
        """Runs a command that must be refused, leaving the aggregate untouched."""
        before = copy.deepcopy(vars(self.agg))
        with pytest.raises(exc) as info:
            getattr(self.agg, command)(**kwargs)
        assert vars(self.agg) == before
        assert self.agg.pending_events == []
        return info.value

    def connect(self, connection_id: str = "c1", *, owner: str = "relay-1", app_version: str = "v1") -> Any:
        (e,) = self.do(
            "connect",
            connection_id=connection_id,
            owner=owner,
            app_version=app_version,
            hostname="host",
            language="python",
            dbos_version="3.2.0",
            executor_metadata={"k": "v"},
            at=self.tick(),
        )
        return e

    def disconnect(self, connection_id: str | None = None, *, reason: str = "socket_closed", grace: timedelta = GRACE) -> Any:
        at = self.tick()
        (e,) = self.do(
            "disconnect",
            connection_id=connection_id if connection_id is not None else self.agg.connection_id,
            reason=reason,
            deadline=at + grace,
            at=at,
        )
        return e

    def declare_dead(self) -> Any:
        assert self.agg.deadline is not None
        self.now = max(self.now, self.agg.deadline)
        (e,) = self.do("declare_dead", now=self.now)
        return e

    def dispatch(self, request_id: str = "r1", target: str = "t1") -> Any:
        (e,) = self.do("dispatch_recovery", request_id=request_id, target_executor_id=target, at=self.tick())
        return e

    def confirm(self, request_id: str = "r1", pending_found: bool | None = True) -> Any:
        (e,) = self.do("confirm_recovery", request_id=request_id, pending_found=pending_found, at=self.tick())
        return e

    def fail(self, request_id: str = "r1", reason: str = "target gone") -> Any:
        (e,) = self.do("fail_recovery", request_id=request_id, reason=reason, at=self.tick())
        return e

    def defer(self, reason: str = "no target") -> Any:
        (e,) = self.do("defer_recovery", reason=reason, at=self.tick())
        return e

    def withdraw(self, reason: str = "came back") -> Any:
        (e,) = self.do("withdraw_recovery", reason=reason, at=self.tick())
        return e

    def delete(self) -> Any:
        (e,) = self.do("delete", at=self.tick())
        return e

    # --------------------------------------------------------------- states
    def to_healthy(self) -> Driver:
        self.connect()
        return self

    def to_disconnected(self) -> Driver:
        self.connect()
        self.disconnect()
        return self

    def to_dead(self) -> Driver:
        self.to_disconnected()
        self.declare_dead()
        return self

    def to_dispatched(self) -> Driver:
        self.to_dead()
        self.dispatch()
        return self

    def to_confirmed(self) -> Driver:
        self.to_dispatched()
        self.confirm()
        return self

    def to_deleted(self) -> Driver:
        self.to_confirmed()
        self.delete()
        return self

    # ----------------------------------------------------------------- checks
    def check(self) -> None:
        # A command that wrongly succeeded inside ``refused`` has already failed the
        # test; take its events so that the report is that failure, not this one.
        self.events += self.agg.collect_events()
        assert_replay_equal(self.agg, self.events)
        assert_fold_agrees(self.agg, self.events)
