"""The Application aggregate: registration and per-application settings.

Settings are held as typed values: durations are ``timedelta``, the rows
threshold an ``int``. Seconds and milliseconds exist only at the boundary
(:mod:`relay_es.domain.units`, the REST API), never in here.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.domain import Aggregate, event

from relay_es.domain.alerting import MAX_RULES, AlertingRule
from relay_es.domain.autoscaling import AutoscalingPolicy, Rollout
from relay_es.domain.errors import IllegalTransition, InvalidSetting

NAMESPACE = uuid.UUID("0c8e7d2a-5b4f-4f6e-8a1d-7e3c9b2f1a64")

# Python, TypeScript and Java put the name into the WebSocket path unescaped.
APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,255}")  # whole string: fullmatch, never ^...$ ("x\n")
ORG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,127}")


def check_app_name(name: str) -> str:
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise InvalidSetting(
            "appName",
            "must be 1-256 URL-safe characters (letters, digits, . _ ~ -), starting with a letter or digit",
        )
    return name


def check_org_name(name: str) -> str:
    if not isinstance(name, str) or not ORG_NAME.fullmatch(name):
        raise InvalidSetting("orgName", "must be 1-128 URL-safe characters (letters, digits, . _ ~ -)")
    return name


def app_stream_id(org: str, name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"app/{org}/{name}")


@dataclass(frozen=True)
class AppSettings:
    """Per-application settings; ``None`` means "not set" (use the default or disable)."""

    executor_timeout: timedelta | None = None
    gc_time_threshold: timedelta | None = None
    gc_rows_threshold: int | None = None
    global_timeout: timedelta | None = None
    private_mode: bool = False

    def grace(self, default: timedelta) -> timedelta:
        return self.executor_timeout if self.executor_timeout is not None else default

    @property
    def wants_retention(self) -> bool:
        return any(
            v is not None for v in (self.gc_time_threshold, self.gc_rows_threshold, self.global_timeout)
        )


_UNSET = object()


@dataclass(frozen=True)
class SettingsPatch:
    """Only the fields given change. ``None`` on a nullable field clears it."""

    executor_timeout: object = _UNSET
    gc_time_threshold: object = _UNSET
    gc_rows_threshold: object = _UNSET
    global_timeout: object = _UNSET
    private_mode: object = _UNSET

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not _UNSET}

    def apply_to(self, settings: AppSettings) -> AppSettings:
        return replace(settings, **self.given())


class Application(Aggregate):
    # The autoscaling policy as primitives (snapshots), None when there is none; a stream or a
    # snapshot recorded before policies existed has none.
    _autoscaling: dict[str, object] | None = None
    # The alerting rules as primitives, by id, in the order made (None: a stream from before rules).
    _alert_rules: dict[str, dict[str, Any]] | None = None
    # When its last retention round was recorded (None: never, or a snapshot from before this was kept).
    last_retention_at: datetime | None = None

    @staticmethod
    def create_id(org: str, name: str) -> uuid.UUID:
        return app_stream_id(org, name)

    @event("Registered")
    def __init__(self, org: str, name: str, private_mode: bool, timestamp: datetime) -> None:
        self.org = org
        self.name = name
        self.settings = AppSettings(private_mode=private_mode)
        self.deleted = False
        self._autoscaling = None
        self._alert_rules = None

    @property
    def autoscaling(self) -> AutoscalingPolicy | None:
        return None if self._autoscaling is None else AutoscalingPolicy.from_dict(self._autoscaling)

    def _refuse(self, command: str, why: str) -> None:
        raise IllegalTransition(f"application {self.name!r}", "deleted" if self.deleted else "registered", command, why)

    def register_again(self, *, private_mode: bool | None, at: datetime) -> bool:
        """PUT on an existing application: idempotent. Returns whether anything was recorded."""
        if self.deleted:
            self._restored(private_mode=bool(private_mode), timestamp=at)
            return True
        if private_mode is not None and private_mode != self.settings.private_mode:
            self.change_settings(SettingsPatch(private_mode=private_mode), at=at)
            return True
        return False

    @event("Restored")
    def _restored(self, private_mode: bool, timestamp: datetime) -> None:
        self.deleted = False
        self.settings = AppSettings(private_mode=private_mode)
        self._autoscaling = None
        self._alert_rules = None

    def change_settings(self, patch: SettingsPatch, *, at: datetime) -> bool:
        if self.deleted:
            self._refuse("change settings", "it was deleted")
        if not isinstance(patch.apply_to(self.settings).private_mode, bool):
            raise InvalidSetting("privateMode", "must be true or false")
        new = patch.apply_to(self.settings)
        changed = [f.name for f in fields(AppSettings) if getattr(new, f.name) != getattr(self.settings, f.name)]
        if not changed:
            return False
        self._settings_changed(
            executor_timeout=new.executor_timeout,
            gc_time_threshold=new.gc_time_threshold,
            gc_rows_threshold=new.gc_rows_threshold,
            global_timeout=new.global_timeout,
            private_mode=new.private_mode,
            changed=changed,
            timestamp=at,
        )
        return True

    @event("SettingsChanged")
    def _settings_changed(
        self,
        executor_timeout: timedelta | None,
        gc_time_threshold: timedelta | None,
        gc_rows_threshold: int | None,
        global_timeout: timedelta | None,
        private_mode: bool,
        changed: list[str],
        timestamp: datetime,
    ) -> None:
        self.settings = AppSettings(
            executor_timeout=executor_timeout,
            gc_time_threshold=gc_time_threshold,
            gc_rows_threshold=gc_rows_threshold,
            global_timeout=global_timeout,
            private_mode=private_mode,
        )

    def delete(self, *, at: datetime) -> None:
        if self.deleted:
            self._refuse("delete", "it is already deleted")
        self._deleted(timestamp=at)

    @event("Deleted")
    def _deleted(self, timestamp: datetime) -> None:
        self.deleted = True
        self._autoscaling = None
        self._alert_rules = None

    # ------------------------------------------------------------ autoscaling
    def set_autoscaling_policy(self, policy: AutoscalingPolicy, *, at: datetime) -> bool:
        """Stores ``policy`` (Conductor's ``setAutoscalingPolicy``); False when it is the one stored."""
        if self.deleted:
            self._refuse("set an autoscaling policy", "it was deleted")
        policy.check()
        if policy == self.autoscaling:
            return False
        r = policy.rollout
        self._autoscaling_policy_set(queue=policy.queue, rollout=r is not None,
                                     max_old_versions=None if r is None else r.max_old_versions,
                                     max_old_executors=None if r is None else r.max_old_executors, timestamp=at)
        return True

    @event("AutoscalingPolicySet")
    def _autoscaling_policy_set(self, queue: str, rollout: bool, max_old_versions: int | None,
                                max_old_executors: int | None, timestamp: datetime) -> None:
        self._autoscaling = AutoscalingPolicy(
            queue, Rollout(max_old_versions, max_old_executors) if rollout else None).as_dict()  # not checked again

    def clear_autoscaling_policy(self, *, at: datetime) -> bool:
        """Clears the policy (``deleteAutoscalingPolicy``); False when there was none."""
        if self.deleted:
            self._refuse("delete an autoscaling policy", "it was deleted")
        if self.autoscaling is None:
            return False
        self._autoscaling_policy_cleared(timestamp=at)
        return True

    @event("AutoscalingPolicyCleared")
    def _autoscaling_policy_cleared(self, timestamp: datetime) -> None:
        self._autoscaling = None

    # ---------------------------------------------------------- alerting rules
    @property
    def alerting_rules(self) -> list[AlertingRule]:
        """The application's alerting rules, oldest first."""
        return [AlertingRule.from_dict(d) for d in (self._alert_rules or {}).values()]

    def alerting_rule(self, rule_id: str) -> AlertingRule | None:
        d = (self._alert_rules or {}).get(rule_id)
        return None if d is None else AlertingRule.from_dict(d)

    def create_alerting_rule(self, rule: AlertingRule, *, at: datetime) -> None:
        """Adds ``rule`` (Conductor's ``createAlertingRule``), at most :data:`MAX_RULES` of them."""
        if self.deleted:
            self._refuse("create an alerting rule", "it was deleted")
        rule.check()
        if rule.org != self.org or rule.app != self.name:
            raise InvalidSetting("rule", "belongs to another application")
        if rule.id in (self._alert_rules or {}):
            raise InvalidSetting("id", "a rule of that id exists")
        if len(self._alert_rules or {}) >= MAX_RULES:
            raise InvalidSetting("ruleType", f"an application has at most {MAX_RULES} alerting rules; delete one first")
        self._alerting_rule_created(rule=rule.as_dict(), timestamp=at)

    @event("AlertingRuleCreated")
    def _alerting_rule_created(self, rule: dict[str, Any], timestamp: datetime) -> None:
        self._alert_rules = {**(self._alert_rules or {}), rule["id"]: rule}  # not checked again

    def delete_alerting_rule(self, rule_id: str, *, at: datetime) -> bool:
        """Removes the rule; False when there is none of that id."""
        if self.deleted:
            self._refuse("delete an alerting rule", "it was deleted")
        if rule_id not in (self._alert_rules or {}):
            return False
        self._alerting_rule_deleted(rule_id=rule_id, timestamp=at)
        return True

    @event("AlertingRuleDeleted")
    def _alerting_rule_deleted(self, rule_id: str, timestamp: datetime) -> None:
        self._alert_rules = {k: v for k, v in (self._alert_rules or {}).items() if k != rule_id}

    # ----------------------------------------------------- retention, hygiene
    def record_retention_dispatched(
        self,
        *,
        request_id: str,
        target_executor_id: str,
        gc_cutoff: datetime | None,
        gc_rows_threshold: int | None,
        timeout_cutoff: datetime | None,
        at: datetime,
    ) -> None:
        if self.deleted:
            self._refuse("send retention", "it was deleted")
        self._retention_dispatched(
            request_id=request_id,
            target_executor_id=target_executor_id,
            gc_cutoff=gc_cutoff,
            gc_rows_threshold=gc_rows_threshold,
            timeout_cutoff=timeout_cutoff,
            timestamp=at,
        )

    @event("RetentionDispatched")
    def _retention_dispatched(
        self,
        request_id: str,
        target_executor_id: str,
        gc_cutoff: datetime | None,
        gc_rows_threshold: int | None,
        timeout_cutoff: datetime | None,
        timestamp: datetime,
    ) -> None:
        self.last_retention_at = timestamp

    def record_retention_answered(self, *, request_id: str, success: bool, error: str | None, at: datetime) -> None:
        self._retention_answered(request_id=request_id, success=success, error=error, timestamp=at)

    @event("RetentionAnswered")
    def _retention_answered(self, request_id: str, success: bool, error: str | None, timestamp: datetime) -> None:
        pass

    def record_violation(
        self, *, kind: str, detail: str, executor_id: str | None, peer: str | None, suppressed: int, at: datetime
    ) -> None:
        """Hostile or broken input from an executor socket (throttled by the hub)."""
        self._protocol_violated(
            kind=kind, detail=detail[:500], executor_id=executor_id, peer=peer, suppressed=suppressed, timestamp=at
        )

    @event("ProtocolViolated")
    def _protocol_violated(
        self, kind: str, detail: str, executor_id: str | None, peer: str | None, suppressed: int, timestamp: datetime
    ) -> None:
        pass
