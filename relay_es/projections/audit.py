"""The audit log: one entry per recorded transition, in the store's order.

``seq`` is the event's notification id: the store's total order, so entries are
in order, paging with ``after`` is stable, and a rebuild gives identical rows.
Ids can have gaps; nothing relies on contiguity. :func:`entry_for` is pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from relay_es.aggregates.application import Application
from relay_es.aggregates.executor import Executor
from relay_es.aggregates.gate import Gate
from relay_es.aggregates.skip import ProjectionSkip
from relay_es.aggregates.token import Token
from relay_es.adapters.stores import Database, copy_rows, insert_rows, is_sqlite
from relay_es.projections.executors import EXECUTOR_EVENTS
from relay_es.projections.storable import check_key
from relay_es.domain.units import duration_to_millis, duration_to_seconds, from_epoch_ms, rfc3339, to_epoch_ms


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


# Executor events: (action, detail) from the event; org, app and name come from the stream's context.
_EXECUTOR_ENTRIES: dict[type, Callable[[Any], tuple[str, dict[str, Any]]]] = {
    Executor.Connected: _connected,
    Executor.Disconnected: lambda e: ("executor.disconnected", {
        "reason": e.reason, "deadline": rfc3339(e.deadline), "connectionId": e.connection_id}),
    Executor.DeclaredDead: lambda e: ("executor.declared_dead", {
        "deadline": rfc3339(e.deadline), "appVersion": e.app_version}),
    Executor.RecoveryDeferred: lambda e: ("recovery.deferred", {"reason": e.reason}),
    Executor.RecoveryDispatched: lambda e: ("recovery.dispatched", {
        "requestId": e.request_id, "targetExecutorId": e.target_executor_id, "appVersion": e.app_version,
        "attempt": e.attempt}),
    Executor.RecoveryFailed: lambda e: ("recovery.failed", {
        "requestId": e.request_id, "targetExecutorId": e.target_executor_id, "reason": e.reason}),
    Executor.RecoveryConfirmed: lambda e: ("recovery.confirmed", {
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
AUDITED_EVENTS = (Application.Registered, Gate.Opened, Token.Created, ProjectionSkip.Recorded, *_OTHER_ENTRIES)

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_audit (
        seq {seq_type} PRIMARY KEY,
        at BIGINT NOT NULL,
        org TEXT NOT NULL,
        app TEXT,
        executor_id TEXT,
        action TEXT NOT NULL,
        detail TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS relay_audit_org ON relay_audit (org, seq)",
    "CREATE INDEX IF NOT EXISTS relay_audit_app ON relay_audit (org, app, executor_id, seq)",
    # stream id -> (org, app, name): lets the audit projection resume mid-stream
    """
    CREATE TABLE IF NOT EXISTS relay_audit_streams (
        stream_id TEXT PRIMARY KEY,
        org TEXT NOT NULL,
        app TEXT,
        name TEXT
    )
    """,
]


class AuditProjection:
    """Keeps ``relay_audit`` and ``relay_audit_streams`` (where each stream belongs)."""

    name = "audit"
    tables = ("relay_audit", "relay_audit_streams")
    event_types = EXECUTOR_EVENTS + AUDITED_EVENTS
    cache_limit = 100_000

    def __init__(self) -> None:
        self.context: dict[str, tuple[str, str | None, str | None]] = {}
        self.new_streams: dict[str, tuple[str, str | None, str | None]] = {}
        self.entries: list[AuditEntry] = []

    def create(self, cur: Any, *, indexes: bool = True) -> None:
        # SQLite: INTEGER PRIMARY KEY makes seq the rowid (one b-tree, not a table and an index)
        seq_type = "INTEGER" if is_sqlite(cur) else "BIGINT"
        for stmt in DDL if indexes else [s for s in DDL if "CREATE INDEX" not in s]:
            cur.execute(stmt.replace("{seq_type}", seq_type))

    def drop(self, cur: Any) -> None:
        for t in self.tables:
            cur.execute(f"DROP TABLE IF EXISTS {t}")

    def forget(self) -> None:
        self.context = {}
        self.new_streams = {}
        self.entries = []

    def load(self, cur: Any, items: list[tuple[int, str, Any]]) -> None:
        """Reads where the batch's streams belong (those not cached yet), 500 to a query."""
        ctx = self.context
        sids = [sid for sid in dict.fromkeys(sid for _, sid, _ in items) if sid not in ctx]
        for start in range(0, len(sids), 500):
            chunk = sids[start:start + 500]
            cur.execute("SELECT stream_id, org, app, name FROM relay_audit_streams WHERE stream_id IN "
                        f"({', '.join(['%s'] * len(chunk))})", chunk)
            for sid, org, app, name in cur.fetchall():
                ctx[sid] = (org, app, name)

    def apply(self, notification_id: int, sid: str, event: Any) -> None:
        ctx = self.context
        known = sid in ctx
        entry = entry_for(event, notification_id, context=ctx, sid=sid)
        if not known and sid in ctx:
            self.new_streams[sid] = ctx[sid]
        if entry is not None:
            check_key("org", entry.org)  # Unstorable: the runner skips this event (ADR 16)
            check_key("app", entry.app)
            check_key("executor_id", entry.executor_id)
            self.entries.append(entry)

    def write(self, cur: Any, *, bulk: bool = False) -> None:
        """``bulk``: the tables were created empty by this rebuild, so rows are
        copied in (Postgres ``COPY``) rather than inserted one statement each."""
        if self.new_streams:
            rows = [(sid, *v) for sid, v in self.new_streams.items()]
            self.new_streams = {}
            if bulk:
                copy_rows(cur, "relay_audit_streams", ("stream_id", "org", "app", "name"), rows)
            else:
                insert_rows(cur, "relay_audit_streams", ("stream_id", "org", "app", "name"), rows,
                            "ON CONFLICT (stream_id) DO NOTHING")
        if self.entries:
            encode = _encode_detail
            rows = [(a.seq, to_epoch_ms(a.at), a.org, a.app, a.executor_id, a.action, encode(a.detail))
                    for a in self.entries]
            self.entries = []
            if bulk:
                copy_rows(cur, "relay_audit", _COLUMNS, rows)
            else:
                insert_rows(cur, "relay_audit", _COLUMNS, rows, "ON CONFLICT (seq) DO NOTHING")

    def committed(self) -> None:
        if len(self.context) > self.cache_limit:
            self.context = {}


_COLUMNS = ("seq", "at", "org", "app", "executor_id", "action", "detail")
_encoder = msgspec.json.Encoder(order="sorted")


def _encode_detail(detail: dict[str, Any]) -> str:
    """The detail column: JSON with sorted keys (the same bytes live and after a rebuild)."""
    return _encoder.encode(detail).decode()


def query(
    db: Database,
    *,
    org: str,
    app: str | None = None,
    executor_id: str | None = None,
    after: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    sql = "SELECT seq, at, org, app, executor_id, action, detail FROM relay_audit WHERE org = %(org)s"
    params: dict[str, Any] = {"org": org, "limit": limit}
    if app is not None:
        sql += " AND app = %(app)s"
        params["app"] = app
    if executor_id is not None:
        sql += " AND executor_id = %(executor_id)s"
        params["executor_id"] = executor_id
    if after is not None:
        sql += " AND seq > %(after)s"
        params["after"] = after
    sql += " ORDER BY seq LIMIT %(limit)s"
    with db.read() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return [AuditEntry(r[0], from_epoch_ms(r[1]), r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]
