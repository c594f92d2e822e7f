"""Queues: ``listQueues`` and ``getQueue`` (Conductor API v2), answered by an executor.

``GET .../queues`` lists the queues registered in the application's system database
(``list_queues``, protocol section 5.21; ``[]`` when none is); ``GET .../queues/{queue_name}``
is one of them (``get_queue``), or 404 when the executor knows none by that name. Each is
Conductor's ``Queue``, exactly its fields. Any healthy executor answers: the queues are the
system database's, not one process's.

An executor whose SDK predates a message (``list_queues`` and ``get_queue`` came with Python
dbos 2.20) answers "Unknown message type": that is a 501 problem saying so
(:func:`unsupported`), not a failure of Relay. The schedule and version routes use the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from litestar import Controller, Response, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from relay_es.adapters.rest import calling
from relay_es.adapters.rest.conductor import mapping
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import APP
from relay_es.protocol import catalogue as c
from relay_es.protocol import messages as wire

UNKNOWN_TYPE = "unknown message type"  # every SDK's reply to a type it does not know (protocol section 6)

# The first SDK version that answers each type (protocol section 8; TypeScript 5.2.11 answers them all).
SINCE = {
    "list_queues": "Python dbos 2.20", "get_queue": "Python dbos 2.20",
    **{t: "Python dbos 2.15" for t in (
        "list_schedules", "get_schedule", "pause_schedule", "resume_schedule", "backfill_schedule",
        "trigger_schedule", "list_application_versions", "set_latest_application_version")},
}

T = TypeVar("T")


def failed_status(message: str) -> int:
    """The status of an executor's error message: 501 for a type it does not know, 404 when
    it says the named thing does not exist, else 500."""
    if message.strip().lower() == UNKNOWN_TYPE:
        return 501
    return calling.not_found_or(500)(message)


async def unsupported(call: Awaitable[T], type_name: str) -> T:
    """``call`` (an :func:`~relay_es.adapters.rest.calling.ask` or ``act`` made with
    :func:`failed_status`), its 501 told as what it is: the executor's SDK does not know
    ``type_name``."""
    try:
        return await call
    except calling.ExecutorProblem as e:
        if e.status != 501:
            raise
        raise calling.ExecutorProblem(
            501, "not supported by the executor",
            f"the application's executor does not support {type_name} (it needs {SINCE.get(type_name, 'a newer SDK')}"
            f" or @dbos-inc/dbos-sdk 5.x); it answered: {e.detail}") from None


def sent_as(request: wire.Request) -> Callable[[str], wire.Request]:
    """``make_request`` for a request built (and so validated) before anything is recorded or
    sent: the same request under the hub's request id."""
    return lambda request_id: msgspec.structs.replace(request, request_id=request_id)


class QueuesController(Controller):
    path = APP + "/queues"

    @get("/", summary="List queues", description="The queues registered in the application's system database, "
                                                 "as one healthy executor reads them.")
    async def list_queues(self, org: FromPath[str], app: FromPath[str], ctx: Context) -> Response[list[m.Queue]]:
        request = mapping.list_queues_request(request_id="")
        answer: c.ListQueuesResponse = await unsupported(
            calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status), request.type)
        return calling.answer(mapping.queues_out(answer))

    @get("/{queue_name:str}", summary="Get queue", description="One queue by name; 404 when there is none.")
    async def get_queue(self, org: FromPath[str], app: FromPath[str], queue_name: FromPath[str],
                        ctx: Context) -> Response[m.Queue]:
        request = mapping.get_queue_request(queue_name, request_id="")
        answer: c.GetQueueResponse = await unsupported(
            calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status), request.type)
        if answer.output is None:
            raise NotFoundException(detail=f"queue {queue_name[:200]!r} not found in application {app!r}")
        return calling.answer(mapping.queue_out(answer.output))
