"""The process manager: durable timers and recovery decisions.

It decides; it does no I/O of its own. Everything it does outside its memory goes through
what its constructor is given: the :class:`~relay_es.engine.service.Relay` service (reads
of the log and conditional commands: these run store transactions and block while they
do), a :class:`Dispatcher` (the sockets; never blocks) and a
:class:`~relay_es.domain.clock.Clock`. Tests drive it with a fake clock and an in-memory
dispatcher: no sockets, no sleeps. Its owner calls :meth:`ProcessManager.step` from one
thread whenever something may have happened (new events, an answer in :class:`Answers`,
a timer due) and sleeps until :meth:`ProcessManager.next_wakeup`.

What it does, per executor row (the same fold as the executors table):

* DISCONNECTED -> a timer at the deadline carried by the Disconnected event.
  When it fires, a *conditional* command declares the executor dead only if
  it is still disconnected with that deadline and the deadline has come.
* DEAD with recovery pending -> pick a candidate (same org and app, HEALTHY,
  same application version, connected to a live Relay), record the dispatch,
  then hand it to the dispatcher. No candidate -> record that it waits; the
  moment an eligible executor connects, dispatch. A later death kept behind it (a death while
  an earlier one's dispatch was out, of another version) that has a candidate goes first
  (RecoveryReordered), and the earlier one after it.
* An outstanding dispatch -> a response timer. A failure, a timeout or the
  target going away -> RecoveryFailed, then a retry to another candidate after
  an exponential backoff. The dispatch carries its deadline
  (:attr:`RecoveryRequest.deadline`, on this clock's monotonic time) and the
  response timer fires at that same instant: the dispatcher sends nothing for
  the attempt after it, and is told (:meth:`Dispatcher.expire`) before the
  failure is recorded, so a recovery never goes out for an attempt already
  recorded as failed (ADR 15).
* Back alive before any dispatch (a new incarnation) on the recovery's application version ->
  withdraw the recovery (that process recovered its own). Back on another version (a connect
  under another version records the earlier process's death first) -> the recovery goes on as
  for a DEAD executor: the new process does not recover another version's workflows.
* The application deleted (``Application.Deleted``, followed with the executor events; its
  sockets are closed with 4007) -> every timer and decision of its executors goes and none is
  armed for them: none is declared dead or recovered, nobody being left to recover them; its
  executors are not :meth:`~ProcessManager.listed` either. Registered again
  (``Application.Restored``) -> their rows are reacted to as they stand, as at a restart.
* What it records itself (deaths, dispatches, answers) it folds at once, as it is saved
  (:meth:`ProcessManager._execute`), and following the log later skips those events without
  decoding them: a death's dispatch waits for no read of the log. Deaths alone wait while more
  deadlines are due, about :data:`URGENT_ROUND` at most (:meth:`ProcessManager._fire_urgent`).
* An application with a HEALTHY executor here -> a retention timer (when the
  constructor is given a ``retention_interval``): every interval its plan
  (:func:`relay_es.protocol.retention.plan`) goes to :meth:`Dispatcher.send_retention`;
  and a metrics timer (when given a ``metrics_interval``): at the end of every bucket
  (:func:`relay_es.engine.metric_windows.seconds_until_next`) the dispatcher is asked to
  collect its metrics (:meth:`Dispatcher.collect_metrics`; what is due is read from the
  series, so a restart loses no bucket).

Everything it needs is in the event store, so a restart rebuilds it: pending
deadlines and outstanding dispatches come back from the rows. Deadlines that
passed while Relay was down fire only after the settle window
(:mod:`relay_es.engine.settle`), and executors that were HEALTHY on a Relay that
is gone get a full fresh grace from start.

Timers wait on the monotonic clock; a persisted wall-clock deadline ``D`` is
armed at ``monotonic() + (D - now())``. If the wall clock is stepped back, the
conditional command refuses and the timer is re-armed; stepped forward, the
monotonic timer has not fired yet. Either way nothing dies early. An outstanding
dispatch found at start waits at most a response timeout from then (its answer
went with the earlier Relay's sockets), and one whose target is found DISCONNECTED
or DEAD fails when the settle window closes, as a running Relay fails it when the
target goes.

A failure is one of two things. A store error (:meth:`Relay.is_store_error`:
the store is away or failing) is retried: the timer or reaction fires again
:data:`RETRY_SECS` later, the log is read again at the next step; once its steps have failed on
the store for :data:`STORE_UNAVAILABLE_SECS`, none succeeding since, it says so
(:attr:`ProcessManager.store_unavailable`: the instance is not ready). Anything else is a bug:
logged with its traceback once per place it happens, counted in
:attr:`Stats.bugs`, and the process manager reports itself unhealthy (:attr:`ProcessManager.healthy`,
:attr:`ProcessManager.last_bug`); the streams it hit are tried again every
:data:`BUG_RETRY_SECS`, alone, and every other stream goes on being served.
"""

from __future__ import annotations

import logging
import secrets
import traceback
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.utils import get_topic

from relay_es.aggregates.application import Application, app_stream_id
from relay_es.aggregates.executor import Executor, ExecutorStatus as S, RecoveryPhase as P, recovered_by_peer
from relay_es.domain.clock import Clock, Timeline
from relay_es.domain.defaults import RECOVERY_RESPONSE_TIMEOUT, RESTART_SETTLE
from relay_es.domain.ids import new_id
from relay_es.engine.indexes import Indexes, derive_indexes
from relay_es.engine.journal import Journal
from relay_es.engine.metric_windows import seconds_until_next, spread
from relay_es.engine.pace import Pace
from relay_es.engine.recovery import (
    Answers,
    Dispatcher,
    RecoveryOutcome,
    RecoveryRequest,
    best_candidate,
    tie_rank,
)
from relay_es.engine.service import Relay
from relay_es.engine.settle import SettleWindow
from relay_es.engine.timers import ANY, TimerHeap
from relay_es.projections.executors import EXECUTOR_EVENTS, ExecutorRow, reduce
from relay_es.projections.unreadable import Unreadable
from relay_es.protocol import retention

__all__ = ["EXECUTOR_TOPICS", "Answers", "Dispatcher", "ProcessManager", "RecoveryOutcome", "RecoveryRequest",
           "Stats", "Timing", "replay_bootstrap"]

log = logging.getLogger(__name__)

# What folding an event it cannot fold raises (a stream without its Registered event, an
# event no class reads any more): the event is skipped, never retried for ever.
FOLD_ERRORS = (ValueError, TypeError, KeyError, AttributeError, AssertionError)

# An application's deletion and its registration again: its executors' timers go with it, and come back.
APP_EVENTS = (Application.Deleted, Application.Restored)
# What the process manager follows (and its journal holds): the executors' events and APP_EVENTS.
EXECUTOR_TOPICS = tuple(get_topic(c) for c in (*EXECUTOR_EVENTS, *APP_EVENTS))
RETRY_SECS = 1.0  # how soon a command that failed on the store is tried again
STORE_UNAVAILABLE_SECS = 10.0  # steps failing on the store this long, none succeeding: the store is unavailable
RETENTION_FIRST_LOOK = 10.0  # s: an application's first retention firing here, spread over half of this
EARLY = 0.001  # a metrics timer this close to its wall-clock time is on time (the wall clock has microseconds)
BUG_RETRY_SECS = 60.0  # how soon a timer or reaction that hit a bug is tried again (alone)
# Timers fired in full every round, before the others, which go a chunk at a time: a deadline, and an
# orphan (HEALTHY on a Relay that is gone), whose Disconnected carries a deadline a grace from Relay's
# start (moved by the settle window's extension); recorded a chunk at a time, the last ones would be
# recorded past their deadline, and executors on their way back declared dead.
URGENT = ("deadline", "orphan")
ORPHANS_PER_SAVE = 1000  # orphans recorded per transaction: the hub's reconnects are written between them
ANSWERS_PER_SAVE = 500  # recovery answers recorded per transaction, when no deadline is near (see Pace)
# While deadlines keep coming due, the deaths recorded are folded only when none is (FOLD_CHUNK at a time,
# then a look for due ones again), or once firing them has gone on for URGENT_ROUND seconds (and the
# batch then being fired): a death is not late for the folds of those before it, and its dispatch waits
# about that long at most for them.
FOLD_CHUNK = 500
URGENT_ROUND = 0.5


