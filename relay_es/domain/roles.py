"""Permissions and roles: Conductor's eight permissions, Relay's built-in roles, and the
checks of a permission list and a role name.

A **permission** lets its holder call a set of operations (the table in
``relay_es/adapters/authz.py`` names one per route). A **role** is a named set of them:
the built-in ``admin``, ``operator`` and ``viewer`` (``isGlobal`` in Conductor's answers: the same
in every org, never changed or deleted) and an org's own. A token carries permissions of its
own (chosen when it is made, within its maker's); an OIDC user gets a role's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from relay_es.domain.errors import InvalidSetting

ORGANIZATION_READ = "organization.read"
ORGANIZATION_WRITE = "organization.write"
APPLICATION_READ = "application.read"
APPLICATION_WRITE = "application.write"
METRIC_READ = "metric.read"
TOKEN_READ = "token.read"
TOKEN_WRITE = "token.write"
WEBSOCKET_CONNECT = "websocket.connect"

PERMISSIONS = (ORGANIZATION_READ, ORGANIZATION_WRITE, APPLICATION_READ, APPLICATION_WRITE, METRIC_READ,
               TOKEN_READ, TOKEN_WRITE, WEBSOCKET_CONNECT)

# The built-in roles. ``operator`` runs the applications (workflows, schedules, alerting rules,
# settings) and reads everything but changes no member, role or key; ``viewer`` only reads.
BUILT_IN: dict[str, frozenset[str]] = {
    "admin": frozenset(PERMISSIONS),
    "operator": frozenset({ORGANIZATION_READ, APPLICATION_READ, APPLICATION_WRITE, METRIC_READ, TOKEN_READ}),
    "viewer": frozenset({ORGANIZATION_READ, APPLICATION_READ, METRIC_READ}),
}

ROLE_NAME = re.compile(r"[a-zA-Z0-9_]{3,30}")  # Conductor's CreateRoleInputBody.name; fullmatch
MAX_ROLES = 100  # an org's own


def check_permissions(field: str, asked: Iterable[object]) -> frozenset[str]:
    """``asked`` as a set of known permissions, or :class:`InvalidSetting` naming the first unknown one."""
    out = set()
    for p in asked:
        if not isinstance(p, str) or p not in PERMISSIONS:
            shown = repr(p)[:80]
            raise InvalidSetting(field, f"{shown} is not a permission; the permissions are {', '.join(PERMISSIONS)}")
        out.add(p)
    return frozenset(out)


def check_role_name(name: object) -> str:
    if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
        raise InvalidSetting("name", "must be 3-30 letters, digits or underscores")
    return name


def ordered(permissions: Iterable[str]) -> list[str]:
    """Sorted, each once: every answer lists permissions the same way."""
    return sorted(set(permissions))
