"""The Executor aggregate: one stream per ``(org, app, executor_id)``.

State machine (``status``)::

    (new) --connect--> HEALTHY --disconnect--> DISCONNECTED --declare_dead--> DEAD
                         ^  |                      |                          |
                         |  +--connect (supersede) |                          |
                         +------connect------------+ (reconnect: no recovery) |
                         +------connect (new incarnation) --------------------+
    DEAD --confirm_recovery + delete--> DELETED --connect--> HEALTHY (new incarnation)
    HEALTHY|DISCONNECTED --connect on another application version--> DEAD, then HEALTHY (new incarnation)

The recovery obligation is a second, orthogonal machine (``recovery_phase``)::

    None --declare_dead--> pending --dispatch--> dispatched --confirm--> confirmed
              pending --defer--> deferred --dispatch--> dispatched --fail--> pending
              pending|deferred --withdraw (executor came back on its version)--> None
              pending|deferred --reorder (a later death first)--> pending

Rules, each enforced here and raised as a domain error:

* A reconnect while DISCONNECTED cancels the deadline and returns to HEALTHY;
  nothing is recovered.
* DeclaredDead only when DISCONNECTED and the deadline has come by the clock, or at a connect
  under another application version than the executor's (HEALTHY or DISCONNECTED): a running
  process cannot change its version, so the earlier one is gone. Its death is recorded
  (``reason`` :data:`VERSION_CHANGED`) before the Connected of the new incarnation.
* A recovery is dispatched (or deferred, or reordered) while the executor is DEAD, or back on
  another application version than the recovery's (:func:`recovered_by_peer`): a process
  recovers at launch only its own version's workflows. It is withdrawn only when the executor
  is back on the recovery's version.
* At most one outstanding dispatch; RecoveryConfirmed / RecoveryFailed only
  for the outstanding request.
* A death recorded while a dispatch for an earlier one is outstanding is kept as
  ``recovery_redo_version`` and recovered after it. When the earlier one cannot go on (no
  HEALTHY executor of its version) and the later one can, the two are reordered
  (``RecoveryReordered``): the later death's version is recovered first, the earlier one's
  after it, so neither waits behind the other.
* Deleted only after a confirmed recovery, and only while DEAD.
* A stream's timestamps never decrease: an event is stamped at the instant its command was given,
  or at the stream's last event's timestamp if that is later (:meth:`Executor.stamp`).
* The same executor id connecting while DEAD or DELETED starts a new
  incarnation in the same stream; a dispatch already under way still completes. A death kept
  behind it (``recovery_redo_version``) is recovered after it unless the executor is back on
  that death's version.

Public command methods decide and compute; the private ``@event`` methods only
assign state, because they run again on every replay. A command records its event with
``trigger_event(self.<Event>, ...)``, the library's public method beneath the decorated
method's call: the same event, made and applied the same way, without the decorator working
out the call's arguments again on every event (a DeclaredDead 5.9 against 9.7 us, 2026-12-05).
It passes every parameter of the decorated method: the event class keeps none of its defaults.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from eventsourcing.domain import Aggregate, Snapshot, event

from relay_es.domain.errors import IllegalTransition, NotDue, StaleConnection

_UNPARSED = object()


class OpaqueJSON:
    """JSON the executor chose (its ``executor_metadata``), recorded as text.

    The event store's transcoder reads every stored object shaped like one of
    its own wrappers (``{"_type_": ..., "_data_": ...}``) as that wrapper: an
    executor's metadata holding such an object was decoded into another type,
    or made the executor's whole stream unreadable (an unknown ``_type_``).
    Kept as one JSON string inside the event, the transcoder never looks in.
    Read back, the text is parsed on first use of :attr:`value` (a rebuild of
    the audit log never needs it).
    """

    __slots__ = ("_text", "_value")

    def __init__(self, value: Any) -> None:
        self._value = value
        self._text: str | None = None

    @classmethod
    def from_text(cls, text: str) -> "OpaqueJSON":
        o = object.__new__(cls)
        o._text = text
        o._value = _UNPARSED
        return o

    @property
    def value(self) -> Any:
        if self._value is _UNPARSED:
            self._value = _parsed(self._text)  # type: ignore[arg-type]
        return self._value

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = json.dumps(self._value, separators=(",", ":"), ensure_ascii=False)
        return self._text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpaqueJSON) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpaqueJSON({self.value!r})"


_PARSED: dict[str, Any] = {}
_PARSED_MAX = 1024  # texts remembered, each at most _PARSED_TEXT characters: about a MiB at most
_PARSED_TEXT = 1024


def _parsed(text: str) -> Any:
    """``json.loads(text)``, remembered for short texts: an executor sends the same metadata at every
    reconnect, and a rebuild folds each of its Connected events. The parsed value is shared, like
    every value of an event (never changed in place)."""
    if len(text) > _PARSED_TEXT:
        return json.loads(text)
    value = _PARSED.get(text, _UNPARSED)
    if value is _UNPARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        value = _PARSED[text] = json.loads(text)
    return value


def opaque_value(v: Any) -> Any:
    """The executor's JSON, from an event recorded with or without :class:`OpaqueJSON`."""
    return v.value if isinstance(v, OpaqueJSON) else v


