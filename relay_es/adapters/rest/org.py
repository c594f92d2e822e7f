"""The operations Conductor serves only with OAuth, served with OIDC sign-in (``--oidc-issuer``):
``getOrg``, ``updateOrg``, ``listMembers``, ``grantRole``, ``removeMember``, ``getCurrentUser`` and
``generateSecret`` (``docs/identity.md``). Without OIDC the guard answers 404 before any of these
runs, as Conductor does.

- ``getOrg``: the org as Conductor's ``Organization``. Relay has no plans or quotas: the plan is
  ``team``, the counts Relay does not limit are the largest int32, the hosted-only ones 0, and the
  audit log is kept as long as the store keeps events (``auditLogRetentionDays`` 3650).
- ``updateOrg``: an org's name is part of every stream of it and the audit log is never pruned, so
  either change is a 422 saying so; an empty body changes nothing (204). Each is in the audit log
  (target: the org), with what was asked.
- ``listMembers``: everyone who signed in or was granted a role, with the role granted them, else
  the one their groups gave them in the newest token Relay has seen; a role with an empty name and
  no permissions for one with neither.
- ``grantRole``: gives a member (signed in or not yet) a role of the org (404 for an unknown role).
- ``grantRole`` and ``removeMember`` change no member whose roles hold more than the caller: the one
  granted them and the one their groups gave them, as recorded; for a member on record whose groups
  no sign-in has carried yet, every role ``--oidc-group-roles`` maps (any may be theirs: 403).
- ``removeMember``: forgets a member and their grant (404 for an unknown one), and revokes the
  tokens noted as theirs, made with ``generateSecret`` or ``createToken`` (signed in, or with a key
  of theirs): their executors' sockets are closed, also when the removal fails after its commit (the
  client's retry finds no member to close them for). Their groups may still give them a role at
  their next sign-in.
- ``getCurrentUser``: the OIDC user calling (404 for a token: no user).
- ``generateSecret``: a new org-wide token for the calling OIDC user (404 for a token: no user), with
  the caller's permissions (never more), named ``secret-<8 hex digits>``, and noted as theirs: removing
  them revokes it. The secret is shown once.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime
from typing import Any

from litestar import Controller, Request, Response, delete, get, patch, post, put
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET

from relay_es.adapters import authz
from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.adapters.rest.recording import recorded
from relay_es.adapters.rest.roles import within
from relay_es.aggregates.members import members_stream_id
from relay_es.aggregates.token import token_stream_id
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.roles import ordered
from relay_es.engine.member_commands import still_made

INT32_MAX = 2**31 - 1
RETENTION_DAYS = 3650


def _org_id(org: str) -> str:
    return str(members_stream_id(org))


def _role(roles: dict[str, tuple[bool, list[str]]], name: str | None) -> m.RoleOutput | None:
    """``name`` as a RoleOutput, from the org's roles (``{name: (built in, permissions)}``); None
    for no name or a role the org no longer has."""
    found = roles.get(name) if name else None
    if found is None:
        return None
    return m.RoleOutput(name=name, is_global=found[0], permissions=ordered(found[1]))


def _roles(ctx: Any, org: str) -> dict[str, tuple[bool, list[str]]]:
    return {name: (built_in, perms) for name, built_in, perms in ctx.relay.roles(org)}


def _stamp(since: str | None) -> str:
    """A member's ``since`` (ISO, as the members' stream keeps it) as every time Relay answers: RFC 3339,
    UTC, milliseconds; the epoch when there is none."""
    return units.rfc3339(datetime.fromisoformat(since)) if since else "1970-01-01T00:00:00.000Z"


def _may_change(ctx: Any, request: Request[Any, Any, Any], org: str, known: dict[str, Any] | None) -> None:
    """403 unless the caller holds everything the member's roles hold (``known``: what the command
    read of them, and saves on), the one granted them and the one their groups gave them (as
    recorded): nobody demotes or removes a stronger member (removing a member with a weak grant and
    strong groups would hand them their groups' role). A member on record whose groups are not (no
    sign-in has carried them yet) may be given any role ``--oidc-group-roles`` maps: the caller must
    hold them all. Asked inside the command's run: a grant saved meanwhile by someone else makes it
    run again, and asks again of what it then holds."""
    if known is None:  # nobody on record: a first grant (checked as a grant), or their secrets' removal (each checked)
        return
    for role in {known.get("role"), known.get("group_role")} - {None}:
        within(request, ctx.relay.role(org, role) or [], "a member whose role")
    if "group_role" not in known:
        within(request, _mapped_permissions(ctx, org), "a member who has not signed in yet, whom their groups may "
                                                       "give any role of --oidc-group-roles,")


def _mapped_permissions(ctx: Any, org: str) -> list[str]:
    """Every permission of the roles ``--oidc-group-roles`` maps (those the org has): the most a
    member's groups may give them."""
    mapped = {role for _, role in ctx.oidc.settings.group_roles} if ctx.oidc is not None else set()
    return sorted({p for role in mapped for p in ctx.relay.role(org, role) or []})


