"""The executor commands: each written once, as an op; alone, with the op's parameters."""

from __future__ import annotations

import inspect
from datetime import timedelta

from relay_es.aggregates.executor import executor_stream_id
from relay_es.engine.executor_commands import ExecutorCommands
from relay_es.engine.service import Relay
from relay_es.projections.executors import fold
from tests.support import POPO, info


def test_each_executor_command_alone_takes_its_op_s_parameters() -> None:
    pairs = {"executor_connected": "op_connected", "executor_disconnected": "op_disconnected",
             "declare_dead_if_due": "op_declare_dead", "dispatch_recovery": "op_dispatch",
             "fail_recovery": "op_fail", "confirm_recovery": "op_confirm", "defer_recovery": "op_defer",
             "withdraw_recovery": "op_withdraw"}
    for alone, op in pairs.items():
        a, o = inspect.signature(getattr(ExecutorCommands, alone)), inspect.signature(getattr(ExecutorCommands, op))
        assert list(a.parameters) == list(o.parameters), alone
        assert a.return_annotation is bool


def test_a_recovery_runs_through_the_single_commands(clock) -> None:
    relay = Relay(POPO, clock=clock, default_grace=timedelta(seconds=5))
    sid = executor_stream_id("local", "app", "A")
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="o")
    assert relay.executor_connected("local", "app", info("B"), connection_id="c2", owner="o")
    assert relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    deadline = relay.get_executor("local", "app", "A").deadline
    assert deadline == clock.now() + timedelta(seconds=5)  # the default grace
    assert not relay.declare_dead_if_due(sid, deadline)  # not yet
    clock.advance(5)
    assert relay.declare_dead_if_due(sid, deadline)
    assert not relay.declare_dead_if_due(sid, deadline)  # once
    assert relay.defer_recovery(sid, reason="no candidate yet")
    assert relay.dispatch_recovery(sid, request_id="r1", target_executor_id="B")
    assert relay.fail_recovery(sid, request_id="r1", reason="boom")
    assert relay.dispatch_recovery(sid, request_id="r2", target_executor_id="B")
    assert relay.confirm_recovery(sid, request_id="r2", pending_found=True)
    assert relay.get_executor("local", "app", "A").status == "DELETED"
    assert not relay.withdraw_recovery(sid, reason="nothing to withdraw")
    assert [type(e).__name__ for e in relay.stream(sid)][-7:] == [
        "DeclaredDead", "RecoveryDeferred", "RecoveryDispatched", "RecoveryFailed", "RecoveryDispatched",
        "RecoveryConfirmed", "Deleted"]


def test_a_connect_and_a_drop_seen_before_a_dispatch_recorded_are_stamped_after_it(clock) -> None:
    """The hub stamps with when it saw the connection or the drop, the process manager with the clock as
    it records: a reconnect seen 45 ms before a dispatch recorded on the same stream is stamped at the
    dispatch, and so is the drop after it, its deadline a grace after that stamp. Before, the stream went
    back 45 ms and an as-of inside those 45 ms said DEAD while the events stamped before it said HEALTHY."""
    relay = Relay(POPO, clock=clock, default_grace=timedelta(seconds=5))
    sid = executor_stream_id("local", "app", "A")
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="o")
    assert relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    clock.advance(5)
    assert relay.declare_dead_if_due(sid)
    seen_back = clock.now()
    clock.advance(0.045)
    assert relay.dispatch_recovery(sid, request_id="r1", target_executor_id="B")
    dispatched = clock.now()
    clock.advance(0.01)
    assert relay.executor_connected("local", "app", info("A"), connection_id="c2", owner="o", at=seen_back)
    assert relay.executor_disconnected(sid, connection_id="c2", reason="socket_closed",
                                       at=seen_back + timedelta(milliseconds=20))
    events = list(relay.stream(sid))
    assert [(type(e).__name__, e.timestamp) for e in events[-3:]] == [
        ("RecoveryDispatched", dispatched), ("Connected", dispatched), ("Disconnected", dispatched)]
    assert events[-1].deadline == dispatched + timedelta(seconds=5)
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps)
    inside = seen_back + timedelta(milliseconds=22)
    assert fold(events, until=inside) == fold([e for e in events if e.timestamp <= inside])
    assert fold(events, until=inside).status == "DEAD"


def test_an_orphan_s_deadline_is_never_before_its_stamp(clock) -> None:
    """``grace_from`` (the process manager's orphans: a full grace from Relay's start) gives a deadline
    before the stream's last stamp: it is that stamp, so the disconnect is recorded, not refused."""
    relay = Relay(POPO, clock=clock, default_grace=timedelta(seconds=5))
    sid = executor_stream_id("local", "app", "A")
    start = clock.now()
    clock.advance(30)
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="o")
    assert relay.executor_disconnected(sid, connection_id="c1", reason="relay_restarted", grace_from=start,
                                       at=clock.now() - timedelta(seconds=1))
    (e,) = list(relay.stream(sid))[-1:]
    assert e.timestamp == e.deadline == clock.now()
