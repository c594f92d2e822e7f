"""The fault suite's crash points: off by default, a name it does not know refused at start.

Each case runs in a subprocess: the module reads its environment variable at import, and
an armed point ends the process with ``os._exit``."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(code: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RELAY_FAULT_CRASH_AT"}
    if crash_at is not None:
        env["RELAY_FAULT_CRASH_AT"] = crash_at
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False)


CALL_ALL = ("from relay_es.adapters.faults import POINTS, crash_point\n"
            "for p in POINTS: crash_point(p)\n"
            "print('survived')")


def test_off_by_default_every_point_is_a_no_op() -> None:
    done = run(CALL_ALL, None)
    assert done.returncode == 0 and done.stdout.strip() == "survived", done.stderr


def test_an_armed_point_exits_at_once_with_137_and_others_pass() -> None:
    code = ("from relay_es.adapters.faults import crash_point\n"
            "crash_point('before_answer_recorded'); print('passed the other point', flush=True)\n"
            "crash_point('after_dispatch_recorded'); print('survived')")
    done = run(code, "after_dispatch_recorded")
    assert done.returncode == 137
    assert done.stdout.strip() == "passed the other point"
    assert "fault injection: crashing at after_dispatch_recorded" in done.stderr


def test_an_unknown_point_is_refused_when_the_module_loads() -> None:
    done = run(CALL_ALL, "after_lunch")
    assert done.returncode != 0 and "survived" not in done.stdout
    assert "RELAY_FAULT_CRASH_AT='after_lunch' is not one of" in done.stderr
