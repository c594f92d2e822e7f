"""The executor lifecycle feed: ``GET /v2/orgs/{org}/executor-events`` (Relay's own).

Every transition Relay recorded in an org, in order (``seq``: the event's notification id):
executors connected, disconnected, declared dead, their recoveries, retention rounds,
protocol violations, refused handshakes, applications and tokens made and changed. Optionally of one application or one executor; a page of at
most ``limit`` after ``after``. Read from :mod:`relay_es.projections.audit`, up to the entries the
read model has folded as a whole (its tracked position): while a start fills empty read models
in processes the feed is empty rather than a page with gaps that a follower would step over. (Who did what
through the API, in Conductor's shape, is the audit log: :mod:`relay_es.adapters.rest.audit`.)

Who may read it: ``application.read`` (the executors and applications, as ``listApplications`` and
``listExecutors``); the tokens' entries (``token.*``: their names and applications, as ``listTokens``)
only with ``token.read`` as well. They are left out by the query, not from its page, so a page is as
full as the others allow and a follower (``relay events -f``) never stops at one emptied.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, get
from litestar.params import FromPath, QueryParameter

from relay_es.adapters import authz
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.roles import TOKEN_READ
from relay_es.projections import audit as audit_view


class ExecutorEvent(msgspec.Struct, rename="camel"):
    seq: int
    at: str
    org: str
    app: str | None
    executor_id: str | None
    action: str
    detail: dict[str, Any]


class ExecutorEventsController(Controller):
    path = ORG + "/executor-events"

    @get("/", sync_to_thread=True, operation_id="listExecutorEvents", summary="The executor lifecycle feed, in order")
    def executor_events(
        self, org: FromPath[str], ctx: Context, request: Request[Any, Any, Any],
        # Lengths checked below, not by Litestar, whose refusal names the argument, not the parameter.
        app: Annotated[str | None, QueryParameter(name="app", required=False, schema_extra={"maxLength": 256})] = None,
        executor_id: Annotated[str | None, QueryParameter(name="executorId", required=False, schema_extra={
            "maxLength": authz.MAX_EXECUTOR_ID})] = None,
        after: Annotated[int | None, QueryParameter(name="after", required=False, ge=0, le=2**63 - 1)] = None,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=1000)] = 100,
    ) -> list[ExecutorEvent]:
        for name, value, most in (("app", app, 256), ("executorId", executor_id, authz.MAX_EXECUTOR_ID)):
            if value is not None and "\x00" in value:
                raise InvalidSetting(name, "must not contain NUL characters")
            if value is not None and len(value) > most:
                raise InvalidSetting(name, f"must be at most {most} characters")
        return [ExecutorEvent(seq=a.seq, at=units.rfc3339(a.at) or "", org=a.org, app=a.app, executor_id=a.executor_id,
                           action=a.action, detail=a.detail)
                for a in audit_view.query(ctx.db, org=org, app=app, executor_id=executor_id, after=after, limit=limit,
                                          folded=True, tokens=may_list_tokens(request))]


def may_list_tokens(request: Request[Any, Any, Any]) -> bool:
    """Whether the caller holds ``token.read`` (development mode's caller holds every permission).
    No principal (the guard always sets one) is no permission: closed."""
    who = getattr(request.state, "principal", None)
    return who is not None and TOKEN_READ in who.permissions
