"""Stranded work: which PENDING workflows wait on an executor that is not alive, why, and what fixes them.

Pure: given the workflows an executor listed (:class:`WorkflowSummary`), Relay's executor rows
(:class:`~relay_es.projections.executors.ExecutorRow`) and the time, :func:`classify` says
which workflows are stranded (their executor is not HEALTHY), the :class:`Reason` of each,
the fixes that apply (:class:`Fix`), and the queues they block. :func:`plan_recovery` decides
an operator's "recover now" for a few executors. No I/O: the REST route
(:mod:`relay_es.adapters.rest.stranded`) asks an executor and reads the rows.

A workflow is stranded when its executor is, by Relay's rows:

* DEAD -- ``recovery_pending`` (declared dead, recovery not yet sent), ``recovery_failed``
  (an attempt failed; the process manager retries after its backoff), ``recovery_dispatched``
  (sent to a target, its answer awaited), ``recovery_deferred`` (no HEALTHY executor of its
  application version: it waits for one), ``dead_unrecovered`` (no recovery obligation left,
  yet the workflow is still PENDING on it);
* DISCONNECTED -- ``stopped_politely`` (it closed its socket cleanly, as a process stopped by a
  deploy does: its disconnect reason is one of :data:`POLITE_CLOSES`; within its grace),
  ``disconnected`` (its socket dropped, it went silent, Relay restarted...; within its grace),
  ``declaration_overdue`` (its deadline has passed and it is not declared dead yet: Relay's
  settle window after a restart, or a process manager behind);
* HEALTHY, for a workflow of another application version than the executor's (an earlier
  incarnation's: the process running now recovers only its own version's workflows) -- the
  reason of the recovery that covers it, as for a DEAD executor (``recovery_pending``,
  ``recovery_failed``, ``recovery_dispatched``, ``recovery_deferred``), else ``dead_unrecovered``;
* ``executor_deleted`` -- Relay confirmed its recovery and deleted it, yet the workflow is PENDING on it;
* ``executor_unknown`` -- Relay has no record of the executor (it never connected to Relay,
  e.g. a process started without Conductor, whose executor id is ``local``).

Fixes (:func:`fixes_for`), in this order:

* ``recover`` -- Relay has an executor of the same version recover the executor's PENDING
  workflows now: for an executor DEAD with recovery pending, failed or deferred, or DISCONNECTED
  (then only when forced: it may still be running), when an executor of its version is HEALTHY,
  and only for a workflow of that version (the SDKs recover only their own version's workflows:
  one of another version would stay PENDING);
* ``resume`` -- the workflow is enqueued again. The SDKs keep its application version (dbos
  3.2.0 and dbos-sdk 5.2.11 alike: an executor dequeues only its own version's workflows), so
  it applies only when an executor of the workflow's version is HEALTHY;
* ``fork`` -- the workflow is cancelled, then forked from its last recorded step on the latest
  version (a new workflow id; the steps before it are copied): the fix when no executor of its
  version is left;
* ``cancel`` -- always.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from relay_es.aggregates.executor import ExecutorStatus as S, recovered_by_peer
from relay_es.aggregates.executor import RecoveryPhase as P
from relay_es.projections.executors import ExecutorRow


class Reason(StrEnum):
    RECOVERY_PENDING = "recovery_pending"
    RECOVERY_FAILED = "recovery_failed"
    RECOVERY_DISPATCHED = "recovery_dispatched"
    RECOVERY_DEFERRED = "recovery_deferred"
    DEAD_UNRECOVERED = "dead_unrecovered"
    STOPPED_POLITELY = "stopped_politely"
    DISCONNECTED = "disconnected"
    DECLARATION_OVERDUE = "declaration_overdue"
    EXECUTOR_DELETED = "executor_deleted"
    EXECUTOR_UNKNOWN = "executor_unknown"


class Fix(StrEnum):
    RECOVER = "recover"
    RESUME = "resume"
    FORK = "fork"
    CANCEL = "cancel"


POLITE_CLOSES = frozenset({"clean_close"})
"""Disconnect reasons of an executor that closed its socket itself, cleanly: the hub records
``clean_close`` for a close frame of code 1000 or 1001 (Python's ``DBOS.destroy()``) or of no code
(1005: TypeScript's ``DBOS.shutdown()``); a dropped socket is ``socket_closed``."""

DEAD_RECOVERABLE = (P.PENDING.value, P.DEFERRED.value)
"""Recovery phases of a DEAD executor that "recover now" may act on (not one in flight)."""


@dataclass(frozen=True)
class WorkflowSummary:
    """What the listing needs of one workflow an executor listed."""

    workflow_id: str
    status: str
    executor_id: str | None
    name: str | None = None
    queue_name: str | None = None
    app_version: str | None = None
    created_at: str | None = None  # RFC 3339, as the REST mapping made it


@dataclass(frozen=True)
class Stranded:
    workflow: WorkflowSummary
    executor: ExecutorRow | None
    reason: Reason
    fixes: tuple[Fix, ...]


@dataclass(frozen=True)
class BlockedQueue:
    name: str
    stranded: int
    """Stranded PENDING workflows of this queue among those examined (each holds a slot of the queue)."""


@dataclass(frozen=True)
class StrandedExecutor:
    """A not-alive executor Relay knows, or one it does not (``row`` None)."""

    executor_id: str
    row: ExecutorRow | None
    reason: Reason
    fixes: tuple[Fix, ...]
    stranded: int = 0
    """Its stranded workflows among those examined."""


@dataclass(frozen=True)
class Classified:
    workflows: list[Stranded]
    queues: list[BlockedQueue]
    executors: list[StrandedExecutor]


UNFINISHED = (P.PENDING.value, P.DEFERRED.value, P.DISPATCHED.value)


def _owed_elsewhere(row: ExecutorRow) -> bool:
    """An executor back (HEALTHY, or DISCONNECTED since) with a recovery under way for another version
    than its own (an earlier incarnation's, done by a peer): the process manager's rule,
    :func:`~relay_es.aggregates.executor.recovered_by_peer`."""
    return row.status != S.DEAD and recovered_by_peer(row.status, row.recovery_phase, row.recovery_version,
                                                      row.app_version)


def recovery_version(row: ExecutorRow) -> str | None:
    """The application version an executor's workflows are recovered by."""
    # HEALTHY, not DISCONNECTED: recovering a DISCONNECTED executor (recover now) recovers its own
    # version's workflows; an earlier process's are the recovery under way's (reason_of)
    if row.recovery_version is not None and (row.status == S.DEAD or (row.status == S.HEALTHY
                                                                       and _owed_elsewhere(row))):
        return row.recovery_version
    return row.app_version


def _obligation_reason(row: ExecutorRow) -> Reason:
    phase = row.recovery_phase
    if phase == P.PENDING:
        return Reason.RECOVERY_FAILED if row.recovery_attempt > 0 else Reason.RECOVERY_PENDING
    if phase == P.DISPATCHED:
        return Reason.RECOVERY_DISPATCHED
    if phase == P.DEFERRED:
        return Reason.RECOVERY_DEFERRED
    return Reason.DEAD_UNRECOVERED


def reason_of(row: ExecutorRow | None, now: datetime, workflow_version: str | None = None) -> Reason | None:
    """Why a workflow of this executor (of ``workflow_version``, if known) is stranded; None when the
    executor is alive (HEALTHY) and the workflow is of its version (or of one not known)."""
    if row is None or row.status is None:
        return Reason.EXECUTOR_UNKNOWN
    other_version = workflow_version is not None and row.app_version is not None and \
        workflow_version != row.app_version
    if row.status in (S.HEALTHY, S.DISCONNECTED) and other_version:
        # An earlier incarnation's, of another version: the process (running, or coming back) does not
        # recover it.
        if row.recovery_phase in UNFINISHED and workflow_version in (row.recovery_version,
                                                                     row.recovery_redo_version):
            return _obligation_reason(row)
        return Reason.DEAD_UNRECOVERED
    if row.status == S.HEALTHY:
        return None
    if row.status == S.DELETED:
        return Reason.EXECUTOR_DELETED
    if row.status == S.DISCONNECTED:
        if row.deadline is not None and row.deadline <= now:
            return Reason.DECLARATION_OVERDUE
        if row.disconnect_reason in POLITE_CLOSES:
            return Reason.STOPPED_POLITELY
        return Reason.DISCONNECTED
    return _obligation_reason(row)  # DEAD


def recoverable(row: ExecutorRow | None) -> bool:
    """Whether "recover now" may act on this executor at all (a version to recover it with aside)."""
    if row is None:
        return False
    if row.status == S.DEAD:
        return row.recovery_phase in DEAD_RECOVERABLE
    return row.status == S.DISCONNECTED


def fixes_for(row: ExecutorRow | None, healthy_versions: Iterable[str | None],
              workflow_version: str | None = None) -> tuple[Fix, ...]:
    """The fixes of a stranded workflow of this executor (``workflow_version``: the workflow's
    application version, else the executor's counts), in the module's order."""
    versions = set(healthy_versions)
    own = recovery_version(row) if row is not None else None
    fixes = []
    version = workflow_version if workflow_version is not None else own
    if row is not None and recoverable(row) and own is not None and own in versions and version == own:
        fixes.append(Fix.RECOVER)  # an executor recovers only the workflows of its own version
    if version is not None and version in versions:
        fixes.append(Fix.RESUME)
    return (*fixes, Fix.FORK, Fix.CANCEL)


def healthy_versions(rows: Iterable[ExecutorRow]) -> set[str | None]:
    """The application versions with a HEALTHY executor."""
    return {r.app_version for r in rows if r.status == S.HEALTHY}


def classify(workflows: Iterable[WorkflowSummary], rows: Iterable[ExecutorRow], now: datetime) -> Classified:
    """The stranded workflows among ``workflows`` (those not PENDING are ignored), in the order
    given; the queues they block, most blocked first (then by name); and the executors they wait
    on, with every other not-alive executor Relay knows (DISCONNECTED, or DEAD with a recovery
    obligation, or HEALTHY with one for another version than its own), in executor id order."""
    rows = list(rows)
    by_id: dict[str, ExecutorRow] = {r.executor_id: r for r in rows}
    versions = healthy_versions(rows)
    out: list[Stranded] = []
    queued: dict[str, int] = {}
    per_executor: dict[str, int] = {}
    for w in workflows:
        if w.status != "PENDING":
            continue
        row = by_id.get(w.executor_id) if w.executor_id is not None else None
        reason = reason_of(row, now, w.app_version)
        if reason is None:
            continue
        out.append(Stranded(workflow=w, executor=row, reason=reason, fixes=fixes_for(row, versions, w.app_version)))
        if w.queue_name:
            queued[w.queue_name] = queued.get(w.queue_name, 0) + 1
        key = w.executor_id or ""
        per_executor[key] = per_executor.get(key, 0) + 1
    queues = [BlockedQueue(name=q, stranded=n) for q, n in sorted(queued.items(), key=lambda kv: (-kv[1], kv[0]))]
    executors = _executors(rows, per_executor, versions, now)
    return Classified(workflows=out, queues=queues, executors=executors)


def _executors(rows: Sequence[ExecutorRow], per_executor: Mapping[str, int], versions: set[str | None],
               now: datetime) -> list[StrandedExecutor]:
    by_id = {r.executor_id: r for r in rows}
    ids = set(per_executor)
    for r in rows:
        if r.status == S.DISCONNECTED or (r.status == S.DEAD and r.recovery_phase in UNFINISHED) or \
                _owed_elsewhere(r):
            ids.add(r.executor_id)
    out = []
    for x in sorted(ids):
        row = by_id.get(x)
        reason = reason_of(row, now)
        if reason is None and row is not None and _owed_elsewhere(row):
            reason = _obligation_reason(row)  # an earlier incarnation's recovery, of another version
        elif reason is None and per_executor.get(x):
            reason = Reason.DEAD_UNRECOVERED  # HEALTHY, with workflows of another version left
        if reason is None:  # HEALTHY again: nothing waits on it
            continue
        out.append(StrandedExecutor(executor_id=x, row=row, reason=reason, fixes=fixes_for(row, versions),
                                    stranded=per_executor.get(x, 0)))
    return out


# ------------------------------------------------------------------ recover now


@dataclass(frozen=True)
class RecoveryPlan:
    """An operator's "recover now": per application version, the executors to recover with one
    of its HEALTHY executors; or why not. Nothing is sent when ``refused`` is not empty."""

    groups: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    """executor id -> why it cannot be recovered now."""
    fork_instead: bool = False
    """Some executor has no HEALTHY executor of its version: forking its workflows on the latest
    version is the fix, not recovery (nor resume, which keeps their version)."""


def plan_recovery(executor_ids: Sequence[str], rows: Iterable[ExecutorRow], *, force: bool = False) -> RecoveryPlan:
    """Whether each executor can be recovered now, and with which version. Refused: one Relay
    does not know or deleted, a HEALTHY one, a recovery in flight, a DISCONNECTED one unless
    ``force`` (it may still be running: its workflows would run twice), and one with no HEALTHY
    executor of its version."""
    rows = list(rows)
    by_id = {r.executor_id: r for r in rows}
    versions = healthy_versions(rows)
    groups: dict[str, list[str]] = {}
    refused: dict[str, str] = {}
    fork_instead = False
    for x in dict.fromkeys(executor_ids):
        row = by_id.get(x)
        if row is None or row.status in (None, S.DELETED):
            refused[x] = "Relay has no live record of this executor; fork, resume or cancel its workflows"
            continue
        if row.status == S.HEALTHY and _owed_elsewhere(row):
            refused[x] = (f"the executor is HEALTHY on version {row.app_version}; its earlier process's "
                          f"version {row.recovery_version} workflows are Relay's to recover "
                          f"({row.recovery_phase}); fork, resume or cancel them meanwhile")
            continue
        if row.status == S.HEALTHY:
            refused[x] = "the executor is HEALTHY: its workflows of its own version are not stranded"
            continue
        if row.status == S.DEAD and row.recovery_phase == P.DISPATCHED:
            refused[x] = (f"a recovery is in flight (sent to {row.recovery_target}, attempt "
                          f"{row.recovery_attempt}); wait for its answer")
            continue
        if not recoverable(row):
            refused[x] = "Relay has no recovery to do for this executor; fork, resume or cancel its workflows"
            continue
        if row.status == S.DISCONNECTED and not force:
            deadline = row.deadline.isoformat() if row.deadline is not None else "its deadline"
            refused[x] = (f"the executor is DISCONNECTED (until {deadline}) and may still be running; "
                          "send force=true if you know it stopped")
            continue
        version = recovery_version(row)
        if version not in versions or version is None:
            refused[x] = (f"no HEALTHY executor of application version {version!r}; fork its workflows "
                          "(cancelled, then forked from their last step on the latest version) or cancel them")
            fork_instead = True
            continue
        groups.setdefault(version, []).append(x)
    return RecoveryPlan(groups=groups, refused=refused, fork_instead=fork_instead)
