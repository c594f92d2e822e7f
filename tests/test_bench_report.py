"""How the benchmark report judges its goals (``bench.report``): met only if met in every run, a
run that failed or lost part of what it measured counts as a miss, the run shown is one with a
figure. The figures themselves are ``bench/``'s; these are the rules that turn them into the
goals table of ``docs/benchmarks.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report import goal, goal3_met, incomplete, merge_goals, render


def g(value: float | None, ok: bool | None, label: str = "7. lateness") -> Any:
    return goal(label, f"{value} ms", "base", "-", "< 250 ms", ok, value, "ms", " by some ms" if ok is False else "")


def test_met_in_every_run_is_met() -> None:
    [row] = merge_goals([[g(10, True)], [g(20, True)], [g(30, True)]])
    assert row[1] == "20 ms" and row[4] == "20 ms (10 ms - 30 ms, 3 runs)" and row[6] == "**met** in all 3 runs"


def test_a_failed_run_is_a_miss_of_every_goal() -> None:
    [row] = merge_goals([[g(10, True)], [g(20, True)]], failed=1)
    assert row[6] == "**missed** in 1 of 3 runs, 1 of them failed"
    assert "2 runs; 1 without a figure" in row[4]


def test_a_miss_is_not_hidden_by_a_run_that_could_not_be_judged() -> None:
    [row] = merge_goals([[g(300, False)], [g(None, None)], [g(10, True)]])
    assert row[6].startswith("**missed** in 1 of 3 runs")


def test_the_run_shown_has_a_figure_and_the_spread_counts_only_figures() -> None:
    [row] = merge_goals([[g(None, None)], [g(100, True)], [g(120, True)]])
    assert row[1] in ("100 ms", "120 ms")
    assert row[4] == "110 ms (100 ms - 120 ms, 2 runs; 1 without a figure)" and row[6] == "n/a"


def phase(n: int, seen: int, registered: int | None = None, recovered: bool = True, p99: float = 50) -> dict[str, Any]:
    return {"n": n, "registered": n if registered is None else registered, "all_recovered": recovered,
            "lateness_ms": {"n": seen, "p50": 10, "p99": p99, "max": p99}}


def test_a_lateness_goal_needs_every_death_on_record() -> None:
    assert goal3_met(phase(10_000, 10_000))
    assert not goal3_met(phase(10_000, 100))  # 9,900 deaths missing are not early
    assert not goal3_met(phase(10_000, 10_000, recovered=False))
    assert not goal3_met(phase(10_000, 10_000, registered=5_000))
    assert not goal3_met(phase(10_000, 10_000, p99=100))
    assert incomplete(phase(500, 20, recovered=False)) == "20 of 500 deaths on record; not all recovered"


def test_a_section_whose_runs_all_failed_is_in_the_goals_table(tmp_path: Path) -> None:
    (tmp_path / "queries.json").write_text(json.dumps({
        "mode": "full", "measured_at": "2026-12-06 00:00:00 UTC", "took_s": 1, "code": "abc",
        "runs": [{"error": "Traceback: boom"}, {"error": "Traceback: boom again"}]}))
    text = render(tmp_path, ["queries"])
    assert "**failed** in all 2 runs" in text and "boom again" in text
