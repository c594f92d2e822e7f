"""``python -m bench.profile SCENARIO ...``: where Relay's time goes, from a sampling profile.

The benchmark report says what bounds each goal it misses; these are the profiles it quotes,
repeatable. Each scenario runs once, with `py-spy <https://github.com/benfred/py-spy>`_
recording every thread of the process being measured (raw folded stacks), then prints a
summary: each thread's share of the samples, the functions with the most samples of their own,
and the most inclusive ones. py-spy is not a dependency of Relay: ``.venv/bin/pip install py-spy``.

Scenarios:

* ``detection [--store S] [--n N]``: section 3's storm (N deaths at once, default 10,000, with as
  many pinging bystanders as the open-file limit leaves), from the drop (or ``--after`` seconds
  later: 4.5 puts the deaths, due 5 s after the drop, at the start) for ``--seconds`` (25);
  prints the section's lateness figures and the process manager's CPU by work beside the summary.
* ``throughput [--store S] [--n N]``: section 2's connect, drop and reconnect storms of N
  executors (default 5,000), one profile each (``OUT.connect``, ...).
* ``reconnect [--store S] [--n N]``: section 4's storm (N retrying executors, default as many as
  the open-file limit allows up to 20,000; the server SIGKILLed and started again), the new
  server profiled from its ``/healthz`` for ``--seconds`` (40); prints the section's figures beside the
  summary.
* ``rebuild --url URL [--share I] [--of N]``: one rebuild process of section 5 (every read model
  over share I of N of the streams, default 0 of 2) on a store that already holds the events
  (section 5's ``generate``), reset and filled again.
* ``summary FILE``: the summary of a raw profile written before.

``--out`` is where the raw profile goes (default ``bench/results/profile/<scenario>[-<store>]``).
Sampling costs the measured process a few per cent; compare profiles with profiles, not with
the report's figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT, Fleet, StoreReader, Workdir, log, raise_fd_limit, relay_server

RATE = 200  # samples a second


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(ROOT / ".venv" / "bin")) or shutil.which("py-spy")
    if found is None:
        sys.exit("bench.profile needs py-spy: .venv/bin/pip install py-spy")
    return found


def record(pid: int, out: Path, seconds: float | None = None) -> subprocess.Popen[bytes]:
    """py-spy recording every thread of ``pid`` into ``out`` (raw), for ``seconds`` or until
    interrupted (SIGINT); returns once it is attached."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [py_spy(), "record", "-p", str(pid), "-r", str(RATE), "-f", "raw", "-o", str(out), "--threads",
           "--nonblocking"]
    if seconds is not None:
        cmd += ["-d", str(int(seconds))]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return proc


def summary(path: Path, own: int = 25, inclusive: int = 60) -> str:
    """Thread shares, then the functions by samples of their own, then by inclusive samples."""
    by_self: collections.Counter[str] = collections.Counter()
    by_incl: collections.Counter[str] = collections.Counter()
    by_thread: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        by_thread[frames[0][:60]] += n
        for f in set(frames[1:]):
            by_incl[f] += n
        by_self[frames[-1]] += n
    if total == 0:
        return f"{path}: no samples"

    def table(title: str, counter: collections.Counter[str], k: int) -> list[str]:
        return [f"== {title}"] + [f"{v / total:6.1%} {name}" for name, v in counter.most_common(k)]

    lines = [f"{path}: {total} samples ({total / RATE:.1f} s of threads at {RATE}/s)"]
    lines += table("threads", by_thread, 12) + table("own", by_self, own) + table("inclusive", by_incl, inclusive)
    return "\n".join(lines)


def section(args: argparse.Namespace, scenario: str, run: Callable[[Any, Callable[[Any], None]], dict[str, Any]],
            keys: tuple[str, ...]) -> None:
    """One benchmark section's run (``run(ctx, profile)``, which calls ``profile(server)`` when the
    part to measure starts) with the server profiled from then for ``--seconds``; prints the
    section's figures ``keys`` and the profile's summary."""
    from bench.__main__ import Context

    ctx = Context(False, 1.0, [args.store])
    out = args.out or ROOT / "bench" / "results" / "profile" / f"{scenario}-{args.store}"
    spy: list[subprocess.Popen[bytes]] = []
    threads: list[threading.Thread] = []
    after = getattr(args, "after", 0.0)

    def profile(srv: Any) -> None:
        if not after:
            spy.append(record(srv.proc.pid, out, args.seconds))
            return
        def later() -> None:  # the run goes on meanwhile
            time.sleep(after)
            spy.append(record(srv.proc.pid, out, args.seconds))
        threads.append(threading.Thread(target=later, daemon=True))
        threads[-1].start()

    try:
        res = run(ctx, profile)
    finally:
        for t in threads:
            t.join()
        for p in spy:
            p.wait()
        ctx.close()
    print(json.dumps({k: res[k] for k in keys}, indent=1))
    print(summary(out))


