"""Queues: ``listQueues`` and ``getQueue`` (Conductor API v2), answered by an executor.

``GET .../queues`` lists the queues registered in the application's system database
(``list_queues``, protocol section 5.21; ``[]`` when none is); ``GET .../queues/{queue_name}``
is one of them (``get_queue``), or 404 when the executor answers none by that name (null; a queue
of another name is a 502). The executor's error is a 500 with its text on both, whatever it says. Each is Conductor's ``Queue``, exactly its fields, each number within
its format (:func:`~relay_es.adapters.rest.conductor.mapping.queue_out`). Any healthy executor answers: the queues are the
system database's, not one process's.

An executor whose SDK predates a message (``list_queues`` and ``get_queue`` came with Python
dbos 2.20 and @dbos-inc/dbos-sdk 4.17) is passed over, and an application whose every executor is
known to be too old is a 501 with nothing sent; one that names no release answers for itself, and
its "Unknown message type" is a 501 too (:mod:`~relay_es.adapters.rest.calling`, which applies
:mod:`~relay_es.adapters.rest.releases` to every request).
"""

from __future__ import annotations

from collections.abc import Callable

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


def failed_status(message: str) -> int:
    """The status of an executor's error message on the queues' routes (and the versions'): 500,
    whatever the text says -- its database's "relation ... does not exist" included -- or 403 for
    the metadata-only refusal. Never 404: a list has nothing to be missing, and an SDK answers a
    queue it has not with null, not an error. (An SDK that does not know the message at all is
    :mod:`.calling`'s 501.)"""
    return calling.refused_or(500)(message)


def sent_as(request: wire.Request) -> Callable[[str], wire.Request]:
    """``make_request`` for a request built (and so validated) before anything is recorded or
    sent: the same request under the hub's request id."""
    return lambda request_id: msgspec.structs.replace(request, request_id=request_id)


class QueuesController(Controller):
    path = APP + "/queues"

    @get("/", operation_id="listQueues", summary="List queues", description="The queues registered in the application's system database, "
                                                 "as one healthy executor reads them.")
    async def list_queues(self, org: FromPath[str], app: FromPath[str], ctx: Context) -> Response[list[m.Queue]]:
        request = mapping.list_queues_request(request_id="")
        answer: c.ListQueuesResponse = await calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status)
        return calling.answer(mapping.queues_out(answer))

    @get("/{queue_name:str}", operation_id="getQueue", summary="Get queue", description="One queue by name; 404 when there is none.")
    async def get_queue(self, org: FromPath[str], app: FromPath[str], queue_name: FromPath[str],
                        ctx: Context) -> Response[m.Queue]:
        request = mapping.get_queue_request(queue_name, request_id="")
        answer: c.GetQueueResponse = await calling.ask(ctx, org, app, sent_as(request), failed_status=failed_status)
        if answer.output is None:
            raise NotFoundException(detail=f"queue {queue_name[:200]!r} not found in application {app!r}")
        mapping.same_as_asked("name", queue_name, answer.output.name)
        return calling.answer(mapping.queue_out(answer.output))
