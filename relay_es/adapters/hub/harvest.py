"""Collecting the executors' metrics: ``get_metrics``, window by window, into the series.

The process manager's ``metrics`` timer (one per application with a HEALTHY executor,
every period) asks the :class:`~relay_es.adapters.hub.dispatcher.Dispatcher` to collect an
application; :meth:`Harvest.collect` does it on the event loop (store calls and the
summing of an answer on worker threads): reads the application's
cursor, asks one executor (the latest version's, through :class:`Calls`) for each window
:func:`relay_es.engine.metric_windows.due` names, oldest first, and stores each answer with
the cursor moved (:class:`~relay_es.adapters.series.MetricSeries`). The executors of one
application share its system database, so one of them answers for all.

A call that fails (no executor, no answer in time, the executor's error, an SDK without
``get_metrics``) stops the collection there: the cursor stays, and the next one asks
again from it (an application's first collection sets its cursor before it asks, so
its backfill does not move while its executors fail; never before the application's
registration, as the applications' read model has it: a deleted application's workflows, in
the system database its executors share with one registered again under its name, are not
the new one's). Once a period, samples older than the retention are pruned.
A store away or full fails every application's collection alike, every period: it is told as an outage
(:class:`~relay_es.adapters.failures.OutageLog`: a line as it starts, one a minute, one as it ends), and
only a bug with its traceback.
Every collection, whatever came of it, tells ``outcome`` the cursor as it stands (the stored one, moved by
what it stored), so ``relay_metrics_collected_until_timestamp_seconds`` is there after a restart even while
the executors fail.

The windows due and the pruning's cutoff are cut from a :class:`~relay_es.domain.clock.Timeline`
of the wall and monotonic clocks: a wall clock stepped ahead is not followed until Relay restarts (said at
WARNING, once a period), so it neither asks the executors for buckets they have not reached nor prunes
history that is still kept.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from relay_es.adapters.failures import OutageLog
from relay_es.adapters.hub.calls import Calls
from relay_es.adapters.series import MetricSeries
from relay_es.domain.clock import Timeline
from relay_es.engine.calls import CallFailed
from relay_es.engine.metric_windows import CATCHUP, Window, due
from relay_es.projections import apps as apps_view
from relay_es.protocol import metrics as wire
from relay_es.protocol.limits import printable

log = logging.getLogger(__name__)


class Harvest:
    def __init__(self, calls: Calls, series: MetricSeries, run: Callable[..., Awaitable[Any]], *,
                 period: int, retention: float, timeout: float, now: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 collected: Callable[[str, str, Window, wire.Samples], None] = lambda org, app, w, s: None,
                 outcome: Callable[[str, str, str, int | None], None] = lambda org, app, outcome, until: None,
                 registered: Callable[[str, str], float | None] | None = None,
                 ) -> None:
        """``run``: how a store call is run off the loop. ``period``: the buckets' length,
        seconds. ``retention``: seconds samples are kept. ``timeout``: one call. ``now``: the
        wall clock, epoch seconds; ``monotonic``: the monotonic clock. ``collected(org, app, window,
        samples)`` is told of every window stored and ``outcome(org, app, "ok" | "failed", until)``
        of every collection, with the application's cursor after it (None: not read, or never set)
        (the metrics). ``registered(org, app)``: when the application was registered, epoch seconds
        (None: not registered); read off the loop, at its first collection only (default: the
        applications' read model, on the series' database)."""
        self.calls = calls
        self.series = series
        self.run = run
        self.period = period
        self.retention = retention
        self.timeout = timeout
        self.now = now
        self.monotonic = monotonic
        self.timeline = Timeline(now(), monotonic())
        self._warned_at = float("-inf")  # monotonic time the wall clock's lead was last logged
        self.collected = collected
        self.outcome = outcome
        self.registered = registered or self._registered
        self._running: set[tuple[str, str]] = set()
        # Moved on by forget() while a collection runs, which then stops; kept only while one runs.
        self._generation: dict[tuple[str, str], int] = {}
        self._failing: dict[tuple[str, str], str] = {}  # the last failure logged, per application
        self._pruned_at = float("-inf")
        # A store away fails every application's collection every period alike: told as an outage (a line
        # when it starts, one a minute, one when it ends), not a traceback each. Reads, writes and the
        # pruning apart: on a full disk the reads go on working, and a read that works ends no write's outage.
        self._reads = OutageLog(log, "metrics collection", monotonic=monotonic, then="asked again next period")
        self._writes = OutageLog(log, "metrics collection", monotonic=monotonic, then="asked again next period")
        self._prunes = OutageLog(log, "metrics pruning", monotonic=monotonic, then="tried again next period")
        # missed buckets asked for at most: a day's worth at the default period, never more than kept
        self.catchup = max(1, min(CATCHUP, int(retention // period)))

    async def collect(self, org: str, app: str) -> int:
        """Collects what is due of ``org``/``app``; returns how many windows were stored.
        One collection per application at a time (a second is a no-op)."""
        key = (org, app)
        if key in self._running:
            return 0
        self._running.add(key)
        try:
            stored = await self._collect(org, app)
        finally:
            self._running.discard(key)
            self._generation.pop(key, None)
        await self._prune()
        return stored

    def forget(self, org: str, app: str) -> None:
        """The application was deleted: a collection of it under way stores and tells nothing more, and
        nothing of it is kept (one registered again under its name starts with no failure behind it)."""
        key = (org, app)
        self._failing.pop(key, None)
        if key in self._running:
            self._generation[key] = self._generation.get(key, 0) + 1

    async def _collect(self, org: str, app: str) -> int:
        key = (org, app)
        generation = self._generation.get(key, 0)

        def gone() -> bool:
            return self._generation.get(key, 0) != generation

        try:
            cursor = await self.run(self.series.cursor, org, app)
        except Exception as e:
            if not self._reads.store_failed(f"failed reading the cursor of {org}/{app}", e):
                log.exception("could not read the metrics cursor of %s/%s", org, app)
            self.outcome(org, app, "failed", None)
            return 0
        floor = None
        if cursor is None:  # its first collection: from its registration at the earliest
            try:
                registered = await self.run(self.registered, org, app)
            except Exception as e:
                if not self._reads.store_failed(f"failed reading when {org}/{app} was registered", e):
                    log.exception("could not read when %s/%s was registered", org, app)
                self.outcome(org, app, "failed", None)
                return 0
            self._reads.worked("reads the store again")  # both reads went through
            if registered is None:  # deleted, or its registration not in the read model yet
                self._failed(org, app, None, "the application is not in the read models (not yet, or deleted)")
                return 0
            floor = math.floor(registered)  # its second: none of its own workflows left out
        else:
            self._reads.worked("reads the store again")
        now = self._now()
        windows = due(cursor, now, self.period, catchup=self.catchup, floor=floor)
        if cursor is None and windows:  # its first collection: from here on, whatever happens
            if gone():
                return 0
            try:
                cursor = await self.run(self.series.begin, org, app, windows[0].start)
            except Exception as e:
                if not self._writes.store_failed(f"failed starting the cursor of {org}/{app}", e):
                    log.exception("could not start the metrics cursor of %s/%s", org, app)
                self.outcome(org, app, "failed", None)
                return 0
            self._writes.worked("writes to the store again")
            windows = due(cursor, now, self.period, catchup=self.catchup)
        stored = 0
        for window in windows:
            try:
                answer = await self.calls.call(org, app, lambda rid, w=window: wire.request(rid, w.start, w.end),
                                               timeout=self.timeout, prefer_latest=True)
            except CallFailed as e:
                if not gone():
                    self._failed(org, app, cursor, f"get_metrics failed: {printable(e, 200)}")
                return stored
            got = await self.run(wire.samples, answer)  # off the loop: up to MAX_ENTRIES entries to add up
            if gone():
                return stored
            if got.dropped or got.folded:
                log.warning("metrics of %s/%s [%d, %d): %d samples refused, %d names folded into %r", org, app,
                            window.start, window.end, got.dropped, got.folded, wire.OTHER)
            try:
                moved = await self.run(self._record, org, app, cursor, window, got)
            except Exception as e:
                if not self._writes.store_failed(f"failed storing the metrics of {org}/{app}", e):
                    log.exception("could not store the metrics of %s/%s", org, app)
                self.outcome(org, app, "failed", cursor)
                return stored
            self._writes.worked("writes to the store again")
            if not moved:  # another collector stored it (and what follows): start again next time
                log.info("metrics of %s/%s were collected elsewhere meanwhile", org, app)
                return stored
            cursor = window.end
            stored += 1
        if gone():
            return stored
        if self._failing.pop((org, app), None) is not None:
            log.info("metrics of %s/%s are collected again", org, app)
        self.outcome(org, app, "ok", cursor)
        return stored

    def _record(self, org: str, app: str, cursor: int | None, window: Window, got: wire.Samples) -> bool:
        """Stores ``window``'s samples (off the loop) and, if this collector did, tells ``collected`` in the
        same call: /metrics is never behind what listMetrics answers (a scrape between the two on the loop
        saw the stored buckets without their counts)."""
        moved = self.series.record(org, app, cursor, window, got.kept)
        if moved:
            self.collected(org, app, window, got)
        return moved

    def _registered(self, org: str, app: str) -> float | None:
        """When ``org``/``app`` was last registered (a deleted one registered again is another), as the
        applications' read model has it; None: not registered there (deleted, or not folded yet)."""
        row = apps_view.app_named(self.series.db, org, app)
        return None if row is None else row.created_at.timestamp()

    def _failed(self, org: str, app: str, cursor: int | None, why: str) -> None:
        self.outcome(org, app, "failed", cursor)
        if self._failing.get((org, app)) != why:  # once per new reason, not every period
            self._failing[(org, app)] = why
            log.warning("metrics of %s/%s not collected (asked again next period): %s", org, app, why)

    def _now(self) -> float:
        """The time windows and pruning are cut from (the timeline's)."""
        mono = self.monotonic()
        now = self.timeline.now(self.now(), mono)
        if self.timeline.ahead > 1 and mono - self._warned_at >= self.period:
            self._warned_at = mono
            log.warning("the wall clock is %.0f s ahead of where it stood, moved on by the monotonic clock: "
                        "metrics are collected and pruned by the earlier time until Relay restarts",
                        self.timeline.ahead)
        return now

    async def _prune(self) -> None:
        now = self._now()
        if now - self._pruned_at < self.period:
            return
        self._pruned_at = now
        try:
            n = await self.run(self.series.prune, int(now - self.retention))
        except Exception as e:
            if not self._prunes.store_failed("failed", e):
                log.exception("could not prune the metrics series")
            return
        self._prunes.worked()
        if n:
            log.info("pruned %d metric samples older than %gs", n, self.retention)