def _may_grant(ctx: Any, request: Request[Any, Any, Any], org: str, permissions: list[str] | None,
               known: dict[str, Any] | None) -> None:
    """403 unless the caller holds the permissions of the role granted (none: no such role, a 404
    next) and may change the member (:func:`_may_change`)."""
    if permissions is not None:
        within(request, permissions, "the role granted")
    _may_change(ctx, request, org, known)


def _live_secrets(ctx: Any, org: str, username: str) -> list[str]:
    """The names of the live tokens noted as ``username``'s (``generateSecret``, ``createToken``) and still holding
    the secret they made them with, as the store holds them now: those removing the member revokes. At
    most :data:`~relay_es.aggregates.members.MAX_SECRETS`, read in two queries."""
    found = ctx.relay.load_many([members_stream_id(org)])
    members = next(iter(found.values()), None)
    made = {} if members is None else dict(members.made_by(username))  # a name made again: its newest secret
    ids = {token_stream_id(org, name): (name, digest) for name, digest in made.items()}
    tokens = ctx.relay.load_many(list(ids)) if ids else {}
    return [name for i, (name, digest) in ids.items() if still_made(tokens.get(i), digest)]


def _asked(b: m.UpdateOrgInputBody) -> dict[str, Any]:
    """What an ``updateOrg`` asked, for its record: the body's two fields (bounded by the body's model:
    a name of at most 30 characters, a number of days), None for one left out."""
    return {"newName": None if b.new_name is UNSET else b.new_name,
            "auditLogRetentionDays": None if b.audit_log_retention_days is UNSET else b.audit_log_retention_days}


def _disconnect(ctx: Any, org: str, names: list[str]) -> None:
    for name in names:
        ctx.token_revoked(org, name)  # their executors' sockets closed, the gate's cache forgets them