@dataclass(frozen=True)
class Timing:
    """How long the process manager waits for what (defaults: :mod:`relay_es.domain.defaults`)."""

    settle: timedelta = RESTART_SETTLE
    # The settle window stays open past ``settle`` while executors are still being re-admitted at
    # least this fast (per second, over the last ``settle_span``, or ``settle`` if longer: TCP retries
    # a connection attempt a full listen queue dropped 1, 3, 7 and 15 s after the first, so a storm
    # comes in waves up to 8 s apart), or while none of those HEALTHY on the Relay that stopped is
    # back yet, or, when they are this many a second over that span or more, for that span after the
    # first of them is back; at most until all of those could be back at this rate, or 1 % of them a
    # second if more, and never less than ``settle_max_factor`` x ``settle`` (relay_es.engine.settle).
    settle_busy_per_s: int = 10
    settle_max_factor: float = 4.0
    settle_span: timedelta = timedelta(seconds=16)
    response_timeout: timedelta = RECOVERY_RESPONSE_TIMEOUT
    backoff_base: timedelta = timedelta(seconds=1)
    backoff_max: timedelta = timedelta(seconds=30)

    def backoff(self, attempt: int) -> timedelta:
        if attempt <= 0:
            return timedelta(0)
        return min(self.backoff_base * (2 ** (attempt - 1)), self.backoff_max)


Bootstrap = Callable[[], tuple[list[ExecutorRow], int]]


@dataclass
class Stats:
    """What the process manager did and met, counted (for the metrics and the health check)."""

    declared_dead: int = 0
    dispatched: int = 0
    confirmed: int = 0
    failed: int = 0
    store_errors: int = 0  # failures retried because the store was away or failing
    bugs: int = 0  # failures that were not store errors (see the module docstring)
    armed_at: float = 0.0  # Unix time the timers rebuilt from the store were armed (0: not yet started)
    # Seconds of this thread's CPU by work (a timer kind, "answers", "following"), if it is given a CPU
    # clock: every key is there from the start, so another thread may copy it while it is added to.
    cpu_seconds: dict[str, float] = field(default_factory=dict)