NAMESPACE = uuid.UUID("6b1f0a52-3c1e-4e0b-9f7a-2d5b8c4e7a10")


class ExecutorStatus(StrEnum):
    HEALTHY = "HEALTHY"
    DISCONNECTED = "DISCONNECTED"
    DEAD = "DEAD"
    DELETED = "DELETED"


class RecoveryPhase(StrEnum):
    PENDING = "pending"
    DEFERRED = "deferred"
    DISPATCHED = "dispatched"
    CONFIRMED = "confirmed"


_UNFINISHED = (RecoveryPhase.PENDING, RecoveryPhase.DEFERRED, RecoveryPhase.DISPATCHED)


class DisconnectReason(StrEnum):
    CLEAN_CLOSE = "clean_close"  # the executor closed its socket itself, 1000 or 1001: a shutdown, e.g. a deploy
    SOCKET_CLOSED = "socket_closed"  # the socket dropped without a close of the executor's (a kill, a network)
    PING_TIMEOUT = "ping_timeout"
    RELAY_RESTARTED = "relay_restarted"
    SUPERSEDED = "superseded"
    TOKEN_REVOKED = "token_revoked"
    # Relay closed the socket as its application was deleted (4007): the end of that application's
    # executors; one registered again is another one.
    APP_DELETED = "app_deleted"


VERSION_CHANGED = "version_changed"
"""The ``reason`` of a DeclaredDead recorded at a connect under another application version."""
# How far an event's stamp is raised to its stream's last one (:meth:`Executor.stamp`): a recording's lag
# (a drop seen before a dispatch recorded, written after it: up to some hundreds of ms in a storm). A last
# stamp further ahead is a wall clock stepped back, not a lag: raised to it, a drop's deadline would be as
# late as the step.
MAX_STAMP_RAISE = timedelta(seconds=5)


def recovered_by_peer(status: str | None, recovery_phase: str | None, recovery_version: str | None,
                      app_version: str | None) -> bool:
    """Whether an executor's recovery is a peer's to do: it is DEAD, or back (HEALTHY or
    DISCONNECTED) on another application version than its unfinished recovery's, whose workflows
    its process does not recover."""
    return status == ExecutorStatus.DEAD or (
        status in (ExecutorStatus.HEALTHY, ExecutorStatus.DISCONNECTED) and recovery_phase in _UNFINISHED
        and recovery_version != app_version)


def executor_stream_id(org: str, app: str, executor_id: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"executor/{org}/{app}/{executor_id}")


