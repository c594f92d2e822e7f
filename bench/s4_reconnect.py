"""Section 4: reconnect storm.

N simulated executors that retry every second (like the SDK) are connected
and HEALTHY. Relay is SIGKILLed and started again on the same port and store.
Measured: the time until every executor is HEALTHY again *on the new
instance* (read model rows with the new instance as owner), from the kill and
from the restart; and, after the settle window plus the grace plus a margin,
the false deaths: DeclaredDead recorded for executors that were alive all
along (every one of them is), and how many got a Disconnected
(``relay_restarted``) because they were not back by the end of the settle window; beside
them, the handshakes the kernel dropped with the accept queue full (``ListenOverflows``),
from the kill until all are HEALTHY.

Baseline (same run, same clients): a bare ``websockets`` server without
compression holding the same N retrying clients is SIGKILLed and started again
on its port; the time from the restart until every client is connected again.
The goal compares Relay's restart-to-all-HEALTHY with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.common import (BENCH_LIMITS, CpuMeter, Fleet, StoreReader, ThreadMeter, Workdir, fleets_call, largest_fleet,
                          listen_overflows, log, pct, relay_server, split, wait_until)
from bench.s3_detection import audit

APP = "storm"


def one_store(ctx: Any, kind: str, n: int, grace: int, settle: float,
              on_restart: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``on_restart``: called with the new server as soon as it is spawned (``bench.profile``)."""
    wd = Workdir.make(f"s4-{kind}")
    store = f"sqlite:///{wd.path}/relay.db" if kind == "sqlite" else ctx.pg.create_db("s4")
    fleets: list[Fleet] = []
    srv = srv2 = None
    env = {"RELAY_RESTART_SETTLE_SECS": f"{settle:g}"}
    try:
        srv = relay_server(wd.path, store, env=env)
        assert httpx.put(srv.http + f"/v2/orgs/local/apps/{APP}", timeout=10).status_code == 204
        r = httpx.patch(srv.http + f"/v2/orgs/local/apps/{APP}", json={"executorTimeoutSecs": grace}, timeout=10)
        assert r.status_code == 204, r.text
        fleets = [Fleet(f"s4-{i}") for i in range(2)]
        first = fleets_call(fleets, "connect", [{"n": k} for k in split(n, 2)], url=srv.ws, app=APP, retry=True,
                            open_timeout=60, timeout=600)
        registered = sum(a["registered"] for a in first)
        reader = StoreReader(store)
        old_owner = srv.get("/healthz").json()["instance"]
        wait_until(lambda: reader.count_status(APP, "HEALTHY", old_owner) >= n, timeout=300, interval=0.2)
        healthy_before = reader.count_status(APP, "HEALTHY", old_owner)
        seq_before = max((e["seq"] for e in audit(srv.http, APP)), default=0)
        time.sleep(1.0)
        fleets_call(fleets, "mark")
        t_kill_wall = time.time()
        overflows0 = listen_overflows()
        t_kill = time.monotonic()
        srv.kill()
        t_restart = time.monotonic()
        from tests.server import RelayServer

        srv2 = RelayServer(wd.path, port=srv.port, args=["--database-url", store, "--log-level", "WARNING", *BENCH_LIMITS], env=env)
        srv2.start(wait=False)
        assert srv2.proc is not None
        if on_restart is not None:
            on_restart(srv2)
        meter = CpuMeter({"server": srv2.proc.pid, **{f"clients{i}": f.pid for i, f in enumerate(fleets)}}).start()
        threads = None
        srv2.wait_healthy(timeout=60)
        t_up = time.monotonic()
        owner = srv2.get("/healthz").json()["instance"]
        threads = ThreadMeter(srv2.proc.pid).start()
        samples = []

        def all_back() -> bool:
            c = reader.count_status(APP, "HEALTHY", owner)
            # beside it, the log's head and the read models' position: where the HEALTHY rows wait
            try:
                head = reader.head()
            except Exception:  # a sample's beside figure, not worth the run
                reader.reset()
                head = -1
            samples.append((time.monotonic() - t_kill, c, head, reader.projected()))
            return c >= n

        wait_until(all_back, timeout=settle + grace + 120, interval=0.1)
        t_all = time.monotonic() if samples and samples[-1][1] >= n else None
        overflows1 = listen_overflows()
        cpu = meter.stop()
        per_thread = threads.stop() if threads is not None else None
        back = samples[-1][1] if samples else 0
        clients = fleets_call(fleets, "wait", timeout=5)
        reg = sorted(t - t_kill_wall for a in fleets_call(fleets, "regtimes") for t in a["times"])
        # past the settle window and a whole grace after it, plus a margin: any death would be recorded by now
        remaining = (t_up + settle + grace + 3.0) - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        entries = [e for e in audit(srv2.http, APP, after=seq_before)]
        deaths = [e for e in entries if e["action"] == "executor.declared_dead"]
        restarted = [e for e in entries if e["action"] == "executor.disconnected"
                     and e["detail"].get("reason") == "relay_restarted"]
        reconnected = [e for e in entries if e["action"] in ("executor.reconnected", "executor.connected")]
        healthy_end = reader.count_status(APP, "HEALTHY", owner)
        reader.close()
        out = {
            "store": kind, "n": n, "registered": registered, "healthy_before": healthy_before,
            "grace_s": grace, "settle_s": settle,
            "restart_to_healthz_s": t_up - t_restart,
            "kill_to_all_healthy_s": (t_all - t_kill) if t_all else None,
            "restart_to_all_healthy_s": (t_all - t_restart) if t_all else None,
            "healthy_at_end_of_wait": back, "healthy_after_grace": healthy_end,
            "client_registrations_after_kill": sum(a["registered"] for a in clients),
            # when each client had its executor_info answered again (Relay accepted and registered it), s after kill
            "client_registered_after_kill_s": {"p50": pct(reg, 50), "p99": pct(reg, 99), "max": reg[-1] if reg else None},
            "server_cores_until_all_healthy": cpu["server"]["cores"],
            "server_threads_after_healthz": per_thread,
            "clients_cores_until_all_healthy": sum(v["cores"] for k, v in cpu.items() if k.startswith("clients")),
            "false_deaths": len(deaths), "relay_restarted_disconnects": len(restarted),
            "reconnect_events": len(reconnected),
            # handshakes the kernel dropped, the accept queue full, from the kill until all were HEALTHY (ADR 2)
            "listen_overflows": None if overflows0 is None or overflows1 is None else overflows1 - overflows0,
            # (s after the kill, HEALTHY rows of the new instance, the log's head, the read models' position)
            "progress": [(round(t, 2), c, h, p) for t, c, h, p in samples[:: max(1, len(samples) // 60)]],
        }
        log(f"s4 {kind}: all {n} HEALTHY {out['kill_to_all_healthy_s']}s after the kill "
            f"(healthz after {out['restart_to_healthz_s']:.2f}s); false deaths {len(deaths)}, "
            f"relay_restarted {len(restarted)}, accept-queue overflows {out['listen_overflows']}")
        return out
    finally:
        for f in fleets:
            f.close()
        for s in (srv, srv2):
            if s is not None:
                s.kill()
        wd.remove()
        if kind == "postgres":  # a database left in the cluster is vacuumed beside the runs after it
            ctx.pg.drop_db(store)


def bare_baseline(n: int) -> dict[str, Any]:
    """The same N retrying clients against a bare ``websockets`` server (no
    compression) that is SIGKILLed and started again on its port: seconds from
    the restart until every client is connected again."""
    from bench.common import stop_proc
    from bench.s1_connections import start_bare
    from tests.server import free_port

    port = free_port()
    proc = start_bare(port, "ws-nodeflate")
    fleets = [Fleet(f"s4-bare-{i}") for i in range(2)]
    try:
        first = fleets_call(fleets, "connect", [{"n": k} for k in split(n, 2)], url=f"ws://127.0.0.1:{port}", app=APP,
                            retry=True, hold=True, open_timeout=60, timeout=600)
        time.sleep(1.0)
        fleets_call(fleets, "mark")
        overflows0 = listen_overflows()
        proc.kill()
        proc.wait(10)
        t_restart = time.time()
        proc = start_bare(port, "ws-nodeflate")
        answers = fleets_call(fleets, "wait", timeout=300)
        overflows1 = listen_overflows()
        back = sum(a["registered"] for a in answers)
        last = max((a["t_last"] for a in answers if a["t_last"]), default=None)
        out = {"n": n, "connected_first": sum(a["registered"] for a in first), "reconnected": back,
               "restart_to_all_connected_s": (last - t_restart) if last and back >= n else None,
               "listen_overflows": None if overflows0 is None or overflows1 is None else overflows1 - overflows0}
        log(f"s4 bare: {back}/{n} reconnected {out['restart_to_all_connected_s']}s after the restart, "
            f"accept-queue overflows {out['listen_overflows']}")
        return out
    finally:
        for f in fleets:
            f.close()
        stop_proc(proc)


def run(ctx: Any) -> dict[str, Any]:
    n = ctx.n(quick=400, full=largest_fleet(20_000))
    stores = ctx.stores if not ctx.quick else ctx.stores[:1]
    grace, settle = (5, 2.0) if ctx.quick else (10, 5.0)
    bare = bare_baseline(n)
    rows = [one_store(ctx, kind, n, grace=grace, settle=settle) for kind in stores]
    for row in rows:
        row["bare_accept_s"] = bare["restart_to_all_connected_s"]
    return {"n": n, "bare": bare, "stores": rows}
