"""Relay's exception hierarchy.

* RelayError
  * DomainError -- a command that the current state does not allow
    * IllegalTransition -- the state machine refuses this transition (revoking a
      revoked token, deleting a deleted application, a stale recovery answer)
      * StaleConnection -- the command names a connection that is no longer current
      * NotDue -- a deadline has not come yet by the injected clock
    * UnknownApplication -- never registered, or deleted
    * UnknownExecutor -- no such executor stream
    * UnknownToken -- no token of that name was ever created
    * MembershipChanged -- a signed-in member was removed, or given another role, after the
      request was let in on the membership it had
    * UnknownAlertingRule -- the application has no alerting rule of that id
    * UnknownRole -- the org has no role of that name (built in or its own)
    * UnknownMember -- the org has no member of that username
  * InvalidSetting -- a value refused at the boundary (also a ``ValueError``;
    names the field, and the unit where there is one)
"""

from __future__ import annotations


class RelayError(Exception):
    """Base class of every error Relay raises on purpose."""


class DomainError(RelayError):
    """A command the current state of an aggregate does not allow."""


class IllegalTransition(DomainError):
    def __init__(self, entity: str, state: object, command: str, why: str = "") -> None:
        self.entity = entity
        self.state = state
        self.command = command
        msg = f"{entity}: cannot {command} while {state}"
        if why:
            msg += f" ({why})"
        super().__init__(msg)


class StaleConnection(IllegalTransition):
    """The connection named is not the executor's current connection."""


class NotDue(IllegalTransition):
    """The deadline has not come yet by the injected clock."""


class UnknownApplication(DomainError):
    def __init__(self, org: str, app: str) -> None:
        super().__init__(f"application {app!r} is not registered in org {org!r}")
        self.org, self.app = org, app


class UnknownExecutor(DomainError):
    def __init__(self, org: str, app: str, executor_id: str) -> None:
        super().__init__(
            f"executor {executor_id!r} of application {app!r} in org {org!r} is unknown"
        )


class UnknownToken(DomainError):
    def __init__(self, org: str, name: str) -> None:
        super().__init__(f"token {name!r} does not exist in org {org!r}")


class MembershipChanged(DomainError):
    """The member record a sign-in was let in on (its ``since`` and granted role) is no longer the one
    on record: the member was removed (and perhaps added again), or given another role, since."""

    def __init__(self, org: str, username: str) -> None:
        super().__init__(f"the membership of {username[:256]!r} in org {org!r} changed since this request was let "
                         "in (removed, or given another role); sign in again")
        self.org, self.username = org, username


class UnknownAlertingRule(DomainError):
    def __init__(self, org: str, app: str, rule_id: str) -> None:
        super().__init__(f"application {app!r} in org {org!r} has no alerting rule {rule_id!r}")


class UnknownRole(DomainError):
    def __init__(self, org: str, name: str) -> None:
        super().__init__(f"org {org!r} has no role {name!r}")


class UnknownMember(DomainError):
    def __init__(self, org: str, username: str) -> None:
        super().__init__(f"org {org!r} has no member {username[:256]!r}")


class InvalidSetting(RelayError, ValueError):
    """A value refused at the boundary. ``field`` is the name the user typed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
