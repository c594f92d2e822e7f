"""Executors: ``/v2/orgs/{org}/apps/{app}/executors`` (Conductor API v2) and an executor's history (Relay's).

The list is the executors table as it stands, or with ``asOf`` as it stood at
a past instant, rebuilt from the event streams one page at a time (a next page
linked in ``Link``). ``asOf`` is strictly RFC 3339; given to the millisecond (as
Relay prints instants) or coarser, it includes the events of that millisecond. An application never
registered is a 404 with ``asOf`` as without; one deleted since still answers its past. Each item
is Conductor's ``Executor``, exactly its fields; with ``?relay=extended`` (a query parameter no
Conductor client sends) each also carries Relay's ``deadline``: the instant a DISCONNECTED executor
is declared dead if it does not come back (RFC 3339), else null.
``.../executors/{executor_id}/history`` pages through one executor's events, each
``{version, type, at, data}`` (``data``: the event's attributes, named in camelCase), a next
page linked in ``Link`` as ``asOf``'s is.
Both rebuilding reads are expensive: at most :data:`EXPENSIVE_READS` run at
once (:func:`expensive_reads`), and between two streams each lets the process
manager's urgent work go first.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

import msgspec
from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, QueryParameter, SkipValidation

from relay_es.adapters import authz
from relay_es.adapters.rest.applications import find_app
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.slashes import SLASH
from relay_es.aggregates.application import app_stream_id
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting, UnknownApplication
from relay_es.engine.queries import (
    AS_OF_LIMIT,
    HISTORY_LIMIT,
    executor_history_page,
    executors_as_of_page,
)
from relay_es.projections.executors import ExecutorRow, all_rows

EXPENSIVE_READS = 2  # as-of and history calls running at once; the rest wait their turn
URGENT_WORK_FIRST = 0.25  # seconds an expensive read waits, between two streams, for the process manager


class Executor(msgspec.Struct, rename="camel"):
    """Conductor's ``Executor``: exactly its fields."""

    executor_id: str
    app_id: str
    app_version: str
    status: str
    host_id: str | None
    hostname: str | None
    language: str | None
    dbos_version: str | None
    executor_metadata: dict[str, Any] | None
    created_at: str
    updated_at: str


class ExtendedExecutor(Executor):
    """``?relay=extended``: Conductor's fields and Relay's."""

    deadline: str | None


# ``?relay=extended``: Relay's fields beside Conductor's (a Conductor client never sends it).
RelayExtended = Annotated[Literal["extended"] | None, QueryParameter(
    name="relay", required=False, description="`extended`: each executor also carries Relay's `deadline` "
                                              "(RFC 3339, or null); without it, exactly Conductor's fields")]


class HistoryEntry(msgspec.Struct):
    version: int
    type: str
    at: str
    data: dict[str, Any]


def executor_out(r: ExecutorRow, app_id: str, *, extended: bool = False) -> Executor:
    """A listed row (:attr:`ExecutorRow.visible`: it has connected, so its
    version, status and times are set) in Conductor's shape, or with Relay's fields."""
    out = Executor(
        executor_id=r.executor_id,
        app_id=app_id,
        app_version=r.app_version or "",
        status=r.status or "",
        host_id=None,
        hostname=r.hostname,
        language=r.language,
        dbos_version=r.dbos_version,
        executor_metadata=r.executor_metadata,
        created_at=units.rfc3339(r.created_at) or "",
        updated_at=units.rfc3339(r.updated_at) or "",
    )
    if not extended:
        return out
    return ExtendedExecutor(**msgspec.structs.asdict(out), deadline=units.rfc3339(r.deadline))


# How a handler asks for the semaphore: injected by name (``expensive``), passed as is.
Expensive = NamedDependency[SkipValidation[asyncio.Semaphore]]


def expensive_reads() -> Provide:
    """The ``expensive`` dependency: one semaphore per built app, bounding the rebuilding reads."""
    semaphore = asyncio.Semaphore(EXPENSIVE_READS)
    return Provide(lambda: semaphore, use_cache=True, sync_to_thread=False)


def urgent_work_first(ctx: RestContext) -> None:
    """Between two streams of an expensive read: while the process manager has
    urgent work (deadlines due or firing), it goes first, at most 0.25 s."""
    end = time.monotonic() + URGENT_WORK_FIRST
    while ctx.urgent() and time.monotonic() < end:
        time.sleep(0.002)


def next_link(request: Request[Any, Any, Any], query: dict[str, Any]) -> str:
    """A ``Link`` header naming the next page: this request's path with ``query``. Each segment of the
    path is percent-encoded again (an executor id may hold ``/``, spaces, any letter: the routed path
    has them decoded), so the link names the same resource and the header stays ASCII."""
    path = "/".join(quote(segment.replace(SLASH, "/"), safe="") for segment in request.url.path.split("/"))
    return f'<{path}?{urlencode(query)}>; rel="next"'


