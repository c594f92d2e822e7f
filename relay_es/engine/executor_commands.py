"""The executor commands, each written once: an op factory (``op_*``) for batches,
and the method that runs it alone derived from it by :func:`~relay_es.engine.commands.single`.

Conditional commands (timers, the process manager) return False, rather than
raise, when the state has moved on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable
from uuid import UUID

from relay_es.aggregates.application import check_app_name, check_org_name
from relay_es.aggregates.executor import Executor, executor_stream_id
from relay_es.domain.errors import UnknownExecutor
from relay_es.domain.text import check_id, check_text, sanitized
from relay_es.engine.commands import Batch, Op, Recorded, execute, single


@dataclass(frozen=True)
class ExecutorInfo:
    """What an executor reports in its ``executor_info`` reply."""

    executor_id: str
    application_version: str
    hostname: str | None = None
    language: str | None = None
    dbos_version: str | None = None
    executor_metadata: Any = None


def _on_executor(stream_id: UUID, command: Callable[[Executor], Any]) -> Op:
    """An op that runs ``command`` on an existing executor (none: nothing to do)."""

    def run(ex: Executor | None, batch: Batch) -> Executor | None:
        if ex is None:
            return None
        command(ex)
        return ex

    return Op(stream_id, run)


class ExecutorCommands:
    """The executor commands of :class:`~relay_es.engine.service.Relay` (a mixin: it uses
    ``now()``, ``grace_for()``, ``load_many()``, ``save()``, ``retrying()`` and ``_maybe()``)."""

    now: Callable[[], datetime]
    grace_for: Callable[[str, str], timedelta]
    _maybe: Callable[[UUID], Any]

    def execute(self, ops: list[Op], recorded: Recorded | None = None) -> list[bool]:
        """Runs many commands and saves all their events in **one** transaction.

        Returns, per op, whether it recorded anything. If the save conflicts
        (another writer touched one of the aggregates), every op is run again
        on its own, each with its own retries. ``recorded``: what was saved is
        appended to it (:func:`~relay_es.engine.commands.execute`).
        """
        return execute(self, ops, recorded)  # type: ignore[arg-type]

    def op_connected(
        self, org: str, app: str, info: ExecutorInfo, *, connection_id: str, owner: str, at: datetime | None = None,
        token: str | None = None, peer: str | None = None,
    ) -> Op:
        """``at``: when the connection was seen (the hub may record it a little later); the Connected is
        stamped at it, or at the stream's last event's timestamp if that is later (:meth:`Executor.stamp`).
        ``token``: the name of the token the connection was admitted with (None in
        development mode); ``peer``: the address it came from, host only. Both are
        recorded in the Connected event and its audit entry: who registered (or
        superseded) the executor.

        Raises :class:`InvalidSetting` for what the stores cannot hold (the last
        line behind the protocol layer's own limits; see :mod:`relay_es.domain.text`)."""
        check_org_name(org)
        check_app_name(app)
        check_id("executorId", info.executor_id)
        check_id("applicationVersion", info.application_version, empty=True)
        check_text("hostname", info.hostname)
        check_text("language", info.language)
        check_text("dbosVersion", info.dbos_version)
        check_id("connectionId", connection_id)
        check_id("owner", owner)
        check_id("token", token, optional=True)
        check_id("peer", peer, optional=True)

        def run(ex: Executor | None, batch: Batch) -> Executor:
            now = at or self.now()
            if ex is None:
                ex = Executor(org=org, app=app, executor_id=info.executor_id, timestamp=now)
            ex.connect(
                connection_id=connection_id,
                owner=owner,
                app_version=info.application_version,
                hostname=info.hostname,
                language=info.language,
                dbos_version=info.dbos_version,
                executor_metadata=info.executor_metadata,
                at=now,
                token=token,
                peer=peer,
            )
            return ex

        return Op(executor_stream_id(org, app, info.executor_id), run)

    def op_disconnected(
        self,
        stream_id: UUID,
        *,
        connection_id: str,
        reason: str,
        grace_from: datetime | None = None,
        at: datetime | None = None,
    ) -> Op:
        """``at``: when the disconnect was seen (default: now). The Disconnected is stamped at it, or at
        the stream's last event's timestamp if that is later (:meth:`Executor.stamp`); the deadline is
        ``grace_from + grace`` (``grace_from`` defaults to that stamp), never earlier than the stamp.
        A stale connection id is a no-op."""

        def run(ex: Executor | None, batch: Batch) -> Executor | None:
            if ex is None:
                return None
            now = ex.stamp(at or self.now())
            deadline = max((grace_from or now) + batch.grace_for(ex.org, ex.app), now)
            ex.disconnect(connection_id=connection_id, reason=reason, deadline=deadline, at=now)
            return ex

        return Op(stream_id, run)

    def op_declare_dead(self, stream_id: UUID, expected_deadline: datetime | None = None) -> Op:
        return _on_executor(stream_id, lambda ex: ex.declare_dead(now=self.now(), expected_deadline=expected_deadline))

    def op_dispatch(self, stream_id: UUID, *, request_id: str, target_executor_id: str,
                    at: datetime | None = None) -> Op:
        """``at``: when it was dispatched (default: now; the process manager's reading of the wall clock
        before it armed the response timer, so the timeout recorded is never shorter than the timer's)."""
        check_id("requestId", request_id)
        check_id("targetExecutorId", target_executor_id)
        return _on_executor(stream_id, lambda ex: ex.dispatch_recovery(
            request_id=request_id, target_executor_id=target_executor_id, at=at or self.now()))

    def op_fail(self, stream_id: UUID, *, request_id: str, reason: str) -> Op:
        reason = sanitized(reason)  # a target's own error text
        return _on_executor(stream_id, lambda ex: ex.fail_recovery(request_id=request_id, reason=reason,
                                                                   at=self.now()))

    def op_confirm(self, stream_id: UUID, *, request_id: str, pending_found: bool | None) -> Op:
        """Confirms the outstanding request; a DEAD executor is deleted in the same save."""

        def command(ex: Executor) -> None:
            ex.confirm_recovery(request_id=request_id, pending_found=pending_found, at=self.now())
            if ex.status == "DEAD" and ex.recovery_phase == "confirmed":
                ex.delete(at=self.now())

        return _on_executor(stream_id, command)

    def op_defer(self, stream_id: UUID, *, reason: str) -> Op:
        reason = sanitized(reason)
        return _on_executor(stream_id, lambda ex: ex.defer_recovery(reason=reason, at=self.now()))

    def op_reorder(self, stream_id: UUID) -> Op:
        return _on_executor(stream_id, lambda ex: ex.reorder_recovery(at=self.now()))

    def op_withdraw(self, stream_id: UUID, *, reason: str) -> Op:
        return _on_executor(stream_id, lambda ex: ex.withdraw_recovery(reason=reason, at=self.now()))

    # Each alone: same parameters as its op factory.
    executor_connected = single(op_connected)
    executor_disconnected = single(op_disconnected)
    declare_dead_if_due = single(op_declare_dead)
    dispatch_recovery = single(op_dispatch)
    fail_recovery = single(op_fail)
    confirm_recovery = single(op_confirm)
    defer_recovery = single(op_defer)
    withdraw_recovery = single(op_withdraw)
    reorder_recovery = single(op_reorder)

    def get_executor(self, org: str, app: str, executor_id: str) -> Executor:
        ex = self._maybe(executor_stream_id(org, app, executor_id))
        if ex is None:
            raise UnknownExecutor(org, app, executor_id)
        return ex
