"""Section 1: connections held.

For each N, a fresh server (Relay on SQLite, or the bare ``websockets``
baseline) is started, warmed up with one client, measured idle, then N
simulated executors connect. Memory per connection is
``(VmRSS with N - VmRSS idle) / N`` of the server process; CPU at rest is the
server's utime+stime over a window with every client connected.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from bench.common import (PY, largest_fleet, ROOT, CpuMeter, Fleet, StoreReader, Workdir, fleets_call, log, relay_server, rss_bytes,
                          split, stop_proc, threads_of, wait_until)
from tests.server import free_port


def start_bare(port: int, variant: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([PY, "-m", "bench.bare_server", "--port", str(port), "--variant", variant], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError("bare server did not start")
    import socket

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(listening, timeout=20)
    return proc


def measure(kind: str, n: int, window: float, idle_window: float, pause: float = 2.0) -> dict[str, Any]:
    wd = Workdir.make(f"s1-{kind}")
    port = free_port()
    srv = None
    proc = None
    store = f"sqlite:///{wd.path}/relay.db"
    fleets: list[Fleet] = []
    try:
        if kind == "relay":
            srv = relay_server(wd.path, store, port=port)
            pid = srv.proc.pid
            url = srv.ws
        else:
            proc = start_bare(port, kind)
            pid = proc.pid
            url = f"ws://127.0.0.1:{port}"
        hold = kind != "relay"
        parts = 1 if n <= 1000 else 2
        fleets = [Fleet(f"s1-{kind}-{i}") for i in range(parts)]
        # warm-up: one client in and out, so lazy imports and the app's registration are not "per connection"
        warm = Fleet("warm")
        warm.call("connect", url=url, app="conn", n=1, hold=hold)
        warm.close()
        time.sleep(1.5)
        cpu_idle = CpuMeter({"server": pid}).start()
        time.sleep(idle_window)
        idle_cpu = cpu_idle.stop()
        rss_idle = rss_bytes(pid)
        t0 = time.monotonic()
        answers = fleets_call(fleets, "connect", [{"n": k} for k in split(n, parts)], url=url, app="conn", hold=hold,
                              open_timeout=120, timeout=600)
        connect_s = time.monotonic() - t0
        registered = sum(a["registered"] for a in answers)
        failed = sum(a["failed"] for a in answers)
        if kind == "relay":
            reader = StoreReader(store)
            wait_until(lambda: reader.count_status("conn", "HEALTHY") >= registered and reader.caught_up(),
                       timeout=300, interval=0.25)
            reader.close()
        time.sleep(pause)
        rss_start = rss_bytes(pid)
        meter = CpuMeter({"server": pid, **{f"clients{i}": f.pid for i, f in enumerate(fleets)}}).start()
        time.sleep(window)
        cpu = meter.stop()
        rss_end = rss_bytes(pid)
        open_now = sum(f.call("status")["open"] for f in fleets)
        out = {
            "kind": kind, "n": n, "registered": registered, "failed": failed, "open_at_end": open_now,
            "connect_s": connect_s, "rss_idle": rss_idle, "rss_start": rss_start, "rss_end": rss_end,
            "per_conn_bytes": (rss_end - rss_idle) / n, "threads": threads_of(pid),
            "window_s": cpu["wall_s"], "cpu_s": cpu["server"]["cpu_s"], "cpu_cores": cpu["server"]["cores"],
            "client_cpu_s": sum(v["cpu_s"] for k, v in cpu.items() if k.startswith("clients")),
            "idle_window_s": idle_cpu["wall_s"], "idle_cpu_s": idle_cpu["server"]["cpu_s"],
            "errors": {k: v for a in answers for k, v in a.get("errors", {}).items()},
        }
        log(f"s1 {kind} n={n}: {out['per_conn_bytes'] / 1024:.1f} KiB/conn, cpu {out['cpu_s']:.2f}s/"
            f"{out['window_s']:.0f}s, registered {registered}, failed {failed}, connect {connect_s:.1f}s")
        return out
    finally:
        for f in fleets:
            f.close()
        if srv is not None:
            srv.kill()
        stop_proc(proc)
        wd.remove()


BASELINE = "ws-nodeflate"
VARIANTS = ("websockets", "uvicorn-nodeflate", "uvicorn")


def workflow_list(size: int) -> str:
    """A ``list_workflows`` reply of about ``size`` bytes as dbos 3.2.0 sends it,
    inputs and outputs made of JSON with random ids and numbers (neither
    all-padding nor incompressible)."""
    import json
    import random

    from bench.api_executors import make_workflows

    template = make_workflows(1, 0, "bench")[0]  # every field a str, None or bool: a shallow copy is a fresh row
    rnd = random.Random(7)
    rows = []
    out = {"type": "list_workflows", "request_id": "bench", "output": rows, "error_message": None}
    i = 0
    while True:
        w = dict(template)
        w["WorkflowUUID"] = f"{rnd.getrandbits(128):032x}"
        w["Input"] = json.dumps({"args": [{"order": f"{rnd.getrandbits(64):016x}", "sku": f"SKU-{rnd.randrange(10**6):06d}",
                                           "qty": rnd.randrange(1, 50), "price": round(rnd.uniform(1, 500), 2)}
                                          for _ in range(rnd.randrange(1, 4))], "kwargs": {}})
        w["Output"] = json.dumps({"receipt": f"{rnd.getrandbits(96):024x}", "total": round(rnd.uniform(1, 5000), 2),
                                  "ok": rnd.random() < 0.9})
        w["CreatedAt"] = str(1796040658645 + i * 997)
        rows.append(w)
        i += 1
        if i % 100 == 0 and len(json.dumps(out)) >= size:
            return json.dumps(out)


async def _echo(port: int, payload: str, compression: str | None) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    async with connect(f"ws://127.0.0.1:{port}/websocket/bench/k", compression=compression, max_size=None,
                       open_timeout=30) as ws:
        counts = {"sent": 0, "received": 0}
        proto = ws.protocol
        to_send, receive_data = proto.data_to_send, proto.receive_data

        def counted_send() -> list[bytes]:
            out = to_send()
            counts["sent"] += sum(len(b) for b in out)
            return out

        def counted_receive(data: bytes) -> None:
            counts["received"] += len(data)
            receive_data(data)

        proto.data_to_send = counted_send  # type: ignore[method-assign]
        proto.receive_data = counted_receive  # type: ignore[method-assign]
        t0 = time.perf_counter()
        await ws.send(payload)
        back = await ws.recv()
        took = time.perf_counter() - t0
        assert back == payload
        return {"negotiated": ws.response.headers.get("Sec-WebSocket-Extensions"), "payload_bytes": len(payload.encode()),
                "executor_to_relay_bytes": counts["sent"], "relay_to_executor_bytes": counts["received"],
                "round_trip_s": took}


def bandwidth(size: int = 1 << 20) -> dict[str, Any]:
    """A 1 MiB workflow list through Relay's WebSocket stack (uvicorn with
    Relay's protocol, an app that sends it back), offered deflate as the SDKs
    offer it, and without: bytes on the wire each way, counted by the client."""
    import asyncio

    payload = workflow_list(size)
    port = free_port()
    proc = start_bare(port, "uvicorn-echo")
    try:
        return {"deflate": asyncio.run(_echo(port, payload, "deflate")), "none": asyncio.run(_echo(port, payload, None))}
    finally:
        stop_proc(proc)


def run(ctx: Any) -> dict[str, Any]:
    sizes = ctx.sizes("connections", quick=[500], full=[1000, 10000, largest_fleet(20_000)])
    window = 4.0 if ctx.quick else 20.0
    idle_window = 1.0 if ctx.quick else 5.0
    rows = []
    for n in sizes:
        for kind in (BASELINE, "relay"):
            rows.append(measure(kind, n, window, idle_window, 1.0 if ctx.quick else 2.0))
    # where the difference comes from: the same clients against servers in between
    n_dec = sizes[len(sizes) // 2]
    decomposition = [measure(v, n_dec, 2.0 if ctx.quick else 5.0, 1.0 if ctx.quick else 2.0) for v in VARIANTS]
    import resource

    return {"sizes": sizes, "baseline": BASELINE, "fd_hard_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[1], "window_s": window, "rows": rows, "decomposition": decomposition, "decomposition_n": n_dec,
            "bandwidth": bandwidth()}
