"""A read-model process ends with the process it works for (``relay_es.adapters.readmodels.children``)."""

from __future__ import annotations

import subprocess
import sys
import time

PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "from relay_es.adapters.readmodels.children import die_with_parent; import time, sys; die_with_parent(); "
    "print('ready', flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
sys.stdin.read()
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")  # a zombie is dead
    except FileNotFoundError:
        return True


def test_a_process_that_asked_to_die_with_its_parent_does_when_the_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        assert not _gone(child)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(child):
            assert time.monotonic() < deadline, f"process {child} outlived its parent"
            time.sleep(0.05)
    finally:
        parent.kill()


def test_a_process_started_for_a_caller_already_gone_ends_at_once() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    out = subprocess.run([sys.executable, "-c", "from relay_es.adapters.readmodels.children import exit_if_gone; "
                          f"exit_if_gone({gone.pid}); print('went on')"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "went on" not in out.stdout
