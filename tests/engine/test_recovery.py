"""The recovery conversation's inbox and the choice of a target, without a store."""

from __future__ import annotations

import random

from relay_es.engine import recovery
from relay_es.engine.recovery import Answers, RecoveryOutcome, best_candidate, rank_candidates, tie_rank
from relay_es.projections.executors import ExecutorRow


def test_answers_inbox_wakes_its_owner_and_keeps_order() -> None:
    woken = []
    inbox = Answers(lambda: woken.append(1))
    assert not inbox and len(inbox) == 0
    inbox.put(RecoveryOutcome("r1", True))
    inbox.put(RecoveryOutcome("r2", False, reason="boom"))
    assert len(woken) == 2 and len(inbox) == 2
    taken = inbox.take(1)
    assert [o.request_id for o in taken] == ["r1"]
    inbox.put_back(taken)
    assert [o.request_id for o in inbox.take(10)] == ["r1", "r2"]
    assert not inbox


def row(executor_id: str, **kw: object) -> ExecutorRow:
    return ExecutorRow(stream_id=f"s-{executor_id}", org="o", app="a", executor_id=executor_id, version=1,
                       status="HEALTHY", app_version="v1", **kw)  # type: ignore[arg-type]


def test_untried_first_then_least_loaded_then_the_keyed_tie_never_the_dead_one_itself() -> None:
    dead = row("dead", recovery_attempt=2)
    healthy = [row(n) for n in ("dead", "a", "b", "c", "d")]
    loads = {"a": 0, "b": 1, "c": 0, "d": 0}
    ranked = rank_candidates(dead, healthy, tried={"c"}, load=lambda r: loads[r.executor_id], tie_key=b"k")
    names = [r.executor_id for r in ranked]
    assert "dead" not in names and names[-1] == "c"  # tried last
    assert names[2] == "b"  # untried but loaded
    assert names[:2] == sorted(["a", "d"], key=lambda n: tie_rank(b"k", "s-dead", 2, n))  # equals: by the keyed hash


def test_the_best_candidate_is_the_first_of_the_ranking_and_hashes_only_the_tied(monkeypatch) -> None:
    rnd = random.Random(7)
    for case in range(500):
        names = [f"e{i}" for i in range(rnd.randint(0, 12))]
        dead = row(rnd.choice(names + ["gone"]), recovery_attempt=rnd.randint(0, 3))
        healthy = [row(n) for n in names]
        loads = {n: rnd.randint(0, 2) for n in names}
        tried = {n for n in names if rnd.random() < 0.3}
        ranked = rank_candidates(dead, healthy, tried=tried, load=lambda r: loads[r.executor_id], tie_key=b"k")
        best = best_candidate(dead, iter(healthy), tried=tried, load=lambda r: loads[r.executor_id], tie_key=b"k")
        assert best == (ranked[0] if ranked else None), case
    # one candidate alone on the lowest load: no hash is needed to choose it
    hashed = []
    monkeypatch.setattr(recovery, "tie_rank", lambda *a: hashed.append(a) or tie_rank(*a))
    loads = {"a": 1, "b": 0, "c": 1, "d": 1}
    got = best_candidate(row("x"), [row(n) for n in "abcd"], tried=set(), load=lambda r: loads[r.executor_id],
                         tie_key=b"k")
    assert got is not None and got.executor_id == "b" and hashed == []
    loads = {"a": 0, "b": 0, "c": 1, "d": 1}
    best_candidate(row("x"), [row(n) for n in "abcd"], tried=set(), load=lambda r: loads[r.executor_id], tie_key=b"k")
    assert sorted(a[3] for a in hashed) == ["a", "b"]  # the two tied for first, not every peer


def test_the_tie_rank_depends_on_the_key_the_dead_stream_and_the_attempt() -> None:
    names = [f"n{i}" for i in range(30)]
    base = sorted(names, key=lambda n: tie_rank(b"k", "s", 1, n))
    assert sorted(names, key=lambda n: tie_rank(b"k", "s", 1, n)) == base
    assert sorted(names, key=lambda n: tie_rank(b"other", "s", 1, n)) != base
    assert sorted(names, key=lambda n: tie_rank(b"k", "s", 2, n)) != base
    assert sorted(names, key=lambda n: tie_rank(b"k", "t", 1, n)) != base
