"""The executor commands: each written once, as an op; alone, with the op's parameters."""

from __future__ import annotations

import inspect
from datetime import timedelta

from relay_es.aggregates.executor import executor_stream_id
from relay_es.engine.executor_commands import ExecutorCommands
from relay_es.engine.service import Relay
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
