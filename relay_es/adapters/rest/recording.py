"""Who did what through the API, on record: the audit log's inputs from the REST layer.

Three kinds of call are recorded as operator actions
(:class:`~relay_es.engine.action_commands.ActionCommands`, read back by ``GET .../audit-logs``):

* a change carried to an executor (workflows, schedules, versions, stranded work):
  :func:`relay_es.adapters.rest.calling.act`;
* a change to Relay's own state (applications, tokens, roles, members, rules, policies):
  :func:`recorded`, around the change -- the action written in the change's own transaction,
  or ``failed`` with the refusal's detail when it raises (an unknown application, a bad
  setting) and nothing was changed;
* a call Relay refused (401: no or an unknown token; 403: a token without the permission,
  or, in development mode, a request from another machine): :class:`Refusals`, from the
  guard. The caller chooses how many refusals there are, so at most one a minute per client
  address, status, operation and org is recorded (each says how many were held back since the
  last, within the throttle's memory: a burst followed by a quiet minute is recorded once), and at
  most :data:`MAX_REFUSALS_PER_WINDOW` a minute of callers with a known token per org, and as many
  of anonymous callers (no token, or one Relay does not know) in all, each their own budget: a client
  rotating addresses cannot make Relay write without end, and neither anonymous callers nor another
  org's tokens can use up the record of an org's known tokens' refusals; the rest are counted on ``/metrics`` only
  (``relay_auth_refused``). A refusal with no org to file it under is not recorded (in auth mode,
  an anonymous caller's refusal is filed only under an org that exists: the guard's
  ``on_record``). A recorded refusal is written before the refusal is answered, so at most that
  many a minute wait on the store.

Who is the request's principal (a token's name, or the development user); from where is
the client's address (host only; behind a trusted proxy, the one it forwarded).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException

from relay_es.adapters.hub.throttle import Throttle
from relay_es.adapters.rest.context import RestContext
from relay_es.domain.errors import RelayError
from relay_es.domain.ids import new_id
from relay_es.engine.action_commands import Actor

log = logging.getLogger(__name__)

REFUSAL_WINDOW = 60.0  # seconds: one refusal per client address, status, operation and org is recorded per window
MAX_REFUSALS_PER_WINDOW = 60  # refusals recorded per window: of an org's known tokens, of anonymous callers


def actor_of(request: Request[Any, Any, Any]) -> Actor:
    """Who a request acts as: its token's name, or the development user."""
    who = getattr(request.state, "principal", None)
    if who is not None and getattr(who, "user", None) is not None:
        return Actor("user", who.user)  # signed in with OIDC
    return Actor.of(who.token if who is not None else None)


def source_of(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The client's address (host only; behind a trusted proxy, the one it forwarded)."""
    return connection.client.host if connection.client is not None else None


def _why(e: BaseException) -> str:
    """What a failed change's record says: a refusal's own detail, else only the kind of error
    (a bug's text may hold anything)."""
    if isinstance(e, HTTPException):
        return str(e.detail)
    if isinstance(e, RelayError):
        return str(e)  # the domain's errors (InvalidSetting, UnknownApplication...) say what was wrong
    return f"relay: {type(e).__name__}"


@contextmanager
def recorded(ctx: RestContext, request: Request[Any, Any, Any], org: str, app: str | None, *, operation: str,
             target_type: str, target_ids: Sequence[str] = (),
             parameters: Mapping[str, Any] | None = None, target_noted: str | None = None) -> Iterator[uuid.UUID]:
    """Records a change to Relay's own state in the change's own transaction (blocking: call it off
    the event loop; :meth:`~relay_es.engine.action_commands.ActionCommands.recording_change`).
    What the change did (a rule's id, the tokens revoked) is what its command noted; a failure
    is recorded with the refusal's detail. ``target_noted``: the noted key that names the target
    of a change that makes it (``ruleId``: a new rule is found by its id, as its deletion is).
    Yields the action's id."""
    with ctx.relay.recording_change(
            org, app, request_id=new_id(), operation=operation, actor=actor_of(request), source=source_of(request),
            target_type=target_type, target_ids=target_ids, parameters=parameters, why=_why,
            target_noted=target_noted) as action_id:
        yield action_id


class Refusals:
    """The guard's refusals, on record (throttled; see the module's docstring)."""

    def __init__(self, ctx: RestContext, *, clock: Callable[[], float] = time.monotonic,
                 per_window: int = MAX_REFUSALS_PER_WINDOW) -> None:
        self.ctx = ctx
        self.throttle = Throttle(REFUSAL_WINDOW, max_keys=10_000, clock=clock)
        self.clock = clock
        self.per_window = per_window
        self._window_start = clock()
        self._recorded: dict[str | None, int] = {}  # the org of known tokens (None: anonymous) -> recorded this window

    def should_record(self, source: str | None, status: int, operation: str, org: str, *,
                      anonymous: bool = False) -> int | None:
        """How many refusals of this client, status, operation and org were held back since the
        last one recorded, when this one is to be recorded; None when it is held back -- also
        when :data:`MAX_REFUSALS_PER_WINDOW` of its budget (``anonymous`` callers', or known
        tokens' of ``org``) were recorded in this window already, whatever their keys (clients rotating
        addresses fill the keyed table, not the store)."""
        now = self.clock()
        if now - self._window_start >= REFUSAL_WINDOW:
            self._window_start, self._recorded = now, {}
        budget = None if anonymous else org  # known tokens' orgs are Relay's own, not the caller's choice
        if self._recorded.get(budget, 0) >= self.per_window:
            return None
        hit = self.throttle.hit((source, status, operation, org))
        if not hit.passed:
            return None
        self._recorded[budget] = self._recorded.get(budget, 0) + 1
        return hit.suppressed

    def record(self, *, org: str, app: str | None, operation: str, actor: Actor, source: str | None,
               status: int, detail: str, target: tuple[str, str] | None, suppressed: int) -> None:
        """Blocking. Never raises: a refusal stands whether or not its record could be written."""
        target_type, target_ids = ("application", [app]) if app is not None else ("organization", [org])
        if target is not None:
            target_type, target_ids = target[0], [target[1]]
        try:
            self.ctx.relay.record_action_refused(
                org, app, request_id=new_id(), operation=operation, actor=actor, source=source,
                target_type=target_type, target_ids=target_ids, status=status, detail=detail,
                suppressed=suppressed)
        except Exception:  # noqa: BLE001  # the store away, a name the aggregate refuses: logged, not raised
            log.warning("could not record a refused %s call", operation, exc_info=True)
