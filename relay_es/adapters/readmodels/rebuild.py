"""``relay projections rebuild``, and a server's start on read models far behind: the read models
filled from the event store, one process per core.

Each process folds every read model over one share of the streams
(:class:`~relay_es.projections.shares.StreamShare`): it reads and decodes only its
own streams' events (the store filters by stream id), so the log is decoded once in
all, and the work is split evenly whatever the read models' costs (ADR 11). A share process
ends with the process it works for (:mod:`~relay_es.adapters.readmodels.children`), logs as
it does, and hands back the events it skipped, which are counted there (``/metrics``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from relay_es.adapters.clock import SystemClock
from relay_es.adapters.readmodels.children import die_with_parent, exit_if_gone
from relay_es.adapters.stores import StoreConfig, event_store_env, open_database
from relay_es.engine.service import Relay
from relay_es.projections import all_projections
from relay_es.projections.runner import Poison, ProjectionRunner
from relay_es.projections.shares import StreamShare

MAX_PROCESSES = 4  # SQLite takes one writer at a time: more processes than this wait on its lock


def processes() -> int:
    """How many processes a rebuild runs: one per core, at most :data:`MAX_PROCESSES`."""
    return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


BEHIND_AT_START = 100_000  # events: from here a server's start fills empty read models in processes


def fill_at_start(relay: Relay, runner: ProjectionRunner, store: StoreConfig, *, least: int | None = None,
                  count: int | None = None) -> int:
    """At a server's start, before it folds the log itself: when the log holds at least ``least``
    events (:data:`BEHIND_AT_START` by default), the read models that have folded none of them
    (a first start on an existing store, a read model stored in an older version) are filled as a
    rebuild fills them, one process per share of the streams (:meth:`ProjectionRunner.fill_elsewhere`;
    the server's own batches wait). A million events fold in these processes in a fraction of the
    time one process's batches take (bench section 5, start-up). Returns how many events they
    read (0: nothing to do)."""
    count = processes() if count is None else count
    least = BEHIND_AT_START if least is None else least
    head = relay.head()
    if count < 2 or head < least:
        return 0
    spawn = multiprocessing.get_context("spawn")  # a fork server would outlive the fill, idle, as long as the server
    return runner.fill_elsewhere(
        lambda names, until: _fill_shares(store, names, until, count, spawn, runner.poisoned_elsewhere), head)


def _fill_shares(store: StoreConfig, names: set[str], until: int, count: int, ctx: BaseContext,
                 poisoned: Callable[[Poison], None] | None = None) -> int:
    """Fills ``names`` in ``count`` processes of ``ctx``, one share of the streams each; each event a
    share skipped goes to ``poisoned``. Returns how many events they read."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    with ProcessPoolExecutor(count, mp_context=ctx, initializer=_share_started, initargs=(os.getpid(), level)) as pool:
        read = 0
        for n, skipped in pool.map(_fill_share, [store] * count, [sorted(names)] * count,
                                   [StreamShare.of(i, count) for i in range(count)], [until] * count):
            read += n
            if poisoned is not None:
                for poison in skipped:
                    poisoned(poison)
        return read


def _share_started(caller: int, log_level: str) -> None:
    """A share process's first act: it ends with its parent (the caller, or the fork server, which
    ends with the caller) and at once if the caller is gone; it logs as the caller does.

    A process forked by a fork server holds the fork server's "alive" pipe (so that it could use the
    server itself), and the fork server runs until every holder has closed it: the share and the
    server would keep each other alive after the caller's death. The share closes its copy."""
    die_with_parent()
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:
        forkserver._forkserver._forkserver_alive_fd = None
        try:
            os.close(alive)
        except OSError:
            pass
    exit_if_gone(caller)
    from relay_es.adapters import logs

    logs.configure(log_level)


def rebuild_in_processes(store: StoreConfig, names: Iterable[str] | None = None, *, count: int | None = None) -> int:
    """Resets the named projections (all by default), fills them in ``count`` processes
    (:func:`processes` by default; in this process when that is 1), one share of the
    streams each, up to the newest event when it started; then moves their positions
    there, folds whatever arrived since, and builds the indexes. Returns how many
    notifications were read.

    Interrupted, the tables hold some of each share's rows and the positions are still 0:
    the next rebuild starts again; the next ``relay serve`` fills them again
    (:func:`fill_at_start`) or, on a log too short for that, folds it from the start over
    them (each read model's rows are written once whatever is replayed: the audit log's by
    notification id, the others' guarded by stream version)."""
    count = processes() if count is None else count
    ctx = _fork_server() if count > 1 else None
    relay = Relay(event_store_env(store), clock=SystemClock())
    db = open_database(store)
    try:
        runner = ProjectionRunner(relay, db, all_projections())
        wanted = runner.reset(names)
        try:
            if ctx is None:
                return runner.fill(wanted)
            head = relay.head()
            read = _fill_shares(store, wanted, head, count, ctx)
            runner.filled(wanted, head)
            return read + runner.catch_up()  # whatever arrived since
        finally:
            runner.create_schema()  # the indexes
    finally:
        db.close()
        relay.close()


def _fork_server() -> BaseContext:
    """A context whose processes are forked from a fork server that has imported this module (and
    with it Relay) once, started now: its imports overlap with the caller's own work (opening the
    store, dropping the tables) instead of each share process importing Relay after it. A rebuild
    of bench section 5 starts its shares some 0.2 s sooner than spawned ones (2026-12-06). Forked
    from the server, not from the caller: the shares inherit none of the caller's connections or
    threads. Spawned processes where there is no fork server (no ``fork``).

    The fork server runs ``python -c``, and Python (3.11 to 3.13) imports its preload on the
    server's own path, the current directory first, not the caller's (``forkserver.main`` ignores
    the ``sys_path`` it is given): a ``relay_es`` or a dependency's name in the directory ``relay``
    was run from would be imported and run in the shares. So it is started on the caller's path
    (``PYTHONPATH``) without the current directory (``PYTHONSAFEPATH``), and the shares run the
    very code the caller runs, as spawned ones do. One fork server serves the process for its
    life, started on the environment of the first call."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)  # "" is the current directory
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ctx


def _fill_share(store: StoreConfig, names: list[str], share: StreamShare, until: int) -> tuple[int, list[Poison]]:
    """One share's fill: the events read, and those skipped (logged here, counted by the caller)."""
    # The parent created every table; workers creating them again at once race in Postgres' catalog.
    relay = Relay({**event_store_env(store), "CREATE_TABLE": "false"}, clock=SystemClock())
    db = open_database(store)
    try:
        runner = ProjectionRunner(relay, db, [p for p in all_projections() if p.name in names], schema=False)
        skipped: list[Poison] = []
        runner.on_poison.append(skipped.append)
        return runner.fill(set(names), share=share, until=until), skipped
    finally:
        db.close()
        relay.close()
