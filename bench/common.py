"""Shared plumbing of the benchmarks: the machine, /proc readings, Postgres,
Relay as a process, the client fleets, and polling the store.

Nothing here asserts anything: every helper measures and returns numbers.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def raise_fd_limit(n: int = 200_000) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(n, soft), max(n, hard)))
    except (ValueError, PermissionError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ------------------------------------------------------------------ /proc
def calibrate() -> float:
    """Seconds a fixed CPU-only Python loop takes (best of 3): the machine's own
    speed beside its figures, so runs on different machines (or one machine
    slowed by a neighbour) can be told apart. Lower is faster."""
    def once() -> float:
        t0 = time.perf_counter()
        acc = 0
        for i in range(1_000_000):
            acc = (acc + i * i) % 1_000_003
        doc = {"executor_id": "calibration", "status": "HEALTHY", "n": 12345, "tags": ["a", "b", "c"]}
        for _ in range(50_000):
            json.loads(json.dumps(doc))
        return time.perf_counter() - t0

    return min(once() for _ in range(3))


STORE_CALIBRATION_ROWS = 100_000


def calibrate_store() -> float:
    """Seconds a fixed SQLite job takes (best of 2): 100,000 rows of about 300 bytes written to a
    file in transactions of 1,000 (WAL, ``synchronous=NORMAL``, as Relay's store), then read back
    in order with ``json.loads`` of each, as a raw scan is. Beside :func:`calibrate`: a machine
    whose CPU loop runs as fast can still be slower at this (memory, page cache, the file system),
    and the store-bound baselines move with it. Lower is faster."""
    import sqlite3
    import tempfile

    doc = json.dumps({"executor_id": "c" * 36, "status": "DISCONNECTED", "reason": "socket_closed",
                      "deadline": "2026-12-05T00:00:00.000000+00:00", "metadata": {"k": "v" * 120}})

    def once() -> float:
        with tempfile.TemporaryDirectory(prefix="relay-calibrate-") as d:
            t0 = time.perf_counter()
            conn = sqlite3.connect(f"{d}/c.db", isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE e (id INTEGER PRIMARY KEY, stream TEXT, version INTEGER, state BLOB)")
            for start in range(0, STORE_CALIBRATION_ROWS, 1_000):
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO e VALUES (?, ?, ?, ?)",
                                 [(i, f"s{i % 997}", i, doc.encode()) for i in range(start, start + 1_000)])
                conn.execute("COMMIT")
            for row in conn.execute("SELECT id, stream, version, state FROM e ORDER BY id"):
                json.loads(row[3])
            conn.close()
            return time.perf_counter() - t0

    return min(once() for _ in range(2))


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _read_cpu(path: str) -> float:
    """utime + stime of a ``/proc/.../stat`` (a process's own, all its threads; or one thread's), in
    seconds. Raises FileNotFoundError once it is gone."""
    with open(path) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) and of its living child processes (Relay's
    read-model process, ADR 8), in seconds."""
    own = _read_cpu(f"/proc/{pid}/stat")
    from tests.server import children_of

    return own + sum(_cpu_or_zero(child) for child in children_of(pid))



def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def thread_cpu(pid: int) -> dict[int, float]:
    """utime + stime per thread of a process, in seconds."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            out[int(tid)] = _read_cpu(f"/proc/{pid}/task/{tid}/stat")
        except FileNotFoundError:
            continue
    return out


class ThreadMeter:
    """CPU of a process's main thread (Relay: the asyncio loop, i.e. sockets and
    the hub) against its other threads (store commands, projections, process
    manager), between start() and stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = 0.0
        self.c0: dict[int, float] = {}

    def start(self) -> "ThreadMeter":
        self.t0 = time.monotonic()
        self.c0 = thread_cpu(self.pid)
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        c1 = thread_cpu(self.pid)
        used = {tid: c1[tid] - self.c0.get(tid, 0.0) for tid in c1}
        main = used.get(self.pid, 0.0)
        others = sorted((v for tid, v in used.items() if tid != self.pid), reverse=True)
        return {"wall_s": wall, "main_cores": main / wall if wall else 0.0,
                "other_threads_cores": sum(others) / wall if wall else 0.0,
                "busiest_other_threads_cores": [round(v / wall, 3) for v in others[:4]] if wall else []}