def detection(args: argparse.Namespace) -> None:
    from bench import s3_detection as s3
    from bench.common import largest_fleet

    others = max(0, min(args.n, largest_fleet() - args.n - 1))
    section(args, "detection", lambda ctx, profile: s3.one_store(ctx, args.store, args.n, 5, others, on_drop=profile),
            ("lateness_ms", "dispatch_after_death_ms", "deadline_spread_ms", "drop_to_all_deleted_s", "pm_cpu_s",
             "pm_cpu_per_death_us"))


def throughput(args: argparse.Namespace) -> None:
    from bench.__main__ import Context
    from bench import s2_throughput as s2

    ctx = Context(False, 1.0, [args.store])
    out = args.out or ROOT / "bench" / "results" / "profile" / f"throughput-{args.store}"
    wd = Workdir.make(f"profile-{args.store}")
    store = f"sqlite:///{wd.path}/relay.db" if args.store == "sqlite" else ctx.pg.create_db("profile")
    srv = relay_server(wd.path, store)
    fleets = [Fleet(f"profile-{i}") for i in range(2)]
    reader = StoreReader(store)
    try:
        import httpx

        assert httpx.put(srv.http + "/v2/orgs/local/apps/storm", timeout=10).status_code == 204
        s2.settle(reader)
        for title, fn, per in s2.storm_plan(fleets, srv.ws, args.n):
            name = title.split()[0]
            path = Path(f"{out}.{name}")
            p = record(srv.proc.pid, path)
            t0, h0 = time.time(), reader.head()
            fn()
            h = s2.settle(reader, quiet=0.5, target=h0 + per * args.n)
            log(f"{name}: {h - h0} events in {time.time() - t0 - 0.5:.2f} s")
            p.send_signal(2)
            p.wait()
            print(summary(path))
    finally:
        reader.close()
        for f in fleets:
            f.close()
        srv.stop()
        wd.remove()
        ctx.close()


def reconnect(args: argparse.Namespace) -> None:
    from bench import s4_reconnect as s4
    from bench.common import largest_fleet

    def run(ctx: Any, profile: Callable[[Any], None]) -> dict[str, Any]:
        def attach(srv: Any) -> None:  # once its interpreter is up: the sockets come in after that
            srv.wait_healthy(timeout=60)
            profile(srv)

        return s4.one_store(ctx, args.store, args.n or largest_fleet(20_000), grace=10, settle=5.0, on_restart=attach)

    section(args, "reconnect", run, ("restart_to_healthz_s", "restart_to_all_healthy_s",
                                     "client_registered_after_kill_s", "false_deaths", "relay_restarted_disconnects"))


def rebuild(args: argparse.Namespace) -> None:
    out = args.out or ROOT / "bench" / "results" / "profile" / f"rebuild-{args.share}of{args.of}"
    child = [sys.executable, "-c", REBUILD, args.url, str(args.share), str(args.of)]
    proc = subprocess.Popen(child, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    time.sleep(1.0)  # the imports: not part of the fill
    spy = record(proc.pid, out)
    proc.wait()
    spy.send_signal(2)
    spy.wait()
    print(summary(out))


REBUILD = """
import sys, time
from relay_es.adapters.clock import SystemClock
from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
from relay_es.engine.service import Relay
from relay_es.projections import all_projections
from relay_es.projections.runner import ProjectionRunner
from relay_es.projections.shares import StreamShare
cfg = parse_database_url(sys.argv[1])
share = StreamShare.of(int(sys.argv[2]), int(sys.argv[3]))
relay = Relay(event_store_env(cfg), clock=SystemClock())
runner = ProjectionRunner(relay, open_database(cfg), all_projections())
names = runner.reset()
head = relay.recorder.max_notification_id() or 0
t = time.perf_counter()
n = runner.fill(names, share=share, until=head)
took = time.perf_counter() - t
print(sorted(names), n, "events", round(took, 2), "s", round(n / took), "per s")
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="scenario", required=True)
    d = sub.add_parser("detection")
    d.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    d.add_argument("--n", type=int, default=10_000)
    d.add_argument("--seconds", type=float, default=25)
    d.add_argument("--after", type=float, default=0.0, help="seconds after the drop the recording starts")
    d.add_argument("--out", type=Path)
    t = sub.add_parser("throughput")
    t.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    t.add_argument("--n", type=int, default=5_000)
    t.add_argument("--out", type=Path)
    c = sub.add_parser("reconnect")
    c.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    c.add_argument("--n", type=int, default=0)
    c.add_argument("--seconds", type=float, default=40)
    c.add_argument("--out", type=Path)
    r = sub.add_parser("rebuild")
    r.add_argument("--url", required=True)
    r.add_argument("--share", type=int, default=0)
    r.add_argument("--of", type=int, default=2)
    r.add_argument("--out", type=Path)
    s = sub.add_parser("summary")
    s.add_argument("file", type=Path)
    args = ap.parse_args(argv)
    if args.scenario == "summary":
        print(summary(args.file))
        return
    raise_fd_limit()
    {"detection": detection, "throughput": throughput, "reconnect": reconnect, "rebuild": rebuild}[args.scenario](args)


if __name__ == "__main__":
    main()
