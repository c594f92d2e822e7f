"""The members commands: who signs in with OIDC, and the roles granted them
(:class:`~relay_es.aggregates.members.OrgMembers`). A mixin of :class:`~relay_es.engine.service.Relay`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from relay_es.aggregates.application import check_app_name, check_org_name
from relay_es.aggregates.members import MAX_FIELD, OrgMembers, members_stream_id
from relay_es.aggregates.token import Token, new_secret, token_stream_id
from relay_es.domain.errors import InvalidSetting, MembershipChanged, UnknownMember, UnknownRole, UnknownToken
from relay_es.domain.roles import check_permissions, ordered
from relay_es.domain.text import check_id, sanitized


# A member record as a sign-in read it: its ``since`` and the role granted them (None: their groups' role).
Membership = tuple[str, str | None]


def membership_of(known: dict[str, Any] | None) -> Membership | None:
    """The membership a member record (as :meth:`MemberCommands.member` answers it) is; None for no record."""
    return None if known is None else (str(known.get("since", "")), known.get("role"))


def _check_username(username: str) -> None:
    check_id("username", username)
    try:
        username.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSetting("username", "must be text: it holds a lone surrogate") from None


class MemberCommands:
    _maybe: Callable[[uuid.UUID], Any]
    save: Callable[..., Any]
    note: Callable[..., None]
    retrying: Callable[[Callable[[], Any]], Any]
    now: Callable[[], datetime]
    role: Callable[[str, str], list[str] | None]
    _token_made: Callable[..., Token]
    load_many: Callable[[list[uuid.UUID]], dict[uuid.UUID, Any]]

    def members(self, org: str) -> dict[str, dict[str, Any]]:
        """username -> what is known (``email``, ``name``, ``given_name``, ``family_name``, ``role``
        granted or None, ``since``, and once a sign-in found what their groups give, ``group_role`` and
        ``group_role_iat``)."""
        m = self._maybe(members_stream_id(org))
        return {} if m is None else dict(m.members)

    def member(self, org: str, username: str) -> dict[str, Any] | None:
        return self.members(org).get(username)

    def member_seen(self, org: str, username: str, *, email: str, name: str, given_name: str,
                    family_name: str, group_role: str | None = None, groups_issued_at: int | None = None) -> None:
        """A member signed in: recorded the first time (one event per person, ever); and with
        ``groups_issued_at`` (the issue time of a token that carried their groups), the role those
        groups gave them (``group_role``) whenever it is not the one last recorded and the token is
        newer than the one that gave that."""
        _check_username(username)
        cut = MAX_FIELD - 1  # sanitized() adds its "…" past the limit

        def run() -> None:
            m = self._maybe(members_stream_id(org)) or OrgMembers(org=org, timestamp=self.now())
            seen = m.see(username, email=str(sanitized(email, cut)), name=str(sanitized(name, cut)),
                         given_name=str(sanitized(given_name, cut)), family_name=str(sanitized(family_name, cut)),
                         at=self.now())
            gave = groups_issued_at is not None and m.groups_gave(username, group_role, issued_at=groups_issued_at,
                                                                   at=self.now())
            if seen or gave:
                self.save(m)

        self.retrying(run)

    def grant_role(self, org: str, username: str, role: str, *,
                   may_grant: Callable[[list[str] | None, dict[str, Any] | None], None] = lambda perms, known: None,
                   ) -> bool:
        """:class:`UnknownRole` for a role the org does not have. ``may_grant(permissions, known)`` is
        asked before anything changes, with the role's permissions (None: no such role) and what is
        known of the member (None: nothing), as this run read them and saves on them, and refuses by
        raising. The members are read before the role: a deletion of the role (which records on the
        members' stream too) saved after that read makes this save conflict, and the run again finds
        no such role."""
        _check_username(username)

        def run() -> bool:
            m = self._maybe(members_stream_id(org)) or OrgMembers(org=org, timestamp=self.now())
            perms = self.role(org, role)
            known = m.members.get(username)
            may_grant(perms, None if known is None else dict(known))
            if perms is None:
                raise UnknownRole(org, role)
            changed = m.grant(username, role, at=self.now())
            self.note(changed=changed)  # for the operator's record
            if not changed:
                return False
            self.save(m)
            return True

        return bool(self.retrying(run))

    def remove_member(self, org: str, username: str, *,
                      may_change: Callable[[dict[str, Any] | None], None] = lambda known: None,
                      may_revoke: Callable[[list[str] | None, list[str] | None], None] = lambda apps, perms: None,
                      ) -> tuple[dict[str, Any], list[str]]:
        """Forgets a member and their grant, and revokes the tokens noted as theirs (:meth:`generate_secret`,
        :meth:`create_member_token`), in one transaction. Returns what was known of them and the names of
        the tokens revoked (the caller closes their sockets); :class:`UnknownMember` when there is neither
        a member on record nor a token they made. Before anything changes, ``may_change(known)`` is asked
        with what is known of the member (None: nothing) as this run read it and saves on it, then
        ``may_revoke(app_names, permissions)`` of each such token (its app names and permissions as
        made, None for org-wide and those of its scope); each refuses by raising: a member's secrets keep the permissions
        they had when they made them."""
        def run() -> tuple[dict[str, Any], list[str]]:
            m = self._maybe(members_stream_id(org))
            known = None if m is None else m.members.get(username)
            may_change(None if known is None else dict(known))
            made = [] if m is None else m.made_by(username)
            revoked = []
            for name, secret_hash in dict(made).items():
                tok = self._maybe(token_stream_id(org, name))
                if still_made(tok, secret_hash):
                    may_revoke(tok.app_names, getattr(tok, "permissions", None))
                    revoked.append(tok)
            known = None if m is None else m.remove(username, at=self.now())
            if known is None:
                raise UnknownMember(org, username)
            for tok in revoked:
                tok.revoke(at=self.now())
            self.note(revokedTokens=len(revoked))  # for the operator's record
            self.save(m, *revoked)
            return known, [t.name for t in revoked]

        known, revoked = self.retrying(run)
        return dict(known), revoked

    def generate_secret(self, org: str, username: str, name: str, *, permissions: list[str],
                        membership: Membership | None = None) -> str:
        """A new org-wide token ``name`` for ``username`` with ``permissions`` (the caller's own, checked
        by the caller), noted as theirs so that removing them revokes it; one transaction. Returns its
        secret: the only time it is seen. ``membership``: the member record the caller was let in on
        (:func:`membership_of`); :class:`MembershipChanged` when it is no longer the one on record."""
        _check_username(username)
        check_org_name(org)
        check_app_name(name)  # a token's name: the same URL-safe alphabet
        chosen = ordered(check_permissions("permissions", permissions))
        secret = new_secret()

        def run() -> str:
            m = self._maybe(members_stream_id(org))
            _still_member(m, org, username, membership)
            m = m or OrgMembers(org=org, timestamp=self.now())
            tok = self._noted(m, username, self._token_made(org, name, secret, None, chosen))
            self.save(tok, m)
            return secret

        return str(self.retrying(run))

    def create_member_token(self, org: str, name: str, *, user: str | None, via: str | None,
                            app_names: list[str] | None = None, permissions: list[str] | None = None,
                            membership: Membership | None = None) -> str:
        """``createToken`` (:meth:`~relay_es.engine.service.Relay.create_token`) by a member: signed in
        (``user``), or with a token noted as a member's (``via``, its name: theirs while it holds the
        secret they made it with). The new token is noted as that member's in the same transaction, so
        removing them revokes it too: neither a key nor a key made with it outlives their membership.
        A token of no member's (``via`` one an admin made) makes a token of no member's. ``membership``: the
        member record ``user`` was let in on (:func:`membership_of`); :class:`MembershipChanged` when it is
        no longer the one on record (they were removed, or given another role, since)."""
        from relay_es.engine.service import check_token_arguments  # the service imports this module

        if user is not None:
            _check_username(user)
        chosen = check_token_arguments(org, name, app_names, permissions)
        secret = new_secret()

        def run() -> str:
            m = None if user is None and via is None else self._maybe(members_stream_id(org))  # an admin's: nobody's
            if user is not None:
                _still_member(m, org, user, membership)
            maker = user if user is not None else self._maker(org, m, via)
            tok = self._token_made(org, name, secret, app_names, chosen)
            if maker is None:
                self.save(tok)
                return secret
            m = m or OrgMembers(org=org, timestamp=self.now())
            self.save(self._noted(m, maker, tok), m)
            return secret

        return str(self.retrying(run))

    def _maker(self, org: str, m: OrgMembers | None, via: str | None) -> str | None:
        """The member the token ``via`` is noted as made by, as it is now (None: nobody's, or no token).
        :class:`UnknownToken` when ``via`` is gone or revoked: the request was let in with it before a
        revocation (its maker's removal, say) committed, and a key it made now would be noted as nobody's."""
        if via is None:
            return None
        tok = self._maybe(token_stream_id(org, via))
        if tok is None or tok.revoked:
            raise UnknownToken(org, via)
        return None if m is None else m.maker_of(via, tok.secret_hash)

    def _noted(self, m: OrgMembers, username: str, tok: Token) -> Token:
        """``tok`` (made, not saved yet) noted on ``m`` as ``username``'s. When they have as many noted as
        a member may, those no longer live with the secret they were made with are forgotten first."""
        if m.full(username):
            made = m.made_by(username)
            found = self.load_many([token_stream_id(m.org, n) for n, _ in made])
            m.forget_made(username, [(n, h) for n, h in made if not still_made(found.get(token_stream_id(m.org, n)), h)],
                          at=self.now())
        m.secret_generated(username, tok.name, tok.secret_hash, at=self.now())
        return tok


def _still_member(m: OrgMembers | None, org: str, username: str, membership: Membership | None) -> None:
    """:class:`MembershipChanged` unless ``username``'s record on ``m`` (as a run read it, and saves on: a
    removal or a grant committed since conflicts, and the run again sees it) is still ``membership``, the one
    their request was let in on: not removed, nor removed and added again (another ``since``), nor given
    another role. Nothing is asked without a ``membership`` (none was read)."""
    if membership is None:
        return
    if membership_of(None if m is None else m.members.get(username)) != tuple(membership):
        raise MembershipChanged(org, username)


def still_made(tok: Token | None, secret_hash: str) -> bool:
    """Whether ``tok`` is live and still holds the secret whose hash is ``secret_hash``: the token noted
    with it (one made again under its name since is not), which removing its maker revokes."""
    return tok is not None and not tok.revoked and tok.secret_hash == secret_hash