class CpuMeter:
    """CPU seconds of some processes between start() and stop()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.t0 = 0.0
        self.c0: dict[str, float] = {}

    def start(self) -> "CpuMeter":
        self.t0 = time.monotonic()
        self.c0 = {k: _cpu_or_zero(p) for k, p in self.pids.items()}
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        out: dict[str, Any] = {"wall_s": wall}
        for k, p in self.pids.items():
            used = _cpu_or_zero(p) - self.c0[k]
            out[k] = {"cpu_s": used, "cores": used / wall if wall > 0 else 0.0}
        return out


def _stat_cpu(path: str) -> float:
    """:func:`_read_cpu`, 0.0 once it is gone."""
    try:
        return _read_cpu(path)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def machine_jiffies() -> tuple[int, int, int]:
    """(busy, stolen, total) clock ticks of all the machine's cores since boot (``/proc/stat``): busy is
    user, nice, system, irq and softirq; stolen is what the hypervisor gave to others while this
    machine wanted to run; idle and iowait are neither. The guest columns are left out: user and
    nice hold them already."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    values += [0] * (8 - len(values))  # an old kernel without steal
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return user + nice + system + irq + softirq, steal, sum(values)


class CpuTimeline:
    """Where the machine's CPU went over any window of a run, read afterwards (:meth:`window`): a thread
    of this process samples ``/proc`` every ``every`` seconds between :meth:`start` and :meth:`stop`, for
    the server (its own process, and its main thread, the event loop, on its own), the server's child
    processes (the read models', ADR 8), some other processes (the clients) and the whole machine.
    Sampling costs this process well under a millisecond a sample. A sample that fails ends the
    sampling (:attr:`error` says why) and every window is None from then: a window read across the
    gap would average over the wrong time."""

    def __init__(self, server: int, others: dict[str, list[int]], *, every: float = 0.1) -> None:
        self.server = server
        self.others = others
        self.every = every
        self.samples: list[tuple[float, dict[str, float], tuple[int, int, int]]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu-timeline", daemon=True)

    def _sample(self) -> None:
        from tests.server import children_of

        try:
            cpu = {"server": _stat_cpu(f"/proc/{self.server}/stat"),
                   "server event loop": _stat_cpu(f"/proc/{self.server}/task/{self.server}/stat"),
                   "read models": sum(_stat_cpu(f"/proc/{c}/stat") for c in children_of(self.server))}
            for name, pids in self.others.items():
                cpu[name] = sum(_stat_cpu(f"/proc/{p}/stat") for p in pids)
            self.samples.append((time.time(), cpu, machine_jiffies()))
        except Exception as e:  # noqa: BLE001 -- a bench reading: recorded, never raised into the run
            self.error = self.error or f"{type(e).__name__}: {e}"

    def _run(self) -> None:
        while self.error is None and not self._stop.wait(self.every):
            self._sample()

    def start(self) -> "CpuTimeline":
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def window(self, t0: float, t1: float) -> dict[str, Any] | None:
        """The cores each used from the last sample at or before ``t0`` to the first at or after ``t1``
        (wall clock, ``time.time()``), the server's other threads apart from its event loop, and the
        machine's busy and stolen shares (fractions of all its cores); None if the samples do not cover
        it, if they are further apart than the window plus three periods, or if a sample failed. A
        child process that ended within the window loses what it used there (``/proc`` forgets it). The
        process and its main thread are read one after the other, not at one instant: the other threads'
        share is their difference, at least zero, to within a tick or so."""
        if self.error is not None:
            return None
        before = [x for x in self.samples if x[0] <= t0]
        after = [x for x in self.samples if x[0] >= t1]
        if not before or not after:
            return None
        (ta, a, ja), (tb, b, jb) = before[-1], after[0]
        wall = tb - ta
        if wall <= 0 or wall > (t1 - t0) + 3 * self.every:
            return None
        cores = {k: max(0.0, b[k] - a.get(k, 0.0)) / wall for k in b}
        cores["server other threads"] = max(0.0, cores["server"] - cores["server event loop"])
        total = jb[2] - ja[2]
        return {"from": ta, "seconds": wall, "cores": cores,
                "machine_busy": (jb[0] - ja[0]) / total if total > 0 else None,
                "machine_stolen": (jb[1] - ja[1]) / total if total > 0 else None}


def _cpu_or_zero(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


# ----------------------------------------------------------------- machine
def code_version() -> str:
    """The commit Relay's code is at, and whether relay_es/ has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "relay_es"], capture_output=True,
                               text=True).stdout.strip()
        return commit + (" (+ uncommitted changes in relay_es/)" if dirty else "")
    except OSError:
        return "?"


def cpu_text(m: dict[str, Any]) -> str:
    """The CPU of :func:`machine`'s answer, as the report names it (each section records its own:
    machines of one kind differ, and the report's sections may come from several)."""
    return f"{m.get('cores', '?')} cores, {m.get('cpu_model', '?')}" + (
        f" ({m['cpu_mhz']:.0f} MHz)" if m.get("cpu_mhz") else "")


def machine() -> dict[str, Any]:
    model = "?"
    mhz = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":", 1)[1])
    except OSError:
        pass
    mem_kb = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    pg = "?"
    pgbin = pg_bin()
    if pgbin:
        try:
            pg = subprocess.run([f"{pgbin}/postgres", "--version"], capture_output=True, text=True).stdout.strip()
        except OSError:
            pass
    versions: dict[str, str] = {}
    from importlib import metadata

    for pkg in ("eventsourcing", "websockets", "uvicorn", "litestar", "psycopg", "msgspec"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "-"
    commit = "?"
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "?"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "relay_es"], capture_output=True,
                               text=True).stdout.strip()
        if dirty:
            commit += " (+ uncommitted changes in relay_es/)"
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": model,
        "cpu_mhz": mhz,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgres": pg,
        "sqlite": sqlite3.sqlite_version,
        "packages": versions,
        "commit": commit,
    }


