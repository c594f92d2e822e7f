"""The members commands: who signs in with OIDC, and the roles granted them
(:class:`~relay_es.aggregates.members.OrgMembers`). A mixin of :class:`~relay_es.engine.service.Relay`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from relay_es.aggregates.members import MAX_FIELD, OrgMembers, members_stream_id
from relay_es.domain.errors import InvalidSetting, UnknownMember, UnknownRole
from relay_es.domain.text import check_id, sanitized


def _check_username(username: str) -> None:
    check_id("username", username)
    try:
        username.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSetting("username", "must be text: it holds a lone surrogate") from None


class MemberCommands:
    _maybe: Callable[[uuid.UUID], Any]
    save: Callable[..., Any]
    retrying: Callable[[Callable[[], Any]], Any]
    now: Callable[[], datetime]
    role: Callable[[str, str], list[str] | None]

    def members(self, org: str) -> dict[str, dict[str, Any]]:
        """username -> what is known (``email``, ``name``, ``given_name``, ``family_name``, ``role``
        granted or None, ``since``)."""
        m = self._maybe(members_stream_id(org))
        return {} if m is None else dict(m.members)

    def member(self, org: str, username: str) -> dict[str, Any] | None:
        return self.members(org).get(username)

    def member_seen(self, org: str, username: str, *, email: str, name: str, given_name: str,
                    family_name: str) -> None:
        """A member signed in: recorded the first time (one event per person, ever)."""
        _check_username(username)
        cut = MAX_FIELD - 1  # sanitized() adds its "…" past the limit

        def run() -> None:
            m = self._maybe(members_stream_id(org)) or OrgMembers(org=org, timestamp=self.now())
            if m.see(username, email=str(sanitized(email, cut)), name=str(sanitized(name, cut)),
                     given_name=str(sanitized(given_name, cut)), family_name=str(sanitized(family_name, cut)),
                     at=self.now()):
                self.save(m)

        self.retrying(run)

    def grant_role(self, org: str, username: str, role: str) -> bool:
        """:class:`UnknownRole` for a role the org does not have."""
        _check_username(username)

        def run() -> bool:
            if self.role(org, role) is None:  # read again on a retry: a role deleted meanwhile is not granted
                raise UnknownRole(org, role)
            m = self._maybe(members_stream_id(org)) or OrgMembers(org=org, timestamp=self.now())
            if not m.grant(username, role, at=self.now()):
                return False
            self.save(m)
            return True

        return bool(self.retrying(run))

    def remove_member(self, org: str, username: str) -> dict[str, Any]:
        """Forgets a member and their grant; :class:`UnknownMember` when there is none."""
        def run() -> dict[str, Any]:
            m = self._maybe(members_stream_id(org))
            known = None if m is None else m.remove(username, at=self.now())
            if known is None:
                raise UnknownMember(org, username)
            self.save(m)
            return known

        return dict(self.retrying(run))
