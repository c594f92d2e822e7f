"""Section 7: expensive queries against deadlines.

An application ``hist`` is given K executors with long event streams (L
events each, written straight to the store before Relay starts). Then, on one
``relay serve``, twice: N executors and one survivor of an application connect
(grace 5 s) and the N drop at once, as in section 3. The **baseline** phase
drops them with nothing else going on; the **loaded** phase drops them while
40 clients call ``GET .../apps/hist/executors?asOf=<now>`` in a loop (each call
folds every one of the K long streams to the end: the most expensive as-of
there is). Figures: DeclaredDead lateness (``at`` - deadline) in both phases,
``/healthz`` latency polled every 20 ms (the event loop), and the as-of calls'
own latency and count.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx

from bench.common import Fleet, StoreReader, Workdir, fleets_call, log, past_settle, relay_server, split, wait_until
from bench.s3_detection import audit, stats_ms, ts

HIST = "hist"
CALLERS = 40
GRACE = 5


def build_streams(store: str, k: int, length: int) -> int:
    """K executors of app ``hist``, each stream ``length`` events long, one transaction per round.
    Each ends Disconnected (its deadline a week away): an executor left HEALTHY by a Relay that is
    gone is an orphan to the ``relay serve`` started next, whose settle window then stays open
    until the first executor comes back and while the section's own connect (hundreds a second)
    goes on: until 2026-12-04 it held the baseline phase's deaths up to 10 s."""
    from relay_es.adapters.clock import system_clock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.aggregates import SettingsPatch
    from relay_es.aggregates.executor import executor_stream_id
    from relay_es.engine.executor_commands import ExecutorInfo
    from relay_es.engine.service import Relay

    relay = Relay(event_store_env(parse_database_url(store)), clock=system_clock())
    try:
        relay.register_app("local", HIST)
        relay.update_app("local", HIST, SettingsPatch(executor_timeout=timedelta(days=7)))  # nobody dies here
        ids = [f"hist-{i:03d}" for i in range(k)]
        infos = {x: ExecutorInfo(executor_id=x, application_version="v1", hostname="h", language="python",
                                 dbos_version="3.2.0") for x in ids}
        conn = {x: uuid.uuid4().hex for x in ids}
        relay.execute([relay.op_connected("local", HIST, infos[x], connection_id=conn[x], owner="bench") for x in ids])
        events = 1

        def disconnect() -> None:
            relay.execute([relay.op_disconnected(executor_stream_id("local", HIST, x), connection_id=conn[x],
                                                 reason="socket_closed") for x in ids])

        while events + 3 <= length:
            disconnect()
            conn = {x: uuid.uuid4().hex for x in ids}
            relay.execute([relay.op_connected("local", HIST, infos[x], connection_id=conn[x], owner="bench")
                           for x in ids])
            events += 2
        disconnect()
        return events + 1
    finally:
        relay.close()


class Callers:
    """40 threads calling the as-of query in a loop until stopped."""

    def __init__(self, base: str, n: int) -> None:
        self.base = base
        self.stop_flag = threading.Event()
        self.lat: list[float] = []
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(n)]

    def loop(self) -> None:
        with httpx.Client(timeout=120) as c:
            while not self.stop_flag.is_set():
                at = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
                t0 = time.monotonic()
                try:
                    r = c.get(f"{self.base}/v2/orgs/local/apps/{HIST}/executors", params={"asOf": at})
                    status = str(r.status_code)
                except httpx.HTTPError as e:
                    status = type(e).__name__
                took = time.monotonic() - t0
                with self.lock:
                    if status == "200":
                        self.lat.append(took)
                    else:
                        self.errors[status] = self.errors.get(status, 0) + 1

    def start(self) -> "Callers":
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> dict[str, Any]:
        self.stop_flag.set()
        for t in self.threads:
            t.join(130)
        return {"calls": len(self.lat), "errors": self.errors, "latency_ms": stats_ms(self.lat)}


class Healthz(threading.Thread):
    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.halt = threading.Event()
        self.lat: list[float] = []

    def run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self.halt.is_set():
                t0 = time.monotonic()
                try:
                    c.get(self.base + "/healthz")
                    self.lat.append(time.monotonic() - t0)
                except httpx.HTTPError:
                    pass
                self.halt.wait(0.02)

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        self.join(35)
        return stats_ms(self.lat)


