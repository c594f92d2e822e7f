"""The OrgMembers aggregate: the people of an org who sign in with OIDC, and the roles granted them.

One stream per org, made with its first member. A member is seen (``MemberSeen``) the first time
they sign in, or when a role is granted to them before that; ``RoleGranted`` gives them a role
(replacing any other); ``MemberRemoved`` forgets them and their grant. A member without a grant
gets the role their groups map to (Relay's settings), or none; ``GroupRoleSeen`` records that role
(or none) as a sign-in's token gave it, the first time a token carries their groups and then each
time it differs from the last one recorded and the token was issued after the one that gave that (so ``listMembers`` shows it, and nobody weaker demotes them;
a user alternating an older token with a newer one writes nothing). ``SecretGenerated`` notes a token a
member made (``generateSecret``; ``createToken`` signed in, or with a key noted as theirs), by its name and
the hash of the secret it was made with, so that removing them revokes it, and only it (not a token made
again later under that name): a key outlives nobody's membership. ``MadeTokensForgotten`` drops notes of
tokens no longer live with the secret they were made with (revoked, or made again by someone else), which
removing the member has nothing of to revoke: a member who reached :data:`MAX_SECRETS` may make more once
they revoke some. A user who signed in while the org was full is no member on record, but what they made
is: removing them revokes it all the same. ``RoleDeleted`` records that one of the
org's own roles was deleted while no member held a grant of it: the deletion is checked against the
grants and recorded on their stream, so a grant and a deletion of one role made at once conflict, and
the one run again sees the other's change (a member never keeps a grant of a deleted role, which a role
made later under that name would fill with its permissions).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from eventsourcing.domain import Aggregate, event

from relay_es.domain.errors import IllegalTransition, InvalidSetting

NAMESPACE = uuid.UUID("c41e7b92-5a3d-4f16-8e0c-9b2d7a6f1e58")
MAX_MEMBERS = 10_000
MAX_FIELD = 256
MAX_SECRETS = 100  # tokens noted as one member's (SecretGenerated), not forgotten since (MadeTokensForgotten)


def groups_news(known: dict[str, Any] | None, role: str | None, issued_at: int | None) -> bool:
    """Whether a token issued at ``issued_at`` whose groups give ``role`` tells anything new of the
    member ``known`` (as :attr:`OrgMembers.members` holds them): they are on record, and either none
    is recorded (the first token carrying their groups: even none is worth recording, as it tells
    that their groups are known) or the role is not the one recorded and the token is newer than the
    one that gave that. (The rule of :meth:`OrgMembers.groups_gave`; a sign-in asks it before it runs
    a command.)"""
    if known is None or issued_at is None:
        return False
    if "group_role" not in known:
        return True
    return known["group_role"] != role and issued_at > known.get("group_role_iat", -1)


def members_stream_id(org: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"members/{org}")


class OrgMembers(Aggregate):
    # username -> (token name, secret hash) of each token they made for themselves, oldest first (pairs
    # come back from a snapshot as lists: read it through made_by). A class default, replaced and never
    # changed in place: a stream recorded before it existed has none. (Not annotated: the library would
    # make it a dataclass field, and a dict default is refused there.)
    secrets = {}  # type: dict[str, tuple[tuple[str, str], ...]]

    @staticmethod
    def create_id(org: str) -> uuid.UUID:
        return members_stream_id(org)

    @event("Opened")
    def __init__(self, org: str, timestamp: datetime) -> None:
        self.org = org
        # username -> {"email", "name", "given_name", "family_name", "role" (granted, or None), "since" (ISO),
        # and once a sign-in found it, "group_role" (their groups', or None) and "group_role_iat" (the
        # issue time, epoch seconds, of the token that gave it)}
        self.members: dict[str, dict[str, Any]] = {}

    def see(self, username: str, *, email: str, name: str, given_name: str, family_name: str, at: datetime) -> bool:
        """Records a member's first sign-in (or their profile, when a grant came first and it was
        empty). Returns whether anything was recorded."""
        known = self.members.get(username)
        if known is not None and (known["email"] or not email):
            return False
        if known is None and len(self.members) >= MAX_MEMBERS:
            raise InvalidSetting("username", f"an org has at most {MAX_MEMBERS} members")
        self._seen(username=username, email=email[:MAX_FIELD], name=name[:MAX_FIELD],
                   given_name=given_name[:MAX_FIELD], family_name=family_name[:MAX_FIELD], timestamp=at)
        return True

    @event("MemberSeen")
    def _seen(self, username: str, email: str, name: str, given_name: str, family_name: str,
              timestamp: datetime) -> None:
        old = self.members.get(username) or {"role": None, "since": timestamp.isoformat()}
        self.members = {**self.members, username: {**old, "email": email, "name": name, "given_name": given_name,
                                                   "family_name": family_name}}

    def grant(self, username: str, role: str, *, at: datetime) -> bool:
        """Gives ``username`` the role ``role`` (checked by the caller); False when they have it."""
        known = self.members.get(username)
        if known is not None and known["role"] == role:
            return False
        if known is None and len(self.members) >= MAX_MEMBERS:
            raise InvalidSetting("username", f"an org has at most {MAX_MEMBERS} members")
        self._granted(username=username, role=role, timestamp=at)
        return True

    @event("RoleGranted")
    def _granted(self, username: str, role: str, timestamp: datetime) -> None:
        old = self.members.get(username) or {"email": "", "name": "", "given_name": "", "family_name": "",
                                             "since": timestamp.isoformat()}
        self.members = {**self.members, username: {**old, "role": role}}

    def groups_gave(self, username: str, role: str | None, *, issued_at: int, at: datetime) -> bool:
        """The role ``username``'s groups gave them in a token issued at ``issued_at`` (epoch seconds),
        recorded the first time (none too), then when it differs from the last one recorded and the token
        is newer than the one that gave that; a member on record only (strangers leave nothing). Returns
        whether it was."""
        if not groups_news(self.members.get(username), role, issued_at):
            return False
        self._groups_gave(username=username, role=role, issued_at=issued_at, timestamp=at)
        return True

    @event("GroupRoleSeen")
    def _groups_gave(self, username: str, role: str | None, timestamp: datetime, issued_at: int = -1) -> None:
        self.members = {**self.members, username: {**self.members[username], "group_role": role,
                                                   "group_role_iat": issued_at}}

    def role_deleted(self, name: str, *, at: datetime) -> None:
        """The org's own role ``name`` is deleted; refused (:class:`IllegalTransition`) while it is
        granted to anyone."""
        granted = [u for u, m in self.members.items() if m.get("role") == name]
        if granted:
            raise IllegalTransition(f"role {name!r}", "granted", "delete",
                                    f"it is granted to {len(granted)} member(s); grant them another role first")
        self._role_deleted(name=name, timestamp=at)

    @event("RoleDeleted")
    def _role_deleted(self, name: str, timestamp: datetime) -> None:
        pass  # nobody holds a grant of it: nothing of the members changes

    def remove(self, username: str, *, at: datetime) -> dict[str, Any] | None:
        """Forgets ``username`` and the tokens they made; returns what was known of them (empty for
        a user who made tokens but is no member on record), None when nothing was."""
        known = self.members.get(username)
        if known is None and username not in self.secrets:
            return None
        self._removed(username=username, timestamp=at)
        return known or {}

    @event("MemberRemoved")
    def _removed(self, username: str, timestamp: datetime) -> None:
        self.members = {k: v for k, v in self.members.items() if k != username}
        self.secrets = {k: v for k, v in self.secrets.items() if k != username}

    def secret_generated(self, username: str, token_name: str, secret_hash: str, *, at: datetime) -> None:
        """``username`` made the token ``token_name`` for themselves, with the secret whose hash is
        ``secret_hash``; removing them revokes it while it still has that secret."""
        if self.full(username):
            raise InvalidSetting("secret", f"a member may hold at most {MAX_SECRETS} live tokens they made; "
                                           "revoke one of them first")
        self._secret_generated(username=username, token_name=token_name, secret_hash=secret_hash, timestamp=at)

    @event("SecretGenerated")
    def _secret_generated(self, username: str, token_name: str, secret_hash: str, timestamp: datetime) -> None:
        self.secrets = {**self.secrets, username: (*self.secrets.get(username, ()), (token_name, secret_hash))}

    def full(self, username: str) -> bool:
        """Whether ``username`` has :data:`MAX_SECRETS` tokens noted as theirs: none more until some are forgotten."""
        return len(self.secrets.get(username, ())) >= MAX_SECRETS

    def forget_made(self, username: str, dead: list[tuple[str, str]], *, at: datetime) -> None:
        """Forgets the notes ``dead`` (token name, secret hash) of ``username``'s: tokens no longer live
        with that secret (the caller read them), which removing them would not revoke. Nothing to forget
        records nothing."""
        gone = {(str(n), str(h)) for n, h in dead} & set(self.made_by(username))
        if gone:
            self._made_forgotten(username=username, tokens=[[n, h] for n, h in sorted(gone)], timestamp=at)

    @event("MadeTokensForgotten")
    def _made_forgotten(self, username: str, tokens: list[list[str]], timestamp: datetime) -> None:
        gone = {(str(n), str(h)) for n, h in tokens}
        kept = tuple((n, h) for n, h in self.made_by(username) if (n, h) not in gone)
        others = {k: v for k, v in self.secrets.items() if k != username}
        self.secrets = {**others, username: kept} if kept else others

    def maker_of(self, token_name: str, secret_hash: str) -> str | None:
        """The member who made the token ``token_name`` with the secret whose hash is ``secret_hash``, if
        one is noted as its maker."""
        for username, made in self.secrets.items():
            if any(str(n) == token_name and str(h) == secret_hash for n, h in made):
                return username
        return None

    def made_by(self, username: str) -> list[tuple[str, str]]:
        """(token name, secret hash) of each token noted as ``username``'s, oldest first."""
        return [(str(name), str(h)) for name, h in self.secrets.get(username, ())]
