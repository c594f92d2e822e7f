"""The command bus: many ops in one save, a conflict run again in halves, refusals as no-ops."""

from __future__ import annotations

from relay_es.aggregates.executor import executor_stream_id
from relay_es.engine.commands import Op, single
from relay_es.engine.service import Relay
from tests.support import POPO, info


def test_a_batch_is_one_save_and_says_which_ops_recorded(clock) -> None:
    relay = Relay(POPO, clock=clock)
    saves = []
    relay.save_observers.append(lambda took, events: saves.append(len(events)))
    sid = executor_stream_id("local", "app", "A")
    results = relay.execute([
        relay.op_connected("local", "app", info("A"), connection_id="c1", owner="o"),
        relay.op_connected("local", "app", info("B"), connection_id="c2", owner="o"),
        relay.op_disconnected(sid, connection_id="stale", reason="socket_closed"),  # refused: a no-op
        relay.op_declare_dead(executor_stream_id("local", "app", "nobody")),  # no such executor: nothing to do
    ])
    assert results == [True, True, False, False]
    assert saves == [4]  # two Registered, two Connected, in one save
    assert relay.execute([]) == []


def test_a_conflicting_batch_runs_again_in_halves_not_op_by_op(clock) -> None:
    relay = Relay(POPO, clock=clock)
    names = [f"E{i}" for i in range(8)]
    for name in names:
        relay.executor_connected("local", "app", info(name), connection_id=f"{name}-1", owner="o")
    sid = executor_stream_id("local", "app", "E5")
    stale = relay.load_many([sid])[sid]
    relay.executor_disconnected(sid, connection_id="E5-1", reason="socket_closed")  # another writer
    relay._cache[sid] = stale
    saves: list[int] = []
    relay.save_observers.append(lambda took, events: saves.append(len(events)))
    ops = [relay.op_disconnected(executor_stream_id("local", "app", n), connection_id=f"{n}-1",
                                 reason="relay_restarted") for n in names]
    assert relay.execute(ops) == [True] * 5 + [False] + [True] * 2  # E5's connection is gone: a no-op
    assert saves == [4, 3]  # the batch failed; its halves ran on what the store holds, not 8 saves
    assert [type(e).__name__ for e in relay.stream(sid)] == ["Registered", "Connected", "Disconnected"]


def test_a_conflicting_batch_runs_again_op_by_op(clock) -> None:
    relay = Relay(POPO, clock=clock)
    relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="o")
    sid = executor_stream_id("local", "app", "A")
    stale = relay.load_many([sid])[sid]
    relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    relay._cache[sid] = stale  # a copy another writer has moved past
    assert relay.execute([relay.op_connected("local", "app", info("A"), connection_id="c2", owner="o"),
                          relay.op_connected("local", "app", info("B"), connection_id="c3", owner="o")]) == [True, True]
    assert [type(e).__name__ for e in relay.stream(sid)] == ["Registered", "Connected", "Disconnected", "Connected"]


def test_single_runs_the_op_alone() -> None:
    ran = []

    class Bus:
        def execute(self, ops: list[Op]) -> list[bool]:
            ran.extend(ops)
            return [True]

        def op_thing(self, n: int) -> Op:
            return Op(n, lambda aggregate, batch: None)  # type: ignore[arg-type]

        thing = single(op_thing)

    assert Bus().thing(3) is True and ran[0].stream_id == 3
