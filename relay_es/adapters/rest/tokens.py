"""Tokens: ``/v2/orgs/{org}/tokens`` and ``/v2/orgs/{org}/tokens/{token_name}`` (Conductor API v2).

List an org's live tokens (never a secret), create one (org-wide, or limited
to 1 to :data:`MAX_APP_NAMES` applications; the secret is shown once, in the
answer) and revoke one: executors connected with it are disconnected and the
key is refused at once, before the read models follow.

A listed token is Conductor's ``Token``, exactly its fields: its
``permissions`` (those it was made with, else those of its scope:
``relay_es.adapters.authz.permissions_for``), its ``appIds`` the ids of the applications
it is limited to (an application's id follows from its org and name, so a
token limited to an application not registered yet lists that id too; empty
for an org-wide token). With ``?relay=extended`` (a query parameter no
Conductor client sends) each also carries Relay's ``appNames`` (null for an
org-wide token). A creation may send Conductor's ``permissions``: null (those
of its scope), or the ones it is to carry: known (422 otherwise), at least
one, and all held by its maker (403 otherwise: a key that makes keys cannot
make a stronger one; the same holds for a scope's own). Likewise a token is
revoked only by a caller holding every permission it carries (403 otherwise,
in the audit log: where Conductor lets ``token.write`` revoke any key, a weak
key could lock out the admin's, as no weaker caller may delete a stronger role
or remove a stronger member). A token made by an OIDC member, signed in or with a key noted as
theirs, is noted as theirs: removing them revokes it (``removeMember``); one asked by a member
removed, or given another role, after their request was let in is refused (401: sign in again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.params import FromPath, QueryParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET, UnsetType

from relay_es.adapters import authz
from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import ORG
from relay_es.adapters.rest.recording import recorded
from relay_es.adapters.rest.roles import within
from relay_es.aggregates.application import app_stream_id
from relay_es.domain import roles, units
from relay_es.domain.errors import IllegalTransition, InvalidSetting, UnknownToken
from relay_es.projections import apps as apps_view

MAX_APP_NAMES = 100  # applications one token may be limited to


class Token(msgspec.Struct, rename="camel"):
    """Conductor's ``Token``: exactly its fields."""

    token_name: str
    created_at: str
    permissions: list[str]
    app_ids: list[str]


class ExtendedToken(Token):
    """``?relay=extended``: Conductor's fields and Relay's."""

    app_names: list[str] | None


# ``?relay=extended``: Relay's fields beside Conductor's (a Conductor client never sends it).
RelayExtended = Annotated[Literal["extended"] | None, QueryParameter(
    name="relay", required=False, description="`extended`: each token also carries Relay's `appNames` (null: "
                                              "org-wide); without it, exactly Conductor's fields")]


class CreateTokenBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Conductor's ``CreateTokenInputBody``. ``appNames`` omitted or null: an
    org-wide token; otherwise 1 to 100 application names. ``permissions``:
    omitted, null, or exactly those the token gets. ``$schema`` (a link Conductor's
    answers carry) is ignored."""

    app_names: list[str] | None | UnsetType = UNSET
    permissions: list[str] | None | UnsetType = UNSET
    schema: str | UnsetType = msgspec.field(default=UNSET, name="$schema")


class TokenCreated(msgspec.Struct, rename="camel"):
    token: str
    token_name: str


def check_app_names(names: list[str]) -> None:
    if not 1 <= len(names) <= MAX_APP_NAMES:
        raise InvalidSetting("appNames", f"must name 1 to {MAX_APP_NAMES} applications; omit it (or "
                                         "null) for an org-wide token")
    for name in names:
        if not authz.valid_name(name):
            raise InvalidSetting("appNames", "each must be 1-256 URL-safe characters (letters, digits, "
                                             ". _ ~ -), starting with a letter or digit")


def check_permissions(asked: list[str], caller: frozenset[str]) -> list[str]:
    """The permissions a new token is asked to carry: known ones, at least one, and none its maker
    does not hold (403): a key that may make keys must not make a stronger one."""
    chosen = roles.ordered(roles.check_permissions("permissions", asked))
    if not chosen:
        raise InvalidSetting("permissions", "must name at least one permission; omit it (or null) for those of the "
                                            "token's scope")
    beyond = [p for p in chosen if p not in caller]
    if beyond:
        raise PermissionDeniedException(detail=f"a token cannot be given permissions its maker does not hold: "
                                               f"{', '.join(beyond)}")
    return chosen


def token_out(org: str, row: apps_view.TokenRow, *, extended: bool = False) -> Token:
    """A live token in Conductor's shape, or with Relay's fields."""
    out = Token(token_name=row.name, created_at=units.rfc3339(row.created_at) or "",
                permissions=roles.ordered(authz.permissions_for(row.app_names, row.permissions)),
                app_ids=[str(app_stream_id(org, a)) for a in row.app_names or []])
    if not extended:
        return out
    return ExtendedToken(**msgspec.structs.asdict(out), app_names=row.app_names)


class TokensController(Controller):
    path = ORG + "/tokens"

    @get("/", operation_id="listTokens", sync_to_thread=True, summary="List live tokens (never the secret)",
         description="With `relay=extended`, each token also carries Relay's `appNames`.")
    def list_tokens(self, org: FromPath[str], ctx: Context, relay: RelayExtended = None) -> list[Token]:
        return [token_out(org, t, extended=relay == "extended") for t in apps_view.list_tokens(ctx.db, org)]

    @post("/{token_name:str}", opt=openapi.body(CreateTokenBody, required=False), operation_id="createToken",
          status_code=HTTP_201_CREATED, summary="Create a token; the secret is shown once")
    async def create(self, org: FromPath[str], token_name: FromPath[str], ctx: Context,
                     request: Request[Any, Any, Any]) -> TokenCreated:
        data: CreateTokenBody | None = await calling.body(request)
        return await asyncio.to_thread(self._create, org, token_name, ctx, request, data)

    @staticmethod
    def _create(org: str, token_name: str, ctx: Context, request: Request[Any, Any, Any],
                data: CreateTokenBody | None) -> TokenCreated:
        names = None if data is None or data.app_names is UNSET else data.app_names
        asked = data.permissions if data is not None and isinstance(data.permissions, list) else None
        who = getattr(request.state, "principal", None)
        caller = who.permissions if who is not None else frozenset(authz.PERMISSIONS)
        # on record: how many applications it is limited to (their names: up to 100, not a summary), and what it may do
        with recorded(ctx, request, org, None, operation="createToken", target_type="token", target_ids=[token_name],
                      parameters={"appCount": None if names is None else len(names),
                                  **({} if asked is None else {"permissions": ",".join(map(str, asked))[:400]})}):
            if names is not None:
                check_app_names(names)
            chosen = None if asked is None else check_permissions(asked, caller)
            if chosen is None and not authz.permissions_for(names) <= caller:
                raise PermissionDeniedException(detail="this token's scope carries permissions its maker does not "
                                                       "hold: name the permissions it is to have")
            # noted as a member's when a member makes it, signed in or with a key of theirs: removing them revokes it
            try:
                secret = ctx.relay.create_member_token(org, token_name, user=getattr(who, "user", None),
                                                       via=getattr(who, "token", None), app_names=names,
                                                       permissions=chosen,  # never on record
                                                       # a sign-in: refused (401) if removed or demoted since
                                                       membership=getattr(who, "membership", None))
            except UnknownToken:  # the caller's own key, revoked since it let the request in
                raise NotAuthorizedException(detail="the key this request was made with was revoked") from None
        ctx.read_your_writes()
        return TokenCreated(token=secret, token_name=token_name)

    @delete("/{token_name:str}", operation_id="deleteToken", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT,
            summary="Revoke a token; executors using it are disconnected")
    def revoke(self, org: FromPath[str], token_name: FromPath[str], ctx: Context,
               request: Request[Any, Any, Any]) -> None:
        checked = [False]  # the last run found the token live and the caller may revoke it: its save may be on record

        def may_revoke(apps: list[str] | None, perms: list[str] | None) -> None:
            # nobody weaker revokes a stronger key, as none deletes a stronger role: asked of the token the
            # command reads and saves (one made again meanwhile is asked of as it is then)
            checked[0] = False
            within(request, sorted(authz.permissions_for(apps, perms)), "a token revoked")
            checked[0] = True

        with disconnecting(ctx, org, token_name, may_be_saved=lambda: checked[0]):
            with recorded(ctx, request, org, None, operation="deleteToken", target_type="token",
                          target_ids=[token_name]):
                ctx.relay.revoke_token(org, token_name, may_revoke=may_revoke)
        ctx.read_your_writes()


@contextmanager
def disconnecting(ctx: RestContext, org: str, name: str, *, may_be_saved: Callable[[], bool]) -> Iterator[None]:
    """Around a revocation of ``org``'s token ``name``: when it ends with the token revoked, or maybe
    revoked, the token's executors are disconnected and admission forgets the key, before the answer
    (:attr:`RestContext.token_revoked`: refused now, not once the read models follow; idempotent).

    Revoked: the revocation succeeded, or the token was revoked already (a 409: perhaps the client's
    retry of a revocation whose answer was lost -- the commit made, then the store's connection
    failed -- which disconnected nothing). Maybe revoked: it failed after ``may_be_saved()`` (its last
    run found the token live and the caller allowed to revoke it), so its save may be on record: a live
    key's executors disconnected for nothing connect again, a revoked key's left connected would keep
    working. A refusal (403, 404, 422) or a failure before the check disconnects nothing; and only this
    org's token of that name is ever named (another org's of the same name is another token)."""
    try:
        yield
    except IllegalTransition as e:
        if e.command == "revoke" and e.state == "revoked":  # revoked already
            ctx.token_revoked(org, name)
        raise
    except Exception:
        if may_be_saved():
            ctx.token_revoked(org, name)
        raise
    ctx.token_revoked(org, name)
