"""Section 8: the Conductor API through Relay -- latency, and liveness under its load.

Executors (``bench/api_executors.py``, a process of their own) speak the real protocol
and answer ``list_workflows`` from workflows made once, encoding each answer afresh and
timing themselves (request frame in to reply handed to the socket: their **own time**).

**Latency.** For each answer size (hundreds to thousands of workflows with inputs and
outputs, and one multi-MiB answer), R requests one after another, three ways in the same
run: the executor's own time; **direct**: the same request sent by this process to the
same kind of executor over a bare WebSocket (a ``websockets`` server standing in for
Relay: frame out, frame in, JSON decoded) -- the floor any control plane pays; **Relay**:
``GET /v2/orgs/local/apps/{app}/workflows?limit=N&loadInput=true&loadOutput=true`` over
HTTP (REST -> WebSocket -> executor -> back, mapped to Conductor's shape, JSON decoded by
the client). Relay's overhead is Relay minus direct.

**Liveness.** As in section 7, N executors and one survivor of an application connect
(grace 5 s) and the N drop at once; DeclaredDead lateness (``at`` - deadline) is measured
alone (**baseline**) and while 50 clients page through the workflows of several
applications (``limit=50``, offsets cycling, two executors per application) (**loaded**),
with ``/healthz`` polled every 20 ms.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx

from bench.common import (
    PY,
    ROOT,
    Fleet,
    StoreReader,
    Workdir,
    fleets_call,
    log,
    past_settle,
    relay_server,
    split,
    wait_until,
)
from bench.s3_detection import audit, stats_ms, ts
from bench.s7_queries import Healthz

if TYPE_CHECKING:
    from bench.report import Goal

PAGERS = 50
PAGE = 50
GRACE = 5
LOAD_WORKFLOWS = 1000
LOAD_FIELD_BYTES = 128
PATH = "/v2/orgs/local/apps/{app}/workflows"


class ApiExecutors(Fleet):
    """A ``python -m bench.api_executors`` process, driven like a :class:`Fleet`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen([PY, "-m", "bench.api_executors"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()
        self._err: list[str] = []
        threading.Thread(target=self._drain_err, daemon=True).start()

    def own(self, reset: bool = True) -> list[list[Any]]:
        return self.call("own", reset=reset)["own"]


# ------------------------------------------------------------------ latency
class Direct:
    """A bare WebSocket server standing in for Relay: sends a request to the one executor
    connected, returns the answer decoded, on a loop in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ws: Any = None
        self.port = 0
        self.pending: dict[str, asyncio.Future[Any]] = {}
        self.connected = threading.Event()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        from websockets.asyncio.server import serve

        async def handler(ws: Any) -> None:
            self.ws = ws
            self.connected.set()
            async for raw in ws:
                msg = json.loads(raw)
                fut = self.pending.pop(msg.get("request_id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)

        async def main() -> None:
            async with serve(handler, "127.0.0.1", 0, max_size=None, ping_interval=None) as server:
                self.port = server.sockets[0].getsockname()[1]
                self.stop = asyncio.Event()
                ready.set()
                await self.stop.wait()

        self.loop.run_until_complete(main())

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/websocket/s8-direct/dev-key"

    def ask(self, n: int) -> tuple[float, int]:
        """One ``list_workflows`` of ``n`` workflows with inputs and outputs: (seconds, workflows)."""

        async def go() -> tuple[float, int]:
            rid = str(time.monotonic_ns())
            fut = asyncio.get_running_loop().create_future()
            self.pending[rid] = fut
            t0 = time.perf_counter()
            await self.ws.send(json.dumps({"type": "list_workflows", "request_id": rid, "body": {
                "limit": n, "offset": 0, "sort_desc": False, "load_input": True, "load_output": True}}))
            msg = await fut
            return time.perf_counter() - t0, len(msg["output"])

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(120)

    def close(self) -> None:
        if hasattr(self, "stop"):
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


def latency(srv: Any, execs: ApiExecutors, sizes: list[tuple[str, int, int]], rounds: int
            ) -> list[dict[str, Any]]:
    """Per size: one executor (of ``execs``) connected to Relay, one to a bare server; R requests each."""
    out = []
    with httpx.Client(timeout=120) as client:
        for label, n, field_bytes in sizes:
            app = f"s8-lat-{n}-{field_bytes}"
            direct = Direct()
            try:
                got = execs.call("connect", url=direct.url, raw=True, app=app, n=1, workflows=n,
                                 field_bytes=field_bytes)
                assert got["connected"] == 1 and direct.connected.wait(30), got
                direct.ask(n)  # warm
                execs.own()
                direct_s = []
                for _ in range(rounds):
                    s, k = direct.ask(n)
                    assert k == n
                    direct_s.append(s)
                direct_own = execs.own()
            finally:
                direct.close()
            assert client.put(srv.http + f"/v2/orgs/local/apps/{app}").status_code == 204
            got = execs.call("connect", url=srv.ws, app=app, n=1, workflows=n, field_bytes=field_bytes)
            assert got["connected"] == 1, got
            url = srv.http + PATH.format(app=app)
            params = {"limit": n, "loadInput": "true", "loadOutput": "true"}
            r = client.get(url, params=params)  # warm
            assert r.status_code == 200 and len(r.json()) == n, r.text[:300]
            rest_bytes = len(r.content)
            execs.own()
            relay_s = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                r = client.get(url, params=params)
                body = r.json()
                relay_s.append(time.perf_counter() - t0)
                assert r.status_code == 200 and len(body) == n
            own = execs.own()
            row = {"label": label, "workflows": n, "field_bytes": field_bytes,
                   "reply_bytes": own[0][1] if own else None, "rest_bytes": rest_bytes,
                   "own_ms": stats_ms([o[2] for o in own]), "direct_own_ms": stats_ms([o[2] for o in direct_own]),
                   "direct_ms": stats_ms(direct_s), "relay_ms": stats_ms(relay_s)}
            d, rl = row["direct_ms"]["p50"], row["relay_ms"]["p50"]
            row["overhead_p50_ms"] = rl - d if d is not None and rl is not None else None
            log(f"s8 latency {label}: reply {(row['reply_bytes'] or 0) / 1048576:.2f} MiB, own p50 "
                f"{row['own_ms']['p50']:.1f} ms, direct p50 {d:.1f} ms, Relay p50 {rl:.1f} ms")
            out.append(row)
    return out


# ------------------------------------------------------------------ liveness
class Pagers:
    """``n`` threads paging through the workflows of ``apps`` until stopped."""

    def __init__(self, base: str, apps: list[str], n: int) -> None:
        self.base, self.apps = base, apps
        self.stop_flag = threading.Event()
        self.lat: list[float] = []
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(n)]

    def loop(self, i: int) -> None:
        k = 0
        with httpx.Client(timeout=120) as c:
            while not self.stop_flag.is_set():
                app = self.apps[(i + k) % len(self.apps)]
                offset = ((i + k) * PAGE) % LOAD_WORKFLOWS
                k += 1
                t0 = time.monotonic()
                try:
                    r = c.get(self.base + PATH.format(app=app), params={
                        "limit": PAGE, "offset": offset, "loadInput": "true", "loadOutput": "true"})
                    status = str(r.status_code) if r.status_code != 200 or len(r.json()) == PAGE else "short"
                except httpx.HTTPError as e:
                    status = type(e).__name__
                took = time.monotonic() - t0
                with self.lock:
                    if status == "200":
                        self.lat.append(took)
                    else:
                        self.errors[status] = self.errors.get(status, 0) + 1

    def start(self) -> Pagers:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> dict[str, Any]:
        self.stop_flag.set()
        t0 = time.monotonic()
        for t in self.threads:
            t.join(130)
        return {"calls": len(self.lat), "errors": self.errors, "latency_ms": stats_ms(self.lat),
                "stop_wait_s": time.monotonic() - t0}


def phase(srv: Any, store: str, app: str, n: int, load_apps: list[str] | None,
          execs: ApiExecutors) -> dict[str, Any]:
    assert httpx.put(srv.http + f"/v2/orgs/local/apps/{app}", timeout=30).status_code == 204
    r = httpx.patch(srv.http + f"/v2/orgs/local/apps/{app}", json={"executorTimeoutSecs": GRACE}, timeout=30)
    assert r.status_code == 204, r.text
    survivor = Fleet(f"s8-{app}-survivor")
    fleets = [Fleet(f"s8-{app}-{i}") for i in range(2)]
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
        execs.own()
        pagers = Pagers(srv.http, load_apps, PAGERS).start() if load_apps else None
        time.sleep(2.0 if load_apps else 0.0)  # the pages are being served before anything is due
        t_drop = time.time()
        fleets_call(fleets, "abort")
        done = wait_until(lambda: reader.count_status(app, "DELETED") >= registered, timeout=GRACE + 180,
                          interval=0.2)
        t_done = time.time()
        paged = pagers.stop() if pagers is not None else None
        healthz = health.stop()
        own = execs.own()
        late = []
        by: dict[str, dict[str, Any]] = {}
        for e in audit(srv.http, app):
            if e["executorId"]:
                by.setdefault(e["executorId"], {}).setdefault(e["action"], e)
        for acts in by.values():
            d, dead = acts.get("executor.disconnected"), acts.get("executor.declared_dead")
            if d is not None and dead is not None:
                late.append(ts(dead["at"]) - ts(d["detail"]["deadline"]))
        out = {"loaded": bool(load_apps), "n": n, "registered": registered, "all_recovered": bool(done),
               "drop_to_all_deleted_s": t_done - t_drop, "lateness_ms": stats_ms(late), "healthz_ms": healthz,
               "pages": paged, "executor_own_ms": stats_ms([o[2] for o in own]) if paged else None}
        log(f"s8 {app}: lateness p99 {out['lateness_ms']['p99']} ms, healthz p99 {healthz['p99']} ms"
            + (f", {paged['calls']} pages p50 {paged['latency_ms']['p50']} ms p99 {paged['latency_ms']['p99']} ms"
               f", errors {paged['errors']}" if paged else ""))
        return out
    finally:
        reader.close()
        for f in fleets:
            f.close()
        survivor.close()


def one_store(ctx: Any, kind: str, sizes: list[tuple[str, int, int]], rounds: int, n: int, n_apps: int
              ) -> dict[str, Any]:
    wd = Workdir.make(f"s8-{kind}")
    store = f"sqlite:///{wd.path}/relay.db" if kind == "sqlite" else ctx.pg.create_db("s8")
    srv = None
    execs = ApiExecutors(f"s8-{kind}")
    try:
        srv = relay_server(wd.path, store)
        lat = latency(srv, execs, sizes, rounds)
        load_apps = [f"s8-wf{i}" for i in range(n_apps)]
        for app in load_apps:
            got = execs.call("connect", url=srv.ws, app=app, n=2, workflows=LOAD_WORKFLOWS,
                             field_bytes=LOAD_FIELD_BYTES)
            assert got["connected"] == 2, got
        base = phase(srv, store, "s8-base", n, None, execs)
        loaded = phase(srv, store, "s8-load", n, load_apps, execs)
        return {"store": kind, "latency": lat, "apps": n_apps, "baseline": base, "loaded": loaded}
    finally:
        execs.close()
        if srv is not None:
            srv.kill()
        wd.remove()
        if kind == "postgres":  # a database left in the cluster is vacuumed beside the runs after it
            ctx.pg.drop_db(store)


def run(ctx: Any) -> dict[str, Any]:
    if ctx.quick:
        sizes = [("100 workflows", 100, 256), ("1,000 workflows", 1000, 256), ("multi-MiB", 500, 4096)]
    else:
        sizes = [("100 workflows", 100, 256), ("1,000 workflows", 1000, 256), ("multi-MiB", 2000, 4096)]
    sizes = [(label, max(1, int(n * ctx.scale)), b) for label, n, b in sizes]
    rounds = ctx.n(quick=10, full=50)
    n = ctx.n(quick=100, full=500)
    n_apps = 5 if ctx.quick else 10
    return {"pagers": PAGERS, "page": PAGE, "grace_s": GRACE, "load_workflows": LOAD_WORKFLOWS,
            "load_field_bytes": LOAD_FIELD_BYTES, "rounds": rounds, "n": n,
            "stores": [one_store(ctx, kind, sizes, rounds, n, n_apps) for kind in ctx.stores]}


# ------------------------------------------------------------------ report
def render(d: dict[str, Any], goals: list["Goal"]) -> str:
    from bench.report import f0, f1, f2, goal, incomplete, ratio, table

    r = d["result"]
    out = ["`listWorkflows` through Relay (REST -> WebSocket -> executor -> back, mapped to Conductor's shape) "
           "against the same request sent to the same kind of executor over a bare WebSocket (**direct**), one "
           f"request at a time, {r['rounds']} rounds each; the executor's **own** time is from request frame in to "
           "reply handed to its socket (decode, page, encode, send).", ""]
    rows = []
    for s in r["stores"]:
        for x in s["latency"]:
            rows.append([s["store"], x["label"], f2((x["reply_bytes"] or 0) / 1048576), f1(x["own_ms"]["p50"]),
                         f1(x["direct_ms"]["p50"]), f1(x["relay_ms"]["p50"]), f1(x["relay_ms"]["p99"]),
                         f1(x["overhead_p50_ms"]), f2(ratio(x["relay_ms"]["p50"], x["direct_ms"]["p50"]))])
    out += [table(["store", "answer", "reply MiB", "own p50 ms", "direct p50 ms", "Relay p50 ms", "Relay p99 ms",
                   "Relay - direct ms", "Relay / direct"], rows), ""]
    out += [f"Then, as in section 7, {r['n']:,} executors and one survivor connected, grace {r['grace_s']} s, the "
            f"{r['n']:,} dropped at once: alone (**baseline**), then while {r['pagers']} clients page through the "
            f"workflows of several applications (`limit={r['page']}`, {r['load_workflows']:,} workflows each, two "
            "executors per application) (**loaded**).", ""]
    rows = []
    for s in r["stores"]:
        b, ld = s["baseline"], s["loaded"]
        for label, ph in (("baseline", b), ("loaded", ld)):
            lat = ph["lateness_ms"]
            pg = ph["pages"] or {}
            rows.append([s["store"], label, f0(lat["n"]), f0(lat["p50"]), f0(lat["p99"]), f0(lat["max"]),
                         f0(ph["healthz_ms"]["p99"]), f0(pg.get("calls")),
                         f0((pg.get("latency_ms") or {}).get("p50")), f0((pg.get("latency_ms") or {}).get("p99")),
                         "yes" if ph["all_recovered"] else "NO"])
        p99, base = ld["lateness_ms"]["p99"], b["lateness_ms"]["p99"]
        why = incomplete(ld)
        ok = p99 is not None and p99 < 250 and not why
        goals.append(goal(f"8. DeclaredDead lateness p99 while {r['pagers']} clients page workflows, {s['store']}",
                          f"{f0(p99)} ms", f"{f0(base)} ms without them", f2(ratio(p99, base)),
                          "< 250 ms (round 1's section 3 goal)", ok, p99, "ms",
                          (f" by {p99 - 250:.0f} ms" if p99 is not None and p99 >= 250 else "")
                          + (f" ({why})" if why else "")))
        errors = (ld["pages"] or {}).get("errors")
        if errors:
            out.append(f"{s['store']}: pages that failed under load: {errors}.")
    out += ["", table(["store", "phase", "deaths", "lateness p50 ms", "p99 ms", "max ms", "/healthz p99 ms", "pages",
                       "page p50 ms", "page p99 ms", "all recovered"], rows)]
    return "\n".join(out)
