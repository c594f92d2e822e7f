"""The alerting commands: rules (on the application's stream) and their alerts and deliveries
(on each rule's :class:`~relay_es.aggregates.alert.AlertFirings` stream).

A mixin of :class:`~relay_es.engine.service.Relay`, like the action commands.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.persistence import IntegrityError

from relay_es.aggregates.alert import AlertFirings, firings_stream_id
from relay_es.aggregates.application import Application
from relay_es.aggregates.executor import DisconnectReason, Executor
from relay_es.domain.alerting import AlertingRule, SealedWebhook, Webhook, key_scope, parse_metadata
from relay_es.domain.errors import InvalidSetting, RelayError, UnknownAlertingRule
from relay_es.domain.ids import new_id
from relay_es.domain.sealing import KeyStore
from relay_es.domain.text import sanitized

HISTORY_PAGE = 100  # events of an executor's stream read at once, from its end back (disconnects())
class AlertCommands:
    """Needs the store's ``_maybe``, ``save``, ``retrying``, ``now``, ``load_many``, ``keys``, ``repository``,
    and the service's ``get_app`` and ``_change_app``.

    A rule's webhooks are sealed under a key of the rule's own (``keys``, outside the log) before
    the rule is recorded, and the key is erased before the rule's deletion, or its application's,
    is recorded: a deletion recorded has always erased them (a deletion that fails after the erasure
    leaves a rule whose webhooks no longer open, which deleting it again ends)."""

    _maybe: Callable[[uuid.UUID], Any]
    save: Callable[..., Any]
    note: Callable[..., None]
    retrying: Callable[[Callable[[], Any]], Any]
    now: Callable[[], datetime]
    load_many: Callable[[list[uuid.UUID]], dict[uuid.UUID, Any]]
    get_app: Callable[[str, str], Application]
    keys: KeyStore
    repository: Any
    app_exists: Callable[[str, str], bool]
    _change_app: Callable[[str, str, Callable[[Application], bool]], bool]

    def alerting_rules(self, org: str, app: str) -> list[tuple[AlertingRule, datetime | None]]:
        """The application's rules, oldest first, each with when it last fired
        (:class:`~relay_es.domain.errors.UnknownApplication` for an application not registered)."""
        rules = self.get_app(org, app).alerting_rules
        firings = self.load_many([firings_stream_id(org, app, r.id) for r in rules])
        out = []
        for r in rules:
            f = firings.get(firings_stream_id(org, app, r.id))
            out.append((r, None if f is None else f.last_fired_at))
        return out

    def create_alerting_rule(self, org: str, app: str, *, rule_type: str, metadata: Any,
                             min_interval_secs: int, receiving_app: str | None) -> AlertingRule:
        """Makes a rule (ids are Relay's). The receiving application must be registered
        (:class:`InvalidSetting` naming ``receivingAppName``)."""
        parameters, webhooks = parse_metadata(rule_type, metadata)
        receiver = app if receiving_app is None else receiving_app
        if receiver != app and not self.app_exists(org, receiver):  # the watched one: 404 when the rule is saved
            raise InvalidSetting("receivingAppName", f"no application {receiver[:256]!r} is registered in org {org!r}")
        rule = AlertingRule(id=new_id(), org=org, app=app, receiving_app=receiver, rule_type=rule_type,
                            parameters=parameters, webhooks=webhooks, min_interval_secs=min_interval_secs).check()
        if rule.webhooks:
            rule = rule.sealed(self.keys.create(key_scope(rule.id)))  # the key kept before the rule is recorded

        def create(a: Application) -> bool:
            a.create_alerting_rule(rule, at=self.now())
            self.note(ruleId=rule.id)  # for the operator's record
            return True

        try:
            self._change_app(org, app, create)
        except (RelayError, IntegrityError):  # refused (no such application, too many rules) or every retry
            # met another writer's change: nothing was recorded under the key. Another failure may have come
            # after the commit (a connection lost as it answered): the key is kept, a row, not a rule's secrets
            self.erase_rules_keys([rule])
            raise
        return rule

    def delete_alerting_rule(self, org: str, app: str, rule_id: str) -> None:
        """:class:`UnknownAlertingRule` when the application has no rule of that id. The rule's key
        is erased first (only a rule of this application's: a rule id is no capability)."""
        rule = self.get_app(org, app).alerting_rule(rule_id)
        if rule is None:
            raise UnknownAlertingRule(org, app, rule_id)
        self.erase_rules_keys([rule])
        if not self._change_app(org, app, lambda a: a.delete_alerting_rule(rule_id, at=self.now())):
            raise UnknownAlertingRule(org, app, rule_id)

    def erase_rules_keys(self, rules: Iterable[AlertingRule]) -> None:
        """Erases the keys of ``rules`` (those with webhooks have one), before their end is recorded."""
        for rule in rules:
            if rule.webhooks:
                self.keys.delete(key_scope(rule.id))

    def open_webhook(self, rule: AlertingRule, index: int) -> Webhook | None:
        """The rule's ``index``-th webhook with its URL and secret, to post to; None when the rule's
        key is missing (erased with the rule, or a store restored without ``relay_sealing_keys``).
        :class:`~relay_es.domain.sealing.Unsealable` when it does not open with the key (the store's
        key or event altered). A rule made before webhooks were sealed holds them as they are."""
        hook = rule.webhooks[index]
        if isinstance(hook, Webhook):
            return hook
        key = self.keys.get(key_scope(rule.id))
        return None if key is None else hook.opened(key, rule.id, index)

    def rules_without_keys(self, rules: Iterable[AlertingRule]) -> int:
        """How many of ``rules`` have sealed webhooks and no key to open them (one key read a rule
        with sealed webhooks)."""
        return sum(1 for r in rules
                   if any(isinstance(w, SealedWebhook) for w in r.webhooks) and self.keys.get(key_scope(r.id)) is None)

    def fire_alert(self, rule: AlertingRule, *, alert_id: str, message: str, metadata: dict[str, str],
                   channels: list[str], cause: str | None = None, at: datetime | None = None) -> bool:
        """Records an alert of ``rule`` unless its last one is less than its ``minIntervalSecs``
        old. Returns whether it was recorded (its delivery follows from the event)."""
        sid = firings_stream_id(rule.org, rule.app, rule.id)
        clean = {str(sanitized(str(k), 128)): str(sanitized(str(v), 1024)) for k, v in list(metadata.items())[:32]}

        def run() -> bool:
            when = at or self.now()
            f = self._maybe(sid)
            if f is None:
                f = AlertFirings(org=rule.org, app=rule.app, rule_id=rule.id, timestamp=when)
            if not f.fire(alert_id=alert_id, rule_type=rule.rule_type, receiving_app=rule.receiving_app,
                          message=str(sanitized(message, 4096)), metadata=clean, channels=channels, cause=cause,
                          min_interval=timedelta(seconds=rule.min_interval_secs), at=when):
                return False
            self.save(f)
            return True

        return bool(self.retrying(run))

    def record_alert_delivery(self, org: str, app: str, rule_id: str, *, alert_id: str, channel: str, attempt: int,
                              ok: bool, detail: str | None, final: bool) -> None:
        sid = firings_stream_id(org, app, rule_id)

        def run() -> None:
            f = self._maybe(sid)
            if f is None:
                raise UnknownAlertingRule(org, app, rule_id)
            f.record_delivery(alert_id=alert_id, channel=channel, attempt=attempt, ok=ok,
                              detail=sanitized(detail, 499), final=final, at=self.now())
            self.save(f)

        self.retrying(run)

    def disconnects(self, executor: uuid.UUID, *, before: int, since: datetime, excluding: Collection[str] = (),
                    limit: int = 1000) -> list[datetime]:
        """When the executor of stream ``executor`` disconnected (its ``Disconnected`` events, but for the
        reasons in ``excluding``) after ``since``, among its events before version ``before`` and in its
        incarnation (after its last death, its deletion, or its application's: a disconnect
        :attr:`~relay_es.aggregates.executor.DisconnectReason.APP_DELETED`); oldest first, at most ``limit`` (the latest). Read from the stream's end back,
        :data:`HISTORY_PAGE` events at a time, down to the first event at or before ``since``, its
        incarnation's start, or the limit: what an ``ExecutorFlapping`` rule counts of an executor's past,
        however long its stream."""
        out: list[datetime] = []
        top = before - 1
        while top > 0 and len(out) < limit:
            page = list(self.repository.event_store.get(executor, lte=top, desc=True, limit=HISTORY_PAGE))
            for e in page:
                if e.timestamp <= since or isinstance(e, (Executor.DeclaredDead, Executor.Deleted)) or (
                        isinstance(e, Executor.Disconnected) and e.reason == DisconnectReason.APP_DELETED):
                    return out[::-1]
                if isinstance(e, Executor.Disconnected) and e.reason not in excluding:
                    out.append(e.timestamp)
                    if len(out) == limit:
                        break
            if len(page) < HISTORY_PAGE:
                break
            top = page[-1].originator_version - 1
        return out[::-1]
