"""``relay projections rebuild``: the read models rebuilt from the event store, two processes at a time."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

from relay_es.adapters.clock import SystemClock
from relay_es.adapters.stores import StoreConfig, event_store_env, open_database
from relay_es.engine.service import Relay
from relay_es.projections import REBUILD_GROUPS, all_projections
from relay_es.projections.runner import ProjectionRunner


def rebuild_in_processes(store: StoreConfig, names: Iterable[str] | None = None) -> int:
    """Resets the named projections, fills them in one process per group of
    :data:`~relay_es.projections.REBUILD_GROUPS` (in this process when there is
    one group or one core), then builds the indexes."""
    relay = Relay(event_store_env(store), clock=SystemClock())
    db = open_database(store)
    try:
        runner = ProjectionRunner(relay, db, all_projections())
        wanted = runner.reset(names)
        groups = [g for g in ([n for n in group if n in wanted] for group in REBUILD_GROUPS) if g]
        try:
            if len(groups) < 2 or (os.cpu_count() or 1) < 2:
                return runner.fill(wanted)
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(len(groups), mp_context=ctx) as pool:
                counts = list(pool.map(_fill_group, [store] * len(groups), groups))
            runner.catch_up()  # whatever arrived since
            return max(counts)
        finally:
            runner.create_schema()  # the indexes
    finally:
        db.close()
        relay.close()


def _fill_group(store: StoreConfig, names: list[str]) -> int:
    # The parent created every table; workers creating them again at once race in Postgres' catalog.
    relay = Relay({**event_store_env(store), "CREATE_TABLE": "false"}, clock=SystemClock())
    db = open_database(store)
    try:
        runner = ProjectionRunner(relay, db, [p for p in all_projections() if p.name in names], schema=False)
        return runner.fill(set(names))
    finally:
        db.close()
        relay.close()
