"""Alerting rules, Conductor's ``listAlertingRules``, ``createAlertingRule`` and
``deleteAlertingRule`` (``docs/alerting.md``).

A rule is the watched application's (an event of its stream): it survives a restart and goes
with the application. ``ruleMetadata`` is checked when the rule is made
(:func:`relay_es.domain.alerting.parse_metadata`: 422 naming the key), the receiving
application must be registered (422) and, for a token limited to applications, one of them (403);
it is answered back without webhook secrets or URL
paths. ``appId`` and ``receivingAppId`` are the applications' ids (as ``Executor.appId``);
``lastFiredAt`` is read from the rule's alerts. Making and deleting a rule are in the audit log
(target: the rule, by its id; a rule that could not be made: its application). The rules are
evaluated by the alert manager (:mod:`relay_es.engine.alerting`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromPath
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import APP
from relay_es.adapters.rest.recording import recorded
from relay_es.aggregates.application import app_stream_id
from relay_es.domain.alerting import DEFAULT_MIN_INTERVAL, AlertingRule
from relay_es.domain.units import rfc3339


def rule_out(rule: AlertingRule, last_fired_at: datetime | None) -> m.AlertingRule:
    return m.AlertingRule(
        id=rule.id, app_id=str(app_stream_id(rule.org, rule.app)),
        receiving_app_id=str(app_stream_id(rule.org, rule.receiving_app)), rule_type=rule.rule_type,
        rule_metadata=rule.public_metadata(), min_interval_secs=rule.min_interval_secs,
        last_fired_at=rfc3339(last_fired_at))


def parameters_of(b: m.CreateAlertInputBody) -> dict[str, Any]:
    """What the audit log records of a new rule (scalars; never a webhook's URL or secret)."""
    meta = b.rule_metadata if isinstance(b.rule_metadata, dict) else {}
    hooks = meta.get("webhooks")
    return {"ruleType": b.rule_type,
            "minIntervalSecs": None if b.min_interval_secs is UNSET else b.min_interval_secs,
            "receivingAppName": None if b.receiving_app_name is UNSET else b.receiving_app_name,
            "webhooks": len(hooks) if isinstance(hooks, list) else 0}


class AlertingController(Controller):
    path = APP

    @get("/alerting-rules", operation_id="listAlertingRules", summary="List alerting rules", sync_to_thread=True,
         description="The application's alerting rules, oldest first, with when each last fired.")
    def list_alerting_rules(self, org: FromPath[str], app: FromPath[str], ctx: Context) -> Response[list[m.AlertingRule]]:
        return calling.answer([rule_out(r, at) for r, at in ctx.relay.alerting_rules(org, app)])

    @post("/alerting-rules", opt=openapi.body(m.CreateAlertInputBody),
          operation_id="createAlertingRule", summary="Create alerting rule",
          status_code=HTTP_201_CREATED,
          description="Makes a rule (Conductor's three types and Relay's own: ExecutorDead, RecoveryDeferred, "
                      "RecoveryFailed, ExecutorFlapping); ruleMetadata holds the type's parameters and webhooks.")
    async def create_alerting_rule(self, org: FromPath[str], app: FromPath[str], request: Request[Any, Any, Any],
                                   ctx: Context) -> Response[m.AlertingRule]:
        b: m.CreateAlertInputBody = await calling.body(request)
        who = getattr(request.state, "principal", None)

        def create() -> AlertingRule:
            with recorded(ctx, request, org, app, operation="createAlertingRule", target_type="alerting_rule",
                          parameters=parameters_of(b), target_noted="ruleId"):  # the new rule, once made
                if b.receiving_app_name is not UNSET and who is not None and not who.covers(b.receiving_app_name):
                    # a token limited to applications sends alerts only to those: not into another's alert
                    # handler (refused on record)
                    raise PermissionDeniedException(detail=f"this token is limited to applications that do not "
                                                           f"include receivingAppName {b.receiving_app_name[:256]!r}")
                rule = ctx.relay.create_alerting_rule(
                    org, app, rule_type=b.rule_type, metadata=b.rule_metadata,
                    min_interval_secs=DEFAULT_MIN_INTERVAL if b.min_interval_secs is UNSET else b.min_interval_secs,
                    receiving_app=None if b.receiving_app_name is UNSET else b.receiving_app_name)
                return rule  # its id noted

        rule = await asyncio.to_thread(create)
        return calling.answer(rule_out(rule, None), HTTP_201_CREATED)

    @delete("/alerting-rules/{rule_id:str}", operation_id="deleteAlertingRule", summary="Delete alerting rule",
            status_code=HTTP_204_NO_CONTENT, sync_to_thread=True,
            description="Deletes the rule; alerts it fired and not delivered yet are still delivered to the "
                        "application, not to its webhooks. 404 for an unknown rule.")
    def delete_alerting_rule(self, org: FromPath[str], app: FromPath[str], rule_id: FromPath[str],
                             request: Request[Any, Any, Any], ctx: Context) -> None:
        with recorded(ctx, request, org, app, operation="deleteAlertingRule", target_type="alerting_rule",
                      target_ids=[rule_id]):
            ctx.relay.delete_alerting_rule(org, app, rule_id)