# ---------------------------------------------------------------- postgres
def pg_bin() -> str | None:
    env = os.environ.get("RELAY_TEST_PGBIN")
    if env:
        return env
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return str(found[-1].parent) if found else None


class Postgres:
    """A throwaway cluster (tests.fault.pg.PgCluster: fsync=off, max_connections=200)."""

    def __init__(self) -> None:
        from tests.fault.pg import PgCluster

        self.cluster = PgCluster()
        self.admin_url = self.cluster.url
        self.settings = self._settings()

    def _settings(self) -> dict[str, str]:
        import psycopg

        out = {}
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            for k in ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"):
                out[k] = c.execute(f"SHOW {k}").fetchone()[0]
        return out

    def create_db(self, prefix: str = "bench", *, template: str | None = None) -> str:
        """A new database; ``template``: the URL of one to copy (nobody may be connected to it)."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            copy = ""
            if template:
                copy = f' TEMPLATE "{template.rsplit("/", 1)[1]}"'
                # Postgres 15 copies a template through the WAL by default, and a large copy then
                # checkpoints during what is measured next; FILE_COPY checkpoints here, before it.
                if int(c.execute("SHOW server_version_num").fetchone()[0]) >= 150000:
                    copy += " STRATEGY FILE_COPY"
            c.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.admin_url.rsplit("/", 1)[0] + "/" + name

    def drop_db(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.admin_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self.cluster.destroy()


# --------------------------------------------------------------- the store
class StoreReader:
    """Reads the event log's head and the projections' positions directly."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pg = url.startswith("postgres")
        self._conn: Any = None
        self._events_table: str | None = None

    def _c(self) -> Any:
        if self._conn is None:
            if self.pg:
                import psycopg

                self._conn = psycopg.connect(self.url, autocommit=True)
            else:
                path = self.url[len("sqlite:///"):]
                self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, isolation_level=None)
        return self._conn

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        c = self._c()
        if self.pg:
            return c.execute(sql.replace("?", "%s"), params).fetchall()
        return c.execute(sql, params).fetchall()

    def events_table(self) -> str | None:
        if self._events_table is None:
            if self.pg:
                names = {r[0] for r in self.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
            else:
                names = {r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for t in ("relay_events", "stored_events"):
                if t in names:
                    self._events_table = t
                    break
        return self._events_table

    def head(self) -> int:
        t = self.events_table()
        if t is None:
            return 0
        col = "notification_id" if self.pg else "rowid"
        r = self.query(f"SELECT MAX({col}) FROM {t}")
        return int(r[0][0] or 0)

    def positions(self) -> dict[str, int] | None:
        """Each read model's position; {} before the read models' table exists, None when it could
        not be read (a busy store): not position 0, which would move a rate's window."""
        try:
            return {n: int(p) for n, p in self.query("SELECT name, position FROM relay_tracking")}
        except Exception as e:
            self.reset()
            if "no such table" in str(e) or type(e).__name__ == "UndefinedTable":
                return {}
            return None

    def projected(self) -> int | None:
        """The read models' lowest position (0 before they exist), None when it could not be read."""
        ps = self.positions()
        return None if ps is None else min(ps.values()) if ps else 0

    def caught_up(self) -> bool:
        """Have the read models folded the whole log (False when their position could not be read)?"""
        p = self.projected()
        return p is not None and p >= self.head()

    def count_status(self, app: str, status: str, owner: str | None = None) -> int:
        sql = "SELECT count(*) FROM relay_executors WHERE app = ? AND status = ?"
        params: tuple[Any, ...] = (app, status)
        if owner is not None:
            sql += " AND owner = ?"
            params += (owner,)
        try:
            return int(self.query(sql, params)[0][0])
        except Exception:
            self.reset()
            return 0

    def reset(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None

    close = reset


class Poller(threading.Thread):
    """Samples (t, head, projected) every ``interval`` seconds."""

    def __init__(self, url: str, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.reader = StoreReader(url)
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                t, head, projected = time.monotonic(), self.reader.head(), self.reader.projected()
                if projected is not None:  # else not read: no sample
                    self.samples.append((t, head, projected))
            except Exception:
                self.reader.reset()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.reader.close()

    def latest(self) -> tuple[float, int, int]:
        return self.samples[-1] if self.samples else (time.monotonic(), 0, 0)


def disconnected_executors(n: int, app: str, *, deadline: Any, at: Any, ids: Callable[[int], str] | None = None,
                           metadata: dict[str, Any] | None = None) -> list[Any]:
    """``n`` executor aggregates of org ``local``, not saved: Registered and Connected (version v1) at
    ``at``, then Disconnected (``socket_closed``) with ``deadline`` (datetimes). ``ids``: executor id
    of the i-th (a random UUID by default)."""
    from relay_es.aggregates.executor import Executor

    out = []
    for i in range(n):
        ex = Executor(org="local", app=app, executor_id=ids(i) if ids else str(uuid.uuid4()), timestamp=at)
        ex.connect(connection_id=uuid.uuid4().hex, owner="bench", app_version="v1", hostname="h", language="python",
                   dbos_version="3.2.0", executor_metadata=dict(metadata or {}), at=at)
        ex.disconnect(connection_id=ex.connection_id, reason="socket_closed", deadline=deadline, at=at)
        out.append(ex)
    return out


def active_rate(samples: list[tuple[float, int]], base: int, target: int) -> dict[str, Any]:
    """Rate of a counter going from ``base`` to ``target``: over the window
    from the last sample at ``base`` to the first sample at ``target``."""
    t_start = None
    t_end = None
    for t, v in samples:
        if v <= base:
            t_start = t
        if v >= target and t_end is None:
            t_end = t
    if t_start is None and samples:
        t_start = samples[0][0]
    n = target - base
    if t_end is None or t_start is None or t_end <= t_start:
        return {"count": n, "seconds": None, "per_s": None, "t_start": t_start, "t_end": t_end}
    return {"count": n, "seconds": t_end - t_start, "per_s": n / (t_end - t_start), "t_start": t_start, "t_end": t_end}


# ------------------------------------------------------------------- relay
# One key and one application per storm: Relay's per-key and per-application caps (10,000 by
# default, protocol/limits.py) are raised so that they are not what is measured.
BENCH_LIMITS = ["--max-connections-per-key", "1000000", "--max-connections-per-app", "1000000",
                "--max-executors-per-key", "1000000", "--max-executors-per-app", "1000000"]


GC_HISTOGRAMS = {"relay_gc_pause_seconds": "generation", "relay_gc_full_collection_seconds": None}


def scrape(http: str, **kw: Any) -> dict[str, list[Any]]:
    """A server's ``/metrics``, parsed once (prometheus_client's parser): ``{family name: samples}``.
    ``kw``: for ``httpx.get`` (``verify``)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(http + "/metrics", timeout=30, **kw).text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def gc_histograms(scraped: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """The server's garbage-collection histograms from a :func:`scrape` (ADR 13): ``{series: {"count": n,
    "sum": seconds, "buckets": {le: cumulative count}}}``, a series per generation of CPython's own
    collections (``"generation 0"`` ...) and ``"relay full"`` for the full collections Relay ran."""
    out: dict[str, dict[str, Any]] = {}
    for name, label in GC_HISTOGRAMS.items():
        for sample in scraped.get(name, ()):
            key = f"generation {sample.labels[label]}" if label else "relay full"
            h = out.setdefault(key, {"count": 0, "sum": 0.0, "buckets": {}})
            if sample.name.endswith("_count"):
                h["count"] = int(sample.value)
            elif sample.name.endswith("_sum"):
                h["sum"] = sample.value
            elif sample.name.endswith("_bucket"):
                h["buckets"][float(sample.labels["le"])] = int(sample.value)
    return out


def pm_cpu(scraped: dict[str, list[Any]]) -> dict[str, float]:
    """The process manager's thread CPU seconds by work, from a :func:`scrape`
    (``relay_process_manager_cpu_seconds_total{work}``)."""
    return {s.labels["work"]: s.value for s in scraped.get("relay_process_manager_cpu_seconds", ())
            if s.name.endswith("_total")}


def gc_between(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What :func:`gc_histograms` grew by between two readings, per series: ``{"count", "ms"`` (in
    all), ``"longest_le_ms"`` (the smallest bucket bound holding every one of them: the longest took at
    most that; ``None`` above the last bound)``}``; series with no collection left out."""
    out = {}
    for key, h in after.items():
        b = before.get(key, {"count": 0, "sum": 0.0, "buckets": {}})
        n = h["count"] - b["count"]
        if n <= 0:
            continue
        bound = next((le for le in sorted(h["buckets"])
                      if h["buckets"][le] - b["buckets"].get(le, 0) >= n), None)
        out[key] = {"count": n, "ms": 1000 * (h["sum"] - b["sum"]),
                    "longest_le_ms": None if bound is None or bound == float("inf") else 1000 * bound}
    return out


def listen_overflows() -> int | None:
    """The kernel's count of connections dropped because a listening socket's accept queue was full
    (``ListenOverflows`` in ``/proc/net/netstat``, all sockets of the network namespace since boot);
    ``None`` where it cannot be read. A client whose handshake is dropped tries again 1 s, 3 s, 7 s
    later, so a storm that overflows takes seconds longer, whatever the server does (ADR 2)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return None
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            counts = dict(zip(names.split()[1:], values.split()[1:]))
            return int(counts["ListenOverflows"]) if "ListenOverflows" in counts else None
    return None


def largest_fleet(goal: int = 20_000) -> int:
    """``goal`` sockets, or as many as one process may open: the open-file limit's hard
    value, which a process without CAP_SYS_RESOURCE cannot raise (20,000 here), less
    500 for the server's own files."""
    return min(goal, resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 500)


def relay_server(workdir: Path, store_url: str, *, port: int | None = None, env: dict[str, str] | None = None,
                 args: list[str] | None = None, wait: bool = True) -> Any:
    from tests.server import RelayServer

    srv = RelayServer(workdir, port=port, args=["--database-url", store_url, "--log-level", "WARNING", *BENCH_LIMITS,
                                                *(args or [])], env=env)
    srv.bench_started = time.monotonic()  # type: ignore[attr-defined]
    srv.start(wait=wait)
    return srv


def past_settle(srv: Any, settle: float = 5.0, margin: float = 1.0) -> None:
    """Waits until Relay has been up longer than its restart settle window
    (RELAY_RESTART_SETTLE_SECS, 5 s): until then no deadline is enforced."""
    left = srv.bench_started + settle + margin - time.monotonic()
    if left > 0:
        time.sleep(left)


def wait_until(pred: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# ------------------------------------------------------------------ fleets
class Fleet:
    """A client process (``python -m bench.clients``) holding many sockets.

    Commands go in as JSON lines on stdin; each answer is one JSON line.
    """

    def __init__(self, name: str = "fleet") -> None:
        self.name = name
        self.proc = subprocess.Popen([PY, "-m", "bench.clients"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()
        self._err: list[str] = []
        threading.Thread(target=self._drain_err, daemon=True).start()

    def _drain_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._err.append(line)
            if len(self._err) > 200:
                del self._err[:100]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, cmd: str, timeout: float = 600, **kw: Any) -> dict[str, Any]:
        with self._lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: client process ended:\n{''.join(self._err[-30:])}")
        out = json.loads(line)
        if out.get("error"):
            raise RuntimeError(f"{self.name}: {out['error']}")
        return out

    def send(self, cmd: str, **kw: Any) -> None:
        """Fire a command whose answer is collected later with :meth:`reply`."""
        assert self.proc.stdin is not None
        self._lock.acquire()
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        try:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
        finally:
            self._lock.release()
        if not line:
            raise RuntimeError(f"{self.name}: client process ended:\n{''.join(self._err[-30:])}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(15)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)


def fleets_call(fleets: list[Fleet], cmd: str, per_fleet: list[dict[str, Any]] | None = None,
                **kw: Any) -> list[dict[str, Any]]:
    """The same command to every fleet at once; their answers in order."""
    for i, f in enumerate(fleets):
        extra = per_fleet[i] if per_fleet else {}
        f.send(cmd, **kw, **extra)
    return [f.reply() for f in fleets]


def split(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


@dataclass
class Workdir:
    path: Path

    @classmethod
    def make(cls, prefix: str) -> "Workdir":
        return cls(Path(tempfile.mkdtemp(prefix=f"relay-bench-{prefix}.")))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def stop_proc(proc: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
