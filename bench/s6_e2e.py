"""Section 6: end to end with real DBOS executors, both SDKs.

Per SDK (``dbos==3.2.0``, then ``@dbos-inc/dbos-sdk@5.2.11``): one Relay (SQLite store), a
DBOS system database on the bench's Postgres, a surviving executor B and, per repeat, a fresh
executor A running workflows
(``tests/e2e/scene.py`` and ``harness.py``). A is SIGKILLed mid-step. Each kill meets an
idle B: the next A is started only once B has finished the workflows it recovered from the
last one (a backlog on B measured the SDK's queue, not a recovery), and after a random pause of up
to one poll period of the SDKs' internal queue (:data:`POLL_S`), so that the kills meet B's next
poll at independent phases. Measured:
seconds from the kill to the first ``step_runs`` row that B writes for one of
A's workflows (the workflow running again), minus the application's grace;
and the stages in between from A's audit entries.
"""

from __future__ import annotations

import os
import random
import time
from datetime import datetime
from typing import Any

from bench.common import Workdir, log, past_settle, pct, relay_server
from bench.s3_detection import ts


def first_peer_step(steps_db: str, ids: list[str], peer: str) -> float | None:
    import psycopg

    with psycopg.connect(steps_db, autocommit=True) as c:
        row = c.execute("SELECT min(ran_at) FROM step_runs WHERE executor_id = %s AND workflow_id = ANY(%s)",
                        (peer, ids)).fetchone()
    v: datetime | None = row[0] if row else None
    return v.timestamp() if v is not None else None


GRACE = 2  # the application's executorTimeoutSecs
STEPS = 12  # per workflow, 0.25 s each: A is killed in step 2, so B has 2.5-2.75 s of work after a recovery

POLL_S = 1.05  # the longest poll period of both SDKs' internal queue: 1 s with up to 5% jitter

REPEATS_ITSELF = True  # ten kills in one run: bench/run --repeat does not multiply them


SDKS = (("python", "dbos==3.2.0"), ("typescript", "@dbos-inc/dbos-sdk@5.2.11"))


def run(ctx: Any) -> dict[str, Any]:
    repeats = 1 if ctx.quick else 10
    os.environ.setdefault("RELAY_TEST_POSTGRES_URL", ctx.pg.admin_url)
    return {"grace_s": GRACE, "repeats": repeats, "steps": STEPS, "idle_peer": True, "store": "sqlite",
            "sdks": [one_sdk(ctx, sdk, package, repeats) for sdk, package in SDKS]}



def one_sdk(ctx: Any, sdk: str, package: str, repeats: int) -> dict[str, Any]:
    """``repeats`` kills with one SDK's executors, on a Relay of its own."""
    from tests.e2e import harness
    from tests.e2e.scene import Scene, TsScene

    wd = Workdir.make(f"s6-{sdk}")
    store = f"sqlite:///{wd.path}/relay.db"
    srv = relay_server(wd.path, store)
    scene = (Scene if sdk == "python" else TsScene)(srv, ctx.pg.admin_url)
    rows: list[dict[str, Any]] = []
    try:
        scene.set_grace(GRACE)
        b = scene.spawn("B")
        previous: list[str] = []
        for i in range(repeats):
            if previous:  # B idle again: every workflow it recovered has run its last step
                scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, STEPS), 0) for wf in previous),
                           "B to finish the workflows it recovered", timeout=120)
            # Relay enforces no deadline in its first seconds (the restart settle window): wait that out
            # before A starts, not between step 2 and the kill, or A may finish every step meanwhile (a Node
            # executor starts in about a second: A's 3 s of steps ended before the window did, 2026-12-04)
            past_settle(srv)
            # The peer starts a recovered workflow at its next poll of the SDK's internal queue, once a second
            # (section 6 of the report): kills at a regular pace would meet that poll at the same phase every
            # time (one run of ten at 0.12-0.47 s, the next at 0.49-0.92 s, 2026-12-04). A pause of a random
            # part of a poll period before each A makes the ten kills independent draws of that phase.
            pause = random.uniform(0.0, POLL_S)
            time.sleep(pause)
            a = scene.spawn(f"A{i}")
            ids = a.start_workflows(count=3, steps=STEPS, step_secs=0.25)
            scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 2), 0) for wf in ids),
                       "every workflow to reach step 2")
            t_kill = time.time()
            a.kill()
            got = harness.wait_until(lambda: first_peer_step(scene.steps_db, ids, b.executor_id), timeout=60,
                                     interval=0.02, message="B to run a step of A's workflows")
            scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered and deleted", timeout=60)
            acts = {e["action"]: e for e in scene.events(a.executor_id)}
            stage = {k: ts(v["at"]) - t_kill for k, v in acts.items()}
            row = {
                "repeat": i + 1,
                "pause_s": pause,
                "kill_to_peer_step_s": got - t_kill,
                "minus_grace_s": got - t_kill - GRACE,
                "kill_to_disconnected_s": stage.get("executor.disconnected"),
                "kill_to_declared_dead_s": stage.get("executor.declared_dead"),
                "kill_to_dispatched_s": stage.get("recovery.dispatched"),
                "kill_to_confirmed_s": stage.get("recovery.confirmed"),
            }
            rows.append(row)
            previous = ids
            log(f"s6 {sdk} repeat {i + 1}: kill -> peer step {row['kill_to_peer_step_s']:.3f}s "
                f"(minus grace {row['minus_grace_s']:.3f}s)")
        vals = [r["minus_grace_s"] for r in rows]
        return {"sdk": sdk, "package": package, "rows": rows, "median_s": pct(vals, 50),
                "max_s": max(vals) if vals else None}
    finally:
        scene.close()
        srv.stop()
        wd.remove()
