"""Composition: one Relay process, its store, its workers and its hub.

Threads:

* the **projection worker** follows the notification log into the read
  models; woken after every save in this process, and polling once a second
  for writers elsewhere. In ``relay serve`` (``projection_process``) it hands that
  to a child process with its own GIL (``adapters/readmodels/follower.py``, ADR 8)
  and folds in this process only while the child is not following;
* the **process-manager worker** runs :meth:`ProcessManager.step` and then the alert
  manager's :meth:`~relay_es.engine.alerting.AlertManager.step`, sleeping on the monotonic
  clock until the next timer of either (deadlines, recovery attempts, retention rounds,
  alert checks and delivery retries), woken by new events and answers;
* the asyncio loop (uvicorn) runs the hub's endpoint, its recovery and
  retention conversations and the REST API; store commands go to the hub's
  small thread pool, never onto the loop;
* the **collector worker** runs the full garbage collections itself, at quiet
  moments (``adapters/collector.py``, ADR 13);
* the **lease worker** checks every 2 s that this instance still holds the
  store's leader lease (the process manager decides nothing, and the outbox
  writes nothing, on a confirmation older than 5 s or older than the store's
  last failure under them: they ask first), takes it again after a lost Postgres
  session (one it cannot confirm for 30 s is lost), and stops the server if
  another instance took it meanwhile or the store came back as another one
  (another cluster, a copy whose log is behind what this process saw: ADR 7);
* the **cache warmer**, once the process manager has started, reads the executors
  the store holds into the executor cache before their sockets come back
  (:meth:`~relay_es.engine.store.RelayStore.warm`, ADR 12), and ends.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from eventsourcing.persistence import PersistenceError

from relay_es.adapters import authz, faults
from relay_es.adapters.clock import system_clock
from relay_es.adapters.collector import Collector
from relay_es.adapters.failures import OutageLog, is_data_error, is_store_error
from relay_es.adapters.hub import AuthGate, Calls, CommandPool, Connection, Dispatcher, Gate, Hub, Outbox, Registry
from relay_es.adapters.hub.alerts import AlertSender
from relay_es.adapters.oidc import OidcSettings, OidcUsers, parse_group_roles
from relay_es.adapters.webhooks import Egress
from relay_es.adapters.hub.harvest import Harvest
from relay_es.adapters.lease import Lease, LeaseLost
from relay_es.adapters.rest.problems import store_warning
from relay_es.adapters.metrics import Metrics
from relay_es.adapters.readmodels import executors as executor_rows
from relay_es.adapters.readmodels.follower import ProjectionProcess
from relay_es.adapters.readmodels.rebuild import fill_at_start
from relay_es.adapters.series import MetricSeries
from relay_es.adapters.stores import POOL_WAIT_SECS, Database, event_store_env, open_database, parse_database_url
from relay_es.aggregates.executor import Executor, ExecutorStatus
from relay_es.domain import defaults
from relay_es.domain.clock import Clock
from relay_es.engine.alerting import AlertManager, AlertTiming
from relay_es.engine.journal import Journal
from relay_es.engine.process_manager import EXECUTOR_TOPICS, STORE_UNAVAILABLE_SECS, Answers, ProcessManager, Timing
from relay_es.projections import all_projections
from relay_es.projections.runner import ProjectionRunner
from relay_es.engine.service import Relay
from relay_es.composition.settings import Settings

log = logging.getLogger(__name__)


HELD = object()  # what a worker's ``fn`` returns when it did nothing, held back (see Worker)


class Worker(threading.Thread):
    """Calls ``fn`` whenever woken, or when ``timeout()`` seconds have passed. ``cpu_seconds``: the
    thread's CPU spent in ``fn`` (``relay_worker_cpu_seconds_total``). A failure is retried; a bug is
    logged with its traceback each time, a store that is away (:func:`~relay_es.adapters.failures.is_store_error`)
    as :class:`~relay_es.adapters.failures.OutageLog` says (it fails every tick until it is back: a
    traceback every half second said nothing new). ``fn`` returning :data:`HELD` did nothing (the lease
    not confirmed): neither a success nor a failure."""

    def __init__(self, name: str, fn: Callable[[], Any], timeout: Callable[[], float], *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.timeout = timeout
        self.monotonic = monotonic
        self._wake = threading.Event()
        self._halt = threading.Event()
        self.errors = 0
        self.cpu_seconds = 0.0
        self.outage = OutageLog(log, name, monotonic=monotonic)

    def wake(self, *_: Any) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()

    def run(self) -> None:
        while not self._halt.is_set():
            c0 = time.thread_time()
            try:
                done = self.fn()
            except Exception as e:
                self.failed(e)
                self._halt.wait(0.5)
            else:
                if done is not HELD:
                    self.succeeded()
            finally:
                self.cpu_seconds += time.thread_time() - c0
            self._wake.wait(max(0.0, self.timeout()))
            self._wake.clear()

    def failed(self, e: Exception) -> None:
        """Counts and logs a failure of ``fn`` (see the class)."""
        self.errors += 1
        if not is_store_error(e) or is_data_error(e):
            log.exception("%s failed; retrying", self.name, exc_info=e)
            return
        self.outage.failed("failed", e)

    def succeeded(self) -> None:
        """``fn`` ran through: a run of failures on the store, if any, is over (and said to be)."""
        self.outage.worked()


def view_bootstrap(db: Database, runner: ProjectionRunner,
                   fill_behind: Callable[[], int] = lambda: 0) -> Callable[[], tuple[list[Any], int]]:
    """The process manager starts from the executors table and its tracked
    position, read in one transaction, then follows the log from there.
    ``fill_behind``: first, read models far behind are filled in processes (``fill_at_start``)."""

    def load() -> tuple[list[Any], int]:
        fill_behind()
        runner.catch_up()
        return executor_rows.load_all(db)

    return load


COMMAND_WORKERS = 8  # threads running the hub's store commands (admission, outbox, audit, retention records)
CATCH_UP_SECS = 2.0  # the longest a key the tokens read model does not know waits for it to catch up
STARTING = "Relay is starting (its read models are being filled from the store): the key cannot be checked yet"
STUCK = "Relay's read models are stalled (their process is being started again): the key cannot be checked yet"
BEHIND = "Relay's read models are catching up with the store: the key cannot be checked yet"
STUCK_CHECK_SECS = 0.25  # how often a wait for the read models asks whether their process is late
READY_LAG = 1_000  # events (one projection batch): read models this close to the log are current for /readyz
# The leader lease, confirmed on the monotonic clock: the process manager decides nothing on a confirmation
# older than LEASE_FRESH_SECS (it asks for one first), and a lease not confirmed for LEASE_LOST_SECS is lost.
LEASE_FRESH_SECS = 5.0
LEASE_LOST_SECS = 30.0


class LeaseUnconfirmed(PersistenceError):
    """A write held back: the leader lease is not confirmed since the store last failed under this
    process (it may have come back as another store). A store error: the writer retries."""


class Runtime:
    """One Relay process, built in dependency order with everything each part needs:
    store and read models; the hub's command pool, outbox and registry; the recovery
    answers inbox; the dispatcher; the process manager (given the dispatcher); the calls
    of the REST operations (given the process manager's record of when each executor
    registered); the admission gate; the hub's endpoint (given the process manager as its
    roster)."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None, manage_gc: bool = False,
                 on_lease_lost: Callable[[], None] = lambda: None, projection_process: bool = False) -> None:
        """``manage_gc``: this process is a server of its own (``relay serve``); the garbage
        collector's policy is process-wide, so a Runtime inside a test process leaves it alone.
        ``on_lease_lost``: called (from the lease worker) when another instance took the
        store's lease; the server should stop. ``projection_process``: the read models follow
        the log in a child process (``relay serve --projections process``, ADR 8)."""
        self.settings = settings
        self.manage_gc = manage_gc
        self.clock = clock or system_clock()
        self.on_lease_lost = on_lease_lost
        self.store = parse_database_url(settings.database_url)
        self.lease = Lease(self.store)
        self.lease.acquire()
        try:
            self.relay = Relay(event_store_env(self.store), clock=self.clock,
                               default_grace=settings.default_executor_timeout)
            # An action whose record the store failed: one line a window, with the REST layer's 503s.
            self.relay.store_warning = store_warning
            self.db = open_database(self.store, pool_wait=POOL_WAIT_SECS)  # REST's reads: a quick 503 in an outage
            self.runner = ProjectionRunner(self.relay, self.db, all_projections())
            self.follower = (ProjectionProcess(self.store, reached=self.runner.reached_elsewhere,
                                               poisoned=self.runner.poisoned_elsewhere,
                                               log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                                               store_away=lambda: self._lease_state == "unreachable")
                             if projection_process else None)
            self.pm_worker = Worker("relay-process-manager", self._pm_tick, self._pm_sleep)
            self.metrics = Metrics()
            self.pool = CommandPool(COMMAND_WORKERS)
            self.outbox = Outbox(self.relay, self._outbox_run)
            self.registry = Registry()
            answers = Answers(self.pm_worker.wake)
            self.calls = Calls(self.registry, first_seen=self._first_registered, observe=self.metrics.executor_call)
            self.series = MetricSeries(self.db)
            self.series.create()
            period = int(settings.metrics_interval.total_seconds())
            self.harvest = Harvest(
                self.calls, self.series, self.pool.run, period=period,
                retention=settings.metrics_retention.total_seconds(), timeout=settings.call_timeout.total_seconds(),
                now=lambda: self.clock.now().timestamp(), monotonic=self.clock.monotonic,
                collected=lambda org, app, w, got: self.metrics.app_collected(org, app, w.end, got.kept),
                outcome=self.metrics.app_outcome,
            )
            self.dispatcher = Dispatcher(
                self.relay, self.registry, self.outbox, self.pool.run,
                answers=answers,
                response_timeout=settings.recovery_response_timeout.total_seconds(),
                monotonic=self.clock.monotonic,  # recovery deadlines are on the process manager's clock
                crash_point=faults.crash_point,
                harvest=self.harvest,
                observe=self.metrics.executor_call,
                stopping=lambda: self.hub.shutting_down,  # the hub is built below; asked only once it runs
            )
            # What this process saves, handed to the process manager: it follows those from memory and
            # reads the log only for the rest (relay_es.engine.journal).
            self.journal = Journal(EXECUTOR_TOPICS)
            self.relay.add_recordings_listener(self.journal.saved)
            self.pm = ProcessManager(
                self.relay,
                self.clock,
                self.dispatcher,
                owner=settings.instance,
                timing=Timing(settle=settings.restart_settle, response_timeout=settings.recovery_response_timeout),
                bootstrap=view_bootstrap(self.db, self.runner, self._fill_at_start),
                answers=answers,
                wake=self.pm_worker.wake,
                retention_interval=settings.retention_interval.total_seconds(),
                metrics_interval=period,
                crash_point=faults.crash_point,
                on_event=self._executor_changed,
                journal=self.journal,
                cpu=time.thread_time,  # relay_process_manager_cpu_seconds_total: its worker thread's CPU
            )
            self.alert_sender = AlertSender(self.calls, timeout=settings.call_timeout.total_seconds(),
                                            egress=Egress.parse(",".join(settings.alert_webhook_allow)))
            self.alerts = AlertManager(
                self.relay, self.clock, self.alert_sender,
                healthy=self.pm.has_healthy,
                ready=lambda: self.pm.settle.closed,
                untried=self.pm.untried_candidates,
                timing=AlertTiming(check_interval=settings.alert_check_interval.total_seconds(),
                                   retry_base=settings.alert_retry.total_seconds(),
                                   lost_after=settings.call_timeout.total_seconds() + 30),
                wake=self.pm_worker.wake,
            )
            self.alert_sender.manager = self.alerts
            self.oidc = None if not settings.oidc_issuer else OidcUsers(OidcSettings(
                issuer=settings.oidc_issuer, audience=settings.oidc_audience or "", org=settings.oidc_org or "",
                groups_claim=settings.oidc_groups_claim, group_roles=parse_group_roles(settings.oidc_group_roles),
                username_claim=settings.oidc_username_claim),
                self.relay)
            self.collector = Collector(self.clock.monotonic, next_deadline=self.pm.next_wakeup)
            self.gate = (AuthGate(self.relay, self.pool.run, self.db, catch_up=self._read_models_caught_up)
                         if settings.auth else Gate(self.relay, self.pool.run))
            self.hub = Hub(
                self.relay,
                owner=settings.instance,
                gate=self.gate,
                roster=self.pm,
                registry=self.registry,
                outbox=self.outbox,
                pool=self.pool,
                handshake_timeout=defaults.HANDSHAKE_TIMEOUT.total_seconds(),
                limits=settings.limits,
                monotonic=self.clock.monotonic,
                on_connection_change=self._connections_changed,
                on_refused=self.metrics.auth_refused.labels("websocket").inc,
            )
        except BaseException:
            self.lease.release()
            raise
        self._observe()
        self.projection_worker = Worker("relay-projections", self._project, lambda: 1.0)
        self._pm_started = threading.Event()  # set once the process manager has started: the read models follow
        self._catching_up = threading.Lock()  # see _read_models_caught_up
        self._fill_tried = False
        self._forwarded = -1  # the head the read-model process was last woken for
        self._wake_anyway = False  # wake the read-model process though this process saved nothing new
        self._ready_once = False  # see readiness
        self.collector_worker = Worker("relay-collector", self._collect, lambda: 0.5)
        self.lease_worker = Worker("relay-lease", self._check_lease, lambda: 2.0)
        self.warmer = threading.Thread(target=self._warm_cache, name="relay-cache-warm", daemon=True)
        self._halt = threading.Event()  # the runtime is stopping: the cache warmer ends
        self.warmed: int | None = None  # executors the cache warmer read (None until it is done)
        self.lease_lost = False
        self._lease_state = "held"
        self._lease_ok_at = time.monotonic()  # the last time the lease was confirmed this instance's
        self._lease_lock = threading.Lock()  # one check at a time: the lease worker's, or the process manager's
        self._deleted_apps: set[tuple[str, str]] = set()  # as last read, for /metrics (_listed_executors)
        self._head = self.relay.head()  # the newest event this process saved or read: the read models' lag
        self._store_failed_at = float("-inf")  # when a write last failed on the store (the lease's clock)
        self._outbox_failing_since: float | None = None  # the outbox's run of store failures (self.clock)
        self._outbox_writes: dict[int, float] = {}  # the outbox's writes under way: when each began (self.clock)
        self._outbox_write_ids = itertools.count()
        if self.store.is_postgres:  # the log the lease leads: taken again, it must be this one still
            recorder = self.relay.recorder
            self.lease.guard(recorder.datastore.schema, recorder.events_table_name, self._seen)
        self.relay.add_listener(self._saved)
        self.relay.add_listener(self.projection_worker.wake)
        self.relay.add_listener(self.pm_worker.wake)
        self._started = False

    @property
    def started(self) -> bool:
        """:meth:`start` ran: the workers run, and :meth:`stop` (not :meth:`close`) ends them."""
        return self._started

    def _read_models_caught_up(self) -> bool:
        """Waits, at most :data:`CATCH_UP_SECS`, until the read models hold every event recorded so
        far; True when they were behind (what they answered may have changed). Blocking. One caller
        waits at a time: any key can ask (an unknown one, on any route), and a second caller while
        one waits is answered at once, so unknown keys hold at most one thread: True if the read
        models hold the log now (ask them again), else ``StoreUnavailable`` (a 503: the key may be one
        just made, as the first caller's, whose two requests at once got a 200 and a 401). At the start
        the read models follow the log once the process manager has started (a start on empty read
        models fills them first, which can take a minute): that is waited for too, within the same
        bound, and until then a key they do not hold cannot be checked (``StoreUnavailable``: a 503,
        not a 401 for a live key). Nor while their process is late (stuck, until it is ended and the
        server folds: :attr:`ProjectionProcess.late`)."""
        if not self._catching_up.acquire(blocking=False):
            if not self._pm_started.is_set():
                raise authz.StoreUnavailable(STARTING)
            if self._read_models_stuck():
                raise authz.StoreUnavailable(STUCK)
            if self.runner.position() < self.relay.head():
                raise authz.StoreUnavailable(BEHIND)
            return True
        try:
            end = time.monotonic() + CATCH_UP_SECS
            running = self._pm_started.is_set()
            if not self._pm_started.wait(CATCH_UP_SECS):
                raise authz.StoreUnavailable(STARTING)
            caught = self.wait_for_read_models(max(0.0, end - time.monotonic()))
            if caught is None:
                return not running  # they have followed the log since the caller looked
            if caught is False and self._read_models_stuck():
                raise authz.StoreUnavailable(STUCK)
            return True
        finally:
            self._catching_up.release()

    def wait_for_read_models(self, timeout: float) -> bool | None:
        """Blocks, at most ``timeout`` seconds, until the read models hold every event recorded so far
        by any process (the log's head is read). None: they held them already; True: they got there;
        False: not within ``timeout``, or their process is late (:attr:`ProjectionProcess.late`: nobody
        folds until its watchdog ends it, so a wait would only hold a thread). Blocking: call it off the
        event loop."""
        top = self.relay.head()
        self._head = max(self._head, top)  # seen: a store that comes back behind it is not this one (Lease.guard)
        if self.runner.position() >= top:
            return None
        self._wake_anyway = True  # an event another process wrote woke no listener here, nor the child
        self.projection_worker.wake()
        end = time.monotonic() + timeout
        while not self._read_models_stuck():
            left = end - time.monotonic()
            if self.runner.wait_for(top, timeout=max(0.0, min(left, STUCK_CHECK_SECS))):
                return True
            if left <= STUCK_CHECK_SECS:
                return False
        return False

    def _read_models_stuck(self) -> bool:
        """The read-model process follows the log, so this process's runner rests, but it is late."""
        return self.follower is not None and self.follower.late

    def readiness(self) -> str | None:
        """Why this instance should not be sent traffic now (``/readyz``), or None: it should. Not
        ready while the process manager has not started (it fills the read models first, from the
        store), until the read models have once been within :data:`READY_LAG` events of this
        process's newest (then it stays ready: a storm's lag is no reason to turn callers away),
        once the process manager has met a bug, while the store keeps failing (:meth:`_store_unavailable`:
        ready again once it answers), and from the start of a shutdown."""
        if self.hub.shutting_down or self.lease_lost:
            return "shutting_down"
        if self.pm.last_bug is not None:
            return "unhealthy"
        if self._store_unavailable():
            return "store_unavailable"
        if not self._pm_started.is_set():
            return "starting"
        if not self._ready_once:
            if self._head - min(dict(self.runner.reached).values(), default=0) > READY_LAG:
                return "catching_up"
            self._ready_once = True
        return None

    def _store_unavailable(self) -> bool:
        """The store has failed for :data:`~relay_es.engine.process_manager.STORE_UNAVAILABLE_SECS`,
        nothing succeeding since, under any of: the process manager's steps
        (:attr:`~relay_es.engine.process_manager.ProcessManager.store_unavailable`); the leader lease,
        not confirmed that long while its checks find the store unreachable or hang (the process
        manager, which waits for it, then fails nothing: an outage left /readyz ready); the outbox's
        writes (a read-only Postgres fails writes only), or one of them under way that long (a frozen
        file system or a paused Postgres fails nothing: it hangs, and /readyz said ready through 40 s
        of ``fsfreeze``)."""
        if self.pm.store_unavailable:
            return True
        if (self._lease_state == "unreachable" or self._lease_lock.locked()) and \
                time.monotonic() - self._lease_ok_at >= STORE_UNAVAILABLE_SECS:
            return True
        now = self.clock.monotonic()
        since = self._outbox_failing_since
        if since is not None and now - since >= STORE_UNAVAILABLE_SECS:
            return True
        return now - min(self._outbox_writes.values(), default=now) >= STORE_UNAVAILABLE_SECS

    async def _outbox_run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The outbox's writes, in the command pool: held back (:class:`LeaseUnconfirmed`, retried like
        an outage) while the lease is not confirmed since the store last failed under a writer, so that
        a store that came back as another is not written to before the lease has looked; its failures
        on the store counted for /readyz (:meth:`_store_unavailable`)."""
        try:
            if not self._lease_fresh() and not await self.pool.run(self._lease_confirmed):
                raise LeaseUnconfirmed("the leader lease is not confirmed since the store failed")
            write = next(self._outbox_write_ids)

            def timed() -> Any:  # while a thread of the pool runs it: a write queued behind others is not hung
                self._outbox_writes[write] = self.clock.monotonic()
                try:
                    return fn(*args, **kwargs)
                finally:
                    del self._outbox_writes[write]

            out = await self.pool.run(timed)
        except Exception as e:
            if is_store_error(e) and not is_data_error(e):
                self._store_failed(e)
                if self._outbox_failing_since is None:
                    self._outbox_failing_since = self.clock.monotonic()
            raise
        self._outbox_failing_since = None
        return out

    def _store_failed(self, e: BaseException) -> None:
        """A write failed on the store: until the lease is confirmed again, nothing more is decided or
        written through the outbox (:meth:`_lease_confirmed`). The store may come back as another one
        (a restored backup, a new cluster), which the lease tells when it is taken again."""
        if not isinstance(e, LeaseUnconfirmed):
            self._store_failed_at = time.monotonic()

    def _seen(self) -> int:
        """The newest notification id this process saved or read (its saves, the log's head as read,
        the read models' positions): a store that comes back with its log behind it is not the one
        this process led."""
        return max(self._head, max(dict(self.runner.reached).values(), default=0))

    def _connections_changed(self, n: int) -> None:
        self.metrics.open_connections.set(n)
        self.collector.connections(n)

    def _saved(self, max_notification_id: int) -> None:
        self._head = max(self._head, max_notification_id)

    def _first_registered(self, conn: Connection) -> float | None:
        """When the executor of ``conn`` registered (this incarnation's first ``Connected``,
        epoch seconds), as the process manager has it; None while its ``Connected`` is on its
        way. Read from the loop: the process manager's rows are safe to read from any thread."""
        if conn.stream_id is None:
            return None
        row = self.pm.rows.get(str(conn.stream_id))
        return None if row is None or row.created_at is None else row.created_at.timestamp()

    def _executor_changed(self, e: Any, old: Any, new: Any) -> None:
        """The process manager folded an executor event: the alerting rules, the recovery metrics."""
        if self.alerts.started:
            self.alerts.executor_event(e, old, new)
        m = self.metrics
        if isinstance(e, Executor.RecoveryDispatched):
            m.recoveries_dispatched.inc()
        elif isinstance(e, Executor.RecoveryFailed):
            m.recoveries_failed.inc()
        elif isinstance(e, Executor.RecoveryConfirmed):
            m.recoveries_confirmed.inc()
            if new.declared_dead_at is not None:
                m.dead_to_confirmed.observe((e.timestamp - new.declared_dead_at).total_seconds())

    def _listed_executors(self) -> list[Any]:
        """The process manager's rows, but those of deleted applications: it keeps them (DISCONNECTED for
        good, checked again should the application be registered again), and on /metrics they counted
        for ever (RelayNoHealthyExecutor firing for an application that is gone, ADR 21)."""
        from relay_es.adapters.readmodels.apps import deleted_apps

        rows = list(self.pm.rows.values())
        if rows:
            try:
                self._deleted_apps = deleted_apps(self.db)
            except Exception as e:  # the store away: the last set read (a scrape must not fail with it)
                if not self.relay.is_store_error(e):
                    raise
        return [r for r in rows if (r.org, r.app) not in self._deleted_apps]

    def _observe(self) -> None:
        m = self.metrics
        m.watch_executors(self._listed_executors)
        m.watch_outbox(self.outbox)
        m.watch_collector(self.collector)
        m.watch_process_manager(self.pm.stats)
        m.watch_alerts(self.alerts.stats)
        self.runner.on_poison.append(lambda p: m.projection_poison.labels(p.projection).inc())
        # A position past this process's newest event is one of events another process wrote (the read-model
        # process's skip records, another writer), which none of them lags: 0. One past the log itself is reset
        # when the runner starts (ProjectionRunner.create_schema, logged); a Postgres log restored older under a
        # running Relay loses it the lease when it is taken again (Lease.guard). A position edited by hand while
        # Relay runs is noticed at the next start only: the scrape reads nothing from the store (ADR 21).
        m.watch_projections(lambda: {name: max(0, self._head - pos) for name, pos in dict(self.runner.reached).items()})

        def workers() -> tuple[Worker, ...]:  # read at each scrape: some are made after this
            return self.projection_worker, self.pm_worker, self.lease_worker, self.collector_worker

        m.watch_workers(lambda: {w.name.removeprefix("relay-"): w.errors + (
            self.follower.failures if w is self.projection_worker and self.follower is not None else 0)
            for w in workers()},
            cpu=lambda: {w.name.removeprefix("relay-"): w.cpu_seconds for w in workers()})

        def saved(took: float, events: list[Any]) -> None:
            m.append_latency.observe(took)
            for e in events:
                if type(e).__qualname__.startswith("Executor."):
                    m.transitions.labels(type(e).__name__).inc()

        self.relay.save_observers.append(saved)

    def app_deleted(self, org: str, name: str) -> None:
        """Called after an application is deleted: its executors are disconnected (4007)."""
        self.gate.forget(org, app=name)
        self.hub.close_app_soon(org, name)
        self.metrics.forget_app(org, name)
        self.harvest.forget(org, name)
        try:
            self.series.forget(org, name)
        except Exception:  # pruned with the retention anyway
            log.exception("could not delete the metrics of deleted application %s/%s", org, name)

    def token_revoked(self, org: str, name: str) -> None:
        """Called after a token is revoked: its executors are disconnected."""
        self.gate.forget(org, token=name)  # before the answer: a retry with that key is refused
        self.hub.close_token_soon(org, name)

    def begin_shutdown(self) -> None:
        """The server is about to close the sockets: their closes are not disconnects."""
        self.hub.begin_shutdown()

    def _pm_tick(self) -> object:
        """The process manager, then the alert manager (one thread: the alert manager is told of
        executor events as the process manager folds them). Nothing is decided on a lease not confirmed
        lately (:meth:`_lease_confirmed`): :data:`HELD`, so that the worker does not say it works on the
        store again while the store is still away."""
        if not self._lease_confirmed():
            return HELD
        try:
            if not self._pm_started.is_set():
                self.pm.start()  # rebuilds timers and dispatches from the store
                self._pm_started.set()
                if not self._halt.is_set():
                    self.warmer.start()
            else:
                self.pm.step()
        except Exception as e:
            if self.relay.is_store_error(e):
                self._store_failed(e)
            raise
        try:  # its own failures never hold the process manager up
            if not self.alerts.started:
                self.alerts.start()  # rebuilds the rules and the unfinished deliveries from the store
            self.alerts.step()
        except Exception as e:
            self.alerts.stats.errors += 1  # relay_alert_errors_total
            level = logging.WARNING if self.relay.is_store_error(e) else logging.ERROR
            log.log(level, "the alert manager failed (%s: %s); retrying at the next step", type(e).__name__, e,
                    exc_info=level == logging.ERROR)

    def _warm_cache(self) -> None:
        """The executors the process manager started with, read into the executor cache: HEALTHY
        ones first (after a restart they all reconnect, or are recorded orphans), then the
        DISCONNECTED (their deaths) and the DEAD (their recoveries). Only an optimisation: a failure
        is logged and the commands read what they need, as before."""
        rows = sorted((r for r in list(self.pm.rows.values()) if r.visible),
                      key=lambda r: (r.status != ExecutorStatus.HEALTHY, r.status != ExecutorStatus.DISCONNECTED))
        t0 = time.monotonic()
        try:
            self.warmed = self.relay.warm([UUID(r.stream_id) for r in rows], stop=self._halt.is_set)
        except Exception as e:
            log.warning("reading the executors into the cache failed (%s: %s); each is read when needed",
                        type(e).__name__, e)
            return
        log.info("executor cache: %d executors read in %.2fs", self.warmed, time.monotonic() - t0)

    def _lease_confirmed(self) -> bool:
        """Whether the lease was confirmed this instance's within :data:`LEASE_FRESH_SECS`, and since the
        store last failed under a writer (:meth:`_store_failed`), asked now if not. The lease worker asks
        every 2 s; a process that was paused (SIGSTOP, a stalled VM) or whose store session ended and
        cannot be opened again may have lost it meanwhile to another instance, which then declares deaths
        and dispatches recoveries too: a paused instance, resumed, recorded a death and its dispatch before
        its lease worker noticed it had lost the lease. And a store that failed may come back as another
        one (a restored backup), which the lease tells only when it is taken again."""
        if self._lease_fresh():
            return True
        # Not behind a check under way for long: the lease worker's may hang on a silent network (about
        # 10 s, the lease session's timeout); meanwhile nothing is decided, and the next step asks again.
        self._check_lease(wait=1.0)
        return not self.lease_lost and self._lease_fresh()

    def _lease_fresh(self) -> bool:
        """Confirmed within :data:`LEASE_FRESH_SECS`, by no check since that found the store unreachable
        (its session ended: the lease is taken again, and the store looked at, first), and since the store
        last failed under a writer."""
        ok = self._lease_ok_at
        return (not self.lease_lost and self._lease_state != "unreachable"
                and time.monotonic() - ok <= LEASE_FRESH_SECS and ok >= self._store_failed_at)

    def _check_lease(self, wait: float = -1) -> None:
        """Asks whether the lease is still this instance's (``wait``: how long to wait for a check under
        way on another thread; by default for as long as it takes)."""
        if not self._lease_lock.acquire(timeout=wait):
            return
        try:
            self._checking_lease()
        finally:
            self._lease_lock.release()

    def _checking_lease(self) -> None:
        if self.lease_lost:
            return
        asked = time.monotonic()  # confirmed as of the question: a store that failed after it is not vouched for
        try:
            state = self.lease.check()
        except LeaseLost as e:
            self._lose_lease(f"{e}")
            return
        if state in ("held", "retaken"):
            self._lease_ok_at = asked
        if state == "retaken":
            log.warning("the store session holding the leader lease had ended; the lease is taken again")
        elif state == "unreachable":
            unconfirmed = time.monotonic() - self._lease_ok_at
            if unconfirmed > LEASE_LOST_SECS:
                # Unreachable from here need not be unreachable from everywhere (this instance's logins
                # refused, its network cut): another instance may lead by now.
                self._lose_lease(f"the leader lease could not be confirmed for {unconfirmed:.0f} s (the "
                                 "store unreachable from this instance); another instance may lead")
                return
            if self._lease_state != "unreachable":  # once per outage, not every 2 s
                log.warning("the store is unreachable; the leader lease will be taken again when it returns "
                            "(this instance decides nothing meanwhile, and stops serving after %.0f s)",
                            LEASE_LOST_SECS)
        self._lease_state = state

    def _lose_lease(self, why: str) -> None:
        self.lease_lost = True
        self.pm_worker.stop()  # decide nothing more: the other instance leads
        log.error("%s; this instance stops serving", why)
        self.on_lease_lost()

    def _collect(self) -> None:
        if self.collector.tick():
            self.metrics.full_collections.observe(self.collector.last_took)
        for generation, seconds in self.collector.pauses():
            self.metrics.gc_pauses.labels(str(generation)).observe(seconds)

    def _fill_at_start(self) -> int:
        """:func:`fill_at_start`, tried once: if it fails (a share process killed, the store away), the
        read models are folded in this process, as before it, rather than emptied and filled again at
        every retry of the process manager's start."""
        if self._fill_tried:
            return 0
        self._fill_tried = True
        try:
            return fill_at_start(self.relay, self.runner, self.store)
        except Exception as e:
            log.warning("filling the read models in processes failed (%s: %s); folding the log in this process",
                        type(e).__name__, e)
            return 0

    def _project(self) -> None:
        if not self._pm_started.is_set():
            return  # the process manager's start folds first: read models far behind in processes (fill_at_start)
        if self.follower is not None:
            head = self._head  # this process's newest save: woken for it, or by the timer
            woken, self._forwarded = head != self._forwarded or self._wake_anyway, head
            self._wake_anyway = False
            if self.follower.follow(wake=woken):
                return  # the child follows the log; until it does, and whenever it is gone, we do
        self.runner.catch_up(pause=self._timers_first, stop=self._handed_over)

    def _handed_over(self) -> bool:
        """The read-model process follows the log now: this process's catch-up ends."""
        return self.follower is not None and self.follower.following

    def _timers_first(self) -> None:
        """Before each projection batch: while the process manager has urgent work
        (deadlines due or being fired, answers to record), the read models wait for
        it, at most 0.25 s. One process shares one GIL; a death must not wait for a
        read model. The process manager merely following the log is not waited for."""
        end = time.monotonic() + 0.25
        while self.pm.urgent() and time.monotonic() < end:
            time.sleep(0.002)

    def _pm_sleep(self) -> float:
        nxt = min((t for t in (self.pm.next_wakeup(), self.alerts.next_wakeup()) if t is not None), default=None)
        if nxt is None:
            return 1.0
        return min(1.0, max(0.0, nxt - self.clock.monotonic()))

    def start(self, loop: Any) -> None:
        """Called on the server's event loop once it runs."""
        self.dispatcher.start(loop)
        self.calls.start(loop)
        self.alert_sender.start(loop)
        self.hub.start(loop)
        self.projection_worker.start()
        self.pm_worker.start()
        self.lease_worker.start()
        if self.manage_gc:
            self.collector.start()  # everything set up so far is frozen: no collection walks it again
            self.collector_worker.start()
        self._started = True
        log.info("relay started: instance %s, store %s", self.settings.instance, self.store.kind)

    async def stop(self) -> None:
        self._halt.set()
        await self.hub.stop()
        self.dispatcher.stop()
        if self.follower is not None:
            self.follower.stop()  # after the hub's last records; before its worker, which would start it again
        self.pm_worker.stop()
        self.projection_worker.stop()
        self.collector_worker.stop()
        self.collector.stop()
        self.lease_worker.stop()
        if self._started:
            self.lease_worker.join(timeout=5)
            self.pm_worker.join(timeout=5)
            self.projection_worker.join(timeout=5)
            if self.collector_worker.is_alive():
                self.collector_worker.join(timeout=5)
        await self.alert_sender.stop()  # after the alert manager stopped: nothing is handed to it any more
        self.close()

    def close(self) -> None:
        self._halt.set()
        if self.warmer.is_alive():
            self.warmer.join(timeout=5)  # between two of its batches: before the store closes under it
        if self.follower is not None:
            self.follower.stop()
        self.pool.shutdown(wait=False)
        try:
            self.db.close()
            self.relay.close()
        finally:
            self.lease.release()
