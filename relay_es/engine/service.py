"""The Relay application service: every command, on one event store.

:class:`Relay` is the application's command surface. Each command loads a fresh
aggregate, runs the domain command with the time read from the injected clock,
and saves. A conflicting save (another writer got there first) raises
``IntegrityError``; the whole command is retried on a fresh load. Conditional
commands used by timers and the process manager return ``False`` when the state
has moved on, instead of raising.

Where the rest lives:

* :mod:`relay_es.engine.store` -- the event store (the ``eventsourcing``
  Application): environment, transcodings, snapshots, save listeners, the
  executor cache, loading many streams;
* :mod:`relay_es.engine.commands` -- the command bus (``Op``, ``Batch``, ``execute``);
* :mod:`relay_es.engine.executor_commands` -- the executor commands, each written once;
* :mod:`relay_es.engine.action_commands` -- the operators' actions (who asked, what, the outcome);
* :mod:`relay_es.engine.alert_commands` -- alerting rules, their alerts and deliveries;
* :mod:`relay_es.engine.role_commands` -- an org's own roles;
* :mod:`relay_es.engine.member_commands` -- OIDC members and the roles granted them;
* this module -- applications, tokens, refusals and projection skips.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.persistence import IntegrityError

from relay_es.aggregates.action import Action
from relay_es.aggregates.application import (
    Application,
    AppSettings,
    SettingsPatch,
    app_stream_id,
    check_app_name,
    check_org_name,
)
from relay_es.aggregates.executor import Executor
from relay_es.aggregates.gate import Gate, gate_stream_id
from relay_es.aggregates.skip import ProjectionSkip, skip_stream_id
from relay_es.aggregates.token import Token, hash_secret, new_secret, token_stream_id
from relay_es.domain.autoscaling import AutoscalingPolicy
from relay_es.domain.clock import Clock
from relay_es.domain.defaults import EXECUTOR_TIMEOUT
from relay_es.domain.errors import InvalidSetting, UnknownApplication, UnknownToken
from relay_es.domain.roles import check_permissions, ordered
from relay_es.domain.text import sanitized
from relay_es.engine.action_commands import ActionCommands
from relay_es.engine.alert_commands import AlertCommands
from relay_es.engine.member_commands import MemberCommands
from relay_es.engine.role_commands import RoleCommands
from relay_es.engine.executor_commands import ExecutorCommands
from relay_es.engine.store import RelayStore
from relay_es.protocol.retention import RetentionPlan, plan as retention_plan


def check_token_name(name: str) -> str:
    """A token's name: the URL-safe alphabet of an application's name (it is a path segment too),
    refused as ``tokenName`` (``relay admin create-token`` said ``appName`` of a bad token name)."""
    try:
        return check_app_name(name)
    except InvalidSetting as e:
        raise InvalidSetting("tokenName", e.message) from None


def check_token_arguments(org: str, name: str, app_names: list[str] | None,
                          permissions: list[str] | None) -> list[str] | None:
    """:meth:`Relay.create_token`'s arguments checked (an :class:`InvalidSetting` naming the first
    that is not); returns the permissions in their order, or None for those of the token's scope."""
    check_org_name(org)
    check_token_name(name)
    if app_names is not None:
        if not isinstance(app_names, (list, tuple)):  # a str would be read letter by letter
            raise InvalidSetting("appNames", f"must be a list of names, got {type(app_names).__name__}")
        if not app_names:
            raise InvalidSetting("appNames", "must name at least one application; omit it (None) for an "
                                             "org-wide token")
        for a in app_names:
            check_app_name(a)
    if permissions is None:
        return None
    chosen = ordered(check_permissions("permissions", permissions))
    if not chosen:
        raise InvalidSetting("permissions", "must name at least one permission; omit it (null) for those of "
                                            "the token's scope")
    return chosen


