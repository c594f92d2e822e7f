"""End-to-end harness: real DBOS executors (dbos 3.2.0) as processes, plus database checks.

Stdlib + psycopg only, so it imports in the project's own venv. The executors themselves run
``tests/e2e/dbos_app.py`` with the python of a separate venv (see ``dbos_venv.py``).

Typical use::

    python = ensure_dbos_venv(REPO_ROOT)
    sys_db = create_database(admin_url, unique_name("sys"))
    steps_db = create_database(admin_url, unique_name("steps"))
    with Executor(python, relay_url=url, app_name="my-app", app_version="v1",
                  system_database_url=sys_db, steps_db_url=steps_db) as a:
        ids = a.start_workflows(count=3, steps=4, step_secs=0.5)
        a.kill()
        ...
        wait_until(lambda: all(s == "SUCCESS" for s in workflow_statuses(sys_db, ids).values()), 30)

Start executors that share a brand-new system database one at a time (each constructor returns
only once its executor reported ``launched``): concurrent first launches can race in the SDK's
schema migration (conductor-protocol.md §13).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

try:  # works both as tests.e2e.harness and as a top-level module next to the test files
    from .dbos_venv import ensure_dbos_venv  # noqa: F401  (re-exported for convenience)
except ImportError:
    from dbos_venv import ensure_dbos_venv  # type: ignore[no-redef]  # noqa: F401

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
DBOS_APP = E2E_DIR / "dbos_app.py"

T = TypeVar("T")

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY",
               "http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")


class ExecutorError(RuntimeError):
    pass


class Executor:
    """One ``dbos_app.py`` process. The constructor starts it and waits for its ``launched`` line.

    stdout is read by a background thread into a queue of JSON events; stderr (DBOS logging) goes
    to a temporary file, readable at any time with :meth:`stderr_text` / :meth:`stderr_tail`.
    """

    def __init__(
        self,
        python: str | os.PathLike[str] | None,
        *,
        relay_url: str,
        app_name: str,
        app_version: str,
        system_database_url: str,
        steps_db_url: str,
        conductor_key: str = "dev-key",
        executor_metadata: Mapping[str, Any] | None = None,
        extra_env: Mapping[str, str] | None = None,
        name: str | None = None,
        launch_timeout: float = 60.0,
        wait_launched: bool = True,
        command: list[str] | None = None,
        cwd: Path | None = None,
        drop_env: tuple[str, ...] = (),
    ) -> None:
        """``command``/``cwd`` start another executor program with the same
        contract (the TypeScript app); by default ``python dbos_app.py``."""
        self.name = name or f"executor-{uuid.uuid4().hex[:6]}"
        self.app_name = app_name
        self.app_version = app_version
        self.system_database_url = system_database_url
        self.steps_db_url = steps_db_url
        self._events: "queue.Queue[dict[str, Any] | None]" = queue.Queue()
        self.alerts: list[dict[str, Any]] = []  # {"event": "alert", "name", "message", "metadata"}, as they came
        self._launched: dict[str, Any] | None = None
        self._stderr_file = tempfile.NamedTemporaryFile(prefix=f"{self.name}-", suffix=".stderr",
                                                        delete=False)
        self.stderr_path = Path(self._stderr_file.name)

        env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
        env.update({
            # websockets >= 15 honours proxy variables (§2.2); never let them reroute the socket.
            "NO_PROXY": "*", "no_proxy": "*",
            "PYTHONUNBUFFERED": "1",
            "RELAY_URL": relay_url,
            "APP_NAME": app_name,
            "APP_VERSION": app_version,
            "SYSTEM_DATABASE_URL": system_database_url,
            "STEPS_DB_URL": steps_db_url,
            "CONDUCTOR_KEY": conductor_key,
        })
        env.pop("PYTHONPATH", None)  # keep the project's packages out of the dbos venv
        for var in drop_env:
            env.pop(var, None)
        if executor_metadata is not None:
            env["EXECUTOR_METADATA"] = json.dumps(dict(executor_metadata))
        if extra_env:
            env.update(extra_env)

        self.proc = subprocess.Popen(
            command or [str(python), str(DBOS_APP)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_file,
            env=env, cwd=str(cwd or E2E_DIR), text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._read_stdout, name=f"{self.name}-stdout", daemon=True)
        self._reader.start()
        if wait_launched:
            self.wait_launched(launch_timeout)

    # ---- plumbing ----------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                line = line.strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {"event": "garbage", "line": line}
                if event.get("event") == "alert":  # whenever it comes: kept apart from the replies
                    self.alerts.append(event)
                    continue
                self._events.put(event)
        except (ValueError, OSError):  # closed under it by close() (ValueError: I/O operation on closed file)
            pass
        self._events.put(None)  # EOF

    def _next_event(self, wanted: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ExecutorError(f"{self.name}: no {wanted!r} event within {timeout}s\n{self.stderr_tail()}")
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event is None:
                self._events.put(None)  # keep EOF visible to later callers
                raise ExecutorError(f"{self.name}: process ended (exit code {self.proc.poll()}) before "
                                    f"{wanted!r}\n{self.stderr_tail()}")
            if event.get("event") == wanted:
                return event
            if event.get("event") == "error":
                raise ExecutorError(f"{self.name}: {event.get('message')}")
            # anything else (e.g. a late reply) is dropped

    def _send(self, command: dict[str, Any]) -> None:
        if self.proc.stdin is None or self.proc.poll() is not None:
            raise ExecutorError(f"{self.name}: process is not running (exit code {self.proc.poll()})")
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    # ---- API ---------------------------------------------------------------------------------

    def wait_launched(self, timeout: float = 60.0) -> str:
        if self._launched is None:
            self._launched = self._next_event("launched", timeout)
        return self._launched["executor_id"]

    @property
    def executor_id(self) -> str:
        """The id the SDK uses for this process (fresh uuid4 per launch when a conductor key is set)."""
        if self._launched is None:
            raise ExecutorError(f"{self.name}: not launched yet")
        return self._launched["executor_id"]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def start_workflows(self, count: int, steps: int, step_secs: float, *,
                        workflow_ids: Iterable[str] | None = None, timeout: float = 30.0) -> list[str]:
        """Starts ``count`` long_workflow(steps, step_secs) in the background; returns their ids."""
        command: dict[str, Any] = {"cmd": "start", "count": count, "steps": steps, "step_secs": step_secs}
        if workflow_ids is not None:
            command["workflow_ids"] = list(workflow_ids)
        self._send(command)
        return list(self._next_event("started", timeout)["workflow_ids"])

    def ground(self, prefix: str, timeout: float = 30.0) -> dict[str, Any]:
        """Starts the app's ground (one workflow of every kind, ids beginning with ``prefix``).

        Returns ``{"workflow_ids": {"running": id, "queued": [3 ids], "failed": id, "steps": id,
        "parent": id, "children": [2 ids]}, "schedule": name}``; see ``ground`` in dbos_app.py.
        """
        self._send({"cmd": "ground", "prefix": prefix})
        event = self._next_event("ground", timeout)
        return {"workflow_ids": event["workflow_ids"], "schedule": event["schedule"]}

    def release(self, workflow_id: str, message: str = "go", timeout: float = 10.0) -> None:
        """Sends ``message`` on topic "release": a blocked_workflow waiting for it finishes."""
        self._send({"cmd": "release", "workflow_id": workflow_id, "message": message})
        self._next_event("released", timeout)

    def ping(self, timeout: float = 10.0) -> None:
        self._send({"cmd": "ping"})
        self._next_event("pong", timeout)

    def kill(self) -> None:
        """SIGKILL: no DBOS shutdown, no close frame (the conductor sees an abnormal close)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGSTOP: the process freezes (no pongs, no work) but keeps its socket open."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT: resumes a process frozen by :meth:`stop`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def exit(self, *, workflow_timeout: int = 0, timeout: float = 30.0) -> int:
        """Graceful shutdown via DBOS.destroy() (close code 1000). Returns the exit code."""
        if self.proc.poll() is None:
            self.cont()  # a stopped process could not read the command
            try:
                self._send({"cmd": "exit", "timeout": workflow_timeout})
            except (BrokenPipeError, ExecutorError):
                pass
            try:
                self.proc.wait(timeout + workflow_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise ExecutorError(f"{self.name}: did not exit within {timeout + workflow_timeout}s\n"
                                    f"{self.stderr_tail()}")
        return self.proc.returncode

    def close(self) -> None:
        """Makes sure the process is gone (SIGKILL if needed). Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        # The process is gone, so its stdout ends: let the reader drain it before the stream is closed
        # under it (a child that inherited the pipe could keep it open: then the reader ends on the close).
        self._reader.join(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self._stderr_file.close()
        except OSError:
            pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stderr_tail(self, lines: int = 60) -> str:
        tail = self.stderr_text().splitlines()[-lines:]
        return f"--- {self.name} ({self._launched and self._launched.get('executor_id')}) stderr tail ---\n" + \
            "\n".join(tail)

    def __repr__(self) -> str:
        return f"Executor({self.name}, pid={self.proc.pid}, id={self._launched and self._launched.get('executor_id')})"


# ---- database helpers ------------------------------------------------------------------------

_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def unique_name(prefix: str) -> str:
    """A fresh lowercase database name such as ``relay_e2e_sys_1a2b3c4d``."""
    return f"relay_e2e_{prefix}_{uuid.uuid4().hex[:8]}"


def database_url(admin_url: str, name: str) -> str:
    """``admin_url`` with its database replaced by ``name`` (user, password, host, query kept)."""
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def create_database(admin_url: str, name: str) -> str:
    """Creates a fresh (dropped first if it exists) database ``name``; returns its URL."""
    if not _DB_NAME.match(name):
        raise ValueError(f"unsafe database name {name!r}")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    if not _DB_NAME.match(name):
        raise ValueError(f"unsafe database name {name!r}")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def workflow_rows(system_db_url: str, ids: Iterable[str], schema: str = "dbos") -> dict[str, dict[str, Any]]:
    """Selected columns of ``<schema>.workflow_status`` for the given ids (missing ids are absent)."""
    ids = list(ids)
    query = sql.SQL(
        "SELECT workflow_uuid, status, executor_id, application_version, name, recovery_attempts "
        "FROM {}.workflow_status WHERE workflow_uuid = ANY(%s)").format(sql.Identifier(schema))
    with psycopg.connect(system_db_url, autocommit=True) as conn:
        rows = conn.execute(query, (ids,)).fetchall()
    return {r[0]: {"status": r[1], "executor_id": r[2], "application_version": r[3], "name": r[4],
                   "recovery_attempts": r[5]} for r in rows}


def workflow_statuses(system_db_url: str, ids: Iterable[str], schema: str = "dbos") -> dict[str, str | None]:
    """``{workflow_id: status}`` (PENDING, ENQUEUED, SUCCESS, ERROR, ...); None for unknown ids."""
    ids = list(ids)
    rows = workflow_rows(system_db_url, ids, schema)
    return {wf: (rows[wf]["status"] if wf in rows else None) for wf in ids}


def step_runs(steps_db_url: str) -> list[dict[str, Any]]:
    """Every row of ``step_runs`` in insertion order (empty if no executor created the table yet)."""
    with psycopg.connect(steps_db_url, autocommit=True) as conn:
        try:
            rows = conn.execute(
                "SELECT workflow_id, step_no, executor_id, pid, ran_at FROM step_runs ORDER BY id").fetchall()
        except psycopg.errors.UndefinedTable:
            return []
    return [{"workflow_id": r[0], "step_no": r[1], "executor_id": r[2], "pid": r[3], "ran_at": r[4]}
            for r in rows]


def step_run_counts(steps_db_url: str) -> dict[tuple[str, int], int]:
    """``{(workflow_id, step_no): how many times that step's body ran}``; step numbers start at 1."""
    with psycopg.connect(steps_db_url, autocommit=True) as conn:
        try:
            rows = conn.execute(
                "SELECT workflow_id, step_no, count(*) FROM step_runs GROUP BY workflow_id, step_no").fetchall()
        except psycopg.errors.UndefinedTable:
            return {}
    return {(r[0], r[1]): r[2] for r in rows}


# ---- waiting ---------------------------------------------------------------------------------

def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.1, message: str = "") -> T:
    """Calls ``predicate`` until it returns something truthy, and returns that value.

    Raises ``TimeoutError`` (mentioning ``message`` and the last value seen) after ``timeout`` s.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message or predicate!r}; "
                               f"last value: {value!r}")
        time.sleep(interval)
