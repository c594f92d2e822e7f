"""Section 3: detection accuracy.

N executors and one survivor (same application and version) connect, and as
many others of another application, which stay connected and keep pinging;
the application's grace is set to 5 s (PATCH executorTimeoutSecs); the N drop
at once (no close frame, like SIGKILL), so N deadlines come due together. From the lifecycle feed (REST, paged):
DeclaredDead's ``at`` against the deadline its Disconnected carried, and the
recovery dispatch against the death; from the survivor's fleet: when the
``exist_pending_workflows`` frame for each dead executor arrived. Then the rate alone: the same
number of deaths recorded alone (``record_deaths_alone``, one transaction, nothing else running)
gives a rate, and ``lateness_floor`` the lateness the run's own deadlines would have had if the
process manager recorded them at that rate, as it batches them, with nothing else to do (an
estimate, not a bound: see there).

``bench/run --history EVENTS``: the storm runs on a copy of a store that already holds that many
events (:func:`seeded`), whose primary key and tables a fresh store does not have: a death costs
more there (docs/benchmarks-history.md, goal 3). The deaths alone are recorded on another copy of it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx

from bench.common import (CpuTimeline, Fleet, StoreReader, Workdir, disconnected_executors, fleets_call, gc_between,
                          gc_histograms, largest_fleet, log, past_settle, pct, pm_cpu, relay_server, scrape, split,
                          wait_until)

APP = "detect"


def ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def audit(base: str, app: str, after: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        r = httpx.get(base + "/v2/orgs/local/executor-events", params={"app": app, "after": after, "limit": 1000}, timeout=30)
        r.raise_for_status()
        page = r.json()
        out.extend(page)
        if len(page) < 1000:
            return out
        after = page[-1]["seq"]


def stats_ms(values: list[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "min": min(ms) if ms else None, "p50": pct(ms, 50), "p99": pct(ms, 99),
            "max": max(ms) if ms else None}


OTHERS = "detect-others"


def record_deaths_alone(store_url: str, n: int, tries: int = 3) -> dict[str, Any]:
    """The cost of recording deaths alone: ``n`` executors Disconnected with their deadline passed,
    then declared dead in one ``Relay.execute`` (as the process manager records the deaths due
    together: one command per executor, one transaction), in this process, with no socket, read
    model or other thread, and without the cyclic garbage collector while it is timed (the server
    pays for its collections; this is the recording's own cost). ``tries`` such batches on the same
    store, each of its own ``n`` executors; the fastest is the rate (a slower one is the machine's
    minute, not the recording's cost). Deaths recorded per second."""
    import gc
    from datetime import timedelta, timezone

    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, parse_database_url
    from relay_es.engine.service import Relay

    if tries < 1:
        raise ValueError("tries must be at least 1")
    relay = Relay(event_store_env(parse_database_url(store_url)), clock=SystemClock())
    runs: list[tuple[float, int]] = []  # (seconds, deaths recorded) per batch
    try:
        relay.register_app("local", "floor")
        for t in range(tries):
            now = datetime.now(timezone.utc)
            executors = disconnected_executors(n, "floor", deadline=now - timedelta(seconds=1),
                                               at=now - timedelta(seconds=3), ids=lambda i: f"floor-{t}-{i}")
            for i in range(0, n, 500):
                relay.save(*executors[i:i + 500])
            ops = [relay.op_declare_dead(ex.id, ex.deadline) for ex in executors]
            was_enabled = gc.isenabled()
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                done = relay.execute(ops)
                runs.append((time.perf_counter() - t0, sum(done)))
            finally:
                if was_enabled:
                    gc.enable()
    finally:
        relay.close()
    best, recorded = min(runs)
    return {"n": n, "recorded": recorded, "seconds": best, "per_s": recorded / best,
            "tries_per_s": [k / x for x, k in runs]}


def lateness_floor(deadlines: list[float], per_s: float) -> list[float]:
    """The deaths' lateness, in the order of their deadlines, under the process manager's own policy at
    ``per_s`` with nothing else to do: whenever it is free it takes every death due by then, stamps
    them all at once (``DeclaredDead.at`` is taken before the batch is saved) and is then busy for the
    batch's cost, ``len(batch) / per_s``; deaths that come due meanwhile wait for the next batch.
    Stamping costs nothing here, so this is what the process manager would measure if a death cost
    it in the server what it costs alone (:func:`record_deaths_alone`).

    Not a lower bound, despite its name (kept for the results files): a thread that waited a little
    before a batch, to take more deaths into it, would stamp those earlier than this policy does,
    and the process manager, late to look because of other work, sometimes does just that (bench
    runs of 2026-12-06 measured below it). Until 2026-12-06 each death was stamped when its own
    recording ended, one after another, which the server beat more often."""
    if not per_s > 0:
        raise ValueError("per_s must be positive")
    ds = sorted(deadlines)
    per = 1.0 / per_s
    late: list[float] = []
    free_at, i = float("-inf"), 0
    while i < len(ds):
        free_at = max(free_at, ds[i])  # idle until the next deadline, if nothing is due
        j = i
        while j < len(ds) and ds[j] <= free_at:
            late.append(free_at - ds[j])
            j += 1
        free_at += (j - i) * per
        i = j
    return late


def seeded(ctx: Any, kind: str) -> str:
    """A store holding ``ctx.history`` events, made once per ``bench/run`` for each store: generated as
    section 5 generates its store (executors from Registered to Deleted, and 1,000 left Disconnected
    with deadlines 30 days ahead, beyond any run), its read models rebuilt, Postgres vacuumed. Each
    run copies it. One that fails is removed, and the run fails."""
    if kind not in ctx.seeds:
        from datetime import timedelta

        from bench import s5_replay as s5

        wd = Workdir.make("s3-seed") if kind == "sqlite" else None
        url = f"sqlite:///{wd.path}/seed.db" if wd is not None else ctx.pg.create_db("s3seed")
        log(f"s3 {kind}: a store of {ctx.history:,} events to copy for each run")
        try:
            made = s5.generate(url, ctx.history, pending_ahead=timedelta(days=30))
            done = s5.rebuild(url)
            if done["returncode"] != 0:
                raise RuntimeError(f"rebuilding the seed store's read models failed: {done['output']}")
            if wd is not None and (wd.path / "seed.db-wal").exists():  # every connection closed: checkpointed
                raise RuntimeError("the seed store still has a write-ahead log: a copy of its file would miss it")
            if kind == "postgres":
                s5.vacuum(url)
        except BaseException:
            if wd is not None:
                wd.remove()
            else:
                ctx.pg.drop_db(url)
            raise
        log(f"s3 {kind}: {made['events']:,} events generated, read models rebuilt in {done['seconds']:.1f} s")
        ctx.seeds[kind] = url
    return ctx.seeds[kind]


def new_store(ctx: Any, kind: str, wd: Workdir, name: str, databases: list[str]) -> str:
    """A store for one run (``name``: the file or database prefix): fresh, or with ``--history`` a copy
    of :func:`seeded`'s. A Postgres database is added to ``databases``, which the caller drops."""
    seed = seeded(ctx, kind) if getattr(ctx, "history", 0) else None
    if kind == "sqlite":
        if seed is not None:
            shutil.copy(seed.removeprefix("sqlite:///"), wd.path / f"{name}.db")
        return f"sqlite:///{wd.path}/{name}.db"
    url = ctx.pg.create_db(f"s3{name}", template=seed)
    databases.append(url)
    return url


def one_store(ctx: Any, kind: str, n: int, grace: int, others: int,
              on_drop: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``on_drop``: called with the server just before the drop (``bench.profile`` attaches there)."""
    wd = Workdir.make(f"s3-{kind}")
    history = getattr(ctx, "history", 0)
    fleets: list[Fleet] = []
    fleets_keep: list[Fleet] = []
    survivor = None
    srv = None
    databases: list[str] = []  # Postgres: dropped at the end (a copy of a store with history is as big as it)
    try:
        store = new_store(ctx, kind, wd, "relay", databases)
        history_events = 0
        if history:  # read from the copy itself
            held = StoreReader(store)
            history_events = held.head()
            held.close()
        srv = relay_server(wd.path, store)
        assert httpx.put(srv.http + f"/v2/orgs/local/apps/{APP}", timeout=10).status_code == 204
        r = httpx.patch(srv.http + f"/v2/orgs/local/apps/{APP}", json={"executorTimeoutSecs": grace}, timeout=10)
        assert r.status_code == 204, r.text
        survivor = Fleet("s3-survivor")
        survivor.call("connect", url=srv.ws, app=APP, n=1, record=True, exist=True)
        fleets = [Fleet(f"s3-{i}") for i in range(2)]
        answers = fleets_call(fleets, "connect", [{"n": k} for k in split(n, 2)], url=srv.ws, app=APP,
                              open_timeout=120, timeout=600)
        registered = sum(a["registered"] for a in answers)
        if others:
            bystanders = Fleet("s3-others")
            fleets_keep.append(bystanders)
            others_registered = bystanders.call("connect", url=srv.ws, app=OTHERS, n=others, open_timeout=120,
                                                timeout=600)["registered"]
        else:
            others_registered = 0
        reader = StoreReader(store)
        # Everyone HEALTHY and the store quiet: the drop meets a Relay whose connect storms are over
        # (on a slow machine the bystanders' 20,000 events were still being written and followed).
        wait_until(lambda: reader.count_status(APP, "HEALTHY") >= registered + 1
                   and reader.count_status(OTHERS, "HEALTHY") >= others_registered, timeout=300, interval=0.2)
        wait_until(reader.caught_up, timeout=120, interval=0.2)
        time.sleep(1.0)
        past_settle(srv)
        if on_drop is not None:
            on_drop(srv)
        before = scrape(srv.http)
        gc_before, cpu_before = gc_histograms(before), pm_cpu(before)
        cores = CpuTimeline(srv.proc.pid, {"clients": [f.pid for f in fleets + fleets_keep + [survivor]]}).start()
        try:
            t_drop = time.time()
            fleets_call(fleets, "abort")
            # every death recovered and deleted, or give up
            done = wait_until(lambda: reader.count_status(APP, "DELETED") >= registered, timeout=grace + 120,
                              interval=0.2)
        finally:
            cores.stop()
        t_done = time.time()
        after = scrape(srv.http)
        gc_storm = gc_between(gc_before, gc_histograms(after))  # the drop to every death deleted
        cpu_after = pm_cpu(after)
        pm_cpu_s = {k: v - cpu_before.get(k, 0.0) for k, v in cpu_after.items() if v - cpu_before.get(k, 0.0) > 0}
        reader.close()
        entries = audit(srv.http, APP)
        frames = survivor.call("frames")["frames"]
        by: dict[str, dict[str, Any]] = {}
        for e in entries:
            if e["executorId"]:
                by.setdefault(e["executorId"], {}).setdefault(e["action"], e)
        first_frame: dict[str, float] = {}
        for f in frames:
            if f["type"] == "exist_pending_workflows" and f["executor_id"] not in first_frame:
                first_frame[f["executor_id"]] = f["t"]
        detect, late, dispatch, frame, confirm, e2e = [], [], [], [], [], []
        timeline: list[tuple[float, float]] = []  # (deadline, DeclaredDead at) per executor
        for ex, acts in by.items():
            d = acts.get("executor.disconnected")
            dead = acts.get("executor.declared_dead")
            if d is None or dead is None:
                continue
            deadline = ts(d["detail"]["deadline"])
            detect.append(ts(d["at"]) - t_drop)
            late.append(ts(dead["at"]) - deadline)
            timeline.append((deadline, ts(dead["at"])))
            disp = acts.get("recovery.dispatched")
            if disp is not None:
                dispatch.append(ts(disp["at"]) - ts(dead["at"]))
            if ex in first_frame:
                frame.append(first_frame[ex] - ts(dead["at"]))
                e2e.append(first_frame[ex] - (t_drop + grace))
            conf = acts.get("recovery.confirmed")
            if conf is not None:
                confirm.append(ts(conf["at"]) - ts(dead["at"]))
        timeline.sort()
        t_first = timeline[0][0] if timeline else 0.0
        # who used the cores from the first deadline to the last death
        cpu_deaths = cores.window(t_first, max(at for _, at in timeline)) if timeline else None
        # how the deaths were recorded: distinct DeclaredDead instants (one per PM batch), with how many each
        batches: dict[float, int] = {}
        for _, at in timeline:
            batches[round(at - t_first, 3)] = batches.get(round(at - t_first, 3), 0) + 1
        for f in fleets + fleets_keep + [survivor]:  # idempotent: closed again below
            f.close()
        srv.kill()
        srv = None
        floor_url = new_store(ctx, kind, wd, "floor", databases)  # like the run's: fresh, or the same history
        alone = record_deaths_alone(floor_url, len(timeline) or n)
        floor = stats_ms(lateness_floor([dl for dl, _ in timeline], alone["per_s"])) if alone["per_s"] > 0 else None
        log(f"s3 {kind}: deaths recorded alone {alone['per_s']:,.0f}/s; lateness at that rate p99 "
            f"{floor and floor['p99']} ms")
        # The process manager's own CPU a death in the server (its thread's, deadline work over the deaths), and
        # the lateness of the deaths recorded in batches at that cost, as lateness_floor records them, with
        # nothing else between them: the scale of its own work on the deaths (that CPU counts the folds too).
        per_death = pm_cpu_s.get("deadline", 0.0) / len(timeline) if timeline else 0.0
        at_cost = stats_ms(lateness_floor([dl for dl, _ in timeline], 1 / per_death)) if per_death else None
        log(f"s3 {kind}: process manager CPU {', '.join(f'{k} {v:.2f} s' for k, v in sorted(pm_cpu_s.items()))}; "
            f"{per_death * 1e6:.0f} us a death; deaths in batches at that cost: p99 {at_cost and at_cost['p99']} ms")
        out = {
            "deaths_alone": alone, "lateness_floor_ms": floor,
            "pm_cpu_s": pm_cpu_s, "pm_cpu_per_death_us": per_death * 1e6, "lateness_at_pm_cost_ms": at_cost,
            "deadline_spread_ms": 1000 * (timeline[-1][0] - t_first) if timeline else None,
            "death_batches": sorted(batches.items()),
            "store": kind, "n": n, "registered": registered, "others": others_registered, "grace_s": grace, "all_recovered": bool(done),
            "history_events": history_events,  # the events the store held before the run
            "deaths_seen": len(late), "frames_seen": len(frame), "drop_to_all_deleted_s": t_done - t_drop,
            "detect_ms": stats_ms(detect),                 # Disconnected.at - the drop
            "lateness_ms": stats_ms(late),                 # DeclaredDead.at - deadline
            "dispatch_after_death_ms": stats_ms(dispatch),  # RecoveryDispatched.at - DeclaredDead.at
            "frame_after_death_ms": stats_ms(frame),       # survivor got exist_pending_workflows - DeclaredDead.at
            "confirm_after_death_ms": stats_ms(confirm),
            "frame_after_drop_plus_grace_ms": stats_ms(e2e),
            "gc_during_storm": gc_storm,
            # CpuTimeline.window: cores by process, the machine's busy and stolen shares
            "cpu_during_deaths": cpu_deaths,
        }
        log(f"s3 {kind}: lateness p50 {out['lateness_ms']['p50']} p99 {out['lateness_ms']['p99']} max "
            f"{out['lateness_ms']['max']} ms; dispatch p99 {out['dispatch_after_death_ms']['p99']} ms; "
            f"frame p99 {out['frame_after_death_ms']['p99']} ms; collections "
            + (", ".join(f"{k}: {v['count']} ({v['ms']:.0f} ms)" for k, v in sorted(gc_storm.items())) or "none"))
        if cpu_deaths is not None:
            log(f"s3 {kind}: over the deaths ({cpu_deaths['seconds']:.2f} s) "
                + ", ".join(f"{k} {v:.2f}" for k, v in cpu_deaths["cores"].items())
                + f" cores; the machine {100 * (cpu_deaths['machine_busy'] or 0):.0f}% busy, "
                  f"{100 * (cpu_deaths['machine_stolen'] or 0):.0f}% stolen")
        elif cores.error:
            log(f"s3 {kind}: no CPU timeline ({cores.error})")
        return out
    finally:
        for f in fleets + fleets_keep:
            f.close()
        if survivor is not None:
            survivor.close()
        if srv is not None:
            srv.kill()
        wd.remove()
        for url in databases:
            ctx.pg.drop_db(url)


def run(ctx: Any) -> dict[str, Any]:
    n = ctx.n(quick=200, full=10_000)
    # As many pinging bystanders as dying executors, within what one process may open (the
    # hard open-file limit, 20,000 here): beyond it Relay refuses connections (RELAY_MAX_OPEN_CONNECTIONS).
    others = max(0, min(n, largest_fleet() - n - 1))
    return {"n": n, "others": others, "history_events": ctx.history,
            "stores": [one_store(ctx, kind, n, 5, others) for kind in ctx.stores]}