class ProcessManager:
    """Follows the executor events, keeps their rows and a timer per pending decision, and
    takes the decisions when the timers fire (see the module docstring). One thread calls
    :meth:`start` once, then :meth:`step`; :meth:`urgent`, :meth:`listed`, :meth:`is_listed`,
    :meth:`recovery_answered` and :attr:`healthy` may be asked from any thread."""

    def __init__(
        self,
        relay: Relay,
        clock: Clock,
        dispatcher: Dispatcher,
        *,
        owner: str,
        timing: Timing = Timing(),
        bootstrap: Bootstrap | None = None,
        answers: Answers | None = None,
        wake: Callable[[], None] | None = None,
        retention_interval: float | None = None,
        metrics_interval: int | None = None,
        crash_point: Callable[[str], None] | None = None,
        on_event: Callable[[Any, ExecutorRow | None, ExecutorRow], None] | None = None,
        batch_size: int = 500,
        chunk: int = 250,
        tie_key: bytes | None = None,
        journal: Journal | None = None,
        cpu: Callable[[], float] | None = None,
    ) -> None:
        """``answers``: the inbox the dispatcher puts recovery answers in (a fresh one that
        calls ``wake`` by default). ``wake``: called from any thread when there is work for a
        step. ``retention_interval``: seconds between two retention plans sent to each
        application with a HEALTHY executor here (None: no retention). ``metrics_interval``: the
        length of a metrics bucket, whole seconds (None: no metrics collected). ``crash_point``: the
        fault suite's hook, called with a point's name (a no-op by default). ``on_event``: told
        ``(event, old row, new row)`` of every executor event followed (the metrics).
        ``batch_size``: log entries read per query while following. ``chunk``: how many timers
        other than :data:`URGENT` ones one round of :meth:`step` fires (see :meth:`_run_due`). ``tie_key``:
        the secret that orders equally good recovery candidates (random per process unless a test
        gives one; see :meth:`_best_candidate`). ``journal``: the events this process saves, told to
        it as they are saved (:mod:`relay_es.engine.journal`): followed from memory, the log read only
        for what it lacks (None: everything is read from the log). ``cpu``: the CPU seconds of the
        calling thread (``time.thread_time``), read around each kind of work and summed in
        :attr:`Stats.cpu_seconds`; None: not measured."""
        self.relay = relay
        self.clock = clock
        self.dispatcher = dispatcher
        self.owner = owner
        self.live_owners = {owner}
        self.timing = timing
        self._bootstrap = bootstrap
        self.wake: Callable[[], None] = wake or (lambda: None)
        # The default inbox looks ``self.wake`` up on each put.
        self.answers = answers if answers is not None else Answers(lambda: self.wake())
        self.retention_interval = retention_interval
        self.metrics_interval = metrics_interval
        self._crash_point = crash_point or (lambda name: None)
        self.batch_size = batch_size  # log entries read per query while following
        self.journal = journal
        if chunk < 1 or batch_size < 1:
            raise ValueError("chunk and batch_size must be at least 1")
        self.chunk = chunk  # timers other than URGENT ones fired per round of step
        self._tie_key = tie_key if tie_key is not None else secrets.token_bytes(16)
        self.on_event: Callable[[Any, ExecutorRow | None, ExecutorRow], None] = on_event or (lambda e, old, new: None)

        self.position = 0
        self.rows: dict[str, ExecutorRow] = {}
        self.timers = TimerHeap()
        self.settle = SettleWindow(timing.settle.total_seconds(), busy_per_s=timing.settle_busy_per_s,
                                   max_factor=timing.settle_max_factor,
                                   span=max(timing.settle, timing.settle_span).total_seconds())
        self.started_at: datetime | None = None
        # Derived from the rows alone (see relay_es.engine.indexes):
        self._indexes = Indexes(self.live_owners)
        # Decisions taken here, not derivable from the rows:
        self._waiting: dict[tuple[str, str, str | None], set[str]] = defaultdict(set)  # no candidate last time
        self._waits: dict[str, tuple[tuple[str, str, str | None], ...]] = {}  # dead sid -> its keys in _waiting
        self._tried: dict[str, set[str]] = defaultdict(set)  # dead sid -> targets that failed it
        self._backoff_until: dict[str, float] = {}  # dead sid -> monotonic time of its next attempt
        # app -> monotonic time its next retention plan is due, kept while it has no HEALTHY executor: an
        # application whose executors all blip more often than the interval is still served every interval
        self._retention_due: dict[tuple[str, str], float] = {}
        # Applications whose rounds on record the retention timer has not read yet, with when (monotonic)
        # this process first saw an executor of it (``_fire_retention``).
        self._retention_unread: dict[tuple[str, str], float] = {}
        # Deleted applications with executor rows here (as the log says, or the store when a deadline of one
        # came due before the log's deletion was followed): nothing is armed or decided for their executors
        # until they are registered again (_app_deleted, _app_restored).
        self._deleted_apps: set[tuple[str, str]] = set()
        self._app_ids: dict[UUID, tuple[str, str]] = {}  # application stream id -> (org, app), of those with rows
        self._requests: dict[str, str] = {}  # request id -> stream id
        # request id -> monotonic deadline of a dispatch: sent from here, or found outstanding (see _react)
        self._deadlines: dict[str, float] = {}
        # stream id -> notification id of the last event recorded here and folded before the log reached it
        self._folded_ahead: dict[str, int] = {}
        self._defer_later: set[str] = set()  # no candidate, but the log was behind: decided again when it isn't
        # The wall time retention plans are cut from (see _retention_now).
        self._timeline = Timeline(clock.now().timestamp(), clock.monotonic())
        # Deaths recorded and not folded yet, in the order saved (see _fire_urgent); only while _deferring.
        self._unfolded: deque[tuple[int, str, Any]] = deque()
        self._deferring = False

        self._fire: dict[str, tuple[Callable[..., None], bool]] = {  # timer kind -> (handler, batched)
            "deadline": (self._fire_deadlines, True),
            "dispatch": (self._fire_dispatches, True),
            "response": (self._fire_response, False),
            "orphan": (self._fire_orphans, True),
            "react": (self._fire_react, False),
            "retention": (self._fire_retention, False),
            "metrics": (self._fire_metrics, False),
        }
        self._alone: set[tuple[str, Any]] = set()  # timers that hit a bug in a batch: fired one by one
        self.stats = Stats()
        self._cpu = cpu
        if cpu is not None:
            self.stats.cpu_seconds.update(dict.fromkeys([*self._fire, "answers", "following"], 0.0))
        self.last_bug: str | None = None
        # Monotonic time of the first of the steps that failed on the store since the last that succeeded
        self._store_failing_since: float | None = None
        self._bugs_logged: set[tuple[Any, ...]] = set()
        self._urgent_running = False
        self._armed = False  # start() has bootstrapped the rows and armed their timers
        # The work that can wait, each kind at its measured pace: a chunk of it fits before the next deadline.
        self._pace_timers = Pace()
        self._pace_answers = Pace()

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Rebuilds pending deadlines and outstanding dispatches from the store. The settle window, and
        the grace of the executors found HEALTHY on a Relay that is gone, start once they are loaded:
        a long load (read models filled from a large log) had used them up before it knew them. The hub's
        count of admitted sockets is taken before the load: those admitted during it came back. The
        executors of applications deleted (one read of each application's stream) get no timer, and the
        window waits for none of them."""
        self._sample_admissions()
        if self._bootstrap is not None:
            rows, self.position = self._bootstrap()
            self._deleted_apps.update(app for app in {(r.org, r.app) for r in rows} if self.relay.app_deleted(*app))
            for row in rows:
                self._put(row)
        self.started_at = self.clock.now()
        self.settle.start(self.clock.monotonic())
        live = [r for r in self.rows.values() if (r.org, r.app) not in self._deleted_apps]
        self.settle.set_orphans(sum(1 for r in live if self._is_orphan(r)))
        cap = self.clock.now() + timedelta(seconds=self.settle.cap - self.clock.monotonic())
        self.settle.set_held(sum(1 for r in live if self._held_by_settle(r, cap)))
        for row in live:
            self._react(row)
            if row.status in (S.DISCONNECTED, S.DEAD) and self._indexes.outstanding.get(
                    (row.org, row.app, row.executor_id)):
                # A target that went away before the stop, its dispatches still outstanding (the Relay that
                # stopped had not failed them yet): failed as a running Relay fails them (_target_lost), when
                # the settle window closes, if it is still away then.
                self.timers.arm(("react", row.stream_id), self._at(self.clock.monotonic()))
        self.stats.armed_at = self.clock.now().timestamp()
        self._armed = True
        self.step()

    @staticmethod
    def _held_by_settle(row: ExecutorRow, cap: datetime) -> bool:
        """Whether the settle window protects ``row``, found at start, besides the orphans: a deadline
        that could come due while the window may be open (by ``cap``, its latest end on the wall
        clock), or a recovery not yet confirmed (its candidates may be among those coming back)."""
        if row.status == S.DISCONNECTED:
            return row.deadline is not None and row.deadline <= cap
        return row.recovery_phase not in (None, P.CONFIRMED) and recovered_by_peer(
            row.status, row.recovery_phase, row.recovery_version, row.app_version)

    def step(self) -> int:
        """Does everything that is due now. Returns how many things it did. A store error
        while reading the log or recording answers propagates (the owner calls again); the
        first of a run of them is noted (:attr:`store_unavailable`), and a step that succeeds
        forgets it."""
        try:
            total = self._step()
        except Exception as e:
            if self._store_failing_since is None and self.relay.is_store_error(e):
                self._store_failing_since = self.clock.monotonic()
            raise
        self._store_failing_since = None
        return total

    def _step(self) -> int:
        total = 0
        while True:
            # Rounds of bounded work, due timers first (every deadline and orphan, a chunk of the rest), then
            # the log (until a deadline is due), a batch of answers, timers again: a burst of answers
            # or dispatches must not make deadlines late, nor keep the log that arms them unread.
            n = (self._urgently(self._run_due) + self._follow() + self._urgently(self._drain_answers)
                 + self._urgently(self._run_due))
            if n == 0:
                return total
            total += n

    def _urgently(self, work: Callable[[], int]) -> int:
        self._urgent_running = True
        try:
            return work()
        finally:
            self._urgent_running = False

    def urgent(self) -> bool:
        """Whether work a death or a recovery waits for is running or due: timers
        being fired or due now, answers to record. Safe to ask from another thread;
        the read models give way to it (one process shares one GIL). Following the
        log is not urgent: a death never waits for it."""
        return self._urgent_running or bool(self.answers) or self._timer_due()

    def _next_at(self, kind: Any = ANY) -> float | None:
        """Monotonic time the next timer (of ``kind``) fires: its own, or the settle window's end."""
        nxt = self.timers.next_at(kind)
        if nxt is not None and not self.settle.closed:
            nxt = self.settle.not_before(nxt)
        return nxt

    def _timer_due(self, kind: Any = ANY) -> bool:
        """Whether a timer (of ``kind``) would fire now."""
        nxt = self._next_at(kind)
        return nxt is not None and nxt <= self.clock.monotonic()

    def _slack(self) -> float | None:
        """Seconds until the next :data:`URGENT` timer fires (at most 0: one is due), or None."""
        times = [t for kind in URGENT if (t := self._next_at(kind)) is not None]
        return min(times) - self.clock.monotonic() if times else None

    def _urgent_due(self) -> bool:
        """Whether a timer that sets or enforces a deadline (:data:`URGENT`) is due."""
        return any(self._timer_due(kind) for kind in URGENT)

    def next_wakeup(self) -> float | None:
        """Monotonic time of the next timer, or None. While the settle window is open (once
        :meth:`start` has armed the timers), its end as it stands, at the latest: the window is
        decided there, closed or kept open a second more, not when the process manager next wakes
        for something else (its worker wakes it at least once a second). Decided late, it counts
        executors admitted after its end as if they had come within it, and may stay open for them."""
        nxt = self._next_at()
        if self._armed and not self.settle.closed:
            nxt = self.settle.until if nxt is None else min(nxt, self.settle.until)
        return nxt

    def recovery_answered(self, outcome: RecoveryOutcome) -> None:
        """Thread-safe: a target answered (or can't). Puts it in :attr:`answers`."""
        self.answers.put(outcome)

    # ------------------------------------------------------------- health
    @property
    def healthy(self) -> bool:
        """False once a bug has been met (see :attr:`last_bug`); store errors do not count."""
        return self.last_bug is None

    @property
    def store_unavailable(self) -> bool:
        """Whether its steps have failed on the store for :data:`STORE_UNAVAILABLE_SECS` or longer,
        none succeeding since (the instance is not ready: ``/readyz``). Safe to ask from another thread."""
        since = self._store_failing_since
        return since is not None and self.clock.monotonic() - since >= STORE_UNAVAILABLE_SECS

    def _failed(self, where: str, e: Exception) -> float:
        """Counts and logs a failure; returns how soon to try again."""
        if self.relay.is_store_error(e):
            self.stats.store_errors += 1
            log.warning("%s failed on the store (%s: %s); retrying in %gs", where, type(e).__name__, e, RETRY_SECS)
            return RETRY_SECS
        self._bug(where, e)
        return BUG_RETRY_SECS

    def _bug(self, where: str, e: BaseException) -> None:
        self.stats.bugs += 1
        self.last_bug = f"{where}: {type(e).__name__}: {e}"
        frames = traceback.extract_tb(e.__traceback__)
        place = (frames[-1].filename, frames[-1].lineno) if frames else ()
        signature = (where, type(e).__qualname__, *place)
        if signature in self._bugs_logged:
            log.debug("bug again in the process manager (%s): %s", where, e)
            return
        self._bugs_logged.add(signature)
        log.error("bug in the process manager (%s); other streams go on, these are tried again every %gs",
                  where, BUG_RETRY_SECS, exc_info=e)

    # ------------------------------------------------------------ following
    def catch_up(self, *, yield_to_timers: bool = False) -> int:
        """Folds the executor events appended since :attr:`position`, :attr:`batch_size` at a time.
        Returns how many entries of the log it passed (the journal's include other topics' ids).
        ``yield_to_timers``: stops after a batch once an :data:`URGENT` timer is due, so that
        :meth:`step` fires it before following on (a backlog of events never makes a death late)."""
        self._fold_unfolded()  # what this process recorded before what it follows, as saved
        n = 0
        while True:
            if yield_to_timers and n and self._urgent_due():
                return n
            notifications, to = self._next_events()
            if not notifications and to == self.position:
                return n
            for nid, sid, event in notifications:
                if event is not None:  # None: folded already (this process manager recorded it), or another topic
                    self._fold(nid, event, "following the log")
                if self._folded_ahead:
                    self._caught_up_with(sid, nid)
                self.position = nid
                n += 1
            self.position = max(self.position, to)

    def _next_events(self) -> tuple[list[tuple[int, str, Any]], int]:
        """The next executor events after :attr:`position`, at most :attr:`batch_size`: ``(id, stream
        id, event)``, the event None where it is folded already (:meth:`_has`) or of another topic;
        and the position once they are folded. From the journal while it holds the next ids (this
        process saved them); else from the log, up to the journal's next id where there is one, or
        else up to the log's head (every id before either is committed: see
        :mod:`relay_es.engine.journal`), so that a gap, or a run of other topics' events at the end of
        the log (another instance's actions, say), is read once and passed, not read again at every
        step; the log is not read at all when its head is where the process manager is."""
        until = None
        if self.journal is not None:
            taken, beyond = self.journal.take(self.position, self.batch_size)
            if taken:
                return [(nid, sid, None if event is None or self._has(sid, event.originator_version) else event)
                        for nid, sid, event in taken], taken[-1][0]
            if beyond is not None:
                until = beyond - 1
        if until is None:
            until = self.relay.head()
            if until <= self.position:
                return [], self.position
        notifications = self.relay.notifications(self.position, self.batch_size, EXECUTOR_TOPICS,
                                                 unreadable=True, skip=self._has, until=until)
        if len(notifications) < self.batch_size:
            return notifications, until  # all of it: what it held of the executors' events, and the rest passed
        return notifications, notifications[-1][0]

    def _has(self, stream_id: str, version: int) -> bool:
        """Whether the row of ``stream_id`` has folded its event ``version`` already (the log
        reader skips decoding such an event)."""
        row = self.rows.get(stream_id)
        return row is not None and row.version >= version

    def _execute(self, ops: list[Any], saved: list[tuple[int, str, Any]] | None = None) -> list[bool]:
        """Runs a batch of this process manager's commands (:meth:`Relay.execute`) and folds the
        events they recorded at once, in the order they were saved, reacting to them as to any event
        followed: a death's dispatch is armed without waiting to read the death back from the log,
        and following the log later skips them without decoding them (:meth:`_has`). Only an event
        that follows on from its row's version is folded: one recorded after another writer's event
        this process manager has not followed yet waits for the log, with that one. While
        :attr:`_deferring` (deaths, while more are due: :meth:`_fire_urgent`), what they record waits in
        :attr:`_unfolded` instead; any other batch run here, and following the log, folds those first
        (what :meth:`_guarded` records is never folded ahead: the log gives it, after them). ``saved``:
        what they recorded is appended to it too."""
        if not self._deferring:
            self._fold_unfolded()
        recorded: list[tuple[int, str, Any]] = []
        try:
            return self.relay.execute(ops, recorded)
        finally:
            if saved is not None:
                saved.extend(recorded)
            if self._deferring:
                self._unfolded.extend(recorded)
            else:
                self._fold_recorded(recorded)

    def _fold_unfolded(self, limit: int | None = None) -> None:
        """Folds what :meth:`_execute` deferred (``limit`` of it, or all), oldest first. Whatever is not
        folded here (a store error in the middle) is not lost: its row is behind, so the log folds it."""
        if self._unfolded:
            n = len(self._unfolded) if limit is None else min(limit, len(self._unfolded))
            self._fold_recorded([self._unfolded.popleft() for _ in range(n)])

    def _fold_recorded(self, recorded: list[tuple[int, str, Any]]) -> None:
        """Folds events this process manager recorded (``(id, stream id, event)``, in the order
        saved) ahead of the log, where they follow on from their row (see :meth:`_execute`)."""
        behind: set[str] = set()  # streams with an event of another writer not followed yet
        for nid, sid, event in recorded:
            row = self.rows.get(sid)
            if sid in behind or event.originator_version != (row.version if row is not None else 0) + 1:
                # Another writer's event comes before it (the hub's Connected, say): folding this one
                # would skip that one for good. The log gives them both, in order.
                behind.add(sid)
                continue
            self._folded_ahead[sid] = nid
            self._fold(nid, event, "folding what it recorded")

    def _fold(self, nid: int, event: Any, where: str) -> None:
        """:meth:`_apply`; a bug in it is counted (:meth:`_bug`) and the stream's reaction tried again
        :data:`BUG_RETRY_SECS` later. A store error propagates."""
        try:
            self._apply(nid, event)
        except Exception as e:
            if self.relay.is_store_error(e):
                raise
            self._bug(where, e)
            self.timers.arm(("react", str(event.originator_id)), self.clock.monotonic() + BUG_RETRY_SECS)

    def _caught_up_with(self, sid: str, nid: int) -> None:
        """The log has reached event ``nid`` of ``sid``, which was folded already as it was recorded:
        every other writer's event before it has been followed now. A recovery that found no
        candidate while the log was behind (:meth:`_fire_dispatches`) is decided again."""
        if self._folded_ahead.get(sid, nid + 1) <= nid:
            del self._folded_ahead[sid]
            if sid in self._defer_later:
                self._defer_later.discard(sid)
                self._arm_dispatch(sid)

    def _follow(self) -> int:
        c0 = self._cpu_now()
        try:
            return self.catch_up(yield_to_timers=True)
        except Exception as e:
            if self.relay.is_store_error(e):
                raise
            self._bug("reading the log", e)
            return 0
        finally:
            self._spent("following", c0)

    def _cpu_now(self) -> float:
        """The CPU clock before a piece of work (0.0 when none is given: nothing is measured)."""
        return self._cpu() if self._cpu is not None else 0.0

    def _spent(self, work: str, since: float) -> None:
        """Adds the CPU time since ``since`` (:meth:`_cpu_now` before the work) to ``work``'s."""
        if self._cpu is not None:
            self.stats.cpu_seconds[work] += self._cpu() - since

    def listed(self, org: str, app: str) -> int:
        """How many executors of the application exist (HEALTHY, DISCONNECTED or
        DEAD), as far as this process manager has followed the log; none while the
        application is deleted. Safe to ask from another thread (the hub's limit on
        executor ids per application)."""
        if (org, app) in self._deleted_apps:
            return 0
        return self._indexes.listed.get((org, app), 0)

    def has_healthy(self, org: str, app: str) -> bool:
        """Whether the application has a HEALTHY executor on a live Relay, as far as this process
        manager has followed the log (the alert manager's ``UnresponsiveApplication``)."""
        return bool(self._indexes.apps_healthy.get((org, app)))

    def untried_candidates(self, stream_id: str) -> int:
        """How many HEALTHY executors of a dead executor's version (on a live Relay) have not failed
        its recovery yet (the alert manager's ``RecoveryFailed``: 0 means every one has)."""
        row = self.rows.get(stream_id)
        if row is None:
            return 0
        tried = self._tried.get(stream_id, set())
        return sum(1 for s in self._indexes.healthy.get((row.org, row.app, row.recovery_version), ())
                   if (r := self.rows.get(s)) is not None and r.executor_id != row.executor_id
                   and r.executor_id not in tried)

    def is_listed(self, stream_id: str) -> bool:
        """Whether this executor stream exists and is not deleted, nor is its application. Thread-safe, like
        :meth:`listed`."""
        row = self.rows.get(stream_id)
        return row is not None and row.visible and (row.org, row.app) not in self._deleted_apps

    # ------------------------------------------------------- derived state
    def derived_indexes(self) -> dict[str, dict[Any, Any]]:
        """The indexes kept in step with :attr:`rows` one event at a time, as plain dicts of
        frozensets/ints without empty entries; equal to :meth:`rebuilt_indexes` at all times."""
        return self._indexes.snapshot()

    def rebuilt_indexes(self) -> dict[str, dict[Any, Any]]:
        """The same indexes computed from scratch from :attr:`rows` (:func:`derive_indexes`)."""
        return derive_indexes(self.rows.values(), self.live_owners)

    def index_snapshot(self, stream_id: str | None = None) -> dict[str, Any]:
        """A read-only copy of the derived state: :meth:`derived_indexes` plus the decisions
        taken here (``waiting``: (org, app, version) -> dead sids that found no candidate;
        ``tried``: dead sid -> targets that failed it; ``requests``: request id -> sid).
        With ``stream_id``: that stream's place in each of them."""
        whole = self.derived_indexes()
        whole["waiting"] = {k: frozenset(v) for k, v in self._waiting.items() if v}
        whole["tried"] = {k: frozenset(v) for k, v in self._tried.items() if v}
        whole["requests"] = dict(self._requests)
        if stream_id is None:
            return whole
        return {
            "healthy": [k for k, v in whole["healthy"].items() if stream_id in v],
            "apps_healthy": [k for k, v in whole["apps_healthy"].items() if stream_id in v],
            "outstanding": [k for k, v in whole["outstanding"].items() if stream_id in v],
            "listed": self.is_listed(stream_id),
            "waiting": [k for k, v in whole["waiting"].items() if stream_id in v],
            "tried": whole["tried"].get(stream_id, frozenset()),
            "requests": sorted(r for r, s in whole["requests"].items() if s == stream_id),
        }

    def _put(self, row: ExecutorRow) -> None:
        old = self.rows.get(row.stream_id)
        if old is None:  # a stream's org and app never change
            self._app_ids.setdefault(app_stream_id(row.org, row.app), (row.org, row.app))
        self._indexes.put(old, row)
        self.rows[row.stream_id] = row
        self._follow_schedules((row.org, row.app))

    def _follow_schedules(self, app: tuple[str, str]) -> None:
        """One retention timer per application with a HEALTHY executor here, first due one
        interval after the application's last round on record (its first firing, within
        :data:`RETENTION_FIRST_LOOK` seconds, reads it: :meth:`_fire_retention`), and one metrics
        timer, first due at the end of the current bucket; both dropped when the last one goes.
        The retention plan's due time is kept meanwhile (until the application has no executor at
        all): when an executor is back the timer is armed for it, not a whole interval later, so an
        application whose only executor is away for a moment more often than the interval still gets
        its plan every interval. A plan
        that fell due meanwhile goes within :func:`~relay_es.engine.metric_windows.spread` of the
        return, so that after an outage the applications' plans do not all go at once."""
        gone = app in self._deleted_apps
        healthy = app in self._indexes.apps_healthy and not gone
        if self.retention_interval is not None:
            if not healthy:
                self.timers.cancel(("retention", app))
                if gone or not self._indexes.listed.get(app):  # no executor left at all (deleted, or never one)
                    self._retention_due.pop(app, None)
                    self._retention_unread.pop(app, None)
            elif ("retention", app) not in self.timers:
                now = self.clock.monotonic()
                due = self._retention_due.get(app)
                if due is None:  # first here: a look at the rounds on record, soon (no store read in a fold)
                    due = self._retention_due[app] = now + spread(app, int(RETENTION_FIRST_LOOK))
                    self._retention_unread[app] = now
                if due < now:  # overdue (after an outage, every application's): spread, as metrics are
                    # (the first look, not yet taken, within its own span: an executor's blip does not delay it)
                    first = app in self._retention_unread
                    due = now + spread(app, int(RETENTION_FIRST_LOOK if first else self.retention_interval))
                self.timers.arm(("retention", app), due)
        if self.metrics_interval is not None:
            if not healthy:
                self.timers.cancel(("metrics", app))
            elif ("metrics", app) not in self.timers:
                self._arm_metrics(app)

    def _arm_metrics(self, app: tuple[str, str], due: float | None = None) -> None:
        """At ``due`` (epoch seconds; by default the end of the current bucket plus its lag and
        the application's offset), on the monotonic clock; the timer carries ``due``."""
        assert self.metrics_interval is not None
        now = self.clock.now().timestamp()
        if due is None:
            due = now + seconds_until_next(now - spread(app, self.metrics_interval), self.metrics_interval)
        self.timers.arm(("metrics", app), self.clock.monotonic() + max(EARLY, due - now), due)

    def _apply(self, nid: int, event: Any) -> None:
        if isinstance(event, Unreadable):  # skipped, as the read models skip it (ADR 16), with its own error
            log.error("process manager skipped event %d: %r", nid, event)
            return
        if isinstance(event, APP_EVENTS):
            app = self._app_ids.get(event.originator_id)
            if app is not None:  # else no executor of it here: nothing to close or to arm again
                if isinstance(event, Application.Deleted):
                    self._app_deleted(app)
                else:
                    self._app_restored(app)
            return
        sid = str(event.originator_id)
        old = self.rows.get(sid)
        if old is not None and old.version >= event.originator_version:
            return
        try:
            row = reduce(old, event)
        except FOLD_ERRORS as e:  # an event it cannot fold: skipped, as the read models skip it (ADR 16)
            log.error("process manager skipped event %d (%s): %s", nid, type(event).__qualname__, e)
            return
        self._put(row)
        if isinstance(event, Executor.RecoveryDispatched):
            self._requests[event.request_id] = sid
        elif isinstance(event, Executor.RecoveryFailed):
            self.stats.failed += 1
            if event.target_executor_id:
                self._tried[sid].add(event.target_executor_id)
            delay = self.timing.backoff(row.recovery_attempt).total_seconds()
            self._backoff_until[sid] = self.clock.monotonic() + delay
            self._requests.pop(event.request_id, None)
            self._deadlines.pop(event.request_id, None)
        elif isinstance(event, Executor.RecoveryConfirmed):
            self._requests.pop(event.request_id, None)
            self._deadlines.pop(event.request_id, None)
        elif isinstance(event, Executor.RecoveryReordered):
            self._backoff_until.pop(sid, None)  # the earlier death's failed attempt does not delay the later one
        elif isinstance(event, (Executor.Deleted, Executor.RecoveryWithdrawn, Executor.DeclaredDead)):
            # Who failed to recover a death, and its backoff, belong to that death: a withdrawal ends it,
            # and a new death (a later incarnation's) starts with every candidate untried.
            self._tried.pop(sid, None)
            self._backoff_until.pop(sid, None)
        try:  # after the bookkeeping above: an observer sees the failed target among those tried
            self.on_event(event, old, row)
        except Exception:
            log.exception("process-manager observer failed")
        if isinstance(event, (Executor.Disconnected, Executor.DeclaredDead)):
            self._target_lost(row)
        if isinstance(event, Executor.Connected) and row.owner in self.live_owners:
            self.settle.readmitted(self.clock.monotonic())
            for waiting in list(self._waiting.get((row.org, row.app, row.app_version), ())):
                self._arm_dispatch(waiting)
        self._react(row)

    # ------------------------------------------------------------- reacting
    def _is_orphan(self, row: ExecutorRow) -> bool:
        """HEALTHY on a Relay that is gone: its socket went with it."""
        return row.status == S.HEALTHY and row.owner not in self.live_owners

    def _sample_admissions(self) -> None:
        """Tells the settle window how many executor sockets the hub has admitted so far (ahead of the log)."""
        admissions = getattr(self.dispatcher, "admissions", None)
        if admissions is not None:
            self.settle.admitted(self.clock.monotonic(), admissions())

    def _mono_for(self, wall: datetime) -> float:
        """The monotonic time at which the wall clock reaches ``wall``: never early, the wall clock
        read first (a reading of it may take a while: whatever it took makes the timer late)."""
        now = self.clock.now()
        return self.clock.monotonic() + (wall - now).total_seconds()

    def _at(self, mono: float) -> float:
        """Nothing is enforced before the settle window after start has passed."""
        return self.settle.not_before(mono)

    def _react(self, row: ExecutorRow) -> None:
        sid = row.stream_id
        if (row.org, row.app) in self._deleted_apps:
            self._close_out(row)
            return
        if row.status == S.DISCONNECTED and row.deadline is not None:
            self.timers.arm(("deadline", sid), self._at(self._mono_for(row.deadline)), row.deadline)
        else:
            self.timers.cancel(("deadline", sid))

        if self._is_orphan(row):
            if ("orphan", sid) not in self.timers:
                self.timers.arm(("orphan", sid), self._at(self.clock.monotonic()), row.connection_id)
        else:
            self.timers.cancel(("orphan", sid))

        if row.recovery_phase == P.DISPATCHED and row.recovery_dispatched_at is not None:
            at = self._deadlines.get(row.recovery_request_id or "")  # the deadline the dispatcher was given
            if at is None:  # dispatched by an earlier Relay: nobody here is waiting on it
                # A response timeout after the dispatch, as the wall clock says, but never more than one from
                # now: a wall clock set back while Relay was down would have stretched the wait by the step,
                # for an answer that died with the earlier Relay's sockets. Kept, so that reacting to the row
                # again does not move it.
                timeout = self.timing.response_timeout
                at = self._deadlines[row.recovery_request_id or ""] = self._at(min(
                    self._mono_for(row.recovery_dispatched_at + timeout),
                    self.clock.monotonic() + timeout.total_seconds()))
            self.timers.arm(("response", sid), at, row.recovery_request_id)
            self._requests[row.recovery_request_id or ""] = sid
        else:
            self.timers.cancel(("response", sid))

        if row.recovery_phase in (P.PENDING, P.DEFERRED):
            if recovered_by_peer(row.status, row.recovery_phase, row.recovery_version, row.app_version):
                if ("dispatch", sid) not in self.timers:
                    self._arm_dispatch(sid)
            else:
                self.timers.cancel(("dispatch", sid))
                self._unwait(sid)
                self._guarded(sid, lambda: self._withdraw(row))
        else:
            self.timers.cancel(("dispatch", sid))
            self._unwait(sid)

    def _app_deleted(self, app: tuple[str, str]) -> None:
        """The application is deleted (its sockets are closed with 4007): nobody is left to recover its
        executors, and a death would only wait for a candidate for ever. Every timer and decision of its
        executors goes (:meth:`_close_out`), and its retention and metrics timers; what they record from
        now on is folded, and nothing is armed for it (ADR 15). Their rows stay as the log has them."""
        if app in self._deleted_apps:
            return
        self._deleted_apps.add(app)
        for row in [r for r in self.rows.values() if (r.org, r.app) == app]:
            self._close_out(row)
        self._follow_schedules(app)

    def _app_restored(self, app: tuple[str, str]) -> None:
        """The application is registered again: its executors' rows are reacted to as they stand, as a
        restart does. A DISCONNECTED one whose deadline has passed is declared dead at once, a recovery
        left pending is dispatched, one left dispatched fails within a response timeout."""
        if app not in self._deleted_apps:
            return
        self._deleted_apps.discard(app)
        for row in [r for r in self.rows.values() if (r.org, r.app) == app]:
            self._react(row)
            if row.status in (S.DISCONNECTED, S.DEAD) and self._indexes.outstanding.get(
                    (row.org, row.app, row.executor_id)):
                self.timers.arm(("react", row.stream_id), self._at(self.clock.monotonic()))  # _target_lost
        self._follow_schedules(app)

    def _close_out(self, row: ExecutorRow) -> None:
        """Forgets every timer and decision about an executor of a deleted application."""
        sid = row.stream_id
        for kind in ("deadline", "orphan", "dispatch", "response", "react"):
            self.timers.cancel((kind, sid))
            self._alone.discard((kind, sid))
        self._unwait(sid)
        self._tried.pop(sid, None)
        self._backoff_until.pop(sid, None)
        request_id = row.recovery_request_id
        if request_id and self._requests.get(request_id) == sid:  # its answer, if one comes, is ignored
            del self._requests[request_id]
            self._deadlines.pop(request_id, None)

    def _withdraw(self, row: ExecutorRow) -> None:
        """Withdraws the recovery of an executor that is back on the recovery's version. A refusal means the command found it
        still dead: a copy in this process's cache older than the Connected this row folded (the
        hub's thread had committed it, not yet cached it). A refusal records nothing, so no version
        check catches it: the copy is forgotten and the row reacted to again, read from the store."""
        sid = row.stream_id
        if not self.relay.withdraw_recovery(UUID(sid), reason=f"executor reconnected (incarnation {row.incarnation})"):
            self.relay.forget_cached([UUID(sid)])
            self.timers.arm(("react", sid), self.clock.monotonic() + RETRY_SECS)

    def _arm_dispatch(self, sid: str) -> None:
        at = max(self.clock.monotonic(), self._backoff_until.get(sid, 0.0))
        self.timers.arm(("dispatch", sid), self._at(at))

    def _wait(self, row: ExecutorRow) -> None:
        """Dispatched again the moment an executor of its version connects, or of the later death's
        version kept behind it (:meth:`_fire_dispatches` then reorders them)."""
        keys = [(row.org, row.app, row.recovery_version)]
        if row.recovery_redo_version not in (None, row.recovery_version):
            keys.append((row.org, row.app, row.recovery_redo_version))
        self._forget_waits(row.stream_id)
        for key in keys:
            self._waiting[key].add(row.stream_id)
        self._waits[row.stream_id] = tuple(keys)

    def _unwait(self, sid: str) -> None:
        self._defer_later.discard(sid)
        self._forget_waits(sid)

    def _forget_waits(self, sid: str) -> None:
        for key in self._waits.pop(sid, ()):
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.discard(sid)
                if not waiting:
                    del self._waiting[key]

    def _target_lost(self, lost: ExecutorRow) -> None:
        if (lost.org, lost.app) in self._deleted_apps:
            return  # its recoveries are of its deleted application: failed if it is registered again (_app_restored)
        for sid in list(self._indexes.outstanding.get((lost.org, lost.app, lost.executor_id), ())):
            row = self.rows[sid]
            if row.recovery_phase == P.DISPATCHED and row.recovery_request_id:
                request_id = row.recovery_request_id
                self._guarded(sid, lambda: self.relay.fail_recovery(
                    UUID(sid), request_id=request_id, reason=f"target {lost.executor_id} became {lost.status}"))

    def _guarded(self, sid: str, command: Callable[[], Any]) -> None:
        """A reaction's command that failed is retried by reacting to the row again
        later (see :meth:`_failed`); commands are idempotent."""
        try:
            command()
        except Exception as e:
            self.timers.arm(("react", sid), self.clock.monotonic() + self._failed("reaction", e))

    # ---------------------------------------------------------------- timers
    def _run_due(self) -> int:
        """Fires the due timers: every deadline and orphan due (:data:`URGENT`), then at most
        :attr:`chunk` of the others, fewer if the next deadline is nearer than that many take
        (:class:`~relay_es.engine.pace.Pace`). Deadlines that come due together are decided together and
        recorded in one transaction, so a thousand executors dying at once cost one commit, not a
        thousand; so are orphans; a batched kind's due timers in a chunk are recorded in one
        transaction too. :meth:`step` goes round (following the log,
        recording answers) before the next chunk: a death is never late because the dispatches of
        earlier deaths were being recorded and sent, nor is the log, whose Disconnected events arm
        the deadlines, left unread while they are."""
        if not self.settle.closed:
            self._sample_admissions()
            if self.settle.is_open(self.clock.monotonic()):
                return 0  # timers armed for the settle window's end wait for its new end
        total = self._fire_urgent()
        limit = self._pace_timers.fitting(self._slack(), self.chunk)
        chunk: dict[str, list[tuple[Any, Any]]] = {}  # kind -> [(key, payload)], earliest due first
        for (kind, sid), payload in self.timers.pop_due(self.clock.monotonic(), limit=limit):
            chunk.setdefault(kind, []).append((sid, payload))
            total += 1
        for kind in URGENT:  # came due meanwhile: first again
            if kind in chunk:
                self._fire_kind(kind, chunk.pop(kind))
        if chunk:
            t0 = self.clock.monotonic()
            for kind, items in chunk.items():
                self._fire_kind(kind, items)
            self._pace_timers.took(sum(map(len, chunk.values())), self.clock.monotonic() - t0)
        return total

    def _fire_urgent(self) -> int:
        """Fires every :data:`URGENT` timer due, kind by kind (an orphan's deadline that is due
        already, too), and those that come due meanwhile, while the round has gone on for less than
        :data:`URGENT_ROUND` seconds (so at most that, plus a batch); then the round goes on to the
        other work. A timer armed again meanwhile fires again in the round if it comes due in it (a
        death refused because the wall clock was behind its deadline is armed for when it is not; a
        store error's retry comes a second later). The deaths recorded are folded (their rows, their
        dispatches armed) only once none is due, :data:`FOLD_CHUNK` at a time, each chunk followed
        by a look for due ones, or when the round ends: in a storm of deaths a deadline waits for the
        records of those before it, not for their folds too (bench section 3: a death took the
        process manager 41 us, 10 of them folding it). Meanwhile the rows of the deaths recorded
        still say DISCONNECTED: the metrics and alerts that read them lag, no decision does (ADR 3)."""
        start = self.clock.monotonic()
        total = 0
        try:
            while True:
                now = self.clock.monotonic()
                fired = 0
                for kind in URGENT:
                    while due := self.timers.pop_due(now, kind=kind):
                        fired += len(due)
                        self._deferring = kind == "deadline"
                        try:
                            self._fire_kind(kind, [(sid, payload) for (_, sid), payload in due])
                        finally:
                            self._deferring = False
                total += fired
                if fired and self.clock.monotonic() - start < URGENT_ROUND:
                    continue
                if fired or not self._unfolded:
                    return total
                self._fold_deaths(FOLD_CHUNK)
        finally:
            self._fold_deaths()

    def _fold_deaths(self, limit: int | None = None) -> None:
        """:meth:`_fold_unfolded`, its CPU counted as the deadlines'."""
        if self._unfolded:
            c0 = self._cpu_now()
            try:
                self._fold_unfolded(limit)
            finally:
                self._spent("deadline", c0)

    def _fire_kind(self, kind: str, items: list[tuple[Any, Any]]) -> None:
        """Fires the due timers of one kind through its handler in :attr:`_fire`: a batched
        kind all together (but those that hit a bug in a batch, one by one), the others one
        by one. A timer that fails is armed again (:meth:`_failed` says when)."""
        entry = self._fire.get(kind)
        if entry is None:
            self._bug("timers", LookupError(f"no handler for timer kind {kind!r}; {len(items)} dropped"))
            return
        c0 = self._cpu_now()
        try:
            self._fire_groups(kind, items, *entry)
        finally:
            self._spent(kind, c0)

    def _fire_groups(self, kind: str, items: list[tuple[Any, Any]], fire: Callable[..., None], batched: bool) -> None:
        if batched:
            together = [item for item in items if (kind, item[0]) not in self._alone]
            groups = [together] if together else []
            groups += [[item] for item in items if (kind, item[0]) in self._alone]
        else:
            groups = [[item] for item in items]
        for group in groups:
            try:
                if batched:
                    fire(group)
                else:
                    fire(*group[0])
            except Exception as e:
                if len(group) > 1 and not self.relay.is_store_error(e):
                    # A bug somewhere in a batch: each fires alone, now, so that only its own stream waits.
                    self._bug(f"{kind} timers", e)
                    for sid, payload in group:
                        self._alone.add((kind, sid))
                        self.timers.arm((kind, sid), self.clock.monotonic(), payload)
                    continue
                at = self.clock.monotonic() + self._failed(f"{kind} timers", e)
                for sid, payload in group:
                    self.timers.arm((kind, sid), at, payload)
            else:
                if self._alone:
                    self._alone.difference_update((kind, sid) for sid, _ in group)

    def _fire_react(self, sid: str, _payload: Any) -> None:
        row = self.rows.get(sid)
        if row is not None:
            self._react(row)
            if row.status in (S.DISCONNECTED, S.DEAD):
                self._target_lost(row)

    def _fire_retention(self, app: tuple[str, str], _payload: Any) -> None:
        """Sends the application's retention plan, if its settings want one; re-arms. Its first firing
        in this process reads the application's last round on record (by any instance, before a restart
        too) and waits until one interval after it, or after this process first saw an executor of it
        when there is none: counted from this process's start alone, a Relay restarted more often than
        the interval (a crash loop, frequent deploys) sent no plan at all, so no retention and no global
        timeout. A store away is retried a second later, as every firing is."""
        if app not in self._indexes.apps_healthy or self.retention_interval is None:
            return
        org, name = app
        seen = self._retention_unread.get(app)
        if seen is not None:
            last = self.relay.last_retention_at(org, name)
            del self._retention_unread[app]
            now = self.clock.monotonic()
            due = seen + self.retention_interval if last is None else \
                now + (last - self.clock.now()).total_seconds() + self.retention_interval
            if due > now:
                due = self._retention_due[app] = min(due, now + self.retention_interval)
                self.timers.arm(("retention", app), due)
                return
        p = retention.plan(self.relay.app_settings(org, name), self._retention_now())
        if p is not None:
            self.dispatcher.send_retention(org, name, p)
        due = self._retention_due[app] = self.clock.monotonic() + self.retention_interval
        self.timers.arm(("retention", app), due)

    def _retention_now(self) -> datetime:
        """The time a retention plan's cutoffs are cut from: the wall clock, but never ahead of the
        lowest reading of it seen, moved on by the monotonic clock since. A plan deletes history and
        cancels workflows older than its cutoffs, on the executors' own clocks: a wall clock stepped
        an hour ahead would have put both cutoffs an hour into the future and taken everything. A clock
        stepped back is followed (the plans delete less); one corrected forward while Relay runs is not,
        until a restart (said at WARNING each round)."""
        wall = self.clock.now()
        now = self._timeline.now(wall.timestamp(), self.clock.monotonic())
        if self._timeline.ahead > 1:
            log.warning("the wall clock is %.0f s ahead of where it stood, moved on by the monotonic clock: "
                        "retention plans are cut from the earlier time until Relay restarts", self._timeline.ahead)
        return wall if now == wall.timestamp() else datetime.fromtimestamp(now, wall.tzinfo)

    def _fire_metrics(self, app: tuple[str, str], due: float | None) -> None:
        """Asks for the application's metrics that are due; re-arms one bucket later. A timer
        that fired before its wall-clock time (the wall clock was stepped back, or drifted from the
        monotonic one) waits for it, so no bucket is asked for before it is complete."""
        if app not in self._indexes.apps_healthy or self.metrics_interval is None:
            return
        now = self.clock.now().timestamp()
        if due is not None and now < due - EARLY:
            self._arm_metrics(app, due)
            return
        self.dispatcher.collect_metrics(*app)
        nxt = None if due is None else due + self.metrics_interval
        self._arm_metrics(app, nxt if nxt is not None and nxt > now else None)

    def _fire_deadlines(self, items: list[tuple[str, datetime]]) -> None:
        live = []
        deleted: dict[tuple[str, str], bool] = {}
        for sid, d in items:
            row = self.rows.get(sid)
            if row is not None and (row.org, row.app) not in deleted:
                deleted[(row.org, row.app)] = self.relay.app_deleted(row.org, row.app)
            if row is not None and deleted[(row.org, row.app)]:
                # Its application is deleted, and the log that says so not followed this far yet: closed out
                # now (_app_deleted), as when it is. Left DISCONNECTED.
                log.info("executor %s of deleted application %s/%s not declared dead", sid, row.org, row.app)
                self._app_deleted((row.org, row.app))
                continue
            if row is None or not self._back_already("deadline", row, d):
                live.append((sid, d))
        items = live
        if not items:
            return
        results = self._execute([self.relay.op_declare_dead(UUID(sid), d) for sid, d in items])
        self.stats.declared_dead += sum(results)
        refused = [(sid, d) for (sid, d), ok in zip(items, results) if not ok]
        if not refused:
            return
        # The log says why (a Connected: its reaction cancels the timer). Followed until a deadline is
        # due, not to the end: a refused deadline's row still stale is armed again and refused again.
        self.catch_up(yield_to_timers=True)
        for sid, deadline in refused:
            row = self.rows.get(sid)
            if row is not None and row.status == S.DISCONNECTED and row.deadline == deadline:
                # The wall clock is behind the deadline (it was stepped back): wait again.
                at = max(self._mono_for(deadline), self.clock.monotonic() + 0.01)
                self.timers.arm(("deadline", sid), at, deadline)

    def _back_already(self, kind: str, row: ExecutorRow, payload: Any) -> bool:
        """Whether the hub holds ``row``'s executor again; if so its Connected is on the way and will
        cancel the ``kind`` timer, which is armed again meanwhile (``RETRY_SECS``)."""
        if not self.dispatcher.is_connected(row.org, row.app, row.executor_id):
            return False
        self.timers.arm((kind, row.stream_id), self.clock.monotonic() + RETRY_SECS, payload)
        return True

    def _fire_orphans(self, items: list[tuple[str, str | None]]) -> None:
        """Records every executor still HEALTHY on a Relay that is gone (and not back here since)
        Disconnected (``relay_restarted``), :data:`ORPHANS_PER_SAVE` to a transaction: the deadline
        each carries is a full grace from Relay's start, moved by as long as the settle window was
        kept open."""
        grace_from = self.started_at + timedelta(seconds=self.settle.extension) if self.started_at else None
        ops = []
        for sid, connection_id in items:
            row = self.rows.get(sid)
            if row is None or not self._is_orphan(row) or row.connection_id != connection_id:
                continue
            if self._back_already("orphan", row, connection_id):
                continue
            ops.append(self.relay.op_disconnected(UUID(sid), connection_id=connection_id or "",
                                                 reason="relay_restarted", grace_from=grace_from))
        for i in range(0, len(ops), ORPHANS_PER_SAVE):
            self._execute(ops[i:i + ORPHANS_PER_SAVE])

    def _fire_response(self, sid: str, request_id: str | None) -> None:
        if request_id:
            expire = getattr(self.dispatcher, "expire", None)
            if expire is not None:
                expire(request_id)  # before the failure is recorded: no recovery goes out after it
            self.relay.fail_recovery(
                UUID(sid),
                request_id=request_id,
                reason=f"no answer within {self.timing.response_timeout.total_seconds():g}s",
            )

    def _fire_dispatches(self, items: list[tuple[str, Any]]) -> None:
        """Decides every due dispatch, records them in one transaction, then sends."""
        ops = []
        sends: list[tuple[str, RecoveryRequest | None]] = []
        asked_at: dict[str, datetime] = {}  # request id -> the clock reading its dispatch was stamped and armed from
        assigned: dict[tuple[str, str, str], int] = defaultdict(int)
        peers: dict[tuple[str, str, str | None], list[ExecutorRow]] = {}
        for sid, _ in items:
            row = self.rows.get(sid)
            if row is None or row.recovery_phase not in (P.PENDING, P.DEFERRED) or not recovered_by_peer(
                    row.status, row.recovery_phase, row.recovery_version, row.app_version):
                continue
            target = self._best_candidate(row, assigned, peers)
            if target is None and self._later_first(row, assigned, peers):
                # A later death kept behind this one has a candidate, this one none: that one first (ADR 9).
                self._unwait(sid)
                ops.append(self.relay.op_reorder(UUID(sid)))
                sends.append((sid, None))
                continue
            if target is None:
                self._wait(row)
                if row.recovery_phase == P.PENDING and sid in self._folded_ahead:
                    # Folded as recorded, ahead of the log: a peer's Connected recorded before it may not be
                    # followed yet. Deferring now would record (and alert on) a wait that isn't one.
                    self._defer_later.add(sid)
                elif row.recovery_phase == P.PENDING:
                    ops.append(self.relay.op_defer(
                        UUID(sid), reason=f"no HEALTHY executor of application version {row.recovery_version!r}"))
                    sends.append((sid, None))
                continue
            self._unwait(sid)
            assigned[(target.org, target.app, target.executor_id)] += 1
            request_id = new_id()
            # Taken before the dispatch is recorded, so the response timer (armed from
            # it, not from the event's timestamp) is never earlier than what the dispatcher obeys;
            # and the dispatch stamped with the wall clock read just before it, so a timeout
            # recorded is never less than the response timeout after the dispatch (a stamp raised
            # past that reading, Executor.stamp, moves the timer as far: below).
            dispatched_at = asked_at[request_id] = self.clock.now()
            deadline = self.clock.monotonic() + self.timing.response_timeout.total_seconds()
            self._deadlines[request_id] = deadline
            ops.append(self.relay.op_dispatch(UUID(sid), request_id=request_id,
                                              target_executor_id=target.executor_id, at=dispatched_at))
            sends.append((sid, RecoveryRequest(
                request_id=request_id,
                org=row.org,
                app=row.app,
                dead_executor_id=row.executor_id,
                app_version=row.recovery_version,
                target_executor_id=target.executor_id,
                target_connection_id=target.connection_id,
                target_owner=target.owner,
                deadline=deadline,
            )))
        saved: list[tuple[int, str, Any]] = []
        try:
            results = self._execute(ops, saved)
        except Exception:
            for _, req in sends:
                if req is not None:
                    self._deadlines.pop(req.request_id, None)
            raise
        stamps = {e.request_id: e.timestamp for _, _, e in saved if isinstance(e, Executor.RecoveryDispatched)}
        recorded = [(sid, self._stamped_late(req, stamps.get(req.request_id), asked_at[req.request_id]))
                    for (sid, req), ok in zip(sends, results) if ok and req is not None]
        for (_, req), ok in zip(sends, results):
            if req is not None and not ok:
                self._deadlines.pop(req.request_id, None)
        if recorded:
            self._crash_point("after_dispatch_recorded")
        for sid, req in recorded:
            self.stats.dispatched += 1
            self._requests[req.request_id] = sid
            self.dispatcher.send_recovery(req)

    def _stamped_late(self, req: RecoveryRequest, stamped: datetime | None, asked_at: datetime) -> RecoveryRequest:
        """``req`` with its response deadline moved by as much as its dispatch was ``stamped`` after the
        clock reading ``asked_at`` it was armed from: a Connected of the dead executor recorded between
        that reading and the save raises the dispatch's stamp to its own (:meth:`Executor.stamp`), and a
        timeout recorded at the reading's deadline would then be less than the response timeout after
        the dispatch."""
        late = 0.0 if stamped is None else (stamped - asked_at).total_seconds()
        if late <= 0 or req.deadline is None:
            return req
        req = replace(req, deadline=req.deadline + late)
        self._deadlines[req.request_id] = req.deadline
        return req

    def _later_first(self, dead: ExecutorRow, assigned: dict[tuple[str, str, str], int],
                     peers: dict[tuple[str, str, str | None], list[ExecutorRow]]) -> bool:
        """Whether the later death kept behind ``dead``'s recovery (``recovery_redo_version``), of another
        version, has a candidate."""
        later = dead.recovery_redo_version
        return (later is not None and later != dead.recovery_version
                and self._best_candidate(replace(dead, recovery_version=later), assigned, peers) is not None)

    def _best_candidate(self, dead: ExecutorRow, assigned: dict[tuple[str, str, str], int] | None = None,
                        peers: dict[tuple[str, str, str | None], list[ExecutorRow]] | None = None
                        ) -> ExecutorRow | None:
        """The dead executor's best candidate (:func:`~relay_es.engine.recovery.best_candidate`) among
        :meth:`_peers`, or None. ``assigned``: given out in this batch; ``peers``: the batch's
        :meth:`_peers` by (org, app, version), filled as they are asked for."""
        key = (dead.org, dead.app, dead.recovery_version)
        if peers is None:
            rows = self._peers(key)
        elif (rows := peers.get(key)) is None:
            rows = peers[key] = self._peers(key)
        extra = assigned or {}

        def load(r: ExecutorRow) -> int:
            k = (r.org, r.app, r.executor_id)
            return len(self._indexes.outstanding.get(k, ())) + extra.get(k, 0)

        return best_candidate(dead, rows, tried=self._tried.get(dead.stream_id, set()),
                              load=load, tie_key=self._tie_key)

    def _peers(self, key: tuple[str, str, str | None]) -> list[ExecutorRow]:
        """The HEALTHY executors of (org, app, version), as far as the log is followed, without those
        held here whose socket has closed (their Disconnected is recorded or on its way): in a storm
        of drops the process manager follows the log behind the hub, and such a peer only fails the
        attempt. Asked once per batch of dispatches, not once per death."""
        gone = self.dispatcher.is_gone
        return [r for s in self._indexes.healthy.get(key, ())
                if (r := self.rows[s]).owner != self.owner or not gone(r.org, r.app, r.executor_id)]

    def tie_rank(self, dead_stream_id: str, attempt: int, candidate_id: str) -> bytes:
        """:func:`~relay_es.engine.recovery.tie_rank` with this process's secret."""
        return tie_rank(self._tie_key, dead_stream_id, attempt, candidate_id)

    # --------------------------------------------------------------- answers
    def _drain_answers(self) -> int:
        """Records waiting answers in one transaction: :data:`ANSWERS_PER_SAVE`, or as many as fit
        before the next deadline (:class:`~relay_es.engine.pace.Pace`). On a store error they go
        back to the inbox (an answer is never lost); on a bug each is recorded alone, and the
        one that still fails is dropped: its response timer fails the attempt in the end."""
        taken = self.answers.take(self._pace_answers.fitting(self._slack(), ANSWERS_PER_SAVE))
        if not taken:
            return 0
        t0 = self.clock.monotonic()
        c0 = self._cpu_now()
        try:
            self._record_answers(taken)
        except Exception as e:
            if self.relay.is_store_error(e):
                self.answers.put_back(taken)
                raise
            self._bug("recording answers", e)
            if len(taken) > 1:
                for i, outcome in enumerate(taken):
                    try:
                        self._record_answers([outcome])
                    except Exception as e1:
                        if self.relay.is_store_error(e1):
                            self.answers.put_back(taken[i:])
                            raise
                        self._bug("recording answers", e1)
        finally:
            self._spent("answers", c0)
        self._pace_answers.took(len(taken), self.clock.monotonic() - t0)
        return len(taken)

    def _record_answers(self, outcomes: list[RecoveryOutcome]) -> None:
        ops = []
        kinds: list[bool] = []
        for outcome in outcomes:
            sid = self._requests.get(outcome.request_id)
            if sid is None:
                log.info("answer to unknown or finished recovery request %s ignored", outcome.request_id)
                continue
            if outcome.ok:
                ops.append(self.relay.op_confirm(UUID(sid), request_id=outcome.request_id,
                                                 pending_found=outcome.pending_found))
            else:
                ops.append(self.relay.op_fail(UUID(sid), request_id=outcome.request_id,
                                              reason=outcome.reason or "failed"))
            kinds.append(outcome.ok)
        results = self._execute(ops)
        self.stats.confirmed += sum(done for done, is_confirm in zip(results, kinds) if is_confirm)


def replay_bootstrap(relay: Relay) -> Bootstrap:
    """Bootstrap by folding every executor event in the store (no read model)."""

    def load() -> tuple[list[ExecutorRow], int]:
        rows: dict[str, ExecutorRow] = {}
        position = 0
        while True:
            batch = relay.notifications(position, 5000, EXECUTOR_TOPICS, unreadable=True)
            if not batch:
                return list(rows.values()), position
            for nid, sid, e in batch:
                if isinstance(e, Unreadable):
                    log.error("process manager skipped event %d: %r", nid, e)
                    position = nid
                    continue
                if isinstance(e, APP_EVENTS):  # which applications are deleted is read at start
                    position = nid
                    continue
                try:
                    rows[sid] = reduce(rows.get(sid), e)
                except FOLD_ERRORS as error:  # skipped, as the read models skip it (ADR 16)
                    log.error("process manager skipped event %d (%s): %s", nid, type(e).__qualname__, error)
                position = nid

    return load
