"""Roles and permissions, Conductor's ``listRoles``, ``createRole``, ``deleteRole`` and
``listPermissions`` (``/v2/orgs/{org}/roles``, ``/v2/orgs/{org}/permissions``).

The built-in roles (``admin``, ``operator``, ``viewer``; ``isGlobal``) come first, then the org's
own (:class:`~relay_es.aggregates.roles.OrgRoles`). A role's name is 3-30 letters, digits or
underscores, its permissions among Conductor's eight (422 otherwise); a name in use, or a built-in
one, is a 409 to make and a built-in one a 409 to delete; deleting an unknown role is a 404. Making
and deleting are in the audit log (target: the role). Roles are what an OIDC user is granted
(``docs/identity.md``); a token carries permissions of its own. So the three roles operations are,
as in Conductor, served only with OIDC configured (rows marked ``oauth`` in
:mod:`relay_es.adapters.authz`: a 404 otherwise); ``listPermissions`` in every mode.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromPath
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT
from msgspec import UNSET

from relay_es.adapters.rest import calling, openapi
from relay_es.adapters.rest.conductor import models as m
from relay_es.adapters.rest.context import Context
from relay_es.adapters.rest.paths import ORG
from relay_es.adapters.rest.recording import recorded
from relay_es.domain.roles import PERMISSIONS


def within(request: Request[Any, Any, Any], permissions: list[str], what: str) -> None:
    """403 unless the caller holds every one of ``permissions``: whoever makes or hands out roles can
    hand out no more than they have (``organization.write`` alone is not every permission)."""
    who = getattr(request.state, "principal", None)
    held = who.permissions if who is not None else frozenset(PERMISSIONS)
    beyond = sorted({p for p in permissions if isinstance(p, str) and p in PERMISSIONS} - held)
    if beyond:
        raise PermissionDeniedException(detail=f"{what} cannot carry permissions you do not hold: {', '.join(beyond)}")


class RolesController(Controller):
    path = ORG

    @get("/roles", operation_id="listRoles", summary="List roles", sync_to_thread=True,
         description="The built-in roles (isGlobal), then the org's own, each with its permissions.")
    def list_roles(self, org: FromPath[str], ctx: Context) -> Response[list[m.RoleOutput]]:
        return calling.answer([m.RoleOutput(name=n, is_global=g, permissions=p) for n, g, p in ctx.relay.roles(org)])

    @post("/roles", opt=openapi.body(m.CreateRoleInputBody),
          operation_id="createRole", summary="Create role", status_code=HTTP_201_CREATED,
          description="Makes a role of the org: a name and a set of permissions.")
    async def create_role(self, org: FromPath[str], request: Request[Any, Any, Any],
                          ctx: Context) -> Response[m.CreateRoleOutputBody]:
        b: m.CreateRoleInputBody = await calling.body(request)
        asked = [] if b.permissions is UNSET or b.permissions is None else list(b.permissions)

        def create() -> list[str]:
            with recorded(ctx, request, org, None, operation="createRole", target_type="role",
                          target_ids=[b.name[:64]], parameters={"permissions": ",".join(map(str, asked))[:400]}):
                within(request, asked, "a role")  # refused on record, as grantRole's refusal is
                return ctx.relay.create_role(org, b.name, asked)

        chosen = await asyncio.to_thread(create)
        return calling.answer(m.CreateRoleOutputBody(name=b.name, permissions=chosen), HTTP_201_CREATED)

    @delete("/roles/{role_name:str}", operation_id="deleteRole", summary="Delete role", sync_to_thread=True,
            status_code=HTTP_204_NO_CONTENT, description="Deletes one of the org's own roles; built-in ones stay.")
    def delete_role(self, org: FromPath[str], role_name: FromPath[str], request: Request[Any, Any, Any],
                    ctx: Context) -> None:
        with recorded(ctx, request, org, None, operation="deleteRole", target_type="role", target_ids=[role_name]):
            # nobody weaker removes a stronger role: the members it gives more than the caller holds would fall
            # back to what their groups give them, a demotion that removeMember and grantRole refuse alike
            within(request, ctx.relay.role(org, role_name) or [], "a role deleted")
            ctx.relay.delete_role(org, role_name)

    @get("/permissions", operation_id="listPermissions", summary="List permissions", sync_to_thread=True,
         description="Conductor's eight permissions.")
    def list_permissions(self, org: FromPath[str]) -> Response[list[str]]:
        return calling.answer(list(PERMISSIONS))
