"""How a route of the Conductor API asks an executor, and records what an operator did.

Every workflow, queue, schedule and version operation is carried to one executor of the
application over its WebSocket (ADR 0019). A route does three things, each here once:

* :func:`body` -- its request body, decoded strictly into one of
  :mod:`~relay_es.adapters.rest.conductor.models`' closed types (a wrong field: 422 naming it;
  not JSON: 400), read whole only up to the route's own cap.
* :func:`ask` -- a read: the application must exist (404), then one executor answers
  (:meth:`relay_es.adapters.hub.calls.Calls.call`) within ``RELAY_CALL_TIMEOUT_SECS``; one whose
  socket closed before it answered is replaced by another of the application, within the same
  time (:data:`READ_ATTEMPTS`).
  How that can fail is :mod:`relay_es.engine.calls` (503 no healthy executor, 504 no
  answer, 502 the socket dropped or the reply was refused, the executor's own error
  message) and :class:`~relay_es.adapters.hub.calls.ReplyTooLarge` (502: a reply over the frame
  cap, never sent to another executor); the problem handlers below turn each into its problem. A request only some SDK
  releases understand (a newer message type; a field an older SDK would silently ignore, as a
  search by ``hasParent`` or a bulk action on several workflows:
  :mod:`~relay_es.adapters.rest.releases`) goes to an executor whose ``executor_info`` says it
  can take it, or to none: a 501 when none of those connected can.
* :func:`act` -- an action (cancel, resume, fork, delete, bulk, import, schedules,
  versions): recorded as requested *before* it is sent and as completed however the call
  ends, so an operator's action is in the store even when Relay dies in between (the
  audit log shows it requested, never completed); one whose executor's socket closed before it
  answered is on record ``unknown``: it may have been done. Who asked is the request's principal
  (its token's name, or the development user), from where is the client's address
  (:mod:`~relay_es.adapters.rest.recording`, which records every other kind of action).

The executor's ``error_message`` keeps its text (escaped and bounded) in the problem's
``detail``. Its status is the route's to choose (``failed_status``): an executor says "no
such workflow" in prose, so a route about one named thing passes a function of the message
that knows how each SDK says it (:func:`not_found_or`, :func:`no_such_schedule`), naming that
thing. Anything else an executor says is a 500: its database or a bug, which retrying may cure --
a relation or a database that "does not exist" included. A list answers no 404 for its
executor's failure.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response

from relay_es.adapters.hub.calls import ExecutorGoneOthersRemain, NoCapableExecutor, Needs, ReplyTooLarge
from relay_es.adapters.rest import bodies, openapi, releases
from relay_es.adapters.rest.conductor.mapping import ExecutorReplyError
from relay_es.adapters.rest.context import RestContext
from relay_es.adapters.rest.problems import problem
from relay_es.adapters.rest.recording import actor_of, source_of
from relay_es.domain.errors import UnknownApplication
from relay_es.domain.ids import new_id
from relay_es.engine.action_commands import Outcome
from relay_es.engine.calls import (
    CallFailed,
    ExecutorFailed,
    ExecutorGone,
    ExecutorTimedOut,
    NoHealthyExecutor,
)
from relay_es.protocol import catalogue as c
from relay_es.protocol import messages as wire

log = logging.getLogger(__name__)

R = TypeVar("R")

LATEST_TTL_SECS = 30.0  # how long the version a user made latest is taken as known, per application
LATEST_ASK_SECS = 5.0  # the longest a call waits to learn it (then: the newest registered version)
READ_ATTEMPTS = 2  # executors a read is sent to at most: another when the first one's socket closed (ADR 0019)

# How each SDK says it has no workflow of an id (the id exact, the words in any case): TypeScript
# "Workflow <id> does not exist" (DBOSNonExistentWorkflowError), Python "Non-existent target workflow
# ID: <id>" (DBOSNonExistentWorkflowError; "Sent to non-existent destination workflow ID: <id>" in
# older releases), Java "Workflow does not exist <id>".
# Each is (the words before the id, after it); the Python and Java ids end with their line. An id is
# looked for at every place the words begin (an error's context says "... workflow <id>: " before the
# SDK's own words).
_NO_WORKFLOW_WORDS = (
    (r"\b(?i:workflow) ", r" (?i:does not exist)\b"),
    (r"\b(?i:non-existent [a-z]+ workflow (?:id|uuid)): ", r"[^\S\n]*(?:\n|\Z)"),
    (r"\b(?i:workflow does not exist) ", r"[^\S\n]*(?:\n|\Z)"),
)
# A bulk action's missing workflows are named together, ", " between them (TypeScript "Workflow a, b does
# not exist", Python "Non-existent target workflow ID: a, b"): a group is either one id, or ids so joined
# (an id holding ", " itself is found alone, not in such a list).
MISSING_SEPARATOR = ", "
# Each group is the id named, on one line (an id with a line break, or space at its end, is looked for
# as it is: :func:`no_such_workflow`).
NO_WORKFLOW = tuple(re.compile(f"(?={before}([^\\n]+?){after})") for before, after in _NO_WORKFLOW_WORDS)
# Python in metadata-only mode names the error's class and withholds its text (and so the id).
NO_WORKFLOW_WITHHELD = "DBOSNonExistentWorkflowError (details withheld in metadata-only mode)"
# An executor in metadata-only mode refusing a data operation ("<type> is not allowed in conductor
# metadata-only mode", protocol section 6): a 403, no retry or other body will help. Not its other
# errors, which end "(details withheld in metadata-only mode)" whatever they were.
METADATA_ONLY_REFUSAL = "not allowed in conductor metadata-only mode"
UNKNOWN_TYPE = "unknown message type"  # every SDK's answer to a type it does not know (protocol section 6)

# What a request needs of its SDK's release (a newer message type; a field an older SDK ignores, the
# bulk form of several workflows among them) is :mod:`.releases`', which :func:`ask` applies to every
# request it sends.


class ExecutorProblem(Exception):
    """An executor's error message, as the route chose to answer it (status, title, text)."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