def phase(srv: Any, store: str, app: str, n: int, loaded: bool) -> dict[str, Any]:
    assert httpx.put(srv.http + f"/v2/orgs/local/apps/{app}", timeout=30).status_code == 204
    r = httpx.patch(srv.http + f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": GRACE}, timeout=30)
    assert r.status_code == 204, r.text
    survivor = Fleet(f"s7-{app}-survivor")
    fleets = [Fleet(f"s7-{app}-{i}") for i in range(2)]
    reader = StoreReader(store)
    try:
        survivor.call("connect", url=srv.ws, app=app, n=1, exist=True)
        answers = fleets_call(fleets, "connect", [{"n": k} for k in split(n, 2)], url=srv.ws, app=app,
                              open_timeout=120, timeout=600)
        registered = sum(a["registered"] for a in answers)
        wait_until(lambda: reader.count_status(app, "HEALTHY") >= registered + 1, timeout=120, interval=0.2)
        past_settle(srv)
        health = Healthz(srv.http)
        health.start()
        callers = Callers(srv.http, CALLERS).start() if loaded else None
        time.sleep(2.0 if loaded else 0.0)  # the queries are running before anything is due
        t_drop = time.time()
        fleets_call(fleets, "abort")
        done = wait_until(lambda: reader.count_status(app, "DELETED") >= registered, timeout=GRACE + 180,
                          interval=0.2)
        t_done = time.time()
        queries = callers.stop() if callers is not None else None
        healthz = health.stop()
        late = []
        by: dict[str, dict[str, Any]] = {}
        for e in audit(srv.http, app):
            if e["executorId"]:
                by.setdefault(e["executorId"], {}).setdefault(e["action"], e)
        for acts in by.values():
            d, dead = acts.get("executor.disconnected"), acts.get("executor.declared_dead")
            if d is not None and dead is not None:
                late.append(ts(dead["at"]) - ts(d["detail"]["deadline"]))
        out = {"loaded": loaded, "n": n, "registered": registered, "all_recovered": bool(done),
               "drop_to_all_deleted_s": t_done - t_drop, "lateness_ms": stats_ms(late), "healthz_ms": healthz,
               "queries": queries}
        log(f"s7 {app}: lateness p99 {out['lateness_ms']['p99']} ms, healthz p99 {healthz['p99']} ms"
            + (f", {queries['calls']} as-of calls p50 {queries['latency_ms']['p50']} ms" if queries else ""))
        return out
    finally:
        reader.close()
        for f in fleets:
            f.close()
        survivor.close()


def one_store(ctx: Any, kind: str, n: int, k: int, length: int) -> dict[str, Any]:
    wd = Workdir.make(f"s7-{kind}")
    store = f"sqlite:///{wd.path}/relay.db" if kind == "sqlite" else ctx.pg.create_db("s7")
    srv = None
    try:
        t0 = time.monotonic()
        events = build_streams(store, k, length)
        log(f"s7 {kind}: {k} streams of {events} events written in {time.monotonic() - t0:.0f}s")
        srv = relay_server(wd.path, store)
        t1 = time.monotonic()
        r = httpx.get(srv.http + f"/v2/orgs/local/apps/{HIST}/executors",
                      params={"asOf": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")}, timeout=300)
        one_call = time.monotonic() - t1
        assert r.status_code == 200 and len(r.json()) == k, r.text[:300]
        base = phase(srv, store, "s7-base", n, loaded=False)
        loaded = phase(srv, store, "s7-load", n, loaded=True)
        return {"store": kind, "streams": k, "events_per_stream": events, "one_call_alone_ms": 1000 * one_call,
                "baseline": base, "loaded": loaded}
    finally:
        if srv is not None:
            srv.kill()
        wd.remove()
        if kind == "postgres":  # a database left in the cluster is vacuumed beside the runs after it
            ctx.pg.drop_db(store)


def run(ctx: Any) -> dict[str, Any]:
    n = ctx.n(quick=100, full=500)
    k = ctx.n(quick=10, full=40)
    length = ctx.n(quick=300, full=2000)
    return {"n": n, "callers": CALLERS, "grace_s": GRACE,
            "stores": [one_store(ctx, kind, n, k, length) for kind in ctx.stores]}
