"""Section 5: replay.

Events are generated in-process with ``relay_es.engine.service.Relay`` and batched
saves (many executors per transaction): executors connect, disconnect and
reconnect many times, and finally die and are recovered and deleted; 1,000 more are left
DISCONNECTED with a deadline an hour ahead. Then ``relay projections rebuild --database-url ...``
is timed as a process, and compared with a raw scan of the same table in the same run: every row
in notification order, ``json.loads`` of the state column (Postgres: rows in binary, as Relay reads
them, the fastest way a client takes them). Before the scan and the rebuild are timed, a Postgres
store is vacuumed and analysed, as autovacuum leaves a store long before anyone rebuilds it:
otherwise autovacuum's pass over the million new rows, which it starts within a minute or so of
their insert, runs beside the measurements (on 2026-12-05 a rebuild beside it took 17.9-18.4 s,
the same rebuild after it 11.0-11.8 s). A profile of the rebuild's first batches says where its
time goes. Start-up: ``relay serve`` on the store, timed to ``/healthz``
and to the process manager's timers armed, once before the rebuild (no read model has folded
anything: the server fills them first, in processes, as a rebuild does) and three times after it
(a restart).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import re
import sqlite3
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.common import PY, ROOT, StoreReader, Workdir, disconnected_executors, log, relay_server, scrape
from bench.s2_throughput import profile_summary

APPS = 10
CYCLES = 47  # per executor: Registered, Connected, 47 x (Disconnected, Connected), then 5 for the death = 101 events
PER_EXECUTOR = 2 + 2 * CYCLES + 5
SAVE_GROUP = 500  # aggregates per save (one transaction)
STARTS = 3  # restarts timed on the store once its read models are current


def generate(store_url: str, events: int, pending_ahead: timedelta = timedelta(hours=1)) -> dict[str, Any]:
    """``events`` (about) in the store, as the section's docstring says; the :data:`PENDING` executors
    left Disconnected have their deadlines ``pending_ahead`` of the end."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.aggregates.executor import Executor
    from relay_es.engine.service import Relay

    relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
    n_exec = max(1, events // PER_EXECUTOR)
    t = datetime.now(timezone.utc) - timedelta(days=2)
    step = timedelta(microseconds=500)
    t0 = time.perf_counter()
    saves = 0
    try:
        for j in range(APPS):
            relay.register_app("local", f"replay{j}")
        for start in range(0, n_exec, SAVE_GROUP):
            group = []
            for i in range(start, min(n_exec, start + SAVE_GROUP)):
                t += step
                ex = Executor(org="local", app=f"replay{i % APPS}", executor_id=str(uuid.uuid4()), timestamp=t)
                ex.connect(connection_id=uuid.uuid4().hex, owner="bench", app_version="v1", hostname="h",
                           language="python", dbos_version="3.2.0", executor_metadata={"bench": True}, at=t)
                group.append(ex)
            relay.save(*group)
            saves += 1
            for c in range(CYCLES):
                for ex in group:
                    t += step
                    ex.disconnect(connection_id=ex.connection_id, reason="socket_closed", deadline=t + timedelta(seconds=60),
                                  at=t)
                    t += step
                    ex.connect(connection_id=uuid.uuid4().hex, owner="bench", app_version="v1", hostname="h",
                               language="python", dbos_version="3.2.0", executor_metadata={"bench": True}, at=t)
                relay.save(*group)
                saves += 1
            for ex in group:
                t += step
                ex.disconnect(connection_id=ex.connection_id, reason="socket_closed", deadline=t, at=t)
                ex.declare_dead(now=t)
                rid = str(uuid.uuid4())
                ex.dispatch_recovery(request_id=rid, target_executor_id="peer", at=t)
                ex.confirm_recovery(request_id=rid, pending_found=True, at=t)
                ex.delete(at=t)
            relay.save(*group)
            saves += 1
        leave_pending(relay, PENDING, pending_ahead)
        saves += 1
        took = time.perf_counter() - t0
        head = relay.recorder.max_notification_id() or 0
    finally:
        relay.close()
    return {"events": head, "executors": n_exec, "saves": saves, "seconds": took, "per_s": head / took}


PENDING = 1_000  # executors left DISCONNECTED at the end, their deadlines an hour ahead: timers to arm at start-up


def leave_pending(relay: Any, n: int, ahead: timedelta = timedelta(hours=1)) -> None:
    """``n`` executors Registered, Connected, Disconnected with a deadline ``ahead`` of now."""
    now = datetime.now(timezone.utc)
    relay.save(*disconnected_executors(n, "replay0", deadline=now + ahead, at=now, metadata={"bench": True}))


def startup(store_url: str) -> dict[str, Any]:
    """``relay serve`` started on the store: seconds from the spawn to ``/healthz`` answering 200,
    and to the process manager's timers armed (``relay_process_manager_armed_timestamp_seconds``,
    which it sets once it has read the executors table after the read models caught up)."""
    import httpx

    from tests.server import TLS  # one TLS context: a client per call otherwise costs 44 ms of CPU to make

    wd = Workdir.make("s5-start")
    t0 = time.time()
    srv = relay_server(wd.path, store_url, wait=False)
    try:
        healthy = armed = None
        deadline = t0 + 1800
        while time.time() < deadline and armed is None:
            try:
                if healthy is None:
                    if httpx.get(srv.http + "/healthz", timeout=5, verify=TLS).status_code == 200:
                        healthy = time.time() - t0
                    else:
                        time.sleep(0.02)
                        continue
                at = [x.value for x in scrape(srv.http, verify=TLS).get(
                    "relay_process_manager_armed_timestamp_seconds", ())]
                if at and at[0] > 0:
                    armed = at[0] - t0
            except httpx.HTTPError:
                pass
            # The gauge holds the instant itself, so asking twice a second loses nothing; asking every
            # 20 ms took a third of a core or more (this process's client and the server's scrape) from
            # the fill being timed, on a 2-core machine: 37.0 s against 30.1 s to armed (Postgres).
            time.sleep(0.02 if healthy is None else 0.5)
        return {"healthz_s": healthy, "armed_s": armed}
    finally:
        srv.stop()
        wd.remove()


def rebuild(store_url: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    p = subprocess.run([PY, "-m", "relay_es", "projections", "rebuild", "--database-url", store_url], cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    took = time.perf_counter() - t0
    m = re.search(r"from (\d+) events", p.stdout)
    n = int(m.group(1)) if m else None
    return {"seconds": took, "events": n, "per_s": (n / took) if n else None, "returncode": p.returncode,
            "output": (p.stdout + p.stderr)[-2000:]}


def startup_cost() -> float:
    """How long starting a process that imports what the rebuild imports takes: the start-up
    included in the rebuild's time."""
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", "import relay_es.composition.cli, relay_es.adapters.readmodels.rebuild"], cwd=ROOT,
                   capture_output=True, timeout=120)
    return time.perf_counter() - t0


def vacuum(store_url: str) -> float:
    """``VACUUM (ANALYZE)`` of the whole database: what autovacuum does to freshly inserted rows, done
    before the measurements instead of beside them. Returns the seconds it took."""
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(store_url, autocommit=True) as c:
        c.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - t0


def raw_scan(store_url: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    n = 0
    if store_url.startswith("postgres"):
        import psycopg

        with psycopg.connect(store_url) as c:
            with c.cursor(name="bench_scan", binary=True) as cur:  # rows in binary, as EventLog.read takes its own
                cur.itersize = 10000
                cur.execute("SELECT notification_id, originator_id, originator_version, topic, state FROM relay_events "
                            "ORDER BY notification_id")
                for row in cur:
                    json.loads(row[4])
                    n += 1
    else:
        reader = StoreReader(store_url)
        table = reader.events_table()
        reader.close()
        conn = sqlite3.connect(store_url[len("sqlite:///"):])
        cur = conn.execute(f"SELECT rowid, originator_id, originator_version, topic, state FROM {table} ORDER BY rowid")
        while True:
            rows = cur.fetchmany(10000)
            if not rows:
                break
            for row in rows:
                json.loads(row[4])
            n += len(rows)
        conn.close()
    took = time.perf_counter() - t0
    return {"events": n, "seconds": took, "per_s": n / took}


def profile_rebuild(store_url: str, batches: int) -> dict[str, Any]:
    """The rebuild's first ``batches`` batches in-process, under cProfile."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
    from relay_es.projections import all_projections
    from relay_es.projections.runner import ProjectionRunner
    from relay_es.engine.service import Relay

    cfg = parse_database_url(store_url)
    relay = Relay(event_store_env(cfg), clock=SystemClock())
    db = open_database(cfg)
    try:
        runner = ProjectionRunner(relay, db, all_projections())
        runner.reset()  # what rebuild() does first
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        n = 0
        for _ in range(batches):
            got = runner.run_batch()
            if not got:
                break
            n += got
        prof.disable()
        took = time.perf_counter() - t0
        stats = pstats.Stats(prof, stream=io.StringIO())
        return {"events": n, "seconds_profiled": took, "top": profile_summary(stats, took, limit=18)}
    finally:
        db.close()
        relay.close()


def one_store(ctx: Any, kind: str, events: int, profile_batches: int) -> dict[str, Any]:
    wd = Workdir.make(f"s5-{kind}")
    store = f"sqlite:///{wd.path}/relay.db" if kind == "sqlite" else ctx.pg.create_db("s5")
    try:
        gen = generate(store, events)
        log(f"s5 {kind}: generated {gen['events']:,} events in {gen['seconds']:.1f}s ({gen['per_s']:,.0f}/s, "
            f"{gen['saves']} saves)")
        if kind == "postgres":
            gen["vacuum_s"] = vacuum(store)
            log(f"s5 {kind}: vacuumed and analysed in {gen['vacuum_s']:.1f}s")
        raw = raw_scan(store)
        log(f"s5 {kind}: raw scan {raw['per_s']:,.0f} events/s")
        cold = startup(store)  # no read model has folded anything yet: the server fills them first
        log(f"s5 {kind}: start-up, read models empty: /healthz {cold['healthz_s']} s, armed {cold['armed_s']} s")
        reb = rebuild(store)
        log(f"s5 {kind}: rebuild {reb['events']} events in {reb['seconds']:.1f}s ({(reb['per_s'] or 0):,.0f}/s)")
        warm = [startup(store) for _ in range(STARTS)]  # the read models current: a restart
        log(f"s5 {kind}: start-up, read models current: {warm}")
        raw2 = raw_scan(store)  # again after, to see the cache's part
        prof = profile_rebuild(store, profile_batches)
        return {"store": kind, "generate": gen, "raw": raw, "raw_again": raw2, "rebuild": reb,
                "startup_s": startup_cost(), "profile": prof, "start_empty": cold, "start_current": warm,
                "pending": PENDING}
    finally:
        wd.remove()
        if kind == "postgres":  # a million events left in the cluster are vacuumed beside the runs after it
            ctx.pg.drop_db(store)


def run(ctx: Any) -> dict[str, Any]:
    events = ctx.n(quick=30_000, full=1_000_000)
    stores = ["postgres"] + [s for s in ctx.stores if s != "postgres"] if "postgres" in ctx.stores else ctx.stores
    return {"events": events, "stores": [one_store(ctx, kind, events, 10 if ctx.quick else 30) for kind in stores]}
