"""The OrgRoles aggregate: an org's own roles (named sets of permissions).

One stream per org, made with its first role. The built-in roles (``admin``, ``operator``,
``viewer``: :data:`relay_es.domain.roles.BUILT_IN`) are not stored: they are the same in every
org and cannot be made, changed or deleted.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from eventsourcing.domain import Aggregate, event

from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.domain.roles import BUILT_IN, MAX_ROLES, check_permissions, check_role_name, ordered

NAMESPACE = uuid.UUID("8f2d6a41-93c7-4e0b-b5a8-2c7e1d9f4b36")


def roles_stream_id(org: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"roles/{org}")


class OrgRoles(Aggregate):
    @staticmethod
    def create_id(org: str) -> uuid.UUID:
        return roles_stream_id(org)

    @event("Opened")
    def __init__(self, org: str, timestamp: datetime) -> None:
        self.org = org
        self.roles: dict[str, list[str]] = {}

    def create(self, name: str, permissions: list[str], *, at: datetime) -> list[str]:
        """Makes role ``name``; returns its permissions, in the usual order."""
        check_role_name(name)
        chosen = ordered(check_permissions("permissions", permissions))
        if name.lower() in BUILT_IN:
            raise IllegalTransition(f"role {name!r}", "built in", "create", "a built-in role has that name")
        if name in self.roles:
            raise IllegalTransition(f"role {name!r}", "existing", "create", "a role of that name exists; delete it first")
        if len(self.roles) >= MAX_ROLES:
            raise InvalidSetting("name", f"an org has at most {MAX_ROLES} roles of its own; delete one first")
        self._created(name=name, permissions=chosen, timestamp=at)
        return chosen

    @event("RoleCreated")
    def _created(self, name: str, permissions: list[str], timestamp: datetime) -> None:
        self.roles = {**self.roles, name: list(permissions)}

    def delete(self, name: str, *, at: datetime) -> bool:
        """Deletes role ``name``; False when the org has none of that name."""
        if name.lower() in BUILT_IN:
            raise IllegalTransition(f"role {name!r}", "built in", "delete", "a built-in role cannot be deleted")
        if name not in self.roles:
            return False
        self._deleted(name=name, timestamp=at)
        return True

    @event("RoleDeleted")
    def _deleted(self, name: str, timestamp: datetime) -> None:
        self.roles = {k: v for k, v in self.roles.items() if k != name}
