"""The audit log: one entry per recorded transition, in the store's order.

``seq`` is the event's notification id: the store's total order, so entries are
in order, paging with ``after`` is stable, and a rebuild gives identical rows.
Ids can have gaps; nothing relies on contiguity. :func:`entry_for` is pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relay_es.aggregates.application import Application
from relay_es.aggregates.executor import Executor
from relay_es.aggregates.gate import Gate
from relay_es.aggregates.token import Token
from relay_es.adapters.stores import Database
from relay_es.projections.executors import EXECUTOR_EVENTS
from relay_es.units import duration_to_millis, duration_to_seconds, from_epoch_ms, rfc3339, to_epoch_ms


@dataclass(frozen=True)
class AuditEntry:
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


def _executor_entry(e: Any) -> tuple[str, dict[str, Any]] | None:
    if isinstance(e, Executor.Connected):
        action = "executor.reconnected" if e.previous_status == "DISCONNECTED" else "executor.connected"
        detail: dict[str, Any] = {
            "incarnation": e.incarnation,
            "appVersion": e.app_version,
            "hostname": e.hostname,
            "connectionId": e.connection_id,
            "owner": e.owner,
        }
        if e.previous_status:
            detail["previousStatus"] = e.previous_status
        if e.superseded_connection:
            detail["supersededConnectionId"] = e.superseded_connection
        return action, detail
    if isinstance(e, Executor.Disconnected):
        return "executor.disconnected", {"reason": e.reason, "deadline": rfc3339(e.deadline), "connectionId": e.connection_id}
    if isinstance(e, Executor.DeclaredDead):
        return "executor.declared_dead", {"deadline": rfc3339(e.deadline), "appVersion": e.app_version}
    if isinstance(e, Executor.RecoveryDeferred):
        return "recovery.deferred", {"reason": e.reason}
    if isinstance(e, Executor.RecoveryDispatched):
        return "recovery.dispatched", {
            "requestId": e.request_id,
            "targetExecutorId": e.target_executor_id,
            "appVersion": e.app_version,
            "attempt": e.attempt,
        }
    if isinstance(e, Executor.RecoveryFailed):
        return "recovery.failed", {"requestId": e.request_id, "targetExecutorId": e.target_executor_id, "reason": e.reason}
    if isinstance(e, Executor.RecoveryConfirmed):
        return "recovery.confirmed", {
            "requestId": e.request_id,
            "targetExecutorId": e.target_executor_id,
            "pendingFound": e.pending_found,
        }
    if isinstance(e, Executor.RecoveryWithdrawn):
        return "recovery.withdrawn", {"reason": e.reason}
    if isinstance(e, Executor.Deleted):
        return "executor.deleted", {}
    return None


def entry_for(e: Any, seq: int, *, context: dict[str, Any]) -> AuditEntry | None:
    """The audit entry for one event, or None. ``context`` maps stream ids to
    (org, app, executor_id) for events that do not carry them (filled from
    created events as they pass)."""
    sid = str(e.originator_id)
    if isinstance(e, Executor.Registered):
        context[sid] = (e.org, e.app, e.executor_id)
        return None
    if isinstance(e, Application.Registered):
        context[sid] = (e.org, e.name, None)
        return AuditEntry(seq, e.timestamp, e.org, e.name, None, "app.registered", {"privateMode": e.private_mode})
    if isinstance(e, Gate.Opened):
        context[sid] = (e.org, None, None)
        return None
    if isinstance(e, Token.Created):
        context[sid] = (e.org, None, e.name)
        return AuditEntry(seq, e.timestamp, e.org, None, None, "token.created", {"tokenName": e.name, "appNames": e.app_names})
    where = context.get(sid)
    if where is None:
        return None
    org, app, name = where
    if isinstance(e, EXECUTOR_EVENTS):
        found = _executor_entry(e)
        if found is None:
            return None
        return AuditEntry(seq, e.timestamp, org, app, name, found[0], found[1])
    if isinstance(e, Application.Restored):
        return AuditEntry(seq, e.timestamp, org, app, None, "app.registered", {"privateMode": e.private_mode, "restored": True})
    if isinstance(e, Application.SettingsChanged):
        changes = {}
        for field in e.changed:
            out_name, conv = _SETTING_OUT[field]
            changes[out_name] = conv(getattr(e, field))
        return AuditEntry(seq, e.timestamp, org, app, None, "app.updated", {"changes": changes})
    if isinstance(e, Application.Deleted):
        return AuditEntry(seq, e.timestamp, org, app, None, "app.deleted", {})
    if isinstance(e, Application.RetentionDispatched):
        return AuditEntry(seq, e.timestamp, org, app, None, "retention.dispatched", {
            "requestId": e.request_id,
            "targetExecutorId": e.target_executor_id,
            "gcCutoffEpochMs": None if e.gc_cutoff is None else to_epoch_ms(e.gc_cutoff),
            "gcRowsThreshold": e.gc_rows_threshold,
            "timeoutCutoffEpochMs": None if e.timeout_cutoff is None else to_epoch_ms(e.timeout_cutoff),
        })
    if isinstance(e, Application.RetentionAnswered):
        return AuditEntry(seq, e.timestamp, org, app, None, "retention.answered",
                          {"requestId": e.request_id, "success": e.success, "error": e.error})
    if isinstance(e, Application.ProtocolViolated):
        return AuditEntry(seq, e.timestamp, org, app, e.executor_id, "protocol.violation",
                          {"kind": e.kind, "detail": e.detail, "peer": e.peer, "suppressed": e.suppressed})
    if isinstance(e, Gate.Refused):
        return AuditEntry(seq, e.timestamp, org, e.app, None, "auth.refused",
                          {"peer": e.peer, "status": e.status, "reason": e.reason, "suppressed": e.suppressed})
    if isinstance(e, Token.Reissued):
        return AuditEntry(seq, e.timestamp, org, None, None, "token.created", {"tokenName": name, "appNames": e.app_names, "reissued": True})
    if isinstance(e, Token.Revoked):
        return AuditEntry(seq, e.timestamp, org, None, None, "token.revoked", {"tokenName": name})
    return None


AUDITED_EVENTS = (
    Application.Registered,
    Application.Restored,
    Application.SettingsChanged,
    Application.Deleted,
    Application.RetentionDispatched,
    Application.RetentionAnswered,
    Application.ProtocolViolated,
    Token.Created,
    Token.Reissued,
    Token.Revoked,
    Gate.Opened,
    Gate.Refused,
)

DDL = [
    """
    CREATE TABLE IF NOT EXISTS relay_audit (
        seq BIGINT PRIMARY KEY,
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

_INSERT = (
    "INSERT INTO relay_audit (seq, at, org, app, executor_id, action, detail) "
    "VALUES (%(seq)s, %(at)s, %(org)s, %(app)s, %(executor_id)s, %(action)s, %(detail)s) "
    "ON CONFLICT (seq) DO NOTHING"
)


class AuditProjection:
    name = "audit"
    tables = ("relay_audit", "relay_audit_streams")

    event_types = EXECUTOR_EVENTS + AUDITED_EVENTS

    def create(self, cur: Any) -> None:
        for stmt in DDL:
            cur.execute(stmt)

    def drop(self, cur: Any) -> None:
        for t in self.tables:
            cur.execute(f"DROP TABLE IF EXISTS {t}")

    def begin_batch(self) -> dict[str, Any]:
        return {"context": {}, "new_streams": {}, "entries": []}

    def prefetch(self, cur: Any, batch: dict[str, Any], events: list[Any]) -> None:
        """Reads where every stream of the batch belongs, 500 to a query."""
        ctx = batch["context"]
        sids = list(dict.fromkeys(str(e.originator_id) for e in events))
        for start in range(0, len(sids), 500):
            chunk = sids[start:start + 500]
            cur.execute("SELECT stream_id, org, app, name FROM relay_audit_streams WHERE stream_id IN "
                        f"({', '.join(['%s'] * len(chunk))})", chunk)
            for sid, org, app, name in cur.fetchall():
                ctx[sid] = (org, app, name)
        batch["prefetched"] = True

    def handle(self, cur: Any, batch: dict[str, Any], event: Any, notification_id: int) -> None:
        ctx = batch["context"]
        sid = str(event.originator_id)
        if sid not in ctx and not batch.get("prefetched") and not isinstance(
            event, (Executor.Registered, Application.Registered, Token.Created, Gate.Opened)
        ):
            cur.execute("SELECT org, app, name FROM relay_audit_streams WHERE stream_id = %(sid)s", {"sid": sid})
            found = cur.fetchone()
            if found:
                ctx[sid] = tuple(found)
        known = sid in ctx
        entry = entry_for(event, notification_id, context=ctx)
        if not known and sid in ctx:
            batch["new_streams"][sid] = ctx[sid]
        if entry is not None:
            batch["entries"].append(entry)

    def end_batch(self, cur: Any, batch: dict[str, Any]) -> None:
        if batch["new_streams"]:
            cur.executemany(
                "INSERT INTO relay_audit_streams (stream_id, org, app, name) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (stream_id) DO NOTHING",
                [(sid, *v) for sid, v in batch["new_streams"].items()],
            )
        if batch["entries"]:
            cur.executemany(
                _INSERT,
                [
                    {
                        "seq": a.seq,
                        "at": to_epoch_ms(a.at),
                        "org": a.org,
                        "app": a.app,
                        "executor_id": a.executor_id,
                        "action": a.action,
                        "detail": json.dumps(a.detail, sort_keys=True),
                    }
                    for a in batch["entries"]
                ],
            )


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
