"""Tokens: ``/v2/orgs/{org}/tokens`` and ``/v2/orgs/{org}/tokens/{token_name}`` (Conductor API v2).

List an org's live tokens (never a secret), create one (org-wide, or limited
to 1 to :data:`MAX_APP_NAMES` applications; the secret is shown once, in the
answer) and revoke one: executors connected with it are disconnected and the
key is refused at once, before the read models follow.
"""

from __future__ import annotations

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET, UnsetType

from relay_es.adapters import authz
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting
from relay_es.projections import apps as apps_view

MAX_APP_NAMES = 100  # applications one token may be limited to


class Token(msgspec.Struct, rename="camel"):
    token_name: str
    created_at: str
    permissions: list[str]
    app_ids: list[str]
    app_names: list[str] | None


class CreateTokenBody(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``appNames`` omitted or null: an org-wide token; otherwise 1 to 100 application names."""

    app_names: list[str] | None | UnsetType = UNSET


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


class TokensController(Controller):
    path = ORG + "/tokens"

    @get("/", sync_to_thread=True, summary="List live tokens (never the secret)")
    def list_tokens(self, org: FromPath[str], ctx: Context) -> list[Token]:
        relay = ctx.relay
        return [Token(token_name=t.name, created_at=units.rfc3339(t.created_at) or "",
                      permissions=sorted(authz.permissions_for(t.app_names)),
                      app_ids=[str(relay.get_app(org, a).id) for a in (t.app_names or []) if relay.app_exists(org, a)],
                      app_names=t.app_names)
                for t in apps_view.list_tokens(ctx.db, org)]

    @post("/{token_name:str}", sync_to_thread=True, status_code=HTTP_201_CREATED,
          summary="Create a token; the secret is shown once")
    def create(self, org: FromPath[str], token_name: FromPath[str], ctx: Context,
               data: JSONBody[CreateTokenBody | None] = None) -> TokenCreated:
        names = None if data is None or data.app_names is UNSET else data.app_names
        if names is not None:
            check_app_names(names)
        secret = ctx.relay.create_token(org, token_name, app_names=names)
        ctx.read_your_writes()
        return TokenCreated(token=secret, token_name=token_name)

    @delete("/{token_name:str}", sync_to_thread=True, status_code=HTTP_204_NO_CONTENT,
            summary="Revoke a token; executors using it are disconnected")
    def revoke(self, org: FromPath[str], token_name: FromPath[str], ctx: Context) -> None:
        ctx.relay.revoke_token(org, token_name)
        ctx.token_revoked(org, token_name)  # refused and disconnected now, not once the read models follow
        ctx.read_your_writes()
