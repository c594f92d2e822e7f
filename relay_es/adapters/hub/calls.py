"""Calls of the REST operations: one request to one executor of an application, its answer back.

:class:`Calls` is how every Conductor API operation carried over the WebSocket (list, get,
cancel, resume, fork, schedules, versions...) asks an executor something. It picks the
executor with :func:`relay_es.engine.routing.choose` among the application's registered,
open connections here, sends the request the caller builds (the request id is the hub's),
and returns the answer decoded into the catalogue's type for that request
(:data:`relay_es.protocol.catalogue.RESPONSES`; the session decodes it straight from the
frame, so a large answer is the frame plus its decoded form, never more copies).

Failures are the engine's (:mod:`relay_es.engine.calls`), each with its problem's status:
no connection (``NoHealthyExecutor``, 503), no answer within the call's timeout
(``ExecutorTimedOut``, 504), the socket closed while the call waited (``ExecutorGone``, at
once; :class:`ExecutorGoneOthersRemain` when other executors able to take the call were connected
then, which a read may be sent to instead, never to the one that went: ``excluding``), the
executor's ``error_message`` (``ExecutorFailed``, its text escaped and bounded),
executors connected but none able to take the call's form (``NoCapableExecutor``, 501: a call
that :class:`Needs` more than being registered, such as a bulk action on several workflows),
a reply Relay refused (``ReplyRefused``: the wrong type for the request, a field of the wrong
type; audited by the endpoint as a ``protocol.violation`` like every other), a reply over the frame
cap (:class:`ReplyTooLarge`: the socket is closed for it, ``frame_too_large``, and the call is
never sent to another executor, which would answer the same). A refused or
unsolicited reply fails only the call it names, if any: other calls on the socket, its pings
and the process manager's deadlines go on.

Used on the event loop (:meth:`Calls.call`), or from another thread
(:meth:`Calls.call_threadsafe`, once :meth:`Calls.start` gave it the loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from relay_es.adapters.hub.connection import Connection, ConnectionLost, Guard, ReplyOverCap
from relay_es.adapters.hub.registry import Registry
from relay_es.adapters.uvicorn_ws import Withdrawn
from relay_es.engine.calls import (
    CallFailed,
    ExecutorFailed,
    ExecutorGone,
    ExecutorTimedOut,
    NoHealthyExecutor,
    ReplyRefused,
)
from relay_es.domain.text import bytes_said
from relay_es.engine.routing import Candidate, choose
from relay_es.protocol import messages as m
from relay_es.protocol.limits import printable
from relay_es.protocol.session import RefusedReply

THREAD_MARGIN = 5.0  # seconds a thread waits beyond a call's own timeout before it gives up on the loop
SDKS_NAMED = 3  # distinct SDKs (language and version) a NoCapableExecutor's detail names, at most


@dataclass(frozen=True)
class Needs:
    """What a call needs of its executor beyond being registered here. ``able(language,
    dbos_version)``: whether an executor that said so in its ``executor_info`` can take the call
    (either is None when it did not say: an old Python SDK sends neither). ``lacking``: what the
    501 says when executors are connected and none is able (why, and what to do)."""

    able: Callable[[str | None, str | None], bool]
    lacking: str


class NoCapableExecutor(CallFailed):
    """Executors of the application are connected here, but none can take the call (their SDK
    lacks the request's form, :class:`Needs`): nothing was sent."""

    status = 501
    title = "not supported by the executor"

    def __init__(self, org: str, app: str, lacking: str, sdks: list[str]) -> None:
        super().__init__(f"no executor of application {printable(app, 200)!r} connected here can take this "
                         f"call (they run {', '.join(sdks)}): {lacking}")
        self.org, self.app = org, app


class ReplyTooLarge(CallFailed):
    """The executor sent a message over Relay's frame cap while the call waited (its reply: a list of
    workflows with their inputs and outputs, an export), and Relay closed its socket for it (1009,
    audited ``frame_too_large``). The reply's fault, not the executor's: never sent to another, which
    would send the same. ``others``: other calls that waited on the socket then (the message was
    this call's reply or one of theirs)."""

    title = "executor reply too large"

    def __init__(self, executor_id: str, cap: int, others: int = 0) -> None:
        whose = ("its reply" if not others else
                 f"a reply (this call's, or that of one of the {others} other call(s) waiting on its socket)")
        super().__init__(f"executor {printable(executor_id, 256)!r} sent {whose} larger than the {bytes_said(cap)} "
                         f"Relay accepts from an executor (its frame cap, MAX_FRAME): Relay closed the executor's "
                         f"socket (it reconnects) and asked no other executor, which would answer the same (a "
                         f"list: ask for fewer workflows, or without their inputs and outputs)")
        self.executor_id, self.cap, self.others = executor_id, cap, others


class ExecutorGoneOthersRemain(ExecutorGone):
    """The executor's socket closed while the call waited, and other executors of the application
    able to take the call (as it was made: its version, its executor, its needs) were connected
    then. What a read may be sent again to (``excluding`` the executors that went); an action never
    is: the executor may have acted before it went."""


def sdk_of(conn: Connection) -> tuple[str | None, str | None]:
    """The ``language`` and ``dbos_version`` the connection's executor sent in its ``executor_info``."""
    info = conn.session.info
    return (None, None) if info is None else (info.language, info.dbos_version)


def _named(sdks: set[tuple[str | None, str | None]]) -> list[str]:
    """The first :data:`SDKS_NAMED` of ``sdks`` as text (escaped, bounded)."""
    names = sorted("an SDK naming neither language nor version" if lang is None and version is None
                   else f"{printable(lang or '?', 40)} {printable(version or '?', 64)}" for lang, version in sdks)
    return names[:SDKS_NAMED] + (["..."] if len(names) > SDKS_NAMED else [])


class Calls:
    def __init__(self, registry: Registry, *,
                 first_seen: Callable[[Connection], float | None] | None = None,
                 observe: Callable[[str, str, float], None] | None = None) -> None:
        """``registry``: the hub's open connections. ``first_seen``: when Relay first registered
        a connection's executor, on one clock for all (the process manager's record of it; None
        when not yet recorded), which ranks versions (:mod:`relay_es.engine.routing`); without
        it, when the connection was accepted here. ``observe(type, outcome, seconds)`` is told of
        every call once it ended (the metrics): the request's type; ``ok``, ``failed`` (the
        executor's error), ``timeout``, ``gone``, ``refused``, ``cancelled`` or ``unavailable``
        (no executor; its type is ``none``: the request was never built)."""
        self.registry = registry
        self.first_seen = first_seen or (lambda conn: conn.connected_at)
        self.observe = observe or (lambda kind, outcome, seconds: None)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._turn = itertools.count()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Calls from other threads run on ``loop`` from now on."""
        self.loop = loop

    def connected(self, org: str, app: str, *, only_version: str | None = None, only_executor: str | None = None,
                  excluding: Collection[str] = ()) -> dict[str, Connection]:
        """The registered, open connections of ``org``/``app`` a call may go to, by connection id:
        of that version (``only_version``), of that executor (``only_executor``), of none of the
        executors ``excluding`` names."""
        return {c.id: c for c in self.registry.registered(org, app)
                if (only_version is None or c.app_version == only_version)
                and (only_executor is None or c.executor_id == only_executor)
                and (c.executor_id or "") not in excluding}

    def choose(self, org: str, app: str, *, prefer_latest: bool = False,
               latest_version: str | None = None, only_version: str | None = None,
               only_executor: str | None = None, needs: Needs | None = None,
               excluding: Collection[str] = ()) -> Connection:
        """The connection a call of ``org``/``app`` goes to (``only_version``: among that
        application version's alone; ``only_executor``: among that executor's alone, which takes
        no turn: the choice that named it took one; ``excluding``: never to those executors;
        ``needs``: among the executors able to take it, before the routing rules); raises
        ``NoHealthyExecutor``, or ``NoCapableExecutor`` when executors are there and none is able."""
        conns = self.connected(org, app, only_version=only_version, only_executor=only_executor, excluding=excluding)
        if needs is not None and conns:
            able = {i: c for i, c in conns.items() if needs.able(*sdk_of(c))}
            if not able:
                raise NoCapableExecutor(org, app, needs.lacking, _named({sdk_of(c) for c in conns.values()}))
            conns = able
        candidates = [Candidate(id=c.id, executor_id=c.executor_id or "", version=c.app_version,
                                first_seen=self.first_seen(c), in_flight=len(c.waiters)) for c in conns.values()]
        chosen = choose(org, app, candidates, turn=next(self._turn) if only_executor is None else 0,
                        prefer_latest=prefer_latest, latest_version=latest_version)
        return conns[chosen.id]

    async def call(self, org: str, app: str, make_request: Callable[[str], m.Request], *, timeout: float,
                   prefer_latest: bool = False, latest_version: str | None = None,
                   only_version: str | None = None, only_executor: str | None = None,
                   chosen: Callable[[str], None] | None = None, needs: Needs | None = None,
                   excluding: Collection[str] = ()) -> m.Response:
        """Sends ``make_request(request_id)`` to one executor of ``org``/``app`` and returns its
        answer, of the catalogue's type for the request. ``prefer_latest``: the latest
        application version first (``latest_version``, when given and running; see
        :mod:`relay_es.engine.routing`). ``chosen(executor_id)`` is told which executor the request
        goes to, before it is sent. ``only_version``: an executor of that application version or
        none (a recovery must run on the dead executor's version). ``only_executor``: that
        executor (its ``executor_id``, as :meth:`choose` gave it) or none: the reads of one answer
        all go to the executor chosen once for it. ``needs``: an executor able to take the request
        (:class:`Needs`) or none. ``excluding``: never those executors (their ``executor_id``: a read
        sent again after its executor went). Raises a :class:`~relay_es.engine.calls.CallFailed`;
        the socket closing while it waited, :class:`ExecutorGoneOthersRemain` when other executors
        could have taken the call, else ``ExecutorGone``; closed for a reply over the frame cap,
        :class:`ReplyTooLarge`. Never sends the request twice."""
        try:
            conn = self.choose(org, app, prefer_latest=prefer_latest, latest_version=latest_version,
                               only_version=only_version, only_executor=only_executor, needs=needs,
                               excluding=excluding)
        except (NoHealthyExecutor, NoCapableExecutor):
            self.observe("none", "unavailable", 0.0)  # nothing was built: no type to tell
            raise
        executor_id = conn.executor_id or ""
        if chosen is not None:
            chosen(executor_id)
        try:
            answer = await observed_call(conn, make_request, timeout, self.observe)
        except TimeoutError:
            raise ExecutorTimedOut(executor_id, timeout) from None
        except ReplyOverCap as e:  # the reply's fault: any other executor would send it alike
            raise ReplyTooLarge(executor_id, e.cap, e.others) from None
        except ConnectionLost as e:
            others = self.connected(org, app, only_version=only_version, only_executor=only_executor,
                                    excluding={*excluding, executor_id}).values()
            remain = any(needs is None or needs.able(*sdk_of(c)) for c in others)
            raise (ExecutorGoneOthersRemain if remain else ExecutorGone)(executor_id, str(e)) from None
        if isinstance(answer, RefusedReply):
            raise ReplyRefused(executor_id, answer.error_message or "unusable reply")
        if answer.failed:
            raise ExecutorFailed(answer.error_message or f"{answer.type} did not succeed", answer)
        return answer

    def call_threadsafe(self, org: str, app: str, make_request: Callable[[str], m.Request], *, timeout: float,
                        prefer_latest: bool = False, latest_version: str | None = None) -> m.Response:
        """:meth:`call` from a thread other than the loop's; blocks until it ends."""
        assert self.loop is not None, "calls not started"
        fut = asyncio.run_coroutine_threadsafe(
            self.call(org, app, make_request, timeout=timeout, prefer_latest=prefer_latest,
                      latest_version=latest_version), self.loop)
        try:
            return fut.result(timeout + THREAD_MARGIN)
        except concurrent.futures.TimeoutError:  # the loop is stuck: give up, and tell the call
            fut.cancel()
            raise ExecutorTimedOut("?", timeout) from None


async def observed_call(conn: Connection, make_request: Callable[[str], m.Request], timeout: float,
                        observe: Callable[[str, str, float], None], guard: Guard | None = None) -> m.Response:
    """``conn.call``, and ``observe(type, outcome, seconds)`` once it ended: the request's type;
    ``ok``, ``failed`` (the executor's error), ``refused`` (its reply, one over the frame cap
    included), ``timeout`` (no answer in
    time, or the guard withdrew the request), ``gone`` (the socket closed) or ``cancelled``. What
    :class:`Calls` and the dispatcher's conversations both time (the metrics)."""
    began = time.perf_counter()
    kind = ["?"]

    def made(request_id: str) -> m.Request:
        request = make_request(request_id)
        kind[0] = request.type
        return request

    outcome = "cancelled"  # unless the call ends otherwise
    try:
        answer = await (conn.call(made, timeout) if guard is None else conn.call(made, timeout, guard))
        outcome = "refused" if isinstance(answer, RefusedReply) else "failed" if answer.failed else "ok"
        return answer
    except (TimeoutError, Withdrawn):
        outcome = "timeout"
        raise
    except ReplyOverCap:  # a reply Relay could not take
        outcome = "refused"
        raise
    except ConnectionLost:
        outcome = "gone"
        raise
    finally:
        observe(kind[0], outcome, time.perf_counter() - began)