class Relay(ActionCommands, AlertCommands, RoleCommands, MemberCommands, ExecutorCommands, RelayStore):
    """Every command of Relay, on one event store.

    ``default_grace``: how long a DISCONNECTED executor of an application that
    sets no ``executorTimeout`` has to come back before it is declared dead."""

    def __init__(self, env: Mapping[str, str] | None = None, *, clock: Clock,
                 default_grace: timedelta = EXECUTOR_TIMEOUT) -> None:
        super().__init__(env, clock=clock)
        self.default_grace = default_grace

    def grace_for(self, org: str, app: str) -> timedelta:
        return self.app_settings(org, app).grace(self.default_grace)

    # -------------------------------------------------------- applications
    def register_app(self, org: str, name: str, *, private_mode: bool | None = None) -> bool:
        """Register (PUT): idempotent. Returns True if anything was recorded."""
        check_org_name(org)
        check_app_name(name)

        def run() -> bool:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                app = Application(org=org, name=name, private_mode=bool(private_mode), timestamp=self.now())
            elif not app.register_again(private_mode=private_mode, at=self.now()):
                return False
            self.save(app)
            return True

        return self.retrying(run)

    def get_app(self, org: str, name: str) -> Application:
        app = self._maybe(app_stream_id(org, name))
        if app is None or app.deleted:
            raise UnknownApplication(org, name)
        return app

    def app_exists(self, org: str, name: str) -> bool:
        app = self._maybe(app_stream_id(org, name))
        return app is not None and not app.deleted

    def app_deleted(self, org: str, name: str) -> bool:
        """Whether the application was registered and has been deleted since
        (and not registered again): False for one never registered. One read of
        its stream, never cached, so a deletion by another writer is seen."""
        app = self._maybe(app_stream_id(org, name))
        return app is not None and bool(app.deleted)

    def app_ever_registered(self, org: str, name: str) -> bool:
        """Whether the application was registered, whether or not it is deleted since. One read of its
        stream, as :meth:`app_deleted`."""
        return self._maybe(app_stream_id(org, name)) is not None

    def app_settings(self, org: str, name: str) -> AppSettings:
        """Settings of a registered application; defaults for an unknown one."""
        app = self._maybe(app_stream_id(org, name))
        return app.settings if app is not None and not app.deleted else AppSettings()

    def update_app(self, org: str, name: str, patch: SettingsPatch) -> bool:
        return self._change_app(org, name, lambda app: app.change_settings(patch, at=self.now()))

    def _change_app(self, org: str, name: str, change: Callable[[Application], bool]) -> bool:
        """Runs ``change`` on the registered application and saves it if it recorded anything
        (``change`` says so); retried on a conflict. Returns whether anything was recorded."""
        def run() -> bool:
            app = self.get_app(org, name)
            if not change(app):
                return False
            self.save(app)
            return True

        return self.retrying(run)

    def autoscaling_policy(self, org: str, name: str) -> AutoscalingPolicy | None:
        """The application's autoscaling policy, or None; :class:`UnknownApplication` when it is not registered."""
        return self.get_app(org, name).autoscaling

    def set_autoscaling_policy(self, org: str, name: str, policy: AutoscalingPolicy) -> bool:
        return self._change_app(org, name, lambda app: app.set_autoscaling_policy(policy, at=self.now()))

    def clear_autoscaling_policy(self, org: str, name: str) -> bool:
        """Whether there was a policy to clear (noted for the operator's record)."""
        def clear(app: Application) -> bool:
            cleared = app.clear_autoscaling_policy(at=self.now())
            self.note(cleared=cleared)
            return cleared

        return self._change_app(org, name, clear)

    def delete_app(self, org: str, name: str) -> None:
        """Records the application deleted; its alerting rules' keys are erased first (ADR 28), those of
        the very version deleted: a rule made meanwhile conflicts with the save, and the retry erases its key."""

        def run() -> None:
            app = self.get_app(org, name)
            self.erase_rules_keys(app.alerting_rules)
            app.delete(at=self.now())
            self.save(app)

        self.retrying(run)

    def record_retention_plan(self, org: str, name: str, *, request_id: str, target_executor_id: str,
                              plan: RetentionPlan) -> RetentionPlan | None:
        """Records a retention round (``Application.record_retention_dispatched``) of ``plan``'s time, cut
        from the application's settings as the transaction reads them, and returns what was recorded: what
        to send.
        None (nothing recorded) when they want no retention now. A plan cut from the settings when its
        timer fired could outlive a change made since (a global timeout cleared, and sent anyway)."""
        def run() -> RetentionPlan | None:
            app = self.get_app(org, name)
            fresh = retention_plan(app.settings, plan.at or self.now())
            if fresh is None:
                return None
            app.record_retention_dispatched(
                request_id=request_id, target_executor_id=target_executor_id, gc_cutoff=fresh.gc_cutoff,
                gc_rows_threshold=fresh.gc_rows_threshold, timeout_cutoff=fresh.timeout_cutoff, at=self.now())
            self.save(app)
            return fresh

        return self.retrying(run)

    def last_retention_at(self, org: str, name: str) -> datetime | None:
        """When the application's last retention round was recorded, by any instance and before a
        restart too; None: never, or no such application."""
        app = self._maybe(app_stream_id(org, name))
        return None if app is None or app.deleted else app.last_retention_at

    def record_retention_answered(self, org: str, name: str, *, request_id: str, success: bool, error: str | None) -> None:
        def run() -> None:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                return
            app.record_retention_answered(request_id=sanitized(request_id, 200), success=success,
                                          error=sanitized(error), at=self.now())
            self.save(app)

        self.retrying(run)

    def record_violation(
        self, org: str, name: str, *, kind: str, detail: str, executor_id: str | None, peer: str | None, suppressed: int = 0
    ) -> bool:
        def run() -> bool:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                return False
            app.record_violation(kind=sanitized(kind, 100), detail=sanitized(detail, 500),
                                 executor_id=sanitized(executor_id, 200), peer=sanitized(peer, 200),
                                 suppressed=suppressed, at=self.now())
            self.save(app)
            return True

        return self.retrying(run)

    def record_refusal(self, org: str, *, app: str, peer: str, status: int, reason: str, suppressed: int = 0) -> None:
        """A refused executor handshake, for the org's audit log."""

        def run() -> None:
            gate = self._maybe(gate_stream_id(org))
            if gate is None:
                gate = Gate(org=org, timestamp=self.now())
            gate.refuse(app=sanitized(app, 200), peer=sanitized(peer, 200), status=status, reason=sanitized(reason, 500),
                        suppressed=suppressed, at=self.now())
            self.save(gate)

        self.retrying(run)

    def record_projection_skip(self, *, projection: str, notification_id: int, event: Any, reason: str,
                               event_type: str | None = None) -> bool:
        """A read model skipped ``event`` (notification ``notification_id``): recorded
        once, for the audit log (``projection.skipped``). Returns whether it was
        recorded now (False: recorded before, e.g. by an earlier run or a rebuild)."""
        sid = skip_stream_id(projection, notification_id)
        if self._maybe(sid) is not None:
            return False
        org, app = self._where(event)
        skip = ProjectionSkip(org=org, app=app, projection=projection, notification_id=notification_id,
                              stream_id=str(event.originator_id),
                              event_type=sanitized(event_type or type(event).__qualname__, 300) or "",
                              reason=sanitized(reason, 500) or "",
                              timestamp=self.now())
        try:
            self.save(skip)
        except IntegrityError:  # recorded meanwhile by another runner
            return False
        return True

    def _where(self, event: Any) -> tuple[str, str | None]:
        """(org, app) of the stream an event belongs to, as far as it can be told."""
        try:
            aggregate = self.repository.get(event.originator_id)
        except Exception:
            aggregate = None
        org = getattr(aggregate, "org", None) or getattr(event, "org", None)
        app = getattr(aggregate, "app", None) if isinstance(aggregate, (Executor, Action)) else (
            aggregate.name if isinstance(aggregate, Application) else None)
        org = org if isinstance(org, str) and len(org) <= 128 and "\x00" not in org else "-"
        app = app if isinstance(app, str) and len(app) <= 256 and "\x00" not in app else None
        return org, app

    # --------------------------------------------------------------- tokens
    def create_token(self, org: str, name: str, *, app_names: list[str] | None = None,
                     permissions: list[str] | None = None) -> str:
        """Makes a token and returns its secret: the only time it is ever seen.

        ``app_names``: the applications it is limited to, at least one; ``None`` (and
        only ``None``) makes an org-wide token. An empty list was read as "no limit":
        a caller that filtered every application out of its list got an org-wide key.
        ``permissions``: what it may do, at least one of the eight; ``None``: those of its scope.
        Whether the caller may grant them is the caller's check (the REST API's)."""
        chosen = check_token_arguments(org, name, app_names, permissions)
        secret = new_secret()

        def run() -> str:
            self.save(self._token_made(org, name, secret, app_names, chosen))
            return secret

        return self.retrying(run)

    def _token_made(self, org: str, name: str, secret: str, app_names: list[str] | None,
                    permissions: list[str] | None) -> Token:
        """The token ``name`` made (or made again, if revoked) with ``secret``, not saved yet; its
        arguments checked by the caller."""
        tok = self._maybe(token_stream_id(org, name))
        apps = None if app_names is None else sorted(set(app_names))
        if tok is None:
            tok = Token(org=org, name=name, secret_hash=hash_secret(secret), app_names=apps, timestamp=self.now())
        else:
            tok.reissue(secret_hash=hash_secret(secret), app_names=apps, at=self.now())
        if permissions is not None:
            tok.set_permissions(permissions, at=self.now())
        return tok

    def revoke_token(self, org: str, name: str, *,
                     may_revoke: Callable[[list[str] | None, list[str] | None], None] = lambda apps, perms: None,
                     ) -> None:
        """:class:`UnknownToken` when there is no token of that name. ``may_revoke(app_names, permissions)``
        is asked of a live token before it is revoked (its app names and permissions as made, None for
        org-wide and those of its scope, read by this run: a token made again meanwhile is asked of as it
        is now) and refuses by raising."""
        def run() -> None:
            tok = self._maybe(token_stream_id(org, name))
            if tok is None:
                raise UnknownToken(org, name)
            if not tok.revoked:
                may_revoke(tok.app_names, getattr(tok, "permissions", None))
            tok.revoke(at=self.now())
            self.save(tok)

        self.retrying(run)