class ExecutorSnapshot(Snapshot):
    """An executor's state at one version (ADR 16: a stream that reconnects for months
    loads from its latest snapshot). Its state goes through the same transcoder as
    events, so what the executor chose (its metadata) travels opaque, as in the events
    (see :class:`OpaqueJSON`), and the enums come back as enums."""

    @classmethod
    def take(cls, aggregate: Any) -> "ExecutorSnapshot":
        snapshot = super().take(aggregate)
        metadata = snapshot.state.get("executor_metadata")
        if metadata is not None and not isinstance(metadata, OpaqueJSON):
            snapshot.state["executor_metadata"] = OpaqueJSON(metadata)
        return snapshot

    def mutate(self, _: None) -> Any:
        ex = super().mutate(None)
        ex.executor_metadata = opaque_value(ex.executor_metadata)
        if ex.status is not None:
            ex.status = ExecutorStatus(ex.status)
        if ex.recovery_phase is not None:
            ex.recovery_phase = RecoveryPhase(ex.recovery_phase)
        return ex


class Executor(Aggregate):
    Snapshot = ExecutorSnapshot

    @staticmethod
    def create_id(org: str, app: str, executor_id: str) -> uuid.UUID:
        return executor_stream_id(org, app, executor_id)

    @event("Registered")
    def __init__(self, org: str, app: str, executor_id: str, timestamp: datetime) -> None:
        self.org = org
        self.app = app
        self.executor_id = executor_id
        self.status: ExecutorStatus | None = None
        self.incarnation = 0
        self.app_version: str | None = None
        self.hostname: str | None = None
        self.language: str | None = None
        self.dbos_version: str | None = None
        self.executor_metadata: Any = None
        self.connection_id: str | None = None
        self.owner: str | None = None
        self.deadline: datetime | None = None
        self.recovery_phase: RecoveryPhase | None = None
        self.recovery_version: str | None = None
        self.recovery_request_id: str | None = None
        self.recovery_target: str | None = None
        self.recovery_attempt = 0
        # A death recorded while a dispatch for an earlier death is outstanding:
        # that dispatch cannot discharge it, so recovery starts again after it.
        self.recovery_redo_version: str | None = None

    # ----------------------------------------------------------------- helpers
    def _refuse(self, command: str, why: str = "", cls: type[IllegalTransition] = IllegalTransition) -> None:
        raise cls(f"executor {self.executor_id!r}", self.status or "new", command, why)

    def stamp(self, at: datetime) -> datetime:
        """The timestamp of an event recorded now, for the instant ``at`` it was given: ``at``, or the
        stream's last event's timestamp if that is later by at most :data:`MAX_STAMP_RAISE`. A command's
        instant is when something was seen (a connection, a drop) or a clock's reading taken before the
        command ran, and the process manager may have recorded on the stream since: stamped so, the
        stream's timestamps do not decrease, and a fold up to an instant (as-of) holds exactly the events
        stamped at or before it. A last stamp further ahead than that is the wall clock stepped back
        (NTP): ``at`` is kept, and the stamps go back with the clock, rather than every deadline after
        the step coming as late as the step. Every command stamps its events with it; a stream recorded
        before stays as it is."""
        last = self.modified_on
        return last if at < last <= at + MAX_STAMP_RAISE else at

    @property
    def outstanding_request(self) -> str | None:
        return self.recovery_request_id if self.recovery_phase == RecoveryPhase.DISPATCHED else None

    # ---------------------------------------------------------------- commands
    def connect(
        self,
        *,
        connection_id: str,
        owner: str,
        app_version: str,
        hostname: str | None,
        language: str | None,
        dbos_version: str | None,
        executor_metadata: Any,
        at: datetime,
        token: str | None = None,
        peer: str | None = None,
    ) -> None:
        """A connection answered ``executor_info``: always legal, the kind differs.

        ``token``: the name of the token the connection was admitted with (None in
        development mode); ``peer``: the address it came from (host only). Recorded
        for the audit (who registered, or superseded, this executor), not state."""
        if not connection_id:
            self._refuse("connect", "a connection id is required")
        if connection_id == self.connection_id and self.status == ExecutorStatus.HEALTHY:
            self._refuse("connect", f"connection {connection_id!r} is already current")
        at = self.stamp(at)
        superseded = self.connection_id if self.status == ExecutorStatus.HEALTHY else None
        if self.status in (ExecutorStatus.HEALTHY, ExecutorStatus.DISCONNECTED) and app_version != self.app_version:
            # A running process cannot change its application version: the earlier one is gone, and
            # its workflows are recovered by an executor of its version (the new process recovers
            # only its own version's).
            self.trigger_event(self.DeclaredDead, deadline=self.deadline, app_version=self.app_version,
                               timestamp=at, reason=VERSION_CHANGED)
        previous_status = self.status.value if self.status else None
        new_incarnation = self.status in (None, ExecutorStatus.DEAD, ExecutorStatus.DELETED)
        self.trigger_event(
            self.Connected,
            connection_id=connection_id,
            owner=owner,
            app_version=app_version,
            hostname=hostname,
            language=language,
            dbos_version=dbos_version,
            executor_metadata=None if executor_metadata is None else OpaqueJSON(executor_metadata),
            previous_status=previous_status,
            superseded_connection=superseded,
            incarnation=self.incarnation + 1 if new_incarnation else self.incarnation,
            timestamp=at,
            token=token,
            peer=peer,
        )

    class Connected(Aggregate.Event):
        """Declared rather than derived from :meth:`_connected` so that the fields
        added later have defaults: an event stored before them reads as None
        (no class version, no upcaster: the event log's fast decoder still applies)."""

        connection_id: str
        owner: str
        app_version: str
        hostname: str | None
        language: str | None
        dbos_version: str | None
        executor_metadata: Any
        previous_status: str | None
        superseded_connection: str | None
        incarnation: int
        token: str | None = None  # since issue 11
        peer: str | None = None  # since issue 11

    @event(Connected)
    def _connected(
        self,
        connection_id: str,
        owner: str,
        app_version: str,
        hostname: str | None,
        language: str | None,
        dbos_version: str | None,
        executor_metadata: Any,
        previous_status: str | None,
        superseded_connection: str | None,
        incarnation: int,
        timestamp: datetime,
        token: str | None = None,
        peer: str | None = None,
    ) -> None:
        self.status = ExecutorStatus.HEALTHY
        self.connection_id = connection_id
        self.owner = owner
        self.app_version = app_version
        self.hostname = hostname
        self.language = language
        self.dbos_version = dbos_version
        self.executor_metadata = opaque_value(executor_metadata)
        self.incarnation = incarnation
        self.deadline = None

    def disconnect(self, *, connection_id: str, reason: str, deadline: datetime, at: datetime) -> None:
        """The current connection closed or went silent; arm the grace deadline."""
        if self.status != ExecutorStatus.HEALTHY:
            self._refuse("disconnect", "only a HEALTHY executor can disconnect")
        if connection_id != self.connection_id:
            self._refuse(
                "disconnect",
                f"connection {connection_id!r} is not current ({self.connection_id!r} is)",
                StaleConnection,
            )
        at = self.stamp(at)
        if deadline < at:
            self._refuse("disconnect", "the deadline is before the disconnect")
        self.trigger_event(self.Disconnected, connection_id=connection_id, reason=str(reason), deadline=deadline,
                           timestamp=at)

    @event("Disconnected")
    def _disconnected(self, connection_id: str, reason: str, deadline: datetime, timestamp: datetime) -> None:
        self.status = ExecutorStatus.DISCONNECTED
        self.deadline = deadline
        self.connection_id = None
        self.owner = None

    def declare_dead(self, *, now: datetime, expected_deadline: datetime | None = None) -> None:
        if self.status != ExecutorStatus.DISCONNECTED:
            self._refuse("declare dead", "only a DISCONNECTED executor can be declared dead")
        assert self.deadline is not None
        if expected_deadline is not None and expected_deadline != self.deadline:
            self._refuse("declare dead", f"the deadline is now {self.deadline.isoformat()}", NotDue)
        if now < self.deadline:
            self._refuse("declare dead", f"the deadline {self.deadline.isoformat()} has not come", NotDue)
        self.trigger_event(self.DeclaredDead, deadline=self.deadline, app_version=self.app_version,
                           timestamp=self.stamp(now), reason=None)

    class DeclaredDead(Aggregate.Event):
        """Declared, as :class:`Connected` is, so that fields added later have defaults."""

        deadline: datetime | None  # None when declared at a connect under another version (while HEALTHY)
        app_version: str | None
        reason: str | None = None  # None: its deadline came; VERSION_CHANGED: connected under another version

    @event(DeclaredDead)
    def _declared_dead(self, deadline: datetime | None, app_version: str | None, timestamp: datetime,
                       reason: str | None = None) -> None:
        self.status = ExecutorStatus.DEAD
        self.deadline = None
        # A new death replaces a finished obligation; an unfinished one stays, and one already on the
        # wire, or one of another version not yet sent, is followed by another for this death.
        if self.recovery_phase in (None, RecoveryPhase.CONFIRMED):
            self.recovery_phase = RecoveryPhase.PENDING
            self.recovery_version = app_version
            self.recovery_attempt = 0
            self.recovery_request_id = None
            self.recovery_target = None
        elif self.recovery_phase == RecoveryPhase.DISPATCHED:
            self.recovery_redo_version = app_version
        elif app_version != self.recovery_version and self.recovery_redo_version is None:
            self.recovery_redo_version = app_version

    @property
    def recovered_by_peer(self) -> bool:
        """See :func:`recovered_by_peer`."""
        return recovered_by_peer(self.status, self.recovery_phase, self.recovery_version, self.app_version)

    def defer_recovery(self, *, reason: str, at: datetime) -> None:
        if not self.recovered_by_peer or self.recovery_phase != RecoveryPhase.PENDING:
            self._refuse("defer recovery", f"recovery is {self.recovery_phase or 'not needed'}")
        self.trigger_event(self.RecoveryDeferred, reason=reason, timestamp=self.stamp(at))

    @event("RecoveryDeferred")
    def _recovery_deferred(self, reason: str, timestamp: datetime) -> None:
        self.recovery_phase = RecoveryPhase.DEFERRED

    def dispatch_recovery(self, *, request_id: str, target_executor_id: str, at: datetime) -> None:
        if not self.recovered_by_peer:
            self._refuse("dispatch recovery",
                         "only a DEAD executor, or one back on another version than the recovery's, is recovered")
        if self.recovery_phase not in (RecoveryPhase.PENDING, RecoveryPhase.DEFERRED):
            self._refuse(
                "dispatch recovery",
                f"recovery is {self.recovery_phase or 'not needed'}"
                + (f" (request {self.recovery_request_id} outstanding)" if self.outstanding_request else ""),
            )
        if target_executor_id == self.executor_id:
            self._refuse("dispatch recovery", "an executor cannot recover itself")
        self.trigger_event(
            self.RecoveryDispatched,
            request_id=request_id,
            target_executor_id=target_executor_id,
            app_version=self.recovery_version,
            attempt=self.recovery_attempt + 1,
            timestamp=self.stamp(at),
        )

    @event("RecoveryDispatched")
    def _recovery_dispatched(
        self, request_id: str, target_executor_id: str, app_version: str | None, attempt: int, timestamp: datetime
    ) -> None:
        self.recovery_phase = RecoveryPhase.DISPATCHED
        self.recovery_request_id = request_id
        self.recovery_target = target_executor_id
        self.recovery_attempt = attempt

    def _check_outstanding(self, command: str, request_id: str) -> None:
        if self.recovery_phase != RecoveryPhase.DISPATCHED:
            self._refuse(command, f"no recovery request is outstanding (recovery is {self.recovery_phase or 'not needed'})")
        if request_id != self.recovery_request_id:
            self._refuse(command, f"request {request_id!r} is not the outstanding one ({self.recovery_request_id!r})")

    def fail_recovery(self, *, request_id: str, reason: str, at: datetime) -> None:
        self._check_outstanding("fail recovery", request_id)
        self.trigger_event(self.RecoveryFailed, request_id=request_id, target_executor_id=self.recovery_target,
                           reason=reason, timestamp=self.stamp(at))

    @event("RecoveryFailed")
    def _recovery_failed(self, request_id: str, target_executor_id: str | None, reason: str, timestamp: datetime) -> None:
        self.recovery_phase = RecoveryPhase.PENDING
        self.recovery_request_id = None

    def confirm_recovery(self, *, request_id: str, pending_found: bool | None, at: datetime) -> None:
        self._check_outstanding("confirm recovery", request_id)
        self.trigger_event(
            self.RecoveryConfirmed,
            request_id=request_id, target_executor_id=self.recovery_target, pending_found=pending_found,
            timestamp=self.stamp(at),
        )

    @event("RecoveryConfirmed")
    def _recovery_confirmed(
        self, request_id: str, target_executor_id: str | None, pending_found: bool | None, timestamp: datetime
    ) -> None:
        if self.recovery_redo_version is not None and (self.status == ExecutorStatus.DEAD
                                                       or self.recovery_redo_version != self.app_version):
            # The confirmed request was for an earlier death: recover this one too, unless the
            # executor is back on its version (that process recovered its own).
            self.recovery_phase = RecoveryPhase.PENDING
            self.recovery_version = self.recovery_redo_version
            self.recovery_attempt = 0
            self.recovery_request_id = None
            self.recovery_target = None
        else:
            self.recovery_phase = RecoveryPhase.CONFIRMED
        self.recovery_redo_version = None

    def reorder_recovery(self, *, at: datetime) -> None:
        """Recovers the later death's version first (the process manager's choice, when only it has
        a candidate); the obligation's own version becomes the one recovered after it."""
        if not self.recovered_by_peer or self.recovery_phase not in (RecoveryPhase.PENDING,
                                                                     RecoveryPhase.DEFERRED):
            self._refuse("reorder recovery", f"recovery is {self.recovery_phase or 'not needed'}")
        if self.recovery_redo_version is None:
            self._refuse("reorder recovery", "no later death waits behind this recovery")
        self.trigger_event(self.RecoveryReordered, app_version=self.recovery_redo_version,
                           postponed_version=self.recovery_version, timestamp=self.stamp(at))

    @event("RecoveryReordered")
    def _recovery_reordered(self, app_version: str, postponed_version: str | None, timestamp: datetime) -> None:
        self.recovery_phase = RecoveryPhase.PENDING
        self.recovery_version = app_version
        self.recovery_redo_version = postponed_version
        self.recovery_attempt = 0
        self.recovery_request_id = None
        self.recovery_target = None

    def withdraw_recovery(self, *, reason: str, at: datetime) -> None:
        if self.recovery_phase not in (RecoveryPhase.PENDING, RecoveryPhase.DEFERRED):
            self._refuse("withdraw recovery", f"recovery is {self.recovery_phase or 'not needed'}")
        if self.status == ExecutorStatus.DEAD:
            self._refuse("withdraw recovery", "the executor is still dead")
        if self.recovered_by_peer:
            self._refuse("withdraw recovery", f"the executor is back on version {self.app_version!r}, "
                                              f"not the recovery's {self.recovery_version!r}")
        self.trigger_event(self.RecoveryWithdrawn, reason=reason, timestamp=self.stamp(at))

    @event("RecoveryWithdrawn")
    def _recovery_withdrawn(self, reason: str, timestamp: datetime) -> None:
        self.recovery_redo_version = None
        self.recovery_phase = None
        self.recovery_request_id = None
        self.recovery_target = None

    def delete(self, *, at: datetime) -> None:
        if self.status != ExecutorStatus.DEAD:
            self._refuse("delete", "only a DEAD executor is deleted")
        if self.recovery_phase != RecoveryPhase.CONFIRMED:
            self._refuse("delete", "its recovery has not been confirmed")
        self.trigger_event(self.Deleted, timestamp=self.stamp(at))

    @event("Deleted")
    def _deleted(self, timestamp: datetime) -> None:
        self.status = ExecutorStatus.DELETED
        self.recovery_phase = None
        self.recovery_request_id = None
        self.recovery_target = None