class MayHaveActed(CallFailed):
    """An action's call ended with its executor's socket closed before the answer came (the executor
    went, or sent a reply over the frame cap): the executor may have carried the action out. The
    502 of that failure, its title kept, its detail saying so; the action is on record ``unknown``."""

    def __init__(self, failure: ExecutorGone | ReplyTooLarge) -> None:
        super().__init__(f"{failure.detail}. The executor may have carried the action out before its socket "
                         f"closed: look (the workflow's status, a fork's new id) before asking again, or it may "
                         f"be done twice")
        self.title, self.executor_id = failure.title, failure.executor_id


def refused(message: str) -> bool:
    """Whether the executor refuses a data operation in metadata-only mode (a 403 wherever it comes)."""
    return METADATA_ONLY_REFUSAL in message.lower()


def refused_or(status: int) -> Callable[[str], int]:
    """A ``failed_status`` that is never a 404 (a list; a thing whose absence the executor answers as
    null): 403 when the executor refuses data in metadata-only mode, else ``status``."""
    return lambda message: 403 if refused(message) else status


def no_such_workflow(message: str, workflow_ids: Collection[str] | None = None) -> bool:
    """Whether the executor's message is an SDK's own "no workflow <id>" (:data:`NO_WORKFLOW`) for
    one of ``workflow_ids`` (None, where a route cannot name them: for an id without spaces), or for
    several of them listed together (:data:`MISSING_SEPARATOR`: every one listed is named). Not a
    database's "relation ... does not exist", whatever workflow the message's context names."""
    if NO_WORKFLOW_WITHHELD in message:
        return True
    ours = _is_ours(workflow_ids)
    for pattern in NO_WORKFLOW:
        for match in pattern.finditer(message):
            named = match.group(1)
            if ours(named) or all(map(ours, named.split(MISSING_SEPARATOR))):
                return True
    # An id that the patterns' groups cannot hold whole (a line break in it, or space at its end: DBOS
    # takes either) is looked for as it is, in the same words.
    return any(_names_exactly(message, wid) for wid in workflow_ids or ()
               if "\n" in wid or wid[-1:].isspace())


def _is_ours(workflow_ids: Collection[str] | None) -> Callable[[str], bool]:
    """Whether an id an SDK named is one of ``workflow_ids`` (None: any id without spaces)."""
    if workflow_ids is None:
        return _one_word
    ids = workflow_ids if isinstance(workflow_ids, (set, frozenset)) else set(workflow_ids)
    return ids.__contains__


def _names_exactly(message: str, workflow_id: str) -> bool:
    wid = re.escape(workflow_id)
    return any(re.search(before + wid + after, message) for before, after in _NO_WORKFLOW_WORDS)


def _one_word(text: str) -> bool:
    return bool(text) and not any(ch.isspace() for ch in text)


def no_such_schedule(message: str, schedule_name: str) -> bool:
    """Whether the executor's message is an SDK's own "no schedule ``schedule_name``": Python's
    "Schedule '<name>' does not exist", TypeScript's 'Schedule "<name>" not found'."""
    return f"Schedule '{schedule_name}' does not exist" in message or f'Schedule "{schedule_name}" not found' in message


