"""The Token aggregate: an org-scoped API key, stored only as a hash.

The secret is shown once, when it is made; the events hold its SHA-256 only.
A secret has 256 bits of entropy, so a fast hash is the right one here: there
is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import datetime

from eventsourcing.domain import Aggregate, event

from relay_es.domain.errors import IllegalTransition

NAMESPACE = uuid.UUID("a3d5c1e9-7f2b-4c8a-9e6d-1b0f4a7c3e52")
PREFIX = "relay_"


def token_stream_id(org: str, name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"token/{org}/{name}")


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)


class Token(Aggregate):
    # The permissions it was made with (PermissionsSet); None: those of its scope
    # (``relay_es.adapters.authz.permissions_for``), as every token made before they could be chosen.
    permissions: list[str] | None = None

    @staticmethod
    def create_id(org: str, name: str) -> uuid.UUID:
        return token_stream_id(org, name)

    @event("Created")
    def __init__(self, org: str, name: str, secret_hash: str, app_names: list[str] | None, timestamp: datetime) -> None:
        self.org = org
        self.name = name
        self.secret_hash = secret_hash
        self.app_names = app_names
        self.revoked = False

    def covers(self, app: str) -> bool:
        return not self.revoked and (not self.app_names or app in self.app_names)

    def reissue(self, *, secret_hash: str, app_names: list[str] | None, at: datetime) -> None:
        if not self.revoked:
            raise IllegalTransition(f"token {self.name!r}", "live", "create", "a live token of that name exists; revoke it first")
        self._reissued(secret_hash=secret_hash, app_names=app_names, timestamp=at)

    @event("Reissued")
    def _reissued(self, secret_hash: str, app_names: list[str] | None, timestamp: datetime) -> None:
        self.secret_hash = secret_hash
        self.app_names = app_names
        self.revoked = False
        self.permissions = None

    def set_permissions(self, permissions: list[str], *, at: datetime) -> None:
        """The permissions it carries, chosen when it is made (recorded with its Created or Reissued)."""
        if self.revoked:
            raise IllegalTransition(f"token {self.name!r}", "revoked", "set permissions", "it is revoked")
        self._permissions_set(permissions=list(permissions), timestamp=at)

    @event("PermissionsSet")
    def _permissions_set(self, permissions: list[str], timestamp: datetime) -> None:
        self.permissions = permissions

    def revoke(self, *, at: datetime) -> None:
        if self.revoked:
            raise IllegalTransition(f"token {self.name!r}", "revoked", "revoke", "it is already revoked")
        self._revoked(timestamp=at)

    @event("Revoked")
    def _revoked(self, timestamp: datetime) -> None:
        self.revoked = True
