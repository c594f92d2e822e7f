"""Prometheus metrics (``GET /metrics``), on a registry of the runtime's own.

Every series Relay exposes is defined here: :class:`Metrics` holds the
counters, gauges and histograms the runtime feeds as things happen, and the
collectors computed at scrape time from memory (executors by status, the hub's
outbox, the process manager's failures, the read models' lag, the workers'
failures): a scrape does no I/O.

The executors' own metrics, collected with ``get_metrics`` (``adapters/hub/harvest.py``),
are added up per application: ``relay_app_workflows_total{org,app,workflow}`` and
``relay_app_steps_total{org,app,step}``. Names come from executors, so an application
gets at most :data:`MAX_APP_NAMES` of each, cut to :data:`MAX_LABEL` characters; more are
counted under ``(other)``. The scrape is rendered on a worker thread, not the event loop,
for one org: a series labelled with another ``org`` is left out (a tenant's token does not
read another tenant's applications and workflow names), the process-wide series (no ``org``
label: transitions, connections, the store, the workers) are the whole server's.
``tests/adapters/test_metrics.py`` checks each is exposed with its name and labels;
``docs/observability/`` holds a Grafana dashboard and alert rules made of them.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

CONTENT_TYPE = "text/plain; version=0.0.4"  # Prometheus's text format; Litestar adds "; charset=utf-8"
MAX_APP_NAMES = 200  # workflow (and step) names one application may have on /metrics
MAX_LABEL = 128  # characters of a workflow or step name on /metrics
OTHER = "(other)"
# The executors' metric types added up on /metrics: type -> (family attribute, name label)
APP_TYPES = {"workflow_count": "app_workflows", "step_count": "app_steps"}


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


class _CollectorState:
    """Computed at scrape time from the garbage collector's policy (ADR 13)."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def collect(self) -> Iterable[Any]:
        lost = CounterMetricFamily("relay_gc_sockets_lost", "Executor sockets whose connection was lost, "
                                   "watched until their objects are freed (ADR 13)")
        lost.add_metric([], self.collector.losses)
        yield lost
        alive = GaugeMetricFamily("relay_gc_lost_socket_objects_alive",
                                  "Objects of lost sockets not freed yet: one that outlives the quiet after the "
                                  "closes is in a reference cycle, and calls for a full collection (ADR 13)")
        alive.add_metric([], self.collector.unfreed())
        yield alive


class _ProcessManagerState:
    """The process manager's store errors and bugs, read from its counters at scrape time, when it
    armed its timers, and its thread's CPU by kind of work."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterable[CounterMetricFamily]:
        yield CounterMetricFamily("relay_process_manager_store_errors", "Process manager commands that failed on "
                                  "the store and were retried", value=self.stats.store_errors)
        yield CounterMetricFamily("relay_process_manager_bugs", "Process manager failures that were not store "
                                  "errors: bugs, logged with their traceback", value=self.stats.bugs)
        yield GaugeMetricFamily("relay_process_manager_armed_timestamp_seconds", "When the process manager had "
                                "rebuilt its timers from the store and armed them (Unix seconds; 0 before)",
                                value=self.stats.armed_at)
        cpu = CounterMetricFamily("relay_process_manager_cpu_seconds", "CPU seconds of the process manager's "
                                  "thread, by work: a timer kind (deadline, dispatch, ...), answers, following",
                                  labels=["work"])
        for work, seconds in sorted(dict(self.stats.cpu_seconds).items()):
            cpu.add_metric([work], seconds)
        yield cpu


class _AlertCounters:
    """The alert manager's counters (:class:`~relay_es.engine.alerting.AlertStats`), read at scrape time."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterable[CounterMetricFamily]:
        st = self.stats
        yield CounterMetricFamily("relay_alerts_fired", "Alerts recorded (a rule's condition held outside its "
                                  "minimum interval)", value=st.fired)
        yield CounterMetricFamily("relay_alerts_suppressed", "Conditions that held inside a rule's minimum interval: "
                                  "no alert", value=st.suppressed)
        f = CounterMetricFamily("relay_alert_deliveries", "Alert delivery attempts, by outcome", labels=["outcome"])
        f.add_metric(["delivered"], st.delivered)
        f.add_metric(["failed"], st.delivery_failures)
        yield f
        yield CounterMetricFamily("relay_alert_check_failures", "Checks of WorkflowFailure and SlowQueue rules that "
                                  "could not ask an executor", value=st.probe_failures)
        yield CounterMetricFamily("relay_alert_errors", "Alert manager failures (the store away, or a bug: logged)",
                                  value=st.errors)