def not_found_or(status: int, workflow_ids: Collection[str] | None = None) -> Callable[[str], int]:
    """A ``failed_status`` for operations on named workflows: 403 when the executor refuses data in
    metadata-only mode, 404 when its message is an SDK's "no such workflow" for one of
    ``workflow_ids`` (:func:`no_such_workflow`), else ``status``."""
    return lambda message: 403 if refused(message) else 404 if no_such_workflow(message, workflow_ids) else status


def schedule_not_found_or(status: int, schedule_name: str) -> Callable[[str], int]:
    """A ``failed_status`` for operations on one schedule: 403 for the metadata-only refusal, 404
    when the executor's message is an SDK's "no such schedule" naming it (:func:`no_such_schedule`),
    else ``status``."""
    return lambda message: 403 if refused(message) else 404 if no_such_schedule(message, schedule_name) else status


async def body(request: Request[Any, Any, Any]) -> Any:
    """The request's body as the model its route declared (:func:`openapi.body`, in the
    decorator's ``opt``: the document shows the same model), strictly (:func:`bodies.decoded`).
    An empty body is None where the declaration says it may be left out (Conductor's bodies of
    search, the aggregates, cancel, resume and fork), else a 422. The size cap is the route's
    ``request_max_body_size``."""
    declared = openapi.declared(request.route_handler)
    return bodies.of_request(await request.body(), declared.model, required=declared.required)


async def app_must_exist(ctx: RestContext, org: str, app: str) -> None:
    """404 for an application never registered or deleted (read from its own stream, so an
    application registered an instant ago by its first executor is found)."""
    if not await asyncio.to_thread(ctx.relay.app_exists, org, app):
        raise UnknownApplication(org, app)


async def latest_version(ctx: RestContext, org: str, app: str) -> str | None:
    """The version a user made latest (``setLatestAppVersion``: the highest ``version_timestamp`` in the
    executors' registry), which an operation that prefers the latest version goes to (routing, rule 2);
    None when unknown (an SDK without the registry, no answer within :data:`LATEST_ASK_SECS`): then the
    newest registered version. Asked of an executor at most every :data:`LATEST_TTL_SECS` per
    application, and asked again after this process's own ``setLatestAppVersion``
    (:func:`latest_changed`); another instance's change is seen within that time. An answer asked for
    before such a change is not kept (it would stand for the old version until the time ran out)."""
    key = (org, app)
    hit = ctx.latest_versions.get(key)
    now = time.monotonic()
    if hit is not None and now - hit[1] < LATEST_TTL_SECS:
        return hit[0]
    changes = ctx.latest_changes.get(key, 0), ctx.apps_gone.value
    version = None
    if ctx.calls is not None:
        try:
            answer = await ctx.calls.call(org, app, lambda rid: c.ListApplicationVersionsRequest(request_id=rid),
                                          timeout=min(LATEST_ASK_SECS, ctx.call_timeout.total_seconds()))
            stamped = [v for v in answer.output or () if v.version_timestamp is not None]
            if stamped:
                version = max(stamped, key=lambda v: v.version_timestamp).version_name
        except CallFailed:
            pass
    if (ctx.latest_changes.get(key, 0), ctx.apps_gone.value) == changes:  # else made latest, or deleted, meanwhile
        ctx.latest_versions[key] = (version, now)
    return version


def latest_changed(ctx: RestContext, org: str, app: str) -> None:
    """``setLatestAppVersion`` of ``org``/``app`` is done: what :func:`latest_version` remembers is
    forgotten, and an answer on its way from before is not kept. Asking again (rather than taking the
    request's version) keeps the registry's order when two such changes race."""
    key = (org, app)
    ctx.latest_changes[key] = ctx.latest_changes.get(key, 0) + 1
    ctx.latest_versions.pop(key, None)


def app_gone(ctx: RestContext, org: str, app: str) -> None:
    """``org``/``app`` was deleted: nothing is remembered of its latest version (an application made
    again under its name asks afresh, and a Relay deleting applications all day keeps none of them); an
    answer on its way from before is not kept (any application's deletion counts: the count is one number)."""
    ctx.apps_gone.value += 1
    ctx.latest_versions.pop((org, app), None)
    ctx.latest_changes.pop((org, app), None)


