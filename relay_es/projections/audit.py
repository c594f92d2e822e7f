"""The executor lifecycle feed (read model ``audit``): one entry per recorded transition, in
the store's order, served at ``GET /v2/orgs/{org}/executor-events``.

Executors connected, disconnected, declared dead, their recoveries, retention rounds,
protocol violations, refused handshakes, skipped events, applications and tokens made and
changed, alerting rules made and deleted, alerts fired and every attempt to deliver one. Operator actions are not here: they are the audit log
(:mod:`relay_es.projections.actions`; version 2 of this table had their two halves too).

``seq`` is the event's notification id: the store's total order, so entries are
in order, paging with ``after`` is stable, and a rebuild gives identical rows.
Ids can have gaps; nothing relies on contiguity. :func:`entry_for` is pure.
The tables are stored by :mod:`relay_es.adapters.readmodels.audit`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from relay_es.aggregates.alert import AlertFirings
from relay_es.aggregates.application import Application
from relay_es.aggregates.executor import Executor
from relay_es.aggregates.gate import Gate
from relay_es.aggregates.skip import ProjectionSkip
from relay_es.aggregates.token import Token
from relay_es.projections.executors import EXECUTOR_EVENTS
from relay_es.projections.storable import check_keys
from relay_es.domain.units import duration_to_millis, duration_to_seconds, rfc3339, to_epoch_ms


class AuditEntry(NamedTuple):
    seq: int
    at: datetime
    org: str
    app: str | None
    executor_id: str | None
    action: str
    detail: dict[str, Any]


# Setting names as the contract spells them, with their units.
_SETTING_OUT = {
    "executor_timeout": ("executorTimeoutSecs", lambda v: None if v is None else duration_to_seconds(v)),
    "gc_time_threshold": ("gcTimeThresholdMs", lambda v: None if v is None else duration_to_millis(v)),
    "global_timeout": ("globalTimeoutMs", lambda v: None if v is None else duration_to_millis(v)),
    "gc_rows_threshold": ("gcRowsThreshold", lambda v: v),
    "private_mode": ("privateMode", lambda v: v),
}


def _connected(e: Any) -> tuple[str, dict[str, Any]]:
    action = "executor.reconnected" if e.previous_status == "DISCONNECTED" else "executor.connected"
    detail: dict[str, Any] = {
        "incarnation": e.incarnation,
        "appVersion": e.app_version,
        "hostname": e.hostname,
        "connectionId": e.connection_id,
        "owner": e.owner,
        # who registered (or superseded) it: the token's name (None in development mode) and the address
        "token": e.token,
        "peer": e.peer,
    }
    if e.previous_status:
        detail["previousStatus"] = e.previous_status
    if e.superseded_connection:
        detail["supersededConnectionId"] = e.superseded_connection
    return action, detail


RECOVERY_CONFIRMED = "recovery.confirmed"  # the action listMetrics' recovery_count counts (its index holds only these)
# What every token entry's action begins with (token.created, token.revoked): their names and
# applications are what listTokens shows, so the feed serves them only to a caller with token.read.
TOKEN_ACTIONS = "token."

# Executor events: (action, detail) from the event; org, app and name come from the stream's context.
_EXECUTOR_ENTRIES: dict[type, Callable[[Any], tuple[str, dict[str, Any]]]] = {
    Executor.Connected: _connected,
    Executor.Disconnected: lambda e: ("executor.disconnected", {
        "reason": e.reason, "deadline": rfc3339(e.deadline), "connectionId": e.connection_id}),
    Executor.DeclaredDead: lambda e: ("executor.declared_dead", {
        "deadline": rfc3339(e.deadline), "appVersion": e.app_version,
        **({"reason": e.reason} if e.reason else {})}),  # reason: version_changed (a connect under another)
    Executor.RecoveryDeferred: lambda e: ("recovery.deferred", {"reason": e.reason}),
    Executor.RecoveryReordered: lambda e: ("recovery.reordered", {
        "appVersion": e.app_version, "postponedVersion": e.postponed_version}),
    Executor.RecoveryDispatched: lambda e: ("recovery.dispatched", {
        "requestId": e.request_id, "targetExecutorId": e.target_executor_id, "appVersion": e.app_version,
        "attempt": e.attempt}),
    Executor.RecoveryFailed: lambda e: ("recovery.failed", {
        "requestId": e.request_id, "targetExecutorId": e.target_executor_id, "reason": e.reason}),
    Executor.RecoveryConfirmed: lambda e: (RECOVERY_CONFIRMED, {
        "requestId": e.request_id, "targetExecutorId": e.target_executor_id, "pendingFound": e.pending_found}),
    Executor.RecoveryWithdrawn: lambda e: ("recovery.withdrawn", {"reason": e.reason}),
    Executor.Deleted: lambda e: ("executor.deleted", {}),
}


def _settings_changed(e: Any) -> dict[str, Any]:
    changes = {}
    for field in e.changed:
        out_name, conv = _SETTING_OUT[field]
        changes[out_name] = conv(getattr(e, field))
    return {"changes": changes}


# Other events of a known stream: (org, app, name, event) -> (app, executor_id, action, detail).
_OTHER_ENTRIES: dict[type, Callable[[str, Any, Any, Any], tuple[Any, Any, str, dict[str, Any]]]] = {
    Application.Restored: lambda org, app, name, e: (app, None, "app.registered",
                                                     {"privateMode": e.private_mode, "restored": True}),
    Application.SettingsChanged: lambda org, app, name, e: (app, None, "app.updated", _settings_changed(e)),
    Application.Deleted: lambda org, app, name, e: (app, None, "app.deleted", {}),
    Application.RetentionDispatched: lambda org, app, name, e: (app, None, "retention.dispatched", {
        "requestId": e.request_id,
        "targetExecutorId": e.target_executor_id,
        "gcCutoffEpochMs": None if e.gc_cutoff is None else to_epoch_ms(e.gc_cutoff),
        "gcRowsThreshold": e.gc_rows_threshold,
        "timeoutCutoffEpochMs": None if e.timeout_cutoff is None else to_epoch_ms(e.timeout_cutoff),
    }),
    Application.RetentionAnswered: lambda org, app, name, e: (app, None, "retention.answered", {
        "requestId": e.request_id, "success": e.success, "error": e.error}),
    Application.ProtocolViolated: lambda org, app, name, e: (app, e.executor_id, "protocol.violation", {
        "kind": e.kind, "detail": e.detail, "peer": e.peer, "suppressed": e.suppressed}),
    Gate.Refused: lambda org, app, name, e: (e.app, None, "auth.refused", {
        "peer": e.peer, "status": e.status, "reason": e.reason, "suppressed": e.suppressed}),
    Application.AlertingRuleCreated: lambda org, app, name, e: (app, None, "alerting.rule_created", {
        "ruleId": e.rule["id"], "ruleType": e.rule["rule_type"], "receivingApp": e.rule["receiving_app"],
        "minIntervalSecs": e.rule["min_interval_secs"], "webhooks": len(e.rule["webhooks"])}),  # no URL, no secret
    Application.AlertingRuleDeleted: lambda org, app, name, e: (app, None, "alerting.rule_deleted",
                                                                {"ruleId": e.rule_id}),
    AlertFirings.Fired: lambda org, app, name, e: (app, None, "alert.fired", {
        "ruleId": name, "alertId": e.alert_id, "ruleType": e.rule_type, "receivingApp": e.receiving_app,
        "message": e.message, "metadata": e.metadata, "channels": e.channels, "cause": e.cause}),
    AlertFirings.DeliveryAttempted: lambda org, app, name, e: (app, None, "alert.delivery", {
        "ruleId": name, "alertId": e.alert_id, "channel": e.channel, "attempt": e.attempt, "ok": e.ok,
        "final": e.final, "detail": e.detail}),
    Token.Reissued: lambda org, app, name, e: (None, None, "token.created",
                                               {"tokenName": name, "appNames": e.app_names, "reissued": True}),
    Token.Revoked: lambda org, app, name, e: (None, None, "token.revoked", {"tokenName": name}),
}


def entry_for(e: Any, seq: int, *, context: dict[str, Any], sid: str | None = None) -> AuditEntry | None:
    """The audit entry for one event, or None. ``context`` maps stream ids to
    (org, app, executor_id) for events that do not carry them (filled from
    created events as they pass). ``sid`` is ``str(e.originator_id)``, if the
    caller has it already."""
    if sid is None:
        sid = str(e.originator_id)
    kind = type(e)
    executor_entry = _EXECUTOR_ENTRIES.get(kind)
    if executor_entry is not None:
        where = context.get(sid)
        if where is None:
            return None
        action, detail = executor_entry(e)
        return AuditEntry(seq, e.timestamp, where[0], where[1], where[2], action, detail)
    if kind is Executor.Registered:
        context[sid] = (e.org, e.app, e.executor_id)
        return None
    if kind is Application.Registered:
        context[sid] = (e.org, e.name, None)
        return AuditEntry(seq, e.timestamp, e.org, e.name, None, "app.registered", {"privateMode": e.private_mode})
    if kind is Gate.Opened:
        context[sid] = (e.org, None, None)
        return None
    if kind is AlertFirings.Opened:
        context[sid] = (e.org, e.app, e.rule_id)
        return None
    if kind is ProjectionSkip.Recorded:
        return AuditEntry(seq, e.timestamp, e.org, e.app, None, "projection.skipped", {
            "projection": e.projection, "notificationId": e.notification_id, "streamId": e.stream_id,
            "eventType": e.event_type, "reason": e.reason})
    if kind is Token.Created:
        context[sid] = (e.org, None, e.name)
        return AuditEntry(seq, e.timestamp, e.org, None, None, "token.created", {"tokenName": e.name, "appNames": e.app_names})
    other = _OTHER_ENTRIES.get(kind)
    where = context.get(sid)
    if other is None or where is None:
        return None
    org, app, name = where
    app_out, executor_id, action, detail = other(org, app, name, e)
    return AuditEntry(seq, e.timestamp, org, app_out, executor_id, action, detail)


# Events of other aggregates the audit log reads: those that say where a stream belongs, and
# those with an entry (derived from the table above, so the two cannot drift apart).
AUDITED_EVENTS = (Application.Registered, Gate.Opened, Token.Created, ProjectionSkip.Recorded, AlertFirings.Opened,
                  *_OTHER_ENTRIES)

Where = tuple[str, str | None, str | None]  # (org, app, name) of a stream
_SID = operator.itemgetter(1)  # a batch item's stream id: (notification id, stream id, event)


class AuditProjection:
    """The audit log between batches: where each stream belongs (cached), and the new entries."""

    NAME = "audit"
    name = NAME
    kept_from = None  # keeps no row per stream for ever
    event_types = EXECUTOR_EVENTS + AUDITED_EVENTS
    cache_limit = 100_000

    def __init__(self) -> None:
        self.context: dict[str, Where] = {}
        self.new_streams: dict[str, Where] = {}
        self.entries: list[AuditEntry] = []
        # (org, app, executor id) that passed check_keys together: their sum is bounded too, so values
        # that passed apart may not pass together, and what passed must not depend on what this process
        # folded before (a rebuild's share sees other streams than the live runner)
        self._keys_ok: set[tuple[str | None, str | None, str | None]] = set()

    def forget(self) -> None:
        self.context = {}
        self.new_streams = {}
        self.entries = []

    def missing(self, items: list[tuple[int, str, Any]]) -> list[str]:
        """The batch's streams not known to belong anywhere yet (read from the streams table)."""
        ctx = self.context
        return [sid for sid in dict.fromkeys(map(_SID, items)) if sid not in ctx]

    def loaded(self, asked: Sequence[str], found: dict[str, Where]) -> None:
        self.context.update(found)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        ctx = self.context
        known = sid in ctx
        entry = entry_for(event, notification_id, context=ctx, sid=sid)
        if not known and sid in ctx:
            self.new_streams[sid] = ctx[sid]
        if entry is not None:
            if (entry.org, entry.app, entry.executor_id) not in self._keys_ok:  # a stream's entries share them
                self._check_keys(entry)
            self.entries.append(entry)

    def _check_keys(self, entry: AuditEntry) -> None:
        check_keys(org=entry.org, app=entry.app, executor_id=entry.executor_id)  # Unstorable: skipped (ADR 16)
        if len(self._keys_ok) > self.cache_limit:
            self._keys_ok = set()
        self._keys_ok.add((entry.org, entry.app, entry.executor_id))

    def changes(self) -> tuple[dict[str, Where], list[AuditEntry]]:
        """The streams newly placed and the entries made since the last call."""
        out = self.new_streams, self.entries
        self.new_streams = {}
        self.entries = []
        return out

    def committed(self) -> None:
        if len(self.context) > self.cache_limit:
            self.context = {}


class AuditLog(Protocol):
    """Where the log is read (the read models' database)."""

    def audit_entries(self, *, org: str, app: str | None = None, executor_id: str | None = None,
                      after: int | None = None, limit: int = 100, folded: bool = False,
                      tokens: bool = True) -> list[AuditEntry]: ...


def query(
    db: AuditLog,
    *,
    org: str,
    app: str | None = None,
    executor_id: str | None = None,
    after: int | None = None,
    limit: int = 100,
    folded: bool = False,
    tokens: bool = True,
) -> list[AuditEntry]:
    """The org's entries (of an application, of an executor) after ``after``, in order, at most ``limit``;
    ``folded``: only those up to the read model's tracked position (a page to follow from); ``tokens=False``:
    none of the tokens' (:data:`TOKEN_ACTIONS`), left out by the query, so every page is as full as the others allow."""
    return db.audit_entries(org=org, app=app, executor_id=executor_id, after=after, limit=limit, folded=folded,
                            tokens=tokens)
