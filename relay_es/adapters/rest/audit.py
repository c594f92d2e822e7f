"""The audit log: ``/v2/orgs/{org}/audit-logs`` (Relay's own shape; issue 13 part 2 moves it).

An org's audit entries in order (``seq``), optionally of one application or
one executor, a page of at most ``limit`` after ``after``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, get
from litestar.params import FromPath, QueryParameter

from relay_es.adapters import authz
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.projections import audit as audit_view


class AuditEntry(msgspec.Struct, rename="camel"):
    seq: int
    at: str
    org: str
    app: str | None
    executor_id: str | None
    action: str
    detail: dict[str, Any]


class AuditController(Controller):
    path = ORG + "/audit-logs"

    @get("/", sync_to_thread=True, summary="Audit entries in order")
    def audit_logs(
        self, org: FromPath[str], ctx: Context,
        # Lengths checked below, not by Litestar, whose refusal names the argument, not the parameter.
        app: Annotated[str | None, QueryParameter(name="app", required=False, schema_extra={"maxLength": 256})] = None,
        executor_id: Annotated[str | None, QueryParameter(name="executorId", required=False, schema_extra={
            "maxLength": authz.MAX_EXECUTOR_ID})] = None,
        after: Annotated[int | None, QueryParameter(name="after", required=False, ge=0, le=2**63 - 1)] = None,
        limit: Annotated[int, QueryParameter(name="limit", ge=1, le=1000)] = 100,
    ) -> list[AuditEntry]:
        for name, value, most in (("app", app, 256), ("executorId", executor_id, authz.MAX_EXECUTOR_ID)):
            if value is not None and "\x00" in value:
                raise InvalidSetting(name, "must not contain NUL characters")
            if value is not None and len(value) > most:
                raise InvalidSetting(name, f"must be at most {most} characters")
        return [AuditEntry(seq=a.seq, at=units.rfc3339(a.at) or "", org=a.org, app=a.app, executor_id=a.executor_id,
                           action=a.action, detail=a.detail)
                for a in audit_view.query(ctx.db, org=org, app=app, executor_id=executor_id, after=after, limit=limit)]