class _ByLabel:
    """A family of one label computed at scrape time from ``values()`` (a dict label -> value)."""

    def __init__(self, family: type, name: str, doc: str, label: str, values: Callable[[], dict[str, float]]) -> None:
        self.family, self.name, self.doc, self.label, self.values = family, name, doc, label, values

    def collect(self) -> Iterable[Any]:
        f = self.family(self.name, self.doc, labels=[self.label])
        for key, value in sorted(self.values().items()):
            f.add_metric([key], value)
        yield f


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
        self.gc_pauses = Histogram(
            "relay_gc_pause_seconds", "Collections of CPython's cyclic garbage collector not run by Relay's collector "
            "(CPython's automatic ones, gc.collect by other code), by generation (2: full); each holds the GIL, "
            "less any finalizer that lets go of it (ADR 13)", ["generation"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5), registry=r)
        self.auth_refused = Counter("relay_auth_refused", "Refused executor handshakes and API calls", ["where"],
                                    registry=r)
        self.projection_poison = Counter(
            "relay_projection_poison_events", "Events a read model skipped because it could not hold them (ADR 16)",
            ["projection"], registry=r)
        self.app_workflows = Counter("relay_app_workflows", "Workflows started, per workflow name (the executors' "
                                     "get_metrics, collected per bucket)", ["org", "app", "workflow"], registry=r)
        self.app_steps = Counter("relay_app_steps", "Steps completed, per step name (the executors' get_metrics, "
                                 "collected per bucket)", ["org", "app", "step"], registry=r)
        self.metrics_collections = Counter("relay_metrics_collections", "Collections of an application's metrics, "
                                           "by outcome (ok, failed)", ["org", "app", "outcome"], registry=r)
        self.metrics_collected_until = Gauge(
            "relay_metrics_collected_until_timestamp_seconds", "End of the last metrics bucket collected of an "
            "application, epoch seconds", ["org", "app"], registry=r)
        self.executor_call_seconds = Histogram(
            "relay_executor_call_seconds", "Requests Relay sent an executor and waited for (the API's operations, "
            "get_metrics, the recovery conversation, retention): from sending to the answer", ["type"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.executor_calls = Counter(
            "relay_executor_calls", "Requests Relay forwarded to an executor, by outcome (ok, failed, timeout, gone, "
            "refused, cancelled, unavailable)", ["type", "outcome"], registry=r)
        self._app_names: dict[tuple[str, str, str], set[str]] = {}  # (org, app, family) -> names exposed
        self._app_lock = threading.Lock()  # collected on the loop, forgotten from a request's thread

    def app_collected(self, org: str, app: str, until: float, samples: Iterable[Any]) -> None:
        """A bucket of ``org``/``app`` was collected up to ``until`` (epoch seconds): its
        ``samples`` (``metric_type``, ``metric_name``, ``value``) are added up."""
        with self._app_lock:
            for s in samples:
                attr = APP_TYPES.get(s.metric_type)
                if attr is None or s.value <= 0:
                    continue
                names = self._app_names.setdefault((org, app, attr), set())
                name = s.metric_name if len(s.metric_name) <= MAX_LABEL else s.metric_name[:MAX_LABEL - 3] + "..."
                if name not in names:
                    if len(names) >= MAX_APP_NAMES - 1 and name != OTHER:
                        name = OTHER
                    names.add(name)
                getattr(self, attr).labels(org, app, name).inc(s.value)
            self.metrics_collected_until.labels(org, app).set(until)

    def app_outcome(self, org: str, app: str, outcome: str, until: float | None = None) -> None:
        """A collection of ``org``/``app`` ended (``ok`` or ``failed``) with its metrics collected up to
        ``until`` (epoch seconds, the stored cursor; None: not known), whatever came of it: after a restart
        the executors may fail every collection, and the stale-collection alert needs the series."""
        with self._app_lock:  # counted before the cursor is set: a scrape that sees the cursor sees the collection
            self.metrics_collections.labels(org, app, outcome).inc()
            if until is not None:
                self.metrics_collected_until.labels(org, app).set(until)

    def forget_app(self, org: str, app: str) -> None:
        """An application was deleted: its series leave /metrics."""
        with self._app_lock:
            for attr in APP_TYPES.values():
                family = getattr(self, attr)
                for name in self._app_names.pop((org, app, attr), set()):
                    family.remove(org, app, name)
            for family, labels in ((self.metrics_collections, (org, app, "ok")),
                                   (self.metrics_collections, (org, app, "failed")),
                                   (self.metrics_collected_until, (org, app))):
                try:
                    family.remove(*labels)
                except KeyError:
                    pass

    def executor_call(self, kind: str, outcome: str, seconds: float) -> None:
        """One request to an executor ended (:class:`~relay_es.adapters.hub.calls.Calls`, the dispatcher's
        recovery and retention conversations)."""
        self.executor_calls.labels(kind, outcome).inc()
        if outcome != "unavailable":  # nothing was sent
            self.executor_call_seconds.labels(kind).observe(seconds)

    def watch_projections(self, lag: Callable[[], dict[str, int]]) -> None:
        """Exposes ``relay_projection_lag_events{projection}``: events in the store that read
        model has not folded yet, ``lag()`` at each scrape."""
        self.registry.register(_ByLabel(GaugeMetricFamily, "relay_projection_lag_events",
                                        "Events in the store not yet folded into the read model", "projection", lag))

    def watch_workers(self, failures: Callable[[], dict[str, int]],
                      cpu: Callable[[], dict[str, float]] | None = None) -> None:
        """Exposes ``relay_worker_failures_total{worker}``: failures (retried) of Relay's
        background workers, ``failures()`` at each scrape; and, given ``cpu``,
        ``relay_worker_cpu_seconds_total{worker}``: each one's thread CPU, ``cpu()`` at each scrape."""
        self.registry.register(_ByLabel(CounterMetricFamily, "relay_worker_failures",
                                        "Failures of a background worker (projections, process manager, lease); "
                                        "each is logged and the work retried", "worker", failures))
        if cpu is not None:
            self.registry.register(_ByLabel(CounterMetricFamily, "relay_worker_cpu_seconds",
                                            "CPU seconds of a background worker's thread (projections, process "
                                            "manager with the alert manager, lease, collector)", "worker", cpu))

    def watch_executors(self, rows: Callable[[], Iterable[Any]]) -> None:
        """Exposes ``relay_executors{org,app,status}``, counted from ``rows()`` (the visible ones) at each scrape."""
        self.registry.register(_ExecutorsByStatus(rows))

    def watch_outbox(self, outbox: Any) -> None:
        """Exposes the outbox's errors, stuck and queued transitions, read at each scrape."""
        self.registry.register(_OutboxState(outbox))

    def watch_collector(self, collector: Any) -> None:
        """Exposes the sockets the garbage collector's policy watched (lost, and objects still alive)."""
        self.registry.register(_CollectorState(collector))

    def watch_process_manager(self, stats: Any) -> None:
        """Exposes the process manager's failures, read from ``stats`` (its ``Stats``) at each scrape:
        ``relay_process_manager_store_errors_total`` (retried) and ``relay_process_manager_bugs_total``
        (anything else; the first one makes ``/healthz`` answer 503); and
        ``relay_process_manager_armed_timestamp_seconds``, when it armed the timers rebuilt from the
        store (0 before: a Relay starting on a large store answers ``/healthz`` before that); and
        ``relay_process_manager_cpu_seconds_total{work}``, its thread's CPU by kind of work."""
        self.registry.register(_ProcessManagerState(stats))

    def watch_alerts(self, stats: Any) -> None:
        """Exposes the alert manager's counters, read from ``stats`` (its ``AlertStats``) at each scrape."""
        self.registry.register(_AlertCounters(stats))

    def render(self, org: str | None = None) -> bytes:
        """The Prometheus text of every series, or with ``org`` of those labelled with that org and
        those with no org label."""
        return generate_latest(self.registry if org is None else _OneOrg(self.registry, org))


class _OneOrg:
    """``registry``'s families, each without the samples labelled with an org other than ``org``."""

    def __init__(self, registry: CollectorRegistry, org: str) -> None:
        self.registry, self.org = registry, org

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            if all(s.labels.get("org", self.org) == self.org for s in family.samples):
                yield family
                continue
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples if s.labels.get("org", self.org) == self.org]
            yield kept
