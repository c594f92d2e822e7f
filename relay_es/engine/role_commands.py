"""The roles commands: an org's own roles, beside the built-in ones
(:class:`~relay_es.aggregates.roles.OrgRoles`). A mixin of :class:`~relay_es.engine.service.Relay`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from relay_es.aggregates.members import OrgMembers, members_stream_id
from relay_es.aggregates.roles import OrgRoles, roles_stream_id
from relay_es.domain.errors import UnknownRole
from relay_es.domain.roles import BUILT_IN, ordered


class RoleCommands:
    _maybe: Callable[[uuid.UUID], Any]
    save: Callable[..., Any]
    retrying: Callable[[Callable[[], Any]], Any]
    now: Callable[[], datetime]

    def roles(self, org: str) -> list[tuple[str, bool, list[str]]]:
        """``(name, built in, permissions)``: the built-in roles, then the org's own by name."""
        own = self._maybe(roles_stream_id(org))
        out = [(name, True, ordered(perms)) for name, perms in BUILT_IN.items()]
        if own is not None:
            out += [(name, False, list(perms)) for name, perms in sorted(own.roles.items())]
        return out

    def role(self, org: str, name: str) -> list[str] | None:
        """The permissions of role ``name`` in ``org``, or None when there is none."""
        for n, _, perms in self.roles(org):
            if n == name:
                return perms
        return None

    def create_role(self, org: str, name: str, permissions: list[str]) -> list[str]:
        def run() -> list[str]:
            roles = self._maybe(roles_stream_id(org)) or OrgRoles(org=org, timestamp=self.now())
            chosen = roles.create(name, permissions, at=self.now())
            self.save(roles)
            return chosen

        return self.retrying(run)

    def delete_role(self, org: str, name: str) -> None:
        """:class:`UnknownRole` when the org has no role of that name; :class:`IllegalTransition` for a
        built-in one, or one granted to anyone. The deletion is recorded on the roles' stream and the
        members' (:meth:`OrgMembers.role_deleted`) in one transaction: a grant of the role saved
        meanwhile conflicts with it, and the run again finds it granted (as a grant run again after the
        deletion finds no such role)."""
        def run() -> None:
            m = self._maybe(members_stream_id(org)) or OrgMembers(org=org, timestamp=self.now())
            m.role_deleted(name, at=self.now())  # refuses while anyone holds a grant of it
            roles = self._maybe(roles_stream_id(org))
            if roles is None or not roles.delete(name, at=self.now()):
                if name.lower() in BUILT_IN:
                    (roles or OrgRoles(org=org, timestamp=self.now())).delete(name, at=self.now())  # refuses
                raise UnknownRole(org, name)
            self.save(roles, m)

        self.retrying(run)
