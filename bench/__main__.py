"""``python -m bench [--quick] [--only SECTION ...]``: run the benchmarks, write the report.

A full run writes ``docs/benchmarks.md``; a quick (smoke) run writes
``bench/results/quick/benchmarks.md`` unless ``--out`` says otherwise. Each
section's raw figures are kept as JSON in ``bench/results/<mode>/``, so
``--only`` re-runs one section and re-renders the report with the others as
they were (each section says when it was measured).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from bench.common import (ROOT, Postgres, calibrate, calibrate_store, code_version, cpu_text, log, machine,
                          raise_fd_limit)
from bench.report import render

SECTIONS = {
    "connections": "bench.s1_connections",
    "throughput": "bench.s2_throughput",
    "detection": "bench.s3_detection",
    "reconnect": "bench.s4_reconnect",
    "replay": "bench.s5_replay",
    "e2e": "bench.s6_e2e",
    "queries": "bench.s7_queries",
    "api": "bench.s8_api",
}
ALIASES = {str(i + 1): name for i, name in enumerate(SECTIONS)}
NEEDS_PG = {"throughput", "replay", "e2e", "detection", "reconnect", "queries", "api"}


class Context:
    def __init__(self, quick: bool, scale: float, stores: list[str], history: int = 0) -> None:
        self.quick = quick
        self.scale = scale
        self.stores = stores
        self.history = history  # events in section 3's store before its storm (--history)
        self.seeds: dict[str, str] = {}  # store kind -> URL of a store holding them, made once (bench.s3_detection)
        self._pg: Postgres | None = None

    @property
    def pg(self) -> Postgres:
        if self._pg is None:
            log("starting a throwaway Postgres cluster")
            self._pg = Postgres()
        return self._pg

    def sizes(self, section: str, *, quick: list[int], full: list[int]) -> list[int]:
        base = quick if self.quick else full
        return [max(1, int(n * self.scale)) for n in base]

    def n(self, quick: int, full: int) -> int:
        return max(1, int((quick if self.quick else full) * self.scale))

    def close(self) -> None:
        for url in self.seeds.values():
            if url.startswith("sqlite:///"):
                shutil.rmtree(Path(url.removeprefix("sqlite:///")).parent, ignore_errors=True)
        if self._pg is not None:
            self._pg.close()  # its seed databases with it


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run of about 2 minutes, small numbers")
    p.add_argument("--only", action="append", metavar="SECTION",
                   help=f"run only this section (repeatable): {', '.join(SECTIONS)} or 1-{len(SECTIONS)}")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every count by this (e.g. 0.5)")
    p.add_argument("--stores", default="sqlite,postgres",
                   help="stores for the sections that run on both (default sqlite,postgres)")
    p.add_argument("--out", help="where to write the report (default: docs/benchmarks.md for a full run, "
                                 "bench/results/quick/benchmarks.md for --quick)")
    p.add_argument("--repeat", type=int, help="runs of each section (default 3, --quick 1); the report gives the "
                                              "median and spread, and a goal is met only if met in every run")
    p.add_argument("--history", type=int, default=0, metavar="EVENTS",
                   help="run section 3 (detection) alone, on a store that already holds this many events (made once, as "
                        "section 5 makes its store, read models rebuilt) instead of a fresh one; results and report "
                        "under bench/results/<mode>-historyEVENTS/")
    p.add_argument("--render", action="store_true", help="only re-render the report from the saved results")
    args = p.parse_args(argv)

    chosen = []
    for s in args.only or list(SECTIONS):
        name = ALIASES.get(s, s)
        if name not in SECTIONS:
            p.error(f"unknown section {s!r}: choose from {', '.join(SECTIONS)} or 1-{len(SECTIONS)}")
        chosen.append(name)
    if args.history:  # a store with history is section 3's option alone
        if args.only and chosen != ["detection"]:
            p.error("--history applies to section 3 (detection) alone: --only detection, or no --only")
        chosen = ["detection"]
    mode = "quick" if args.quick else "full"
    if args.scale != 1.0:
        mode += f"-x{args.scale:g}"
    if args.history:
        mode += f"-history{args.history}"
    results_dir = ROOT / "bench" / "results" / mode
    results_dir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else (ROOT / "docs" / "benchmarks.md" if mode == "full"
                                           else results_dir / "benchmarks.md")
    if args.render:
        out.write_text(render(results_dir, list(SECTIONS)))
        log(f"report: {out}")
        return 0
    raise_fd_limit()
    os.environ.setdefault("NO_PROXY", "*")
    ctx = Context(args.quick, args.scale, [s.strip() for s in args.stores.split(",") if s.strip()], args.history)
    repeat = args.repeat or (1 if args.quick else 3)
    here = machine()
    (results_dir / "machine.json").write_text(json.dumps({**here, "calibration_s": calibrate(),
                                                          "calibration_store_s": calibrate_store()}, indent=2))
    started = time.monotonic()
    try:
        for name in chosen:
            log(f"section {name}: starting ({mode})")
            t0 = time.monotonic()
            load_before = open("/proc/loadavg").read().split()[:3]
            code = code_version()
            module = importlib.import_module(SECTIONS[name])
            runs, calibration, calibration_store = [], [], []
            for i in range(1 if getattr(module, "REPEATS_ITSELF", False) else repeat):
                calibration.append(calibrate())
                calibration_store.append(calibrate_store())
                log(f"section {name}: run {i + 1} (calibration loop {calibration[-1]:.2f} s, "
                    f"store loop {calibration_store[-1]:.2f} s)")
                try:
                    runs.append(module.run(ctx))
                except Exception:
                    traceback.print_exc()
                    runs.append({"error": traceback.format_exc()})
            took = time.monotonic() - t0
            doc = {"section": name, "mode": mode, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                   "took_s": took, "code": code, "loadavg_before": " ".join(load_before),
                   "loadavg_after": " ".join(open("/proc/loadavg").read().split()[:3]), "result": runs[-1],
                   "runs": runs, "calibration_s": calibration, "calibration_store_s": calibration_store,
                   "cpu": cpu_text(here)}
            if ctx._pg is not None:
                doc["postgres_settings"] = ctx._pg.settings
            (results_dir / f"{name}.json").write_text(json.dumps(doc, indent=2, default=str))
            log(f"section {name}: done in {took:.0f}s")
            out.write_text(render(results_dir, list(SECTIONS)))
    finally:
        ctx.close()
    log(f"all done in {time.monotonic() - started:.0f}s; report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
