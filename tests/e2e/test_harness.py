"""The e2e harness's own plumbing (``tests/e2e/harness.py``), with a stand-in program instead of a
DBOS executor: no SDK, no Relay, no database."""

from __future__ import annotations

import sys
import threading

try:  # tests/e2e may or may not become a package
    from . import harness
except ImportError:
    import harness  # type: ignore[no-redef]

# A program that writes JSON lines as fast as it can until it is killed.
CHATTY = "import sys\nwhile True:\n    sys.stdout.write('{\"event\": \"tick\", \"pad\": \"' + 'x' * 200 + '\"}\\n')\n"


def test_close_while_the_reader_is_reading_leaves_no_thread_error(monkeypatch) -> None:
    # close() kills the program and closes its stdout; the thread reading that stdout must end
    # quietly, not raise "I/O operation on closed file" (seen once at the end of a suite run).
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    for _ in range(20):
        ex = harness.Executor(sys.executable, relay_url="ws://127.0.0.1:9/", app_name="a", app_version="v",
                              system_database_url="", steps_db_url="", wait_launched=False,
                              command=[sys.executable, "-c", CHATTY])
        ex._events.get(timeout=10)  # it is writing, and the reader reading
        ex.close()
        ex._reader.join(10)
        assert not ex._reader.is_alive()
    assert errors == []
