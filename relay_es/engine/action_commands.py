"""The action commands: what an operator asked through the API, and how it ended.

Every REST operation that changes something is on record, however it ends:

* one that acts on executors (cancel, resume, fork, delete, the bulk forms, schedules, versions,
  stranded work) calls :meth:`ActionCommands.record_action_requested` before it sends anything
  and :meth:`ActionCommands.record_action_completed` when it ends: until then the action is
  ``pending``, and it stays so if Relay stops while the executor is asked;
* one that changes Relay's own state (applications, tokens, roles, members, rules, policies)
  runs in :meth:`ActionCommands.recording_change`: its action, requested and completed, is
  written in the change's own transaction, or with its failure when nothing was changed, so
  the change and its record exist both or neither;
* a call Relay refuses (credentials, permission) is :meth:`ActionCommands.record_action_refused`.
All are recorded on the action's own stream (:class:`~relay_es.aggregates.action.Action`)
and are the audit log (:mod:`relay_es.projections.actions`).

What the caller sent (target ids, parameter values, the source address, a
user's id) is kept escaped and cut, never refused: the record of a hostile
request must not be lost to the hostility (ADR 16). What Relay itself
supplies (org, application, operation, outcome, executor id) is checked, and
refused when wrong (:class:`~relay_es.domain.errors.InvalidSetting`): that is a
bug in the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from relay_es.aggregates.action import (
    DEVELOPMENT_USER,
    ID_CHARS,
    MESSAGE_CHARS,
    SUMMARY_CHARS,
    Action,
    Outcome,
    action_stream_id,
)
from relay_es.domain.errors import IllegalTransition
from relay_es.domain.text import first_line, sanitized

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Actor:
    """Who asked: ``kind`` is ``"token"`` (``id``: the token's name) or ``"user"``."""

    kind: str
    id: str

    @classmethod
    def token(cls, name: str) -> Actor:
        return cls("token", name)

    @classmethod
    def development(cls) -> Actor:
        """The user every request acts as in development mode (no token)."""
        return cls("user", DEVELOPMENT_USER)

    @classmethod
    def anonymous(cls, why: str = "no valid token") -> Actor:
        """A caller Relay could not identify (no token, or one it refused)."""
        return cls("anonymous", why)

    @classmethod
    def of(cls, token: str | None) -> Actor:
        """From a principal's ``token`` (None: development mode)."""
        return cls.development() if token is None else cls.token(token)


def _summary(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A caller's summary made recordable: string values escaped and cut, other
    values not representable as a scalar recorded as their cut ``repr``. Keys
    and their number are Relay's own choice, checked by the aggregate."""
    if values is None:
        return None
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, bool) or value is None or (isinstance(value, int) and -(2**63) <= value < 2**63):
            out[key] = value
        else:
            out[key] = sanitized(value if isinstance(value, str) else repr(value), SUMMARY_CHARS)
    return out


def _request_fields(org: str, app: str | None, request_id: str, operation: str, actor: Actor, source: str | None,
                    target_type: str, target_ids: Sequence[str],
                    parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``Action.request``'s fields: what the caller sent (the actor's id, the source, the
    target ids, the parameters' summary) escaped and cut; what Relay supplies as given, for the
    aggregate to check."""
    if isinstance(target_ids, (str, bytes)):
        target_ids = [target_ids]  # type: ignore[list-item]  # one id, not its letters
    ids = [sanitized(t if isinstance(t, str) else repr(t), ID_CHARS) or "" for t in target_ids]
    return dict(org=org, app=app, request_id=request_id, operation=operation, actor_kind=actor.kind,
                actor=sanitized(actor.id, ID_CHARS) or "", source=sanitized(source, ID_CHARS),
                target_type=target_type, target_ids=ids, parameters=_summary(parameters))


class ActionCommands:
    """The action commands of :class:`~relay_es.engine.service.Relay` (a mixin: it
    uses ``now()``, ``save()``, ``retrying()``, ``_maybe()`` and ``is_store_error()``)."""

    now: Callable[[], datetime]
    _maybe: Callable[[UUID], Any]
    is_store_error: Callable[[BaseException], bool]
    # How a record the store failed to write is told: ``store_warning(error, what)`` tells it and
    # returns True, or returns False for an error that is not the store being away (a bug: logged here
    # with its traceback). ``relay serve`` hands the REST layer's, throttled with its 503s
    # (:func:`relay_es.adapters.rest.problems.store_warning`); without one, each is a line of its own.
    store_warning: Callable[[BaseException, str], bool] | None = None

    def record_action_requested(
        self,
        org: str,
        app: str | None,
        *,
        request_id: str,
        operation: str,
        actor: Actor,
        source: str | None,
        target_type: str,
        target_ids: Sequence[str] = (),
        parameters: Mapping[str, Any] | None = None,
    ) -> UUID:
        """Records that ``actor`` asked for ``operation`` (Conductor's ``operationId``,
        e.g. ``cancelWorkflow``) on ``target_type`` ``target_ids`` (e.g. ``workflow``,
        ``schedule``, ``version``; all the ids the request named: each is cut to
        :data:`~relay_es.aggregates.action.ID_CHARS` characters, a "…" marking the cut, and
        the first ones are recorded, at most :data:`~relay_es.aggregates.action.MAX_TARGET_IDS`
        and :data:`~relay_es.aggregates.action.TARGET_IDS_BYTES` in all, with their count),
        from ``source`` (the client's address, host only), with a summary of
        the request's ``parameters`` (at most
        :data:`~relay_es.aggregates.action.MAX_SUMMARY_KEYS` scalars; never workflow
        inputs or outputs). Returns the action's id, for :meth:`record_action_completed`.

        ``request_id``: made by Relay for this request (a uuid4), never taken from
        the caller. Recording the same request again returns the same id and
        records nothing (a retry after a lost answer); a different action under a
        request id already used raises :class:`IllegalTransition`."""
        fields = _request_fields(org, app, request_id, operation, actor, source, target_type, target_ids, parameters)
        sid = action_stream_id(org, request_id)

        def run() -> UUID:
            existing = self._maybe(sid)
            action = Action.request(**fields, at=self.now())  # validated even when it is a repeat
            if existing is not None:
                if _same_request(existing, action):
                    return sid
                raise IllegalTransition(f"action {request_id!r}", "requested", "request",
                                        "that request id names another action")
            self.save(action)  # type: ignore[attr-defined]
            return sid

        return self.retrying(run)  # type: ignore[attr-defined,no-any-return]

    def record_action_completed(
        self,
        action_id: UUID,
        *,
        outcome: Outcome | str,
        message: str | None = None,
        executor_id: str | None = None,
        result: Mapping[str, Any] | None = None,
    ) -> bool:
        """Records how the action ended: ``outcome``; ``message`` (an executor's
        ``error_message``, a timeout's or a dropped socket's account: kept escaped and
        cut to :data:`~relay_es.aggregates.action.MESSAGE_CHARS` characters);
        ``executor_id``, the executor that answered (or was asked, for a timeout);
        ``result``, a summary like the parameters' (e.g. a fork's new workflow id,
        a bulk operation's counts).

        Returns True if recorded, False if the action had completed already (the
        first completion stands). Raises :class:`IllegalTransition` for an action
        never requested."""
        message = sanitized(message, MESSAGE_CHARS)
        summary = _summary(result)

        def run() -> bool:
            action = self._maybe(action_id)
            if not isinstance(action, Action):
                raise IllegalTransition(f"action {action_id}", "unknown", "complete", "it was never requested")
            if action.completed:
                return False
            action.complete(outcome=outcome, message=message, executor_id=executor_id, result=summary,
                            at=self.now())
            self.save(action)  # type: ignore[attr-defined]
            return True

        return self.retrying(run)  # type: ignore[attr-defined,no-any-return]

    @contextmanager
    def recording_change(
        self,
        org: str,
        app: str | None,
        *,
        request_id: str,
        operation: str,
        actor: Actor,
        source: str | None,
        target_type: str,
        target_ids: Sequence[str] = (),
        parameters: Mapping[str, Any] | None = None,
        why: Callable[[BaseException], str] = lambda e: f"relay: {type(e).__name__}",
        target_noted: str | None = None,
    ) -> Iterator[UUID]:
        """A change to Relay's own state, on record in its own transaction (blocking: the block
        runs in this thread). The block's commands save as usual; the first save that succeeds
        also records the action, requested and ``succeeded`` with what the commands noted
        (``note``: a rule's id, the tokens revoked), through the store's :meth:`riding`. When no
        save carried it, the action is written after the block, in one transaction: ``failed``
        with ``why(error)`` if the block raised (nothing was changed), else ``succeeded`` (a
        change that found nothing to do). A change never stands without its record, nor a
        record of a change never made: a crash leaves both or neither.

        Fields as :meth:`record_action_requested`'s, checked before the block runs
        (:class:`~relay_es.domain.errors.InvalidSetting`). ``target_noted``: for a change that makes
        its target (a new rule, whose id is Relay's, known once made), the key its command notes the
        target's id under: when noted, that id is the action's one target (kept in the result too);
        a change that failed before naming it has the targets given. Yields the action's id. Writing the
        record after the block may fail (the store away): that is logged, never raised over the
        block's own outcome. A save that carried the record and a block that raised after it: the
        change was made, and its record says so."""
        fields = _request_fields(org, app, request_id, operation, actor, source, target_type, target_ids, parameters)
        Action.request(**fields, at=self.now())  # a field Relay got wrong is refused before anything is done
        sid = action_stream_id(org, request_id)

        def made(_objs: Sequence[Any], noted: dict[str, Any]) -> list[Action]:
            named = _noted_target(fields, noted, target_noted)
            return [self._action_ended(named, Outcome.SUCCEEDED, None, noted)]

        error: BaseException | None = None
        with self.riding(made) as rider:  # type: ignore[attr-defined]
            try:
                yield sid
            except BaseException as e:  # noqa: BLE001  # recorded below, then raised again
                error = e
        if not rider.rode:
            outcome, message = (Outcome.SUCCEEDED, None) if error is None else (Outcome.FAILED, why(error))
            named = _noted_target(fields, rider.noted, target_noted)
            self._write_action_ended(named, outcome, message, rider.noted)
        elif error is not None:
            log.info("%s %s raised after its change was recorded: it stays succeeded", operation, sid)
        if error is not None:
            raise error

    def _action_ended(self, fields: dict[str, Any], outcome: Outcome, message: str | None,
                      result: Mapping[str, Any]) -> Action:
        """A new action, requested and completed (not saved)."""
        action = Action.request(**fields, at=self.now())
        action.complete(outcome=outcome, message=sanitized(message, MESSAGE_CHARS), executor_id=None,
                        result=_summary(result) or None, at=self.now())
        return action

    def _save_action_ended(self, fields: dict[str, Any], outcome: Outcome, message: str | None,
                           result: Mapping[str, Any]) -> UUID:
        """:meth:`_action_ended`, saved in one transaction, unless it was already (a retry after a lost
        answer). Returns the action's id."""
        sid = action_stream_id(fields["org"], fields["request_id"])

        def run() -> UUID:
            if self._maybe(sid) is None:
                self.save(self._action_ended(fields, outcome, message, result))  # type: ignore[attr-defined]
            return sid

        return self.retrying(run)  # type: ignore[attr-defined,no-any-return]

    def _write_action_ended(self, fields: dict[str, Any], outcome: Outcome, message: str | None,
                            result: Mapping[str, Any]) -> None:
        """:meth:`_save_action_ended` that never raises (logged). The store away (its outage refuses every
        write, and this follows each refused one) is told in one line without a traceback
        (:attr:`store_warning`); anything else is a bug, logged with its traceback."""
        try:
            self._save_action_ended(fields, outcome, message, result)
        except Exception as e:  # noqa: BLE001
            what = f"recording how {fields['operation']} ended ({outcome})"
            tell = self.store_warning
            if tell is not None:
                if tell(e, what):
                    return
            elif self.is_store_error(e):
                log.warning("the store failed %s (%s: %s): it is not in the audit log", what, type(e).__name__,
                            first_line(e))
                return
            log.warning("could not record how %s ended (%s): it is not in the audit log", fields["operation"],
                        outcome, exc_info=True)

    def record_action_refused(
        self,
        org: str,
        app: str | None,
        *,
        request_id: str,
        operation: str,
        actor: Actor,
        source: str | None,
        target_type: str,
        target_ids: Sequence[str] = (),
        status: int,
        detail: str,
        suppressed: int = 0,
    ) -> UUID:
        """Records an attempt Relay refused (its credentials or its permission): the
        request and its ``refused`` completion in one transaction: ``status``, the HTTP
        status answered, and ``suppressed``, how many like it were not recorded since the
        last that was, in its result; ``detail``, the refusal's, as its message. Returns the
        action's id."""
        fields = _request_fields(org, app, request_id, operation, actor, source, target_type, target_ids)
        return self._save_action_ended(fields, Outcome.REFUSED, detail, {"status": status, "suppressed": suppressed})


def _noted_target(fields: dict[str, Any], noted: Mapping[str, Any], key: str | None) -> dict[str, Any]:
    """``fields`` whose target is what the block's commands noted under ``key`` (escaped and cut, as
    any target id), when they noted it; else as they were."""
    value = None if key is None else noted.get(key)
    if value is None:
        return fields
    return fields | {"target_ids": [sanitized(value if isinstance(value, str) else repr(value), ID_CHARS) or ""]}


def _same_request(a: Action, b: Action) -> bool:
    keys = ("org", "app", "request_id", "operation", "actor_kind", "actor", "source", "target_type", "target_ids",
            "target_count", "parameters")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


__all__ = ["ActionCommands", "Actor", "Outcome"]  # Outcome: the aggregate's, offered here to the callers
