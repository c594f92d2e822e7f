"""Prometheus metrics (``GET /metrics``), on a registry of the runtime's own.

Every series Relay exposes is defined here: :class:`Metrics` holds the
counters, gauges and histograms the runtime feeds as things happen, and two
collectors computed at scrape time (executors by status, the hub's outbox).
``tests/adapters/test_metrics.py`` checks each is exposed with its name and labels.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ExecutorsByStatus:
    """Computed at scrape time from the process manager's in-memory rows."""

    def __init__(self, rows: Callable[[], Iterable[Any]]) -> None:
        self.rows = rows

    def collect(self) -> Iterable[GaugeMetricFamily]:
        g = GaugeMetricFamily("relay_executors", "Executors by status and application",
                              labels=["org", "app", "status"])
        tally = Tally((r.org, r.app, r.status) for r in self.rows() if r.visible)
        for (org, app, status), n in sorted(tally.items()):
            g.add_metric([org, app, status], n)
        yield g


class _OutboxState:
    """Computed at scrape time from the hub's outbox (ADR 15: it never drops a transition)."""

    def __init__(self, outbox: Any) -> None:
        self.outbox = outbox

    def collect(self) -> Iterable[Any]:
        o = self.outbox
        errors = CounterMetricFamily("relay_outbox_errors", "Transitions that failed to record for a reason "
                                     "other than the store being away (a bug; each is kept and retried)")
        errors.add_metric([], o.errors)
        yield errors
        stuck = GaugeMetricFamily("relay_outbox_stuck_transitions",
                                  "Executors whose oldest transition failed on a bug and waits to be retried")
        stuck.add_metric([], len(o.stuck()))
        yield stuck
        queued = GaugeMetricFamily("relay_outbox_queued_transitions", "Executor transitions waiting to be recorded")
        queued.add_metric([], len(o))
        yield queued


class _ProcessManagerFailures:
    """The process manager's store errors and bugs, read from its counters at scrape time."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterable[CounterMetricFamily]:
        yield CounterMetricFamily("relay_process_manager_store_errors", "Process manager commands that failed on "
                                  "the store and were retried", value=self.stats.store_errors)
        yield CounterMetricFamily("relay_process_manager_bugs", "Process manager failures that were not store "
                                  "errors: bugs, logged with their traceback", value=self.stats.bugs)


class Metrics:
    """The metrics of one runtime, and :meth:`render` for the scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.transitions = Counter("relay_transitions", "Executor transitions recorded", ["event"], registry=r)
        self.recoveries_dispatched = Counter("relay_recoveries_dispatched", "Recovery dispatches sent", registry=r)
        self.recoveries_confirmed = Counter("relay_recoveries_confirmed", "Recoveries confirmed", registry=r)
        self.recoveries_failed = Counter("relay_recoveries_failed", "Recovery attempts failed", registry=r)
        self.dead_to_confirmed = Histogram(
            "relay_dead_to_recovery_confirmed_seconds", "Time from DeclaredDead to RecoveryConfirmed",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800), registry=r)
        self.open_connections = Gauge("relay_open_connections", "Open executor WebSocket connections", registry=r)
        self.append_latency = Histogram(
            "relay_event_store_append_seconds", "Latency of one save to the event store",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1), registry=r)
        self.full_collections = Histogram(
            "relay_gc_full_collection_seconds", "Full garbage collections Relay ran at a quiet moment (ADR 13)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r)
        self.auth_refused = Counter("relay_auth_refused", "Refused executor handshakes and API calls", ["where"],
                                    registry=r)
        self.projection_poison = Counter(
            "relay_projection_poison_events", "Events a read model skipped because it could not hold them (ADR 16)",
            ["projection"], registry=r)

    def watch_executors(self, rows: Callable[[], Iterable[Any]]) -> None:
        """Exposes ``relay_executors{org,app,status}``, counted from ``rows()`` (the visible ones) at each scrape."""
        self.registry.register(_ExecutorsByStatus(rows))

    def watch_outbox(self, outbox: Any) -> None:
        """Exposes the outbox's errors, stuck and queued transitions, read at each scrape."""
        self.registry.register(_OutboxState(outbox))

    def watch_process_manager(self, stats: Any) -> None:
        """Exposes the process manager's failures, read from ``stats`` (its ``Stats``) at each scrape:
        ``relay_process_manager_store_errors_total`` (retried) and ``relay_process_manager_bugs_total``
        (anything else; the first one makes ``/healthz`` answer 503)."""
        self.registry.register(_ProcessManagerFailures(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)
