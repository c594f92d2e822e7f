"""Section 2: transition throughput under connect/disconnect storms.

Relay runs as a process on each store; client fleets (separate processes)
connect N executors at once, drop them all at once (no close frame), and
reconnect them all at once. A poller samples the event log's head
(``max(notification_id)``) and the projections' position (``min(position)``
of ``relay_tracking``) every 20 ms: the append and projection rates are the
events of a storm over the time the counter took to move from its value
before the storm to its value after.

Baselines, in the same run and on the same store (Postgres: the same database; SQLite: a file of its own
beside Relay's, with Relay's ``synchronous``): raw single-row inserts
with one commit each (psycopg autocommit into a table shaped like
``relay_events``; sqlite3 ``BEGIN; INSERT; COMMIT`` into a table shaped like
the SQLite recorder's, same pragmas). A diagnostic measures Relay's own
commands in-process, one save at a time, with a profile.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import (CpuMeter, ThreadMeter, Fleet, Poller, StoreReader, Workdir, active_rate, fleets_call,
                          listen_overflows, log, relay_server, split)

TOPIC = "relay_es.aggregates.executor:Executor.Connected"


def settle(reader: StoreReader, quiet: float = 1.0, timeout: float = 300, target: int | None = None) -> int:
    """Waits until the head has reached ``target`` (if given) and stopped
    moving for ``quiet`` seconds, and every projection has caught up."""
    deadline = time.monotonic() + timeout
    last = -1
    since = time.monotonic()
    while time.monotonic() < deadline:
        head = reader.head()
        if head != last:
            last, since = head, time.monotonic()
        elif (time.monotonic() - since >= quiet and (p := reader.projected()) is not None and p >= head
              and (target is None or head >= target or time.monotonic() - since >= 10 * quiet)):
            return head
        time.sleep(0.05)
    return last


def storm_plan(fleets: list[Fleet], ws_url: str, n: int) -> list[tuple[str, Callable[[], Any], int]]:
    """The three storms, in order, of ``n`` executors of application ``storm`` split over ``fleets``:
    (name, what starts it, events each executor's transition records). ``bench.profile throughput``
    runs the same ones."""
    return [
        ("connect (new executors)", lambda: fleets_call(
            fleets, "connect", [{"n": k} for k in split(n, len(fleets))], url=ws_url, app="storm",
            open_timeout=120, timeout=600), 2),
        ("drop all (no close frame)", lambda: fleets_call(fleets, "abort"), 1),
        ("reconnect within grace", lambda: fleets_call(fleets, "reconnect", timeout=600, open_timeout=120), 1),
    ]


def storm(name: str, fn: Any, poller: Poller, reader: StoreReader, pids: dict[str, int],
          events_per_client: int) -> dict[str, Any]:
    """``events_per_client``: how many events each registered client's transition records."""
    head0 = reader.head()
    proj0 = reader.projected()
    for _ in range(200):  # None while it cannot be read (a busy store)
        if proj0 is not None:
            break
        time.sleep(0.05)
        proj0 = reader.projected()
    assert proj0 is not None, "the read models' position could not be read for 10 s"
    meter = CpuMeter(pids).start()
    threads = ThreadMeter(pids["server"]).start()
    overflows0 = listen_overflows()
    t0 = time.monotonic()
    info = fn()
    clients = sum(a.get("registered", 0) for a in info) if isinstance(info, list) else 0
    if name.startswith("drop"):
        clients = sum(a.get("open_before", 0) for a in info)
    head1 = settle(reader, target=head0 + events_per_client * clients)
    t_done = time.monotonic()
    overflows1 = listen_overflows()
    cpu = meter.stop()
    per_thread = threads.stop()
    offered = None
    if isinstance(info, list) and all(a.get("t_last") for a in info) and clients:
        span = max(a["t_last"] for a in info) - min(a["t0"] for a in info)
        offered = clients / span if span > 0 else None
    samples = [s for s in poller.samples if s[0] >= t0 - 0.05]
    appended = active_rate([(t, h) for t, h, _ in samples], head0, head1)
    projected = active_rate([(t, p) for t, _, p in samples], proj0, head1)
    # From the storm's start (the command to the clients) to the last event appended: what a user sees,
    # bounded by how fast the event loop takes the sockets in or notices them gone.
    from_start = ((head1 - head0) / (appended["t_end"] - t0)) if appended["t_end"] and appended["t_end"] > t0 else None
    out = {
        "storm": name, "events": head1 - head0, "append": appended, "project": projected,
        "append_from_start_per_s": from_start,
        "storm_to_projected_s": (projected["t_end"] - t0) if projected["t_end"] else t_done - t0,
        "server_cores": cpu.get("server", {}).get("cores"),
        "server_threads": per_thread,
        # connect storms: executors whose executor_info was answered per second (the transitions offered)
        "registrations_per_s": offered,
        "clients_cores": sum(v["cores"] for k, v in cpu.items() if k.startswith("clients")),
        # handshakes the kernel dropped, the accept queue being full (every listener of the machine)
        "listen_overflows": None if overflows0 is None or overflows1 is None else overflows1 - overflows0,
        "client": info,
    }
    for k in ("append", "project"):
        out[k].pop("t_start", None)
        out[k].pop("t_end", None)
    log(f"s2 {name}: {out['events']} events, append {fmt(appended['per_s'])}/s, project {fmt(projected['per_s'])}/s, "
        f"server {out['server_cores'] or 0:.2f} cores, accept-queue overflows {out['listen_overflows']}")
    return out


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def state_sample(reader: StoreReader) -> tuple[int, str]:
    t = reader.events_table()
    rows = reader.query(f"SELECT topic, state FROM {t} ORDER BY {'notification_id' if reader.pg else 'rowid'} DESC LIMIT 2000")
    sizes = [len(bytes(r[1])) for r in rows]
    return (int(sum(sizes) / len(sizes)) if sizes else 400), (rows[0][0] if rows else TOPIC)


def raw_postgres(url: str, rows: int, state_size: int, topic: str) -> dict[str, Any]:
    import psycopg

    state = b"x" * state_size
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS bench_raw_events")
        c.execute("CREATE TABLE bench_raw_events (originator_id uuid NOT NULL, originator_version bigint NOT NULL, "
                  "topic text, state bytea, notification_id bigserial, PRIMARY KEY (originator_id, originator_version))")
        c.execute("CREATE UNIQUE INDEX bench_raw_events_nid ON bench_raw_events (notification_id ASC)")
        sql = "INSERT INTO bench_raw_events (originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s)"
        for _ in range(200):  # warm-up
            c.execute(sql, (uuid.uuid4(), 1, topic, state), prepare=True)
        ids = [uuid.uuid4() for _ in range(rows)]
        t0 = time.perf_counter()
        for i in ids:
            c.execute(sql, (i, 1, topic, state), prepare=True)
        took = time.perf_counter() - t0
        c.execute("DROP TABLE bench_raw_events")
    return {"rows": rows, "seconds": took, "per_s": rows / took, "state_bytes": state_size}


def raw_sqlite(path: str, rows: int, state_size: int, topic: str, synchronous: int) -> dict[str, Any]:
    state = b"x" * state_size
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_raw_events (originator_id TEXT, originator_version INTEGER, topic TEXT, "
                 "state BLOB, PRIMARY KEY (originator_id, originator_version))")
    sql = "INSERT INTO bench_raw_events (originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?)"
    for _ in range(200):
        conn.execute("BEGIN")
        conn.execute(sql, (uuid.uuid4().hex, 1, topic, state))
        conn.execute("COMMIT")
    ids = [uuid.uuid4().hex for _ in range(rows)]
    t0 = time.perf_counter()
    for i in ids:
        conn.execute("BEGIN")
        conn.execute(sql, (i, 1, topic, state))
        conn.execute("COMMIT")
    took = time.perf_counter() - t0
    conn.close()
    return {"rows": rows, "seconds": took, "per_s": rows / took, "state_bytes": state_size, "synchronous": synchronous}


def single_saves(store_url: str, n: int) -> dict[str, Any]:
    """Relay's commands in-process, one executor at a time: connect (2 events,
    one save), then disconnect (1 event, one save). With a profile."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.aggregates.executor import executor_stream_id
    from relay_es.engine.executor_commands import ExecutorInfo
    from relay_es.engine.service import Relay

    relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
    try:
        infos = [ExecutorInfo(executor_id=str(uuid.uuid4()), application_version="v1", hostname="h", language="python",
                              dbos_version="3.2.0", executor_metadata={"bench": True}) for _ in range(n)]
        conns = [uuid.uuid4().hex for _ in range(n)]
        relay.register_app("local", "single")
        for i in range(50):  # warm-up
            relay.executor_connected("local", "single", ExecutorInfo(executor_id=f"w{i}", application_version="v1"),
                                     connection_id=f"w{i}", owner="bench")
        t0 = time.perf_counter()
        sids = []
        for info, cid in zip(infos, conns):
            relay.executor_connected("local", "single", info, connection_id=cid, owner="bench")
            sids.append(executor_stream_id("local", "single", info.executor_id))
        t1 = time.perf_counter()
        for sid, cid in zip(sids, conns):
            relay.executor_disconnected(sid, connection_id=cid, reason="socket_closed")
        t2 = time.perf_counter()
        # the same again under cProfile (slower; for the shares only)
        k = max(50, n // 4)
        pinfos = [ExecutorInfo(executor_id=str(uuid.uuid4()), application_version="v1") for _ in range(k)]
        prof = cProfile.Profile()
        p0 = time.perf_counter()
        prof.enable()
        for info in pinfos:
            relay.executor_connected("local", "single", info, connection_id="p" + info.executor_id, owner="bench")
            relay.executor_disconnected(executor_stream_id("local", "single", info.executor_id),
                                        connection_id="p" + info.executor_id, reason="socket_closed")
        prof.disable()
        stats = pstats.Stats(prof, stream=io.StringIO())
        top = profile_summary(stats, time.perf_counter() - p0)
        grouped = grouped_saves(relay, n)
        return {
            "grouped": grouped,
            "n": n,
            "connect_saves_per_s": n / (t1 - t0), "connect_events_per_s": 2 * n / (t1 - t0),
            "disconnect_saves_per_s": n / (t2 - t1), "disconnect_events_per_s": n / (t2 - t1),
            "ms_per_save": 1000 * (t2 - t0) / (2 * n),
            "profile": top,
        }
    finally:
        relay.close()


def grouped_saves(relay: Any, n: int, group: int = 100) -> dict[str, Any] | None:
    """If the service can run many commands in one transaction (``Relay.execute``
    with ``op_*`` factories), the same connect/disconnect cycle in groups."""
    from relay_es.aggregates.executor import executor_stream_id
    from relay_es.engine.executor_commands import ExecutorInfo

    if not (hasattr(relay, "execute") and hasattr(relay, "op_connected") and hasattr(relay, "op_disconnected")):
        return None
    try:
        infos = [ExecutorInfo(executor_id=str(uuid.uuid4()), application_version="v1", hostname="h", language="python",
                              dbos_version="3.2.0", executor_metadata={"bench": True}) for _ in range(n)]
        conns = [uuid.uuid4().hex for _ in range(n)]
        t0 = time.perf_counter()
        for i in range(0, n, group):
            relay.execute([relay.op_connected("local", "single", info, connection_id=cid, owner="bench")
                           for info, cid in zip(infos[i:i + group], conns[i:i + group])])
        t1 = time.perf_counter()
        sids = [executor_stream_id("local", "single", info.executor_id) for info in infos]
        for i in range(0, n, group):
            relay.execute([relay.op_disconnected(sid, connection_id=cid, reason="socket_closed")
                           for sid, cid in zip(sids[i:i + group], conns[i:i + group])])
        t2 = time.perf_counter()
    except Exception as e:  # the API is new and moving: report, don't fail the section
        return {"error": f"{type(e).__name__}: {e}"}
    return {"group": group, "n": n, "connect_events_per_s": 2 * n / (t1 - t0), "disconnect_events_per_s": n / (t2 - t1)}


def profile_summary(stats: pstats.Stats, total: float, limit: int = 14) -> list[dict[str, Any]]:
    """The functions with the most cumulative time, as shares of the total (profiled) time."""
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split("/work/main/")[-1]
        rows.append({"function": f"{short}:{line}({fn})", "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    prof_total = sum(r["tottime_s"] for r in rows) or total
    rows.sort(key=lambda r: -r["cumtime_s"])
    out = []
    for r in rows:
        if "{" in r["function"] or "<" in r["function"].split("(")[-1]:
            continue  # builtins and lambdas: listed through their callers
        r["cum_share"] = r["cumtime_s"] / prof_total
        r["self_share"] = r["tottime_s"] / prof_total
        out.append(r)
        if len(out) >= limit:
            break
    selfs = sorted(rows, key=lambda r: -r["tottime_s"])[:8]
    for r in selfs:
        r["self_share"] = r["tottime_s"] / prof_total
    return out + [{"self_top": True, **r} for r in selfs]


def one_store(ctx: Any, kind: str, n: int, raw_rows: int, single_n: int) -> dict[str, Any]:
    wd = Workdir.make(f"s2-{kind}")
    store = f"sqlite:///{wd.path}/relay.db" if kind == "sqlite" else ctx.pg.create_db("s2")
    fleets: list[Fleet] = []
    srv = None
    poller = None
    single_url = None
    try:
        srv = relay_server(wd.path, store)
        assert srv.get("/healthz").status_code == 200
        import httpx

        httpx.put(srv.http + "/v2/orgs/local/apps/storm", timeout=10)
        reader = StoreReader(store)
        fleets = [Fleet(f"s2-{i}") for i in range(2)]
        pids = {"server": srv.proc.pid, **{f"clients{i}": f.pid for i, f in enumerate(fleets)}}
        settle(reader)
        poller = Poller(store)
        poller.start()
        storms = [storm(name, fn, poller, reader, pids, per) for name, fn, per in storm_plan(fleets, srv.ws, n)]
        poller.stop()
        poller = None
        state_size, topic = state_sample(reader)
        reader.close()
        for f in fleets:
            f.close()
        fleets = []
        srv.kill()
        srv = None
        # baselines, same database / same directory, same run
        if kind == "postgres":
            raw = raw_postgres(store, raw_rows, state_size, topic)
        else:
            raw = raw_sqlite(str(wd.path / "raw.db"), raw_rows, state_size, topic, synchronous=sqlite_synchronous(store))
        log(f"s2 {kind}: raw single-row inserts {raw['per_s']:,.0f}/s")
        single_url = f"sqlite:///{wd.path}/single.db" if kind == "sqlite" else ctx.pg.create_db("s2single")
        single = single_saves(single_url, single_n)
        log(f"s2 {kind}: in-process single saves {single['connect_events_per_s']:,.0f} events/s (connect), "
            f"{single['disconnect_events_per_s']:,.0f} (disconnect)")
        return {"store": kind, "n": n, "storms": storms, "raw": raw, "single_saves": single}
    finally:
        if poller is not None:
            poller.stop()
        for f in fleets:
            f.close()
        if srv is not None:
            srv.kill()
        wd.remove()
        if kind == "postgres":  # a database left in the cluster is vacuumed beside the runs after it
            for url in (store, single_url):
                if url is not None:
                    ctx.pg.drop_db(url)


def sqlite_synchronous(store_url: str) -> int:
    """The synchronous pragma the eventsourcing SQLite recorder runs with."""
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.engine.service import Relay

    relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
    try:
        with relay.recorder.datastore.transaction(commit=False) as cur:  # type: ignore[attr-defined]
            cur.execute("PRAGMA synchronous")
            return int(cur.fetchone()[0])
    except Exception:
        return 2
    finally:
        relay.close()


def run(ctx: Any) -> dict[str, Any]:
    n = ctx.n(quick=400, full=5000)
    raw_rows = ctx.n(quick=2000, full=20000)
    single_n = ctx.n(quick=300, full=2000)
    return {"n": n, "stores": [one_store(ctx, kind, n, raw_rows, single_n) for kind in ctx.stores]}