def ever_registered(ctx: RestContext, org: str, app: str) -> bool:
    """Whether the application is registered, or was once (deleted since): its past has an answer.
    One never registered is a 404 at every instant, as it is without ``asOf``. The read model
    answers for a registered one; the store for the rest (deleted, or not folded yet)."""
    try:
        find_app(ctx.db, org, app)
        return True
    except UnknownApplication:
        return ctx.relay.app_ever_registered(org, app)


class ExecutorsController(Controller):
    path = APP + "/executors"

    @get("/", operation_id="listExecutors", summary="List executors (optionally as of a past instant)",
         description="With `asOf`, the table as it stood then, rebuilt from the event streams, one page of at "
                     f"most `limit` (1-{AS_OF_LIMIT}, default {AS_OF_LIMIT}) executors in id order; a next page "
                     "is linked in the `Link` header (rel=\"next\", `after` = the last executor id examined). "
                     "With `relay=extended`, each executor also carries Relay's `deadline`.")
    async def executors(
        self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
        ctx: Context, expensive: Expensive,
        # asOf's length is checked below: Litestar's refusal would name the argument, not the parameter.
        as_of: Annotated[str | None, QueryParameter(name="asOf", required=False, schema_extra={"maxLength": 64},
                                                    description="RFC 3339 instant; one given to the millisecond "
                                                                "or coarser includes that whole millisecond")] = None,
        after: Annotated[str | None, QueryParameter(name="after", required=False, max_length=authz.MAX_EXECUTOR_ID,
                                                    description="with asOf: the page after this executor id")] = None,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=AS_OF_LIMIT,
                                             description="with asOf: executors examined per page")] = AS_OF_LIMIT,
        relay: RelayExtended = None,
    ) -> Response[list[Executor]]:
        extended = relay == "extended"
        if as_of is None:
            def current() -> list[Executor]:
                row = find_app(ctx.db, org, app)
                return [executor_out(r, row.stream_id, extended=extended)
                        for r in all_rows(ctx.db, org=org, app=app) if r.visible]

            return Response(await asyncio.to_thread(current))
        if len(as_of) > 64:
            raise InvalidSetting("asOf", "must be at most 64 characters")
        at = units.parse_as_of("asOf", as_of)

        def past() -> tuple[list[Executor], str | None]:
            if not ever_registered(ctx, org, app):
                raise UnknownApplication(org, app)
            rows, cursor = executors_as_of_page(ctx.relay, ctx.db, org, app, at, after=after, limit=limit,
                                                pause=lambda: urgent_work_first(ctx))
            app_id = str(app_stream_id(org, app))  # the application's id, also once it is deleted
            return [executor_out(r, app_id, extended=extended) for r in rows], cursor

        async with expensive:
            out, cursor = await asyncio.to_thread(past)
        headers = {}
        if cursor is not None:
            query = {"asOf": as_of, "after": cursor, "limit": limit, **({"relay": relay} if extended else {})}
            headers["Link"] = next_link(request, query)
        return Response(out, headers=headers)

    @get("/{executor_id:str}/history", operation_id="getExecutorHistory", summary="An executor's events",
         description=f"The executor's events, also after it was deleted: `[{{version, type, at, data}}]`, `data` "
                     "the event's attributes with camelCase names (`executorId`, `appVersion`, `connectionId`, "
                     "`previousStatus`, ...; `executorMetadata` holds what the executor sent, as it sent it). "
                     f"Those with a version above `after`, in order, at most `limit` (1-{HISTORY_LIMIT}, default "
                     f"{HISTORY_LIMIT}); while more follow, the next page is linked in the `Link` header "
                     "(rel=\"next\", `after` = the last version returned); a page without one is the last.")
    async def history(
        self, org: FromPath[str], app: FromPath[str], executor_id: FromPath[str], request: Request[Any, Any, Any],
        ctx: Context, expensive: Expensive,
        after: Annotated[int, QueryParameter(name="after", ge=0, le=2**63 - 1,
                                             description="the page after this version")] = 0,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=HISTORY_LIMIT,
                                             description="events per page")] = HISTORY_LIMIT,
    ) -> Response[list[HistoryEntry]]:
        async with expensive:
            events, cursor = await asyncio.to_thread(executor_history_page, ctx.relay, org, app, executor_id,
                                                     after=after, limit=limit)
        headers = {} if cursor is None else {"Link": next_link(request, {"after": cursor, "limit": limit})}
        return Response([HistoryEntry(**h) for h in events], headers=headers)
