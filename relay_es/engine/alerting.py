"""The alert manager: evaluates the alerting rules and drives the delivery of their alerts.

It decides; it does no I/O of its own, like the process manager beside it (and on the same
thread: the runtime steps both). Everything outside its memory goes through the
:class:`~relay_es.engine.service.Relay` service (the log, the end of an executor's stream, and
two commands: an alert fired, a delivery attempted), an :class:`AlertSender` (the sockets and
the webhooks; never blocks) and a :class:`~relay_es.domain.clock.Clock`. Tests drive it with a
fake clock and a fake sender.

What fires a rule (:mod:`relay_es.domain.alerting` has the types and their parameters):

* **Executor events**, told by the process manager as it folds them
  (:meth:`AlertManager.executor_event`): ``ExecutorDead``, ``RecoveryDeferred``,
  ``RecoveryFailed``, ``ExecutorFlapping``. Only events folded after this process started are
  told, so a restart never fires for an old event. ``ExecutorFlapping`` counts an executor's
  disconnects as its stream has them: the first one told of an executor (since this process
  started, since its death, since a flapping rule watched its application) waits for the next
  step, which reads the earlier ones back to the largest window (:meth:`Relay.disconnects`), once.
* **Checks**, every ``check_interval`` per rule: ``WorkflowFailure`` and ``SlowQueue`` ask one
  executor of the watched application (:meth:`AlertSender.probe`; the answer comes back through
  :meth:`AlertManager.probed`); a ``WorkflowFailure`` probe looks back ``windowSecs``, or to the
  start of the rule's last probe answered if that is earlier, so no failure falls between two
  probes (a window shorter than the interval, a check skipped, a probe that failed); over such a
  longer span it fires on ``threshold`` failures within ``windowSecs`` of one another.
  ``UnresponsiveApplication`` needs no executor: the application has had no HEALTHY executor
  (the process manager's index) for ``thresholdSecs``, counted from when this process saw it
  lose its last one (told of every application's executor events, whether it has a rule or not),
  or, where it did not see that (before it started, before its settle window closed), from when
  it first found the application without one.

Every duration is measured on the monotonic clock (the time without an executor, the interval
since the last alert, a delivery's backoff): a wall clock that steps neither fires a rule early
nor silences it. Events carry wall times; an alert recorded by another process or before a
restart is placed on the monotonic clock by its age on the wall clock when it is read.

Firing is the conditional command :meth:`Relay.fire_alert`: it records the alert only when the
rule's ``minIntervalSecs`` has passed since its last one, on the rule's own stream, so a rule
fires at most once per interval through a restart and with two writers. Delivery follows from
the recorded ``Fired`` event, never from the decision, so an alert fired before a crash is
delivered after it: each channel (``app``: the receiving application's executors, ended unsent
once that application is deleted, for good; ``webhook:<i>``) gets attempt 1 at once, and each
failed attempt that may be retried another after an exponential backoff (:class:`AlertTiming`),
up to ``max_attempts``. Every attempt is recorded (:meth:`Relay.record_alert_delivery`) with its
outcome, before the next is armed.
Delivery is at least once: an attempt under way when Relay stopped is made again, with the
same alert id for the receiver to drop the repeat.

At most ``max_in_flight`` attempts are handed to the sender and unanswered at once, and at most
``per_receiver`` to one receiver (a webhook's ``scheme://host:port``, or the receiving
application): an attempt that is due waits its turn here, as a key in its receiver's queue (what
it carries is its channel's pending entry already), and the receivers take turns. A storm of
alerts to a receiver that hangs (50 rules of 5 webhooks each, one executor's death) neither floods
the event loop the sender runs on nor holds up the attempts to other receivers. A hand-over the
sender has not answered after ``lost_after`` (its task died: Relay's own fault; a waiting attempt
is not handed over, so it is never taken for lost) is recorded as a failed attempt, which counts
toward ``max_attempts``, and its answer, should it come after all, is ignored: each hand-over
carries a token, and only the latest hand-over's answer is taken.

What is left to deliver is held in memory, :data:`MAX_UNDELIVERED` channels at most
(:attr:`AlertManager.pending`; the receivers' queues and the timers hold its keys only). A receiver
that hangs is worked through 4 attempts at a time, each taking its full timeout, and waiting one's
turn does not count against a channel: while its rules went on firing, its channels piled up for as
long as the hang lasted (20 rules of 3 webhooks and an app channel firing every minute: 80 channels
more every minute, none finished in three hours). Past the bound, the oldest channel of the
receiver holding the most (not one under way) is ended unsent, recorded like any final attempt
(:data:`DROPPED`, an ``alert.delivery`` in the lifecycle feed), so that a restart does not bring it
back; its alert's ``Fired`` is untouched. Each is counted (:attr:`AlertStats.dropped`, and as a
failed delivery), and one WARNING a minute at most says how many.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import count
from typing import Any, Protocol
from urllib.parse import urlsplit

from eventsourcing.utils import get_topic

from relay_es.aggregates.alert import AlertFirings, firings_stream_id
from relay_es.aggregates.application import Application, app_stream_id
from relay_es.aggregates.executor import VERSION_CHANGED, DisconnectReason, Executor, ExecutorStatus as S
from relay_es.domain.alerting import POLLED, AlertingRule, Webhook
from relay_es.domain.clock import Clock
from relay_es.domain.ids import new_id
from relay_es.domain.sealing import Unsealable
from relay_es.engine.service import Relay
from relay_es.engine.timers import TimerHeap
from relay_es.projections.unreadable import Unreadable

log = logging.getLogger(__name__)

ALERT_EVENTS = (
    Application.AlertingRuleCreated,
    Application.AlertingRuleDeleted,
    Application.Deleted,
    Application.Restored,
    AlertFirings.Opened,
    AlertFirings.Fired,
    AlertFirings.DeliveryAttempted,
)
ALERT_TOPICS = tuple(get_topic(c) for c in ALERT_EVENTS)
RETRY_SECS = 1.0  # a command that failed on the store is tried again this soon
MAX_FLAPS = 1000  # disconnects remembered per executor
# Disconnects that are not the executor flapping: Relay's own restart, the executor's own new socket, and
# the sockets Relay closed itself as their token was revoked (4003) or their application deleted (4007).
NOT_FLAPPING = (DisconnectReason.RELAY_RESTARTED, DisconnectReason.SUPERSEDED, DisconnectReason.TOKEN_REVOKED,
                DisconnectReason.APP_DELETED)
RECEIVER_DELETED = "not sent: the receiving application was deleted"
# Deleted applications remembered (the latest), so that the disconnects of their executors' sockets, closed
# with 4007 after the deletion, do not count them as applications without a HEALTHY executor.
DELETIONS_KEPT = 1024
CHECKED = (*POLLED, "UnresponsiveApplication")
# Channels of fired alerts held undelivered (pending: queued, under way or waiting for a retry), at most; about
# 1 KB each, 10 KB at the very most (an alert's message and metadata, shared by its channels). Past it the
# oldest of the receiver holding the most is dropped: recorded as a final attempt not made (DROPPED).
MAX_UNDELIVERED = 10_000
DROPPED = ("not sent: dropped, as Relay holds at most {:,} alert deliveries not finished and this one's receiver "
           "held the most (its oldest go first)")
REPORT_EVERY = 60.0  # seconds: one WARNING at most this often about the deliveries dropped


@dataclass(frozen=True)
class AlertTiming:
    check_interval: float = 60.0  # seconds between two checks of a rule
    retry_base: float = 5.0  # the first retry of a failed delivery, seconds; doubled each time
    retry_max: float = 300.0
    max_attempts: int = 10  # per channel: 20 minutes of backoff with the defaults, plus the attempts themselves
    lost_after: float = 60.0  # an attempt or a check the sender has not answered by then is given up for lost
    max_in_flight: int = 32  # delivery attempts handed to the sender and not answered yet, at most
    per_receiver: int = 4  # of those, to one receiver (a webhook's scheme://host:port, or the receiving app)

    def backoff(self, attempt: int) -> float:
        """Seconds between attempt ``attempt`` (failed) and the next."""
        return min(self.retry_base * 2 ** max(0, attempt - 1), self.retry_max)


@dataclass(frozen=True)
class Delivery:
    """One attempt to deliver an alert on one channel, handed to the sender."""

    org: str
    app: str
    rule_id: str
    alert_id: str
    channel: str  # "app" or "webhook:<i>"
    attempt: int
    rule_type: str
    receiving_app: str
    message: str
    metadata: dict[str, str]
    fired_at: datetime
    webhook: Webhook | None = None
    token: int = 0  # which hand-over this is: only the latest hand-over of its channel is answered for


@dataclass(frozen=True)
class Delivered:
    """The sender's answer to a :class:`Delivery`. ``retry``: a failure worth another attempt
    (no executor, a timeout, a 5xx, 408 or 429), not one that will fail the same way again."""

    delivery: Delivery
    ok: bool
    detail: str | None = None
    retry: bool = True


@dataclass(frozen=True)
class Probed:
    """The sender's answer to a probe: whether the condition holds now (``message`` and
    ``metadata`` say how), or why it could not be asked (``error``)."""

    rule_id: str
    holds: bool = False
    message: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    error: str | None = None


class AlertSender(Protocol):
    def probe(self, rule: AlertingRule, now: datetime, since: datetime | None = None) -> None:
        """Asks an executor of ``rule.app`` whether a polled rule's condition holds; answers
        :meth:`AlertManager.probed` (from any thread), always, within a bounded time.
        ``since`` (``WorkflowFailure``): the start of the rule's last probe answered; failures
        from then on have not been counted, so the probe looks back to it when that is further
        than ``windowSecs`` (None: ``windowSecs``)."""

    def deliver(self, delivery: Delivery) -> None:
        """Makes one delivery attempt; answers :meth:`AlertManager.delivered` (from any thread),
        always, within a bounded time."""


@dataclass
class AlertStats:
    fired: int = 0
    suppressed: int = 0  # conditions that held inside a rule's minimum interval
    delivered: int = 0
    delivery_failures: int = 0  # attempts that failed (retried or not)
    probe_failures: int = 0
    errors: int = 0
    dropped: int = 0  # channels ended unsent, more than MAX_UNDELIVERED being held (also counted in delivery_failures)


@dataclass
class _Pending:
    """A channel of a fired alert not delivered yet, as the log has it."""

    org: str
    app: str
    rule_id: str
    alert_id: str
    channel: str
    rule_type: str
    receiving_app: str
    message: str
    metadata: dict[str, str]
    fired_at: datetime
    attempts: int = 0
    last_at: datetime | None = None
    receiver_deleted: bool = False  # an app channel whose receiving application was deleted: never sent
    receiver: str = ""  # who its attempts go to (AlertManager._receiver), as it was when the alert was read


@dataclass(frozen=True)
class _Out:
    """A hand-over to the sender not answered yet."""

    token: int
    attempt: int
    receiver: str
    lost_at: float  # monotonic: given up for lost then


class AlertManager:
    """See the module docstring. One thread calls :meth:`start` once, then :meth:`step` and
    :meth:`executor_event`; :meth:`probed` and :meth:`delivered` may be called from any thread."""

    def __init__(self, relay: Relay, clock: Clock, sender: AlertSender, *,
                 healthy: Callable[[str, str], bool], timing: AlertTiming = AlertTiming(),
                 ready: Callable[[], bool] = lambda: True, untried: Callable[[str], int] = lambda sid: 1,
                 wake: Callable[[], None] = lambda: None, batch_size: int = 500) -> None:
        """``healthy(org, app)``: whether the application has a HEALTHY executor (the process
        manager's index). ``ready()``: whether the executors have had their chance to come back
        after a restart (the process manager's settle window is closed): an application's time
        without one is not counted before. ``untried(stream id)``: how many HEALTHY candidates have
        not failed that dead executor's recovery yet. ``wake``: called from any thread when an
        answer came in."""
        self.relay = relay
        self.clock = clock
        self.sender = sender
        self.healthy = healthy
        self.ready = ready
        self.untried = untried
        self.timing = timing
        self.wake = wake
        self.batch_size = batch_size
        self.position = 0
        self.rules: dict[str, AlertingRule] = {}
        self.by_app: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._app_of_stream: dict[Any, tuple[str, str]] = {}  # Application id -> org, app; of those with rules
        self._firing_streams: dict[Any, tuple[str, str, str]] = {}  # AlertFirings id -> org, app, rule id; of rules
        self._deleted: dict[Any, None] = {}  # Application ids of the latest applications deleted (DELETIONS_KEPT)
        # Application id -> the rules that send their alerts to it, another application than the one they watch.
        self._receivers: dict[Any, set[str]] = {}
        # Rules whose receiving application was deleted after they were made: their app channel is never sent,
        # also once an application of that name is registered again (another application).
        self._receiver_gone: set[str] = set()
        self.pending: dict[tuple[str, str], _Pending] = {}  # (alert id, channel) -> what is left to deliver
        # Rule id -> its last alert (its id, and its time on the monotonic clock): this process's own
        # alert when it fired it, another's placed by its age on the wall clock when it was read.
        self.last_fired: dict[str, tuple[str, float]] = {}
        # Handed to the sender and not answered yet (at most max_in_flight; per_receiver to one receiver).
        self._inflight: dict[tuple[str, str], _Out] = {}
        self._busy: dict[str, int] = {}  # receiver -> its attempts in _inflight
        self._tokens = count(1)
        # Receiver -> its attempts due and not handed over yet, oldest first (keys of pending; the receivers
        # in the order they take turns). A key is in one queue at most (_queued: key -> its receiver).
        self._waiting: dict[str, deque[tuple[str, str]]] = {}
        self._queued: dict[tuple[str, str], str] = {}
        # Receiver -> the keys of pending that go to it, oldest alert first; _sizes: how many a receiver holds ->
        # those receivers, and _largest the most any holds: the channel dropped past MAX_UNDELIVERED is found at once.
        self._held: dict[str, OrderedDict[tuple[str, str], None]] = {}
        self._sizes: dict[int, dict[str, None]] = {}
        self._largest = 0
        self._dropped_from: Counter[str] = Counter()  # receiver -> its channels dropped and not reported yet
        self._reported_at: float | None = None  # monotonic: the last WARNING about drops
        self._probing: dict[str, float] = {}
        self._asked: dict[str, float] = {}  # rule id -> monotonic start of its probe out
        self._seen: dict[str, float] = {}  # rule id -> monotonic start of its last probe answered (no error)
        self._to_fire: deque[tuple[str, str, dict[str, str], str | None]] = deque()  # decided, not recorded yet
        # (org, app) -> monotonic time since which it has had no HEALTHY executor, for every application
        # this process has seen without one (a rule or not); gone when it has one, or is deleted.
        self._unhealthy_since: dict[tuple[str, str], float] = {}
        # (org, app, executor id) -> the times of its disconnects that count, inside the largest window of its
        # application's flapping rules, in its incarnation; of executors told of since this process started.
        self._flaps: dict[tuple[str, str, str], deque[datetime]] = {}
        # Executor events waiting for their executor's earlier disconnects to be read from its stream (at the next
        # step: no store I/O on the process manager's fold path), oldest first: (key, event, who, cause); who is None
        # for a death or a deletion. _unread: key -> how many of its events wait there (they keep their order).
        self._flap_queue: deque[tuple[tuple[str, str, str], Any, dict[str, str] | None, str | None]] = deque()
        self._unread: dict[tuple[str, str, str], int] = {}
        self.timers = TimerHeap()
        self._inbox: deque[Probed | Delivered] = deque()
        self._lock = threading.Lock()
        self.stats = AlertStats()
        self.started = False

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Folds every rule and alert in the log: rules are checked from now on, and every
        delivery left unfinished is resumed."""
        self.catch_up()
        self._shed()  # every unfinished delivery is known now: one later in the log may have finished it
        self._report_missing_keys()
        self.started = True
        for rule in self.rules.values():
            self._watch(rule)
        for key, p in self.pending.items():
            self._arm_delivery(key, p)

    def _report_missing_keys(self) -> None:
        """One ERROR when live rules have sealed webhooks whose key is gone (one key read a rule with
        webhooks, once): their webhooks cannot be posted to, and nothing else would say so before an alert."""
        try:
            missing = self.relay.rules_without_keys(self.rules.values())
        except Exception as e:  # a warning, never a reason not to start
            log.warning("alert manager: the rules' sealing keys could not be checked (%s: %s)", type(e).__name__, e,
                        exc_info=not self.relay.is_store_error(e))
            return
        if missing:
            log.error("%d alerting rule(s) have webhooks whose sealing key is missing from relay_sealing_keys: "
                      "their webhooks will not be posted to (each attempt is recorded as failed). Was the store "
                      "restored without that table? Restore it with the events, or delete those rules and make "
                      "them again with their URLs and secrets", missing)

    def step(self) -> int:
        """Does everything due now; returns how much. A store error propagates (retried by the
        owner)."""
        total = 0
        while True:
            n = (self._run_due() + self.catch_up() + self._shed() + self._drain() + self._read_flaps()
                 + self._fire_queued() + self._hand_over_waiting())
            if n == 0:
                return total
            total += n

    def next_wakeup(self) -> float | None:
        return self.timers.next_at()

    def probed(self, answer: Probed) -> None:
        """From any thread: a probe's answer."""
        with self._lock:
            self._inbox.append(answer)
        self.wake()

    def delivered(self, answer: Delivered) -> None:
        """From any thread: a delivery attempt's outcome."""
        with self._lock:
            self._inbox.append(answer)
        self.wake()

    # ------------------------------------------------------------ following
    def catch_up(self) -> int:
        """Folds the alerting events recorded since :attr:`position`; returns how many. The log is
        read up to its head as it was when asked, and the position moves to that head whatever the
        events were: the next call reads only what was recorded since. (It read everything after
        the last alerting event at every step of the process manager's thread: 65 ms a step on a
        SQLite log of 200,000 events and no alerting rule.)"""
        n = 0
        head = self.relay.head()
        while self.position < head:
            batch = self.relay.notifications(self.position, self.batch_size, ALERT_TOPICS, unreadable=True,
                                             until=head)
            for nid, _sid, e in batch:
                self._fold(nid, e)
                self.position = nid
            n += len(batch)
            if len(batch) < self.batch_size:  # every alerting event up to the head was in this batch
                self.position = head
        return n

    def _fold(self, nid: int, e: Any) -> None:
        if isinstance(e, Unreadable):
            log.error("alert manager skipped event %d: %r", nid, e)
            return
        try:
            self._apply(e)
        except Exception as error:
            if self.relay.is_store_error(error):
                raise
            self.stats.errors += 1
            log.error("alert manager skipped event %d (%s): %s", nid, type(e).__qualname__, error)

    def _apply(self, e: Any) -> None:
        if isinstance(e, Application.AlertingRuleCreated):
            rule = AlertingRule.from_dict(e.rule)
            self.rules[rule.id] = rule
            self.by_app[(rule.org, rule.app)].add(rule.id)
            self._app_of_stream[e.originator_id] = (rule.org, rule.app)
            if rule.receiving_app != rule.app:
                self._receivers.setdefault(app_stream_id(rule.org, rule.receiving_app), set()).add(rule.id)
            if self.started:
                self._watch(rule)
        elif isinstance(e, Application.AlertingRuleDeleted):
            self._forget(e.rule_id)
        elif isinstance(e, (Application.Deleted, Application.Restored)):
            app = self._app_of_stream.pop(e.originator_id, None)
            for rule_id in list(self.by_app.get(app, ())) if app else ():
                self._forget(rule_id)
            self._deleted.pop(e.originator_id, None)
            if isinstance(e, Application.Deleted):
                self._receiver_deleted(e.originator_id)
                self._deleted[e.originator_id] = None
                if len(self._deleted) > DELETIONS_KEPT:
                    del self._deleted[next(iter(self._deleted))]
            # An application registered again is another one: its time without an executor starts afresh.
            for key in [k for k in self._unhealthy_since if app_stream_id(*k) == e.originator_id]:
                del self._unhealthy_since[key]
        elif isinstance(e, AlertFirings.Opened):
            self._firing_streams[e.originator_id] = (e.org, e.app, e.rule_id)
        elif isinstance(e, AlertFirings.Fired):
            where = self._firing_streams.get(e.originator_id)
            if where is None:  # recorded by another writer as the rule was being deleted
                log.info("alert %s of a deleted rule not delivered", e.alert_id)
                return
            org, app, rule_id = where
            if self.last_fired.get(rule_id, ("",))[0] != e.alert_id:  # not the one this process just fired
                age = (self.clock.now() - e.timestamp).total_seconds()  # < 0: recorded "later" than now
                self.last_fired[rule_id] = (e.alert_id, self.clock.monotonic() - age)
            metadata = dict(e.metadata)  # one copy for every channel (never changed)
            gone = self._receiver_gone  # the rule's receiving application deleted since it was made: not sent
            for channel in e.channels:
                key = (e.alert_id, channel)
                p = _Pending(org, app, rule_id, e.alert_id, channel, e.rule_type, e.receiving_app, e.message,
                             metadata, e.timestamp, receiver_deleted=channel == "app" and rule_id in gone)
                p.receiver = self._receiver(p) or f"a deleted rule's {channel}"
                self.pending[key] = p
                self._hold(key, p.receiver)
                if self.started:
                    self._arm_delivery(key, p)
            if self.started:  # else once every unfinished delivery is read: one later in the log may finish it
                self._shed()
        elif isinstance(e, AlertFirings.DeliveryAttempted):
            key = (e.alert_id, e.channel)
            p = self.pending.get(key)
            if p is None:
                return
            if e.final:
                self._let_go(key)
                self._release(key)  # recorded by another writer while this one's attempt was out: its slot is free
                return
            p.attempts, p.last_at = max(p.attempts, e.attempt), e.timestamp
            if self.started:
                self._arm_delivery(key, p)

    def _receiver_deleted(self, app_id: Any) -> None:
        """Application ``app_id`` was deleted: the rules that send to it lose their app channel for good (an
        application registered again under its name is another one: it never gets their alerts), and the alerts
        not delivered to it yet end unsent, at once."""
        for rule_id in self._receivers.pop(app_id, ()):
            self._receiver_gone.add(rule_id)
        ids: dict[tuple[str, str], Any] = {}  # (org, receiving app) -> its id, computed once
        for key, p in self.pending.items():
            if p.channel != "app" or p.receiver_deleted:
                continue
            receiver = (p.org, p.receiving_app)
            if receiver not in ids:
                ids[receiver] = app_stream_id(*receiver)
            if ids[receiver] != app_id:
                continue
            p.receiver_deleted = True
            if self.started and key not in self._inflight and key not in self._queued:
                self.timers.arm(("deliver", key), self.clock.monotonic())  # out or waiting: ended when its turn comes

    def _forget(self, rule_id: str) -> None:
        rule = self.rules.pop(rule_id, None)
        self.last_fired.pop(rule_id, None)
        self._receiver_gone.discard(rule_id)
        if rule is None:
            return
        receivers = self._receivers.get(app_stream_id(rule.org, rule.receiving_app))
        if receivers is not None:
            receivers.discard(rule_id)
            if not receivers:
                del self._receivers[app_stream_id(rule.org, rule.receiving_app)]
        self._firing_streams.pop(firings_stream_id(rule.org, rule.app, rule_id), None)  # its pending alerts stay
        ids = self.by_app.get((rule.org, rule.app))
        if ids is not None:
            ids.discard(rule_id)
            if not ids:
                del self.by_app[(rule.org, rule.app)]
                self._app_of_stream.pop(app_stream_id(rule.org, rule.app), None)
        self.timers.cancel(("check", rule_id))
        self._probing.pop(rule_id, None)
        self._asked.pop(rule_id, None)
        self._seen.pop(rule_id, None)
        if not any(r.rule_type == "ExecutorFlapping" for r in self.rules.values()
                   if (r.org, r.app) == (rule.org, rule.app)):
            for key in [k for k in self._flaps if k[:2] == (rule.org, rule.app)]:
                del self._flaps[key]

    def _watch(self, rule: AlertingRule) -> None:
        """A checked rule is checked every interval from now on."""
        if rule.rule_type in CHECKED and ("check", rule.id) not in self.timers:
            self.timers.arm(("check", rule.id), self.clock.monotonic() + self.timing.check_interval)
        if rule.rule_type == "UnresponsiveApplication" and not self.healthy(rule.org, rule.app) and self.ready():
            # Kept when this process saw the application lose its last executor; from now when it did not.
            self._unhealthy_since.setdefault((rule.org, rule.app), self.clock.monotonic())

    # -------------------------------------------------------- executor events
    def executor_event(self, e: Any, old: Any, row: Any) -> None:
        """An executor event the process manager folded (``row``: the executor after it). Decides
        only: what fires is queued and recorded at the next :meth:`step` (no store I/O here, on the
        process manager's fold path), retried there while the store is away."""
        app = (row.org, row.app)
        # Every application's, a rule or not: a rule made later counts from when the executor went. Not a
        # deleted one's (its sockets closed with 4007 after the deletion).
        if self.healthy(*app):
            self._unhealthy_since.pop(app, None)
        elif self.ready() and app not in self._unhealthy_since and app_stream_id(*app) not in self._deleted:
            self._unhealthy_since[app] = self.clock.monotonic()
        if app not in self.by_app:
            return
        who = {"executorId": row.executor_id, "appVersion": row.app_version or "", "hostname": row.hostname or ""}
        cause = f"{e.originator_id}@{e.originator_version}"
        key = (*app, row.executor_id)
        if isinstance(e, Executor.DeclaredDead):
            # The disconnects that led to a death are that incarnation's: the next one starts clean.
            self._end_flaps(key, e)
            why = ("it connected again under another application version, and a process recovers only its "
                   "own version's workflows" if getattr(e, "reason", None) == VERSION_CHANGED
                   else "it did not come back within its grace period")
            self._decide(app, "ExecutorDead", lambda r: (
                f"executor {row.executor_id} of {row.app} (version {row.app_version}) was declared DEAD: {why}",
                who), cause)
        elif isinstance(e, Executor.RecoveryDeferred):
            self._decide(app, "RecoveryDeferred", lambda r: (
                f"the recovery of dead executor {row.executor_id} of {row.app} waits: no HEALTHY executor of "
                f"version {row.recovery_version} is left to run it ({e.reason}); operator intervention needed",
                {**who, "reason": e.reason}), cause)
        elif isinstance(e, Executor.RecoveryFailed):
            untried = self.untried(row.stream_id)

            def failed(r: AlertingRule) -> tuple[str, dict[str, str]] | None:
                if row.recovery_attempt < r.parameters["attempts"] and untried > 0:
                    return None
                every = " (every HEALTHY executor of its version has failed it)" if untried == 0 else ""
                return (f"recovery attempt {row.recovery_attempt} of dead executor {row.executor_id} of {row.app} "
                        f"failed{every}: {e.reason}",
                        {**who, "attempt": str(row.recovery_attempt), "reason": e.reason,
                         "untriedCandidates": str(untried)})

            self._decide(app, "RecoveryFailed", failed, cause)
        elif isinstance(e, Executor.Disconnected) and row.status == S.DISCONNECTED:
            if e.reason in NOT_FLAPPING or not self._flapping(app):
                return  # closed by Relay itself, or the executor's own new socket: not the executor flapping
            if key in self._flaps and key not in self._unread:
                self._count_flap(key, e, who, cause)
            else:  # the first told of it (since this process started, its death, a flapping rule): history first
                self._wait_for_history(key, e, who, cause)
        elif isinstance(e, Executor.Deleted):
            self._end_flaps(key, e)

    # ------------------------------------------------------------ flapping
    def _flapping(self, app: tuple[str, str]) -> list[AlertingRule]:
        return [self.rules[i] for i in self.by_app.get(app, ()) if self.rules[i].rule_type == "ExecutorFlapping"]

    def _wait_for_history(self, key: tuple[str, str, str], e: Any, who: dict[str, str] | None,
                          cause: str | None) -> None:
        self._flap_queue.append((key, e, who, cause))
        self._unread[key] = self._unread.get(key, 0) + 1

    def _end_flaps(self, key: tuple[str, str, str], e: Any) -> None:
        """The executor died or was deleted: its disconnects are forgotten (after those waiting for its history)."""
        if key in self._unread:
            self._wait_for_history(key, e, None, None)
        else:
            self._flaps.pop(key, None)

    def _read_flaps(self) -> int:
        """Counts the disconnects that waited for their executor's history: the earlier ones that count are read
        from its stream (:meth:`_history`), once, then each is counted as if it had been told then, in order. A
        store error leaves the rest queued for the next step."""
        n = 0
        while self._flap_queue:
            key, e, who, cause = self._flap_queue[0]
            flapping = self._flapping(key[:2])
            if who is None or not flapping:  # its death or deletion, or no flapping rule any more
                self._flaps.pop(key, None)
            else:
                if key not in self._flaps:
                    self._flaps[key] = self._history(e, flapping)
                self._count_flap(key, e, who, cause)
            self._flap_queue.popleft()
            left = self._unread.pop(key) - 1
            if left:
                self._unread[key] = left
            n += 1
        return n

    def _history(self, e: Any, flapping: list[AlertingRule]) -> deque[datetime]:
        """The disconnects that count of ``e``'s executor before ``e``, inside the largest window of ``flapping``
        and in its incarnation, as its stream has them: those before this process started (a restart of Relay
        forgets none), or before a flapping rule watched its application."""
        since = e.timestamp - timedelta(seconds=max(r.parameters["windowSecs"] for r in flapping))
        try:
            times = self.relay.disconnects(e.originator_id, before=e.originator_version, since=since,
                                           excluding=NOT_FLAPPING, limit=MAX_FLAPS - 1)
        except Exception as error:
            if self.relay.is_store_error(error):
                raise  # still queued: the next step reads it again
            self.stats.errors += 1
            log.error("alert manager: the disconnects of executor stream %s could not be read (%s: %s); counted "
                      "from now", e.originator_id, type(error).__name__, error)
            times = []
        return deque(times, maxlen=MAX_FLAPS)

    def _count_flap(self, key: tuple[str, str, str], e: Any, who: dict[str, str], cause: str | None) -> None:
        """One more disconnect of the executor: kept (pruned to the largest window), and the flapping rules
        decided."""
        org, app, executor_id = key
        flapping = self._flapping((org, app))
        horizon = e.timestamp - timedelta(seconds=max(r.parameters["windowSecs"] for r in flapping))
        times = self._flaps.setdefault(key, deque(maxlen=MAX_FLAPS))
        times.append(e.timestamp)
        while times and times[0] <= horizon:
            times.popleft()

        def flaps(r: AlertingRule) -> tuple[str, dict[str, str]] | None:
            window = timedelta(seconds=r.parameters["windowSecs"])
            n = sum(1 for t in times if t > e.timestamp - window)
            if n < r.parameters["disconnects"]:
                return None
            return (f"executor {executor_id} of {app} disconnected {n} times in the last "
                    f"{r.parameters['windowSecs']} s", {**who, "disconnects": str(n)})

        self._decide((org, app), "ExecutorFlapping", flaps, cause)

    def _decide(self, app: tuple[str, str], rule_type: str,
                what: Callable[[AlertingRule], tuple[str, dict[str, str]] | None], cause: str) -> None:
        for rule_id in list(self.by_app.get(app, ())):
            rule = self.rules[rule_id]
            if rule.rule_type != rule_type:
                continue
            said = what(rule)
            if said is not None:
                self._to_fire.append((rule_id, said[0], said[1], cause))

    def _fire_queued(self) -> int:
        """Records what executor events decided, oldest first; a store error leaves the rest queued."""
        n = 0
        while self._to_fire:
            rule_id, message, metadata, cause = self._to_fire[0]
            rule = self.rules.get(rule_id)
            if rule is not None:
                try:
                    self._fire(rule, message, metadata, cause)
                except Exception as e:
                    if self.relay.is_store_error(e):
                        raise  # still queued: the next step tries again
                    self.stats.errors += 1
                    log.exception("alert manager: firing rule %s failed", rule_id)
            self._to_fire.popleft()
            n += 1
        return n

    # ------------------------------------------------------------- deciding
    def _fire(self, rule: AlertingRule, message: str, metadata: dict[str, str], cause: str | None) -> bool:
        """Records an alert of ``rule`` unless its interval has not passed: known already (no store
        read), or found so by the conditional command. Known on the monotonic clock: the last alert
        less than the interval away, either side (one placed "later" than now is another process's, or
        the wall clock went back since it was recorded: by the interval or more, it silences nothing)."""
        now = self.clock.now()
        mono = self.clock.monotonic()
        last = self.last_fired.get(rule.id)
        if last is not None and abs(mono - last[1]) < rule.min_interval_secs:
            self.stats.suppressed += 1
            return False
        channels = ["app", *(f"webhook:{i}" for i in range(len(rule.webhooks)))]
        meta = {"ruleId": rule.id, "app": rule.app, **metadata}
        alert_id = new_id()
        fired = self.relay.fire_alert(rule, alert_id=alert_id, message=message, metadata=meta,
                                      channels=channels, cause=cause, at=now)
        if fired:
            self.stats.fired += 1
            self.last_fired[rule.id] = (alert_id, mono)
        else:
            self.stats.suppressed += 1
        return fired

    # ---------------------------------------------------------------- timers
    def _run_due(self) -> int:
        due = self.timers.pop_due(self.clock.monotonic())
        for (kind, key), _payload in due:
            try:
                if kind == "check":
                    self._check(key)
                elif kind == "report":
                    self._report_drops()
                else:
                    self._deliver(key)
            except Exception as e:
                self.stats.errors += 1
                if not self.relay.is_store_error(e):
                    log.exception("alert manager: %s timer %s failed", kind, key)
                self.timers.arm((kind, key), self.clock.monotonic() + RETRY_SECS)
        return len(due)

    def _check(self, rule_id: str) -> None:
        rule = self.rules.get(rule_id)
        if rule is None:
            return
        self.timers.arm(("check", rule_id), self.clock.monotonic() + self.timing.check_interval)
        now = self.clock.now()
        mono = self.clock.monotonic()
        if rule.rule_type == "UnresponsiveApplication":
            app = (rule.org, rule.app)
            if self.healthy(*app) or not self.ready():
                self._unhealthy_since.pop(app, None)  # after a restart, counted once executors had their chance
                return
            gone = mono - self._unhealthy_since.setdefault(app, mono)
            if gone >= rule.parameters["thresholdSecs"]:
                since = now - timedelta(seconds=gone)  # on the wall clock as it reads now
                self._fire(rule, f"application {rule.app} has had no HEALTHY executor for {gone:.0f} s",
                           {"unresponsiveSecs": f"{gone:.0f}", "since": since.isoformat()}, None)
            return
        if not self.healthy(rule.org, rule.app):
            return  # nobody to ask (UnresponsiveApplication is the rule for that)
        if self._probing.get(rule_id, mono) > mono:
            return  # the last check is still out
        seen = self._seen.get(rule_id)
        self.sender.probe(rule, now, None if seen is None else now - timedelta(seconds=mono - seen))
        self._probing[rule_id] = mono + self.timing.lost_after  # after the hand-over: a failed one is not out
        self._asked[rule_id] = mono

    def _arm_delivery(self, key: tuple[str, str], p: _Pending) -> None:
        """The next attempt after the backoff left since the last one (recorded at a wall time), never
        more than the whole backoff: a wall clock set back since does not stretch it."""
        wait = 0.0
        if p.last_at is not None and p.attempts > 0:
            backoff = self.timing.backoff(p.attempts)
            wait = min(backoff, max(0.0, backoff - (self.clock.now() - p.last_at).total_seconds()))
        self.timers.arm(("deliver", key), self.clock.monotonic() + wait)

    def _deliver(self, key: tuple[str, str]) -> None:
        """The channel's timer: its next attempt is due (it joins its receiver's queue), or the watchdog of
        its hand-over went off."""
        p = self.pending.get(key)
        if p is None or key in self._queued:
            return
        out = self._inflight.get(key)
        if out is not None:
            if self.clock.monotonic() < out.lost_at:
                self.timers.arm(("deliver", key), out.lost_at)  # its answer is awaited; this fires again then
            else:
                self._lost(key, p, out)
            return
        if p.receiver_deleted:
            self._end(p, RECEIVER_DELETED)
            return
        receiver = self._receiver(p)
        if receiver is None:
            self._end(p, "not sent: the rule was deleted")
            return
        self._queued[key] = receiver
        self._waiting.setdefault(receiver, deque()).append(key)

    def _receiver(self, p: _Pending) -> str | None:
        """Who the channel's attempts go to, for their bound; None: a webhook of a rule deleted since."""
        if p.channel == "app":
            return f"app {p.org}/{p.receiving_app}"
        rule = self.rules.get(p.rule_id)
        i = int(p.channel.partition(":")[2])
        if rule is None or i >= len(rule.webhooks):
            return None
        parts = urlsplit(rule.webhooks[i].public()["url"])  # scheme and host, kept in the clear
        return f"{parts.scheme}://{parts.netloc}".lower()

    def _hand_over_waiting(self) -> int:
        """Hands the waiting attempts over as the bounds allow, the receivers taking turns; returns how
        many left their queue."""
        n = 0
        moved = True
        while moved and len(self._inflight) < self.timing.max_in_flight:
            moved = False
            for receiver in list(self._waiting):
                if len(self._inflight) >= self.timing.max_in_flight:
                    break
                if self._busy.get(receiver, 0) >= self.timing.per_receiver:
                    continue
                queue = self._waiting.pop(receiver)
                key = queue.popleft()
                if queue:
                    self._waiting[receiver] = queue  # at the end: the other receivers' turn first
                del self._queued[key]
                n += 1
                moved = True
                try:
                    self._hand_over(key, receiver)
                except Exception as e:
                    self.stats.errors += 1
                    if not self.relay.is_store_error(e):
                        log.exception("alert manager: the attempt of %s could not be handed over", key)
                    self.timers.arm(("deliver", key), self.clock.monotonic() + RETRY_SECS)
        return n

    def _hand_over(self, key: tuple[str, str], receiver: str) -> None:
        p = self.pending.get(key)
        if p is None or key in self._inflight:
            return  # ended while it waited
        webhook = None
        if p.receiver_deleted:  # since it joined the queue
            self._end(p, RECEIVER_DELETED)
            return
        if p.channel != "app":
            webhook, why = self._open(p)
            if webhook is None:
                self._end(p, why)
                return
        token = next(self._tokens)
        attempt = p.attempts + 1
        self.sender.deliver(Delivery(p.org, p.app, p.rule_id, p.alert_id, p.channel, attempt, p.rule_type,
                                     p.receiving_app, p.message, p.metadata, p.fired_at, webhook, token))
        # After the hand-over: a failed one is not in flight (its timer tries again).
        lost_at = self.clock.monotonic() + self.timing.lost_after
        self._inflight[key] = _Out(token, attempt, receiver, lost_at)
        self._busy[receiver] = self._busy.get(receiver, 0) + 1
        self.timers.arm(("deliver", key), lost_at)  # the watchdog; the outcome re-arms it

    def _open(self, p: _Pending) -> tuple[Webhook | None, str]:
        """The channel's webhook, opened just before its attempt; else None and why it is not sent."""
        rule = self.rules.get(p.rule_id)
        i = int(p.channel.partition(":")[2])
        if rule is None or i >= len(rule.webhooks):
            return None, "not sent: the rule was deleted"
        try:
            webhook = self.relay.open_webhook(rule, i)
        except Unsealable:
            why = "not sent: the webhook's sealed credentials do not open with the rule's key"
        else:
            if webhook is not None:
                return webhook, ""
            why = ("not sent: the rule's sealing key is missing (the rule was deleted, or its deletion did not "
                   "finish, or the store was restored without relay_sealing_keys)")
        log.warning("alert %s on %s of rule %s: %s", p.alert_id, p.channel, p.rule_id, why)
        return None, why

    def _end(self, p: _Pending, why: str) -> None:
        """The channel's next attempt, recorded as final without being made."""
        self.relay.record_alert_delivery(p.org, p.app, p.rule_id, alert_id=p.alert_id, channel=p.channel,
                                         attempt=p.attempts + 1, ok=False, final=True, detail=why)

    def _lost(self, key: tuple[str, str], p: _Pending, out: _Out) -> None:
        """A hand-over never answered: recorded as a failed attempt (it counts toward the limit), its
        answer ignored should it come; the next attempt follows the backoff, as after any failure."""
        final = out.attempt >= self.timing.max_attempts
        detail = f"relay: no outcome within {self.timing.lost_after:g}s"
        if final:
            detail = f"{detail}; gave up after {out.attempt} attempts"
        log.warning("alert %s on %s: no outcome from attempt %d within %gs; %s", p.alert_id, p.channel,
                    out.attempt, self.timing.lost_after, "given up" if final else "counted as failed")
        self.relay.record_alert_delivery(p.org, p.app, p.rule_id, alert_id=p.alert_id, channel=p.channel,
                                         attempt=out.attempt, ok=False, detail=detail, final=final)
        self._release(key)  # after the record: a crash before it makes the attempt again
        self.stats.delivery_failures += 1

    def _release(self, key: tuple[str, str]) -> None:
        out = self._inflight.pop(key, None)
        if out is None:
            return
        left = self._busy[out.receiver] - 1
        if left:
            self._busy[out.receiver] = left
        else:
            del self._busy[out.receiver]

    # ---------------------------------------------------------------- bound
    def _hold(self, key: tuple[str, str], receiver: str) -> None:
        held = self._held.setdefault(receiver, OrderedDict())
        if key not in held:
            held[key] = None
            self._resize(receiver, len(held) - 1)

    def _let_go(self, key: tuple[str, str]) -> None:
        """The channel is no longer held (recorded as final, or dropped): out of pending, its receiver's
        count, its timer and its receiver's queue. Not out of _inflight: its answer frees the slot."""
        p = self.pending.pop(key, None)
        if p is None:
            return
        held = self._held.get(p.receiver)
        if held is not None and key in held:
            del held[key]
            if not held:
                del self._held[p.receiver]
            self._resize(p.receiver, len(held) + 1)
        self.timers.cancel(("deliver", key))
        receiver = self._queued.pop(key, None)
        if receiver is not None:
            queue = self._waiting[receiver]
            queue.remove(key)  # the oldest dropped are near its front
            if not queue:
                del self._waiting[receiver]

    def _resize(self, receiver: str, was: int) -> None:
        """``receiver`` held ``was`` channels and now holds one more or one less: it changes bucket."""
        now = len(self._held.get(receiver, ()))
        if was:
            bucket = self._sizes[was]
            del bucket[receiver]
            if not bucket:
                del self._sizes[was]
        if now:
            self._sizes.setdefault(now, {})[receiver] = None
        self._largest = max(self._largest, now)
        while self._largest and self._largest not in self._sizes:  # one step down at most: sizes move by one
            self._largest -= 1

    def _victim(self) -> tuple[str, str] | None:
        """The oldest channel not under way of the receiver holding the most (of another when all of its
        are under way: at most per_receiver are)."""
        for receiver in self._sizes.get(self._largest, ()):
            for key in self._held[receiver]:
                if key not in self._inflight:
                    return key
        for receiver, held in self._held.items():  # seldom: each receiver holding the most has only keys under way
            for key in held:
                if key not in self._inflight:
                    return key
        return None

    def _shed(self) -> int:
        """Drops channels while more than :data:`MAX_UNDELIVERED` are held; returns how many. Each is recorded
        as a final attempt not made (before it is let go: a store error leaves it held, for the next step), so a
        restart does not bring it back and the lifecycle feed says so."""
        n = 0
        while len(self.pending) > MAX_UNDELIVERED:
            key = self._victim()
            if key is None:
                break
            p = self.pending[key]
            try:
                self._end(p, DROPPED.format(MAX_UNDELIVERED))
            except Exception as e:
                if self.relay.is_store_error(e):
                    raise
                self.stats.errors += 1  # a bug: dropped all the same, the bound holds
                log.exception("alert manager: the drop of alert %s on %s could not be recorded", p.alert_id, p.channel)
            self._let_go(key)
            self.stats.dropped += 1
            self.stats.delivery_failures += 1
            self._dropped_from[p.receiver] += 1
            n += 1
        if n:
            self._report_drops()
        return n

    def _report_drops(self) -> None:
        """One WARNING for the channels dropped since the last, at most every :data:`REPORT_EVERY` seconds: the
        next is armed for the rest."""
        if not self._dropped_from:
            return
        mono = self.clock.monotonic()
        if self._reported_at is not None and mono < self._reported_at + REPORT_EVERY:
            self.timers.arm(("report", "drops"), self._reported_at + REPORT_EVERY)
            return
        most = ", ".join(f"{r} {n}" for r, n in self._dropped_from.most_common(3))
        log.warning("alert manager: %d alert deliveries dropped unsent (most from: %s; %d receivers in all): more "
                    "than %d were held undelivered, so the oldest of the receiver holding the most are dropped, "
                    "each recorded as a final attempt not made (alert.delivery in the lifecycle feed); %d dropped "
                    "since start", sum(self._dropped_from.values()), most, len(self._dropped_from), MAX_UNDELIVERED,
                    self.stats.dropped)
        self._dropped_from.clear()
        self._reported_at = mono

    # --------------------------------------------------------------- answers
    def _drain(self) -> int:
        with self._lock:
            taken = list(self._inbox)
            self._inbox.clear()
        for i, answer in enumerate(taken):
            try:
                if isinstance(answer, Probed):
                    self._on_probed(answer)
                else:
                    self._on_delivered(answer)
            except Exception as e:
                if self.relay.is_store_error(e):
                    with self._lock:  # the store is away: the answers wait for the next step
                        self._inbox.extendleft(reversed(taken[i:]))
                    raise
                self.stats.errors += 1  # a bug: this answer is dropped (its watchdog counts the attempt failed)
                log.exception("alert manager: an answer could not be handled")
        return len(taken)

    def _on_probed(self, a: Probed) -> None:
        self._probing.pop(a.rule_id, None)
        asked = self._asked.pop(a.rule_id, None)
        rule = self.rules.get(a.rule_id)
        if a.error is not None:
            self.stats.probe_failures += 1  # what it was to count is left to the next one
            log.info("alert rule %s could not be checked: %s", a.rule_id, a.error)
            return
        if asked is not None and rule is not None:
            self._seen[a.rule_id] = asked  # counted up to its start: the next probe looks back to it
        if rule is not None and a.holds:
            self._fire(rule, a.message, a.metadata, None)

    def _on_delivered(self, a: Delivered) -> None:
        d = a.delivery
        key = (d.alert_id, d.channel)
        out = self._inflight.get(key)
        if out is None or out.token != d.token:
            log.info("alert %s on %s: the outcome of attempt %d came after it was given up for lost; ignored",
                     d.alert_id, d.channel, d.attempt)
            return
        if key not in self.pending:
            self._release(key)
            return  # ended since it was handed over (recorded elsewhere)
        final = a.ok or not a.retry or d.attempt >= self.timing.max_attempts
        detail = a.detail
        if not a.ok and a.retry and final:
            detail = f"{detail or 'failed'}; gave up after {d.attempt} attempts"
        self.relay.record_alert_delivery(d.org, d.app, d.rule_id, alert_id=d.alert_id, channel=d.channel,
                                         attempt=d.attempt, ok=a.ok, detail=detail, final=final)
        self._release(key)  # after the record: a crash before it makes the attempt again
        if a.ok:
            self.stats.delivered += 1
        else:
            self.stats.delivery_failures += 1