async def ask(ctx: RestContext, org: str, app: str, make_request: Callable[[str], wire.Request], *,
              prefer_latest: bool = False, failed_status: Callable[[str], int] | int = 500,
              chosen: Callable[[str], None] | None = None, app_checked: bool = False,
              only_executor: str | None = None, needs: Needs | None = None, resend_if_gone: bool = True) -> Any:
    """The answer of one executor of ``org``/``app`` to ``make_request(request_id)``, of the
    catalogue's type for it. Raises :class:`~relay_es.engine.calls.CallFailed` (or
    :class:`ExecutorProblem` for the executor's own error, with the status
    ``failed_status`` gives its message; an executor whose SDK does not know the request's type
    answers "unknown message type": a 501 saying so). ``chosen(executor_id)`` is told each
    executor the request went to. ``app_checked``: the route has read the application's stream
    already in this request (a 404 for one absent); it is not read again. ``only_executor``: that
    executor answers or none does (a 503 once it is gone), for a route whose reads make one answer
    (:meth:`~relay_es.adapters.hub.calls.Calls.call`). An executor able to take the request answers,
    or none does (a 501 when executors are connected and none is): able for what the request needs of
    its SDK's release (:func:`~relay_es.adapters.rest.releases.needs_of`, of ``make_request("")``: its
    message type, every field an older SDK would ignore) and for the route's own ``needs``.

    A read whose executor's socket closed before it answered is sent to another executor of the
    application, never to one that went, up to :data:`READ_ATTEMPTS` executors in all and within
    the one call timeout: the executors share the application's system database, so any of them
    answers it alike. Not with ``only_executor`` (the answer's other reads came from that one), nor
    without ``resend_if_gone`` (:func:`act`: an action may have been done by the executor that
    went); a timeout is not resent either (the call's time is spent). With none other left, the
    executor that went is the answer (a 502)."""
    if not app_checked:
        await app_must_exist(ctx, org, app)
    if ctx.calls is None:
        raise NoHealthyExecutor(org, app)
    sent: list[str] = []

    def made(request_id: str) -> wire.Request:
        request = make_request(request_id)
        sent.append(request.type)
        return request

    # what the request needs of its SDK's release (releases.needs_of), found in it before an executor
    # is chosen; with the route's own
    needs = releases.both(needs, releases.needs_of(make_request("")))
    latest = await latest_version(ctx, org, app) if prefer_latest else None
    needed = {} if needs is None else {"needs": needs}  # only when there are: a stand-in for Calls need not know it
    total = ctx.call_timeout.total_seconds()
    began = time.monotonic()
    gone: list[ExecutorGoneOthersRemain] = []  # the executors that went, in order
    try:
        while True:
            # only once one went (``excluding``); then what is left of the call's one timeout
            again = {} if not gone else {"excluding": tuple(g.executor_id for g in gone)}
            left = total - (time.monotonic() - began) if gone else total
            try:
                return await ctx.calls.call(org, app, made, timeout=left, prefer_latest=prefer_latest,
                                            latest_version=latest, chosen=chosen, only_executor=only_executor,
                                            **needed, **again)
            except ExecutorGoneOthersRemain as e:  # only a Calls that takes ``excluding`` raises it
                gone.append(e)
                if (not resend_if_gone or only_executor is not None or len(gone) >= READ_ATTEMPTS
                        or time.monotonic() - began >= total):
                    raise
            except (NoHealthyExecutor, NoCapableExecutor):
                if not gone:
                    raise
                raise gone[-1] from None  # the others went too, meanwhile: what happened to the request sent
    except ExecutorFailed as e:
        if e.message.strip().lower() == UNKNOWN_TYPE:
            kind = sent[0] if sent else "this operation"
            raise ExecutorProblem(
                501, "not supported by the executor",
                f"the application's executor does not support {kind} (it needs "
                f"{releases.first_releases(kind)}); it answered: {e.message}") from None
        status = failed_status(e.said) if callable(failed_status) else failed_status  # the text as sent
        raise ExecutorProblem(status, e.title, e.message) from None


