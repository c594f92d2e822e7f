"""The Action aggregate: one operator action through the API, who asked and how it ended.

One stream per action, keyed by ``(org, request id)``: the request id is Relay's own,
made once per API request (a uuid4), never a value the caller sends, so no caller can
make two actions share a record. ``Requested`` says who asked (a token, or a user: the
development-mode user today, an OIDC user later), from where, for what (the
operation's Conductor ``operationId``, e.g. ``cancelWorkflow``), on what (a target:
its type and ids) and with which parameters; ``Completed`` says how it ended
(:class:`Outcome`) and which executor answered. These events feed the audit log.

Rules, each enforced here:

* completed at most once (a second completion is an :class:`IllegalTransition`);
* every string bounded (:mod:`relay_es.domain.text`): names by their patterns,
  identifiers at most :data:`~relay_es.domain.text.MAX_ID_BYTES`, the message at most
  :data:`MESSAGE_CHARS` characters with control characters escaped; no NUL anywhere;
* the first target ids are recorded, in the order given: at most :data:`MAX_TARGET_IDS`,
  and only as many as fit in :data:`TARGET_IDS_BYTES` of UTF-8 in all (the first always
  does: an id is at most :data:`~relay_es.domain.text.MAX_ID_BYTES`); ``target_count``
  is how many the request named, so fewer recorded than counted says the list was cut.
  Events recorded before this budget replay as they were (:func:`recorded_target_ids`
  cuts them again where they are read: the audit log);
* parameters and result are summaries: at most :data:`MAX_SUMMARY_KEYS` keys, each
  value a bounded string, a 64-bit integer, a boolean or None. Workflow inputs and
  outputs are never recorded (the callers' contract; the bounds keep any slip small).

The service (:mod:`relay_es.engine.action_commands`) escapes and cuts what the caller
sent before it gets here, so a hostile request is recorded, never refused.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from eventsourcing.domain import Aggregate, event

from relay_es.aggregates.application import check_app_name, check_org_name
from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.domain.text import check_id, check_text, escape_controls

NAMESPACE = uuid.UUID("7c1f4e2a-93b6-4d58-a0e7-2b6c9d4f1e83")

MAX_TARGET_IDS = 100  # target ids recorded per action; the count says how many were named
# UTF-8 bytes of an action's recorded target ids in all: 100 UUIDs fit (3,600), 100 ids of 255 emoji
# (102,000, which made each audit entry 100 KB) do not. At most about twice that as JSON (quotes, a
# backslash escaped), never 12 bytes a character (the read model keeps non-ASCII as it is).
TARGET_IDS_BYTES = 4096
MAX_SUMMARY_KEYS = 20  # keys of a parameters or result summary
SUMMARY_CHARS = 200  # characters of a summary's string value, as recorded
MESSAGE_CHARS = 2000  # characters of a completion's message, as recorded
ID_CHARS = 255  # characters of a caller's identifier, as recorded (<= MAX_ID_BYTES in UTF-8)

# Whole strings (fullmatch): "cancelWorkflow", "workflow", "startStep".
OPERATION = re.compile(r"[a-z][A-Za-z0-9]{0,99}")
TARGET_TYPE = re.compile(r"[a-z][a-z0-9_]{0,63}")
SUMMARY_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

# An API token (by name); a user (the development-mode user, OIDC users); a caller whose
# credentials were missing or refused (only in a refused action; its id says which).
ACTOR_KINDS = ("token", "user", "anonymous")
DEVELOPMENT_USER = "development"  # the user a request acts as in development mode (no token)

Scalar = str | int | bool | None


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the executor answered with an error, or the call failed (its reply refused)
    TIMED_OUT = "timed_out"  # the executor did not answer within the call's timeout
    NO_HEALTHY_EXECUTOR = "no_healthy_executor"  # no executor of the application could take it
    REFUSED = "refused"  # Relay refused the caller (credentials, permission): nothing was done
    UNKNOWN = "unknown"  # the executor's socket closed before its answer came: it may have carried it out


def action_stream_id(org: str, request_id: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"action/{org}/{request_id}")


def recorded_target_ids(ids: Iterable[str]) -> list[str]:
    """Of the target ids named, those an action records: the first ones, in order, at most
    :data:`MAX_TARGET_IDS`, as many as fit in :data:`TARGET_IDS_BYTES` of UTF-8 (the first one
    always, whatever its size). Reads only as many as it keeps, and one more."""
    out: list[str] = []
    size = 0
    for t in ids:
        size += len(t.encode("utf-8", "surrogatepass"))
        if len(out) == MAX_TARGET_IDS or (out and size > TARGET_IDS_BYTES):
            break
        out.append(t)
    return out


def check_summary(field: str, summary: Mapping[str, Any] | None) -> dict[str, Scalar]:
    """A parameters or result summary as recorded: a flat, bounded mapping of scalars."""
    if summary is None:
        return {}
    if not isinstance(summary, Mapping):
        raise InvalidSetting(field, f"must be a mapping, got {type(summary).__name__}")
    if len(summary) > MAX_SUMMARY_KEYS:
        raise InvalidSetting(field, f"must have at most {MAX_SUMMARY_KEYS} keys, got {len(summary)}")
    out: dict[str, Scalar] = {}
    for key, value in summary.items():
        if not isinstance(key, str) or not SUMMARY_KEY.fullmatch(key):
            raise InvalidSetting(field, f"key {key!r} is not a name ({SUMMARY_KEY.pattern})")
        if isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise InvalidSetting(f"{field}.{key}", "must fit in 64 bits")
        elif isinstance(value, str):
            check_text(f"{field}.{key}", value)
            if len(value) > SUMMARY_CHARS + 1:  # sanitized() may add one "…"
                raise InvalidSetting(f"{field}.{key}", f"must be at most {SUMMARY_CHARS} characters")
        else:
            raise InvalidSetting(f"{field}.{key}", f"must be a string, an integer, a boolean or null, "
                                                   f"got {type(value).__name__}")
        out[key] = value
    return out


def _check_name(field: str, value: object, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidSetting(field, f"must match {pattern.pattern}, got {value!r:.80}")
    return value


class Action(Aggregate):
    """One action: requested, then completed at most once."""

    @staticmethod
    def create_id(org: str, request_id: str) -> uuid.UUID:
        return action_stream_id(org, request_id)

    @classmethod
    def request(
        cls,
        *,
        org: str,
        app: str | None,
        request_id: str,
        operation: str,
        actor_kind: str,
        actor: str,
        source: str | None,
        target_type: str,
        target_ids: Sequence[str],
        parameters: Mapping[str, Any] | None = None,
        at: datetime,
    ) -> Action:
        """Validates and records ``Requested``. ``target_ids``: every id the request
        named; the first ones are recorded (:func:`recorded_target_ids`), with their count."""
        check_org_name(org)
        if app is not None:
            check_app_name(app)
        check_id("requestId", request_id)
        _check_name("operation", operation, OPERATION)
        if actor_kind not in ACTOR_KINDS:
            raise InvalidSetting("actorKind", f"must be one of {', '.join(ACTOR_KINDS)}, got {actor_kind!r:.80}")
        check_id("actor", actor)
        check_id("source", source, optional=True)
        _check_name("targetType", target_type, TARGET_TYPE)
        if isinstance(target_ids, (str, bytes)) or not isinstance(target_ids, Sequence):
            raise InvalidSetting("targetIds", f"must be a list of ids, got {type(target_ids).__name__}")
        recorded = recorded_target_ids(check_id("targetIds", t, empty=True) or "" for t in target_ids)
        return cls(org=org, app=app, request_id=request_id, operation=operation, actor_kind=actor_kind,
                   actor=actor, source=source, target_type=target_type, target_ids=recorded,
                   target_count=len(target_ids), parameters=check_summary("parameters", parameters),
                   timestamp=at)

    @event("Requested")
    def __init__(
        self,
        org: str,
        app: str | None,
        request_id: str,
        operation: str,
        actor_kind: str,
        actor: str,
        source: str | None,
        target_type: str,
        target_ids: list[str],
        target_count: int,
        parameters: dict[str, Any],
        timestamp: datetime,
    ) -> None:
        self.org = org
        self.app = app
        self.request_id = request_id
        self.operation = operation
        self.actor_kind = actor_kind
        self.actor = actor
        self.source = source
        self.target_type = target_type
        self.target_ids = target_ids
        self.target_count = target_count
        self.parameters = parameters
        self.outcome: str | None = None
        self.executor_id: str | None = None

    @property
    def completed(self) -> bool:
        return self.outcome is not None

    def complete(
        self,
        *,
        outcome: Outcome | str,
        message: str | None = None,
        executor_id: str | None = None,
        result: Mapping[str, Any] | None = None,
        at: datetime,
    ) -> None:
        """Records ``Completed``: once. ``message``: already escaped and cut (at most
        :data:`MESSAGE_CHARS` characters, plus the "…" that marks a cut)."""
        if self.outcome is not None:
            raise IllegalTransition(f"action {self.operation} {self.request_id!r}", f"completed ({self.outcome})",
                                    "complete", "an action completes once")
        try:
            outcome = Outcome(outcome)
        except ValueError:
            raise InvalidSetting("outcome", f"must be one of {', '.join(Outcome)}, got {outcome!r:.80}") from None
        check_text("message", message)
        if message is not None and (len(message) > MESSAGE_CHARS + 1 or escape_controls(message) != message):
            raise InvalidSetting("message", f"must be escaped and at most {MESSAGE_CHARS} characters")
        check_id("executorId", executor_id, optional=True)
        self._completed(outcome=outcome.value, message=message, executor_id=executor_id,
                        result=check_summary("result", result), timestamp=at)

    @event("Completed")
    def _completed(self, outcome: str, message: str | None, executor_id: str | None, result: dict[str, Any],
                   timestamp: datetime) -> None:
        self.outcome = outcome
        self.executor_id = executor_id

