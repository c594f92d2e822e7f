"""The invariant checker run after every fault scenario.

For every executor stream in the store:

1. **The event stream is a legal sequence**: each event is re-derived by
   running the command that produced it on a fresh aggregate, with the
   recorded arguments and time. The domain's own rules decide; any refusal is
   a violation.
2. **The audit log tells the same story**: the audit entries of the executor
   are, in order, exactly the audited events of its stream.
3. **Every death is accounted for**: an executor still DEAD is either waiting
   with a recorded reason (RecoveryDeferred or RecoveryFailed) or has a
   dispatch outstanding; a DELETED one had its recovery confirmed.
4. **Nothing is recovered twice**: per death and application version, at most one
   RecoveryConfirmed of a dispatch sent after it (a dispatch still out when the executor died
   again was sent for the death before; the versions of two deaths, one kept behind the other's
   recovery, are recovered by a dispatch each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from relay_es.adapters.clock import SystemClock
from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
from relay_es.aggregates.executor import Executor, opaque_value
from relay_es.domain.errors import IllegalTransition
from relay_es.projections import audit
from relay_es.engine.service import Relay

AUDITED = {
    "Connected": ("executor.connected", "executor.reconnected"),
    "Disconnected": ("executor.disconnected",),
    "DeclaredDead": ("executor.declared_dead",),
    "RecoveryDeferred": ("recovery.deferred",),
    "RecoveryDispatched": ("recovery.dispatched",),
    "RecoveryFailed": ("recovery.failed",),
    "RecoveryConfirmed": ("recovery.confirmed",),
    "RecoveryWithdrawn": ("recovery.withdrawn",),
    "RecoveryReordered": ("recovery.reordered",),
    "Deleted": ("executor.deleted",),
}


@dataclass
class Report:
    executors: int = 0
    events: int = 0
    deaths: int = 0
    recoveries: int = 0
    pending: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def assert_ok(self) -> None:
        assert not self.violations, "invariant violations:\n" + "\n".join(self.violations[:30])


def _replay(events: list[Any]) -> str | None:
    """Re-runs the command behind every event; returns the first refusal."""
    ex: Executor | None = None
    for e in events:
        name = type(e).__name__
        try:
            if name == "Registered":
                ex = Executor(org=e.org, app=e.app, executor_id=e.executor_id, timestamp=e.timestamp)
                continue
            assert ex is not None
            t = e.timestamp
            if name == "Connected":
                ex.connect(connection_id=e.connection_id, owner=e.owner, app_version=e.app_version,
                           hostname=e.hostname, language=e.language, dbos_version=e.dbos_version,
                           executor_metadata=opaque_value(e.executor_metadata), at=t)
            elif name == "Disconnected":
                ex.disconnect(connection_id=e.connection_id, reason=e.reason, deadline=e.deadline, at=t)
            elif name == "DeclaredDead":
                ex.declare_dead(now=t, expected_deadline=e.deadline)
            elif name == "RecoveryDeferred":
                ex.defer_recovery(reason=e.reason, at=t)
            elif name == "RecoveryDispatched":
                ex.dispatch_recovery(request_id=e.request_id, target_executor_id=e.target_executor_id, at=t)
            elif name == "RecoveryFailed":
                ex.fail_recovery(request_id=e.request_id, reason=e.reason, at=t)
            elif name == "RecoveryConfirmed":
                ex.confirm_recovery(request_id=e.request_id, pending_found=e.pending_found, at=t)
            elif name == "RecoveryWithdrawn":
                ex.withdraw_recovery(reason=e.reason, at=t)
            elif name == "RecoveryReordered":
                ex.reorder_recovery(at=t)
            elif name == "Deleted":
                ex.delete(at=t)
            else:
                return f"unknown event {name}"
        except IllegalTransition as err:
            return f"v{e.originator_version} {name}: {err}"
    return None


def check_store(store_url: str) -> Report:
    cfg = parse_database_url(store_url)
    relay = Relay(event_store_env(cfg), clock=SystemClock())
    db = open_database(cfg)
    report = Report()
    try:
        streams: dict[str, tuple[str, str, str]] = {}
        position = 0
        while True:
            batch = relay.recorder.select_notifications(start=position, limit=1000, inclusive_of_start=False)
            if not batch:
                break
            for n in batch:
                position = n.id
                if n.topic.endswith(":Executor.Registered"):
                    e = relay.mapper.to_domain_event(n)
                    streams[str(e.originator_id)] = (e.org, e.app, e.executor_id)
        audit_by_executor: dict[tuple[str, str, str], list[str]] = {}
        for org in {o for o, _, _ in streams.values()}:
            after = None
            while True:
                page = audit.query(db, org=org, after=after, limit=1000)
                if not page:
                    break
                for a in page:
                    # protocol.violation entries name an executor but are not its transitions
                    if a.executor_id is not None and a.app is not None and \
                            a.action.split(".")[0] in ("executor", "recovery"):
                        audit_by_executor.setdefault((a.org, a.app, a.executor_id), []).append(a.action)
                after = page[-1].seq
        for sid, key in streams.items():
            events = list(relay.stream(UUID(sid)))
            report.executors += 1
            report.events += len(events)
            label = "/".join(key)
            problem = _replay(events)
            if problem:
                report.violations.append(f"{label}: illegal stream: {problem}")
            names = [type(e).__name__ for e in events]
            expected = [n for n in names if n in AUDITED]
            got = audit_by_executor.get(key, [])
            if len(got) != len(expected) or any(a not in AUDITED[n] for a, n in zip(got, expected)):
                report.violations.append(f"{label}: audit {got} does not match stream {expected}")
            # deaths and recoveries
            sent_since_death: dict[str, str | None] = {}  # request id -> its application version
            confirmed_since_death: set[str | None] = set()
            for e, n in zip(events, names):
                if n == "DeclaredDead":
                    report.deaths += 1
                    sent_since_death, confirmed_since_death = {}, set()
                elif n == "RecoveryDispatched":
                    sent_since_death[e.request_id] = e.app_version
                elif n == "RecoveryConfirmed":
                    report.recoveries += 1
                    if e.request_id in sent_since_death:
                        version = sent_since_death[e.request_id]
                        if version in confirmed_since_death:
                            report.violations.append(f"{label}: recovered twice for one death: {names}")
                        confirmed_since_death.add(version)
            final = relay.repository.get(UUID(sid))
            if final.status == "DEAD":
                last_death = len(names) - 1 - names[::-1].index("DeclaredDead")
                has_reason = any(n in ("RecoveryDeferred", "RecoveryFailed") for n in names[last_death:])
                if final.recovery_phase == "dispatched" or has_reason:
                    report.pending.append(label)
                else:
                    report.violations.append(f"{label}: DEAD with no recovery under way and no reason ({names})")
            if final.status == "DELETED" and "RecoveryConfirmed" not in names:
                report.violations.append(f"{label}: deleted without a confirmed recovery")
    finally:
        db.close()
        relay.close()
    return report