async def act(ctx: RestContext, request: Request[Any, Any, Any], org: str, app: str, *,
              operation: str, target_type: str, target_ids: Sequence[str] = (),
              parameters: Mapping[str, Any] | None = None,
              make_request: Callable[[str], wire.Request],
              result: Callable[[Any], Mapping[str, Any] | None] = lambda answer: None,
              prefer_latest: bool = False, failed_status: Callable[[str], int] | int = 500,
              needs: Needs | None = None, only_executor: str | None = None) -> Any:
    """:func:`ask`, recorded as an operator's action (``operation``: Conductor's
    ``operationId``). ``parameters`` and ``result(answer)``: small summaries of scalars for
    the audit log, never workflow inputs or outputs. ``needs``: as :func:`ask` has it; no
    executor able to take the action is a failure on record, nothing sent. ``only_executor``: as
    :func:`ask` has it, for an action a read of that executor checked first (a schedule paused
    where it was found); once it is gone, a 503 on record, nothing sent. Sent to one executor
    only: one whose socket closed may have acted before it went, and another would act again
    (a second fork, a second trigger); such an action is on record ``unknown`` and answered a 502
    saying it may have been done (:class:`MayHaveActed`). Returns the executor's answer."""
    await app_must_exist(ctx, org, app)
    action_id = await asyncio.to_thread(
        ctx.relay.record_action_requested, org, app, request_id=new_id(), operation=operation,
        actor=actor_of(request), source=source_of(request), target_type=target_type, target_ids=target_ids,
        parameters=parameters)
    asked: list[str] = []
    try:
        answer = await ask(ctx, org, app, make_request, prefer_latest=prefer_latest, failed_status=failed_status,
                           chosen=asked.append, needs=needs, only_executor=only_executor,
                           resend_if_gone=False)  # it may have been done
    except NoHealthyExecutor as e:
        await completed(ctx, action_id, Outcome.NO_HEALTHY_EXECUTOR, e.detail, None)
        raise
    except ExecutorTimedOut as e:
        await completed(ctx, action_id, Outcome.TIMED_OUT, e.detail, e.executor_id)
        raise
    except (ExecutorGone, ReplyTooLarge) as e:  # sent, and no answer will come: done or not, nobody knows
        unknown = MayHaveActed(e)
        await completed(ctx, action_id, Outcome.UNKNOWN, unknown.detail, e.executor_id)
        raise unknown from None
    except (CallFailed, ExecutorProblem) as e:
        await completed(ctx, action_id, Outcome.FAILED, getattr(e, "detail", str(e)),
                        getattr(e, "executor_id", None) or (asked[0] if asked else None))
        raise
    except BaseException as e:  # cancelled (client gone) or a bug: the action still ends on record
        await asyncio.shield(completed(ctx, action_id, Outcome.FAILED, f"relay: {type(e).__name__}",
                                       asked[0] if asked else None))
        raise
    try:
        summary = result(answer)
    except Exception:  # noqa: BLE001  # an answer the route cannot summarise is still a success on record
        summary = None
    await completed(ctx, action_id, Outcome.SUCCEEDED, None, asked[0] if asked else None, summary)
    return answer


async def completed(ctx: RestContext, action_id: uuid.UUID, outcome: Outcome, message: str | None,
                    executor_id: str | None, result: Mapping[str, Any] | None = None) -> None:
    """Records how an action carried to an executor ended. Never raises: what the executor did (a
    fork's new id, a trigger) or the refusal it met is answered whether or not its end can be
    written (the store away); the action then stays ``pending`` in the audit log (logged). A 500
    instead would hide a change that happened, and a client retrying would make it twice."""
    try:
        await asyncio.to_thread(ctx.relay.record_action_completed, action_id, outcome=outcome, message=message,
                                executor_id=executor_id, result=result)
    except Exception:  # noqa: BLE001
        log.warning("could not record how action %s ended (%s); it stays pending in the audit log", action_id,
                    outcome, exc_info=True)


def answer(value: Any, status: int = 200) -> Response[Any]:
    """A response body of :mod:`~relay_es.adapters.rest.conductor.models` (or a list of them),
    encoded with msgspec (``UNSET`` fields left out, everything else as the reference says)."""
    return Response(content=msgspec.json.encode(value), status_code=status, media_type="application/json")


# --- problems ------------------------------------------------------------------------------


def _call_failed(_: Request[Any, Any, Any], exc: CallFailed) -> Response[Any]:
    resp = problem(exc.status, exc.title, exc.detail)
    if exc.status == 503:
        resp.headers["Retry-After"] = "5"
    return resp


def _executor_problem(_: Request[Any, Any, Any], exc: ExecutorProblem) -> Response[Any]:
    return problem(exc.status, exc.title, exc.detail)


def _bad_reply(_: Request[Any, Any, Any], exc: ExecutorReplyError) -> Response[Any]:
    return problem(502, "executor reply refused", str(exc))


EXCEPTION_HANDLERS: dict[type[Exception], Callable[..., Response[Any] | Awaitable[Response[Any]]]] = {
    CallFailed: _call_failed,
    ExecutorProblem: _executor_problem,
    ExecutorReplyError: _bad_reply,
}
"""Added to :data:`relay_es.adapters.rest.problems.EXCEPTION_HANDLERS` by the application."""
