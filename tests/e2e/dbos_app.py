"""One real DBOS executor (dbos 3.2.0) for end-to-end tests, driven over stdin/stdout.

Run with the python of the dbos venv (tests/e2e/dbos_venv.py), never with the project's: this
script must not import relay_es.

Configuration (environment variables):
    RELAY_URL            conductor_url, e.g. ws://127.0.0.1:8090 (required)
    APP_NAME             DBOS application name = the app segment of the WebSocket path (required;
                         DBOS accepts 3-256 chars of lowercase letters, digits, '-' and '_')
    APP_VERSION          pinned application_version, so several processes share one (required)
    SYSTEM_DATABASE_URL  Postgres URL of the DBOS system database (required)
    STEPS_DB_URL         Postgres URL where every step execution inserts a row into `step_runs`
                         (required; the table is created if missing)
    CONDUCTOR_KEY        conductor key, the last path segment (default "dev-key")
    EXECUTOR_METADATA    optional JSON object -> conductor_executor_metadata
    DBOS_LOG_LEVEL       optional DBOS log level (default INFO)
    SYS_DB_POOL_SIZE     optional system database pool size (default 10; DBOS's own default is 20,
                         which exhausts Postgres' 100 connections at ~5 executors)

Protocol: stdout carries only JSON lines written by this script (everything else, DBOS logging
included, goes to stderr).
    -> {"event": "launched", "executor_id": ..., "application_version": ..., "app_name": ..., "pid": ...}
stdin takes one JSON command per line:
    {"cmd": "start", "count": N, "steps": S, "step_secs": T}      (optional "workflow_ids": [...])
        -> {"event": "started", "workflow_ids": [...]}
    {"cmd": "ping"}                                               -> {"event": "pong"}
    {"cmd": "ground", "prefix": P}     -> {"event": "ground", "workflow_ids": {...}, "schedule": name}
        starts one workflow of every kind a Conductor operation acts on (see ``ground`` below)
    {"cmd": "release", "workflow_id": W, "message": M}   DBOS.send(W, M, topic "release")
        -> {"event": "released", "workflow_id": W}
    {"cmd": "exit"}            (optional "timeout": seconds to let active workflows finish)
        -> DBOS.destroy(), then {"event": "exited"} and the process exits with code 0.
    An alert from the control plane (the app's alert handler) -> {"event": "alert", "name": ...,
        "message": ..., "metadata": {...}}, whenever it comes.
    A malformed or unknown command -> {"event": "error", "message": ...}.
End of stdin behaves like {"cmd": "exit"}, so an executor never outlives its driver.

The workflow `long_workflow(n_steps, step_secs)` runs steps 1..n_steps. Each step first inserts
(workflow_id, step_no, executor_id, pid) into step_runs, then time.sleep(step_secs) *inside* the
step: a SIGKILL during the sleep leaves the workflow PENDING with that step unfinished, so after
recovery exactly that one step may have run twice and every other step exactly once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

# Keep the real stdout for protocol lines only; anything else that writes to fd 1 or sys.stdout
# (libraries, stray prints) ends up on stderr instead.
_PROTO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
_PROTO_LOCK = threading.Lock()


def emit(event: str, **fields: object) -> None:
    line = json.dumps({"event": event, **fields})
    with _PROTO_LOCK:
        _PROTO.write(line + "\n")
        _PROTO.flush()


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None or value == "":
        print(f"dbos_app: missing required environment variable {name}", file=sys.stderr)
        sys.exit(2)
    return value


RELAY_URL = _env("RELAY_URL")
APP_NAME = _env("APP_NAME")
APP_VERSION = _env("APP_VERSION")
SYSTEM_DATABASE_URL = _env("SYSTEM_DATABASE_URL")
STEPS_DB_URL = _env("STEPS_DB_URL")
CONDUCTOR_KEY = _env("CONDUCTOR_KEY", "dev-key")
_metadata_raw = os.environ.get("EXECUTOR_METADATA")
EXECUTOR_METADATA = json.loads(_metadata_raw) if _metadata_raw else None
LOG_LEVEL = os.environ.get("DBOS_LOG_LEVEL", "INFO")
SYS_DB_POOL_SIZE = int(os.environ.get("SYS_DB_POOL_SIZE", "10"))

import datetime as _dt  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402  (after the stdout redirection on purpose)
from dbos import DBOS, DBOSConfig, SetWorkflowID  # noqa: E402

STEP_RUNS_DDL = """
CREATE TABLE IF NOT EXISTS step_runs (
    id          bigserial PRIMARY KEY,
    workflow_id text        NOT NULL,
    step_no     integer     NOT NULL,
    executor_id text        NOT NULL,
    pid         integer     NOT NULL,
    ran_at      timestamptz NOT NULL DEFAULT now()
)
"""


def ensure_step_runs_table() -> None:
    # Two processes racing on CREATE TABLE IF NOT EXISTS can still collide on the catalog's unique
    # indexes; the loser simply retries and then sees the table.
    for attempt in range(5):
        try:
            with psycopg.connect(STEPS_DB_URL, autocommit=True) as conn:
                conn.execute(STEP_RUNS_DDL)
            return
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
            time.sleep(0.2 * (attempt + 1))
    with psycopg.connect(STEPS_DB_URL, autocommit=True) as conn:
        conn.execute(STEP_RUNS_DDL)


config: DBOSConfig = {
    "name": APP_NAME,
    "system_database_url": SYSTEM_DATABASE_URL,
    "conductor_url": RELAY_URL,
    "conductor_key": CONDUCTOR_KEY,
    "application_version": APP_VERSION,
    "log_level": LOG_LEVEL,
    "sys_db_pool_size": SYS_DB_POOL_SIZE,
}
if EXECUTOR_METADATA is not None:
    config["conductor_executor_metadata"] = EXECUTOR_METADATA

DBOS(config=config)


@DBOS.step()
def run_step(step_no: int, step_secs: float) -> int:
    with psycopg.connect(STEPS_DB_URL, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO step_runs (workflow_id, step_no, executor_id, pid) VALUES (%s, %s, %s, %s)",
            (DBOS.workflow_id, step_no, DBOS.executor_id, os.getpid()),
        )
    # time.sleep, not DBOS.sleep: DBOS.sleep is itself a durable step and may not be called from
    # inside a step. Sleeping here keeps the step "in flight" so that a kill interrupts it.
    time.sleep(step_secs)
    return step_no


@DBOS.workflow()
def long_workflow(n_steps: int, step_secs: float) -> int:
    for step_no in range(1, n_steps + 1):
        run_step(step_no, step_secs)
    return n_steps


# ---- the ground: one workflow of every kind (the same names and shapes in ts_app/app.js) --------

# Registered by `ground` (database-backed, so only executors that build a ground write it), global
# concurrency 1: the first workflow enqueued runs (and blocks), the others stay ENQUEUED; worker
# concurrency 1, so that it can drive an autoscaling policy (check_autoscale in
# tests/e2e/test_queues_schedules_api.py).
GROUND_QUEUE = "ground_queue"
_flaky_attempts: dict[str, int] = {}


@DBOS.workflow()
def blocked_workflow(label: str) -> str:
    """PENDING until a message on topic "release" arrives; says so in event "state"."""
    DBOS.set_event("state", "waiting")
    message = DBOS.recv("release", timeout_seconds=3600)
    DBOS.set_event("state", "released")
    return f"{label}: {message}"


@DBOS.step()
def plain_step(n: int) -> int:
    return n * 10


@DBOS.step(retries_allowed=True, max_attempts=3, interval_seconds=0.1, backoff_rate=1.0)
def flaky_step() -> str:
    """Fails on its first attempt in each workflow, succeeds on the retry (one step row)."""
    wf = DBOS.workflow_id or ""
    _flaky_attempts[wf] = _flaky_attempts.get(wf, 0) + 1
    if _flaky_attempts[wf] == 1:
        raise RuntimeError("flaky: first attempt fails")
    return f"ok after {_flaky_attempts[wf]} attempts"


@DBOS.step()
def failing_step() -> None:
    raise ValueError("failing_step always fails")


@DBOS.workflow()
def steps_workflow(notify_id: str) -> str:
    """SUCCESS after steps (one retried, one failed and caught), events, a stream and a message."""
    plain_step(1)
    flaky_step()
    try:
        failing_step()
    except ValueError:
        pass
    plain_step(2)
    DBOS.set_event("progress", {"done": 3})
    DBOS.set_event("result", "steps done")
    for i in range(3):
        DBOS.write_stream("numbers", i)
    DBOS.close_stream("numbers")
    DBOS.send(notify_id, "a note for you", topic="note")
    return "steps done"


@DBOS.workflow()
def failing_workflow() -> None:
    """ERROR: one step, then it raises."""
    plain_step(1)
    raise RuntimeError("failing_workflow failed on purpose")


@DBOS.workflow()
def child_workflow(n: int) -> int:
    return plain_step(n)


@DBOS.workflow()
def parent_workflow(n_children: int) -> int:
    """SUCCESS once its children (ids <parent>-child-<i>) have."""
    parent = DBOS.workflow_id
    handles = []
    for i in range(n_children):
        with SetWorkflowID(f"{parent}-child-{i}"):
            handles.append(DBOS.start_workflow(child_workflow, i))
    return sum(h.get_result() for h in handles)


@DBOS.workflow()
def tick_workflow(scheduled_at: _dt.datetime, context: Any) -> None:
    plain_step(0)


@DBOS.alert_handler
def on_alert(name: str, message: str, metadata: dict[str, str]) -> None:
    """Conductor's (here Relay's) alerts: each is reported on stdout."""
    emit("alert", name=name, message=message, metadata=metadata)


def ground(prefix: str) -> dict[str, Any]:
    """Starts the ground under workflow ids beginning with ``prefix``; returns their ids.

    running   blocked_workflow, PENDING until released
    queued    3 blocked_workflows on ground_queue: one PENDING, two ENQUEUED
    failed    failing_workflow, ERROR
    steps     steps_workflow, SUCCESS (5 steps, events, stream "numbers", sends "note" to running)
    parent    parent_workflow(2), SUCCESS; children <parent>-child-0 and -1
    schedule  <prefix>-tick, every 2 s: tick_workflow
    """
    ids: dict[str, Any] = {"running": f"{prefix}-running", "failed": f"{prefix}-failed",
                           "steps": f"{prefix}-steps", "parent": f"{prefix}-parent",
                           "queued": [f"{prefix}-queued-{i}" for i in range(3)]}
    with SetWorkflowID(ids["running"]):
        DBOS.start_workflow(blocked_workflow, "running")
    queue = DBOS.register_queue(GROUND_QUEUE, global_concurrency=1, worker_concurrency=1)
    for wf in ids["queued"]:
        with SetWorkflowID(wf):
            queue.enqueue(blocked_workflow, wf)
    with SetWorkflowID(ids["failed"]):
        DBOS.start_workflow(failing_workflow)
    with SetWorkflowID(ids["steps"]):
        DBOS.start_workflow(steps_workflow, ids["running"])
    with SetWorkflowID(ids["parent"]):
        DBOS.start_workflow(parent_workflow, 2)
    ids["children"] = [f"{ids['parent']}-child-{i}" for i in range(2)]
    schedule = f"{prefix}-tick"
    DBOS.create_schedule(schedule_name=schedule, workflow_fn=tick_workflow, schedule="*/2 * * * * *")
    return {"workflow_ids": ids, "schedule": schedule}


def handle_start(cmd: dict) -> None:
    count = int(cmd.get("count", 1))
    steps = int(cmd.get("steps", 1))
    step_secs = float(cmd.get("step_secs", 0.0))
    wanted_ids = cmd.get("workflow_ids")
    if wanted_ids is not None and len(wanted_ids) != count:
        raise ValueError("workflow_ids must have `count` entries")
    ids: list[str] = []
    for i in range(count):
        if wanted_ids is not None:
            with SetWorkflowID(str(wanted_ids[i])):
                handle = DBOS.start_workflow(long_workflow, steps, step_secs)
        else:
            handle = DBOS.start_workflow(long_workflow, steps, step_secs)
        ids.append(handle.get_workflow_id())
    emit("started", workflow_ids=ids)


def shutdown(timeout: int = 0) -> None:
    try:
        DBOS.destroy(workflow_completion_timeout_sec=timeout)
    finally:
        emit("exited")
        sys.stderr.flush()
        # Workflow threads still sleeping inside a step would otherwise keep the interpreter
        # alive (concurrent.futures joins its workers at exit).
        os._exit(0)


def main() -> None:
    ensure_step_runs_table()
    DBOS.launch()
    # With a conductor key (and outside DBOS Cloud) launch() replaces the executor id with a fresh
    # uuid4 (dbos/_dbos.py `_launch`: GlobalParams.executor_id = generate_uuid()); DBOS.executor_id
    # is a classproperty over that same GlobalParams value that executor_info reports.
    emit("launched", executor_id=DBOS.executor_id, application_version=DBOS.application_version,
         app_name=APP_NAME, pid=os.getpid())
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw:
            continue
        try:
            cmd = json.loads(raw)
            kind = cmd.get("cmd")
            if kind == "start":
                handle_start(cmd)
            elif kind == "ping":
                emit("pong")
            elif kind == "ground":
                emit("ground", **ground(str(cmd["prefix"])))
            elif kind == "release":
                DBOS.send(str(cmd["workflow_id"]), cmd.get("message", "go"), topic="release")
                emit("released", workflow_id=cmd["workflow_id"])
            elif kind == "exit":
                shutdown(int(cmd.get("timeout", 0)))
            else:
                emit("error", message=f"unknown command {kind!r}")
        except Exception as exc:  # report, keep serving
            emit("error", message=f"{type(exc).__name__}: {exc}")
    shutdown(0)


if __name__ == "__main__":
    main()