class OrgController(Controller):
    path = ORG

    @get("/", operation_id="getOrg", summary="Get org (OIDC)", sync_to_thread=True)
    def get_org(self, org: FromPath[str], ctx: Context) -> Response[m.Organization]:
        since = min((v.get("since") or "" for v in ctx.relay.members(org).values()), default="")  # ISO, all UTC
        return calling.answer(m.Organization(
            id=_org_id(org), name=org, created_at=_stamp(since), subscription_plan="team",
            max_database_instances=0, max_apps=INT32_MAX, max_vms=0, default_rds_instance_class_type="",
            max_team_members=INT32_MAX, max_conductor_apps=INT32_MAX, audit_log_retention_days=RETENTION_DAYS))

    @patch("/", opt=openapi.body(m.UpdateOrgInputBody),
           operation_id="updateOrg", summary="Update org (OIDC)", status_code=HTTP_204_NO_CONTENT)
    async def update_org(self, org: FromPath[str], request: Request[Any, Any, Any], ctx: Context) -> None:
        b: m.UpdateOrgInputBody = await calling.body(request)

        def update() -> None:
            with recorded(ctx, request, org, None, operation="updateOrg", target_type="organization",
                          target_ids=[org], parameters=_asked(b)):
                if b.new_name is not UNSET:
                    raise InvalidSetting("newName", "an org cannot be renamed in Relay: its name is part of every "
                                                    "record of it")
                if b.audit_log_retention_days is not UNSET:
                    raise InvalidSetting("auditLogRetentionDays", "Relay keeps the audit log as long as the store "
                                                                  "keeps its events; it is not pruned by age")

        await asyncio.to_thread(update)

    @get("/members", operation_id="listMembers", summary="List members (OIDC)", sync_to_thread=True)
    def list_members(self, org: FromPath[str], ctx: Context) -> Response[m.OrgMembers]:
        users = {}
        roles = _roles(ctx, org)  # read once, not once per member
        for username, info in sorted(ctx.relay.members(org).items()):
            role = _role(roles, info.get("role") or info.get("group_role"))
            users[username] = role or m.RoleOutput(name="", is_global=False, permissions=[])
        return calling.answer(m.OrgMembers(org_name=org, users=users))

    @put("/members/{username:str}/roles/{role_name:str}", operation_id="grantRole", summary="Grant role (OIDC)",
         status_code=HTTP_204_NO_CONTENT, sync_to_thread=True)
    def grant_role(self, org: FromPath[str], username: FromPath[str], role_name: FromPath[str],
                   request: Request[Any, Any, Any], ctx: Context) -> None:
        with recorded(ctx, request, org, None, operation="grantRole", target_type="user", target_ids=[username],
                      parameters={"role": role_name}):
            ctx.relay.grant_role(org, username, role_name,  # notes whether it changed anything
                                 may_grant=lambda perms, known: _may_grant(ctx, request, org, perms, known))

    @delete("/members/{username:str}", operation_id="removeMember", summary="Remove member (OIDC)",
            status_code=200, sync_to_thread=True)
    def remove_member(self, org: FromPath[str], username: FromPath[str], request: Request[Any, Any, Any],
                      ctx: Context) -> Response[m.Member]:
        passed = [False]  # the last run's checks all passed: its save, revoking the member's secrets, may be on record

        def may_change(known: dict[str, Any] | None) -> None:  # asked first by each run
            passed[0] = False
            _may_change(ctx, request, org, known)
            passed[0] = True

        def may_revoke(apps: list[str] | None, perms: list[str] | None) -> None:
            # nor the secrets they made, which keep the permissions the member had then (as deleteToken checks)
            passed[0] = False
            within(request, sorted(authz.permissions_for(apps, perms)), "a token the member made")
            passed[0] = True

        with recorded(ctx, request, org, None, operation="removeMember", target_type="user",
                      target_ids=[username]):
            live = _live_secrets(ctx, org, username)  # what a failure after the commit may have revoked
            try:
                known, revoked = ctx.relay.remove_member(org, username, may_change=may_change, may_revoke=may_revoke)
            except Exception:
                if passed[0]:  # the answer lost, perhaps, not the change: a retry finds no member, and no secret
                    _disconnect(ctx, org, live)
                raise
        _disconnect(ctx, org, revoked)
        if revoked:
            ctx.read_your_writes()  # listTokens no longer shows them, as after deleteToken
        return calling.answer(m.Member(id=username, org_id=_org_id(org), email=known.get("email", ""),
                                       name=known.get("name", ""), given_name=known.get("given_name", ""),
                                       family_name=known.get("family_name", ""), company=""))

    @post("/secrets", operation_id="generateSecret", summary="Generate secret (OIDC)", status_code=HTTP_201_CREATED,
          sync_to_thread=True)
    def generate_secret(self, org: FromPath[str], request: Request[Any, Any, Any],
                        ctx: Context) -> Response[m.GenerateSecretOutputBody]:
        who = request.state.principal
        if who.user is None:
            raise NotFoundException("a token is not a user: generateSecret makes a key for an OIDC sign-in")
        name = f"secret-{secrets.token_hex(4)}"
        with recorded(ctx, request, org, None, operation="generateSecret", target_type="token", target_ids=[name]):
            secret = ctx.relay.generate_secret(org, who.user, name, permissions=sorted(who.permissions),
                                               membership=who.membership)  # never on record; a 401 if removed since
        ctx.read_your_writes()
        return calling.answer(m.GenerateSecretOutputBody(secret=secret), HTTP_201_CREATED)


class UsersController(Controller):
    path = "/v2/users"

    @get("/me", operation_id="getCurrentUser", summary="Current user (OIDC)", sync_to_thread=True)
    def me(self, request: Request[Any, Any, Any], ctx: Context) -> Response[m.UserProfile]:
        who = request.state.principal
        if who.user is None:
            raise NotFoundException("a token is not a user: getCurrentUser answers for OIDC sign-ins")
        info = ctx.relay.member(who.org, who.user) or {}
        role = _role(_roles(ctx, who.org), who.role)
        return calling.answer(m.UserProfile(
            name=info.get("name") or who.user, email=info.get("email") or "", org_name=who.org,
            org_id=_org_id(who.org), subscription_plan="team",
            created_at=_stamp(info.get("since")),
            role=UNSET if role is None else role))
