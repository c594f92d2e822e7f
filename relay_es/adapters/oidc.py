"""OIDC sign-in: bearer JWTs from an OpenID Connect issuer, verified against its JWKS (ADR 25).

:class:`Verifier` checks a token with PyJWT: signed (RSA, RSA-PSS, ECDSA or EdDSA only: never
``none``, never a shared-secret HMAC, whatever the token's header says) by a key of the issuer's
JWKS, issued by the configured issuer for the configured audience, not expired (30 s of clock
leeway), with ``sub``. The issuer's discovery document (``/.well-known/openid-configuration``)
names the JWKS; both are fetched over HTTP(S) when first needed. Keys are cached: the set is
fetched again every :data:`KEYS_LIFESPAN`, and at once for a key id it does not hold (a rotated
key), at most once per :data:`MIN_REFRESH` so that tokens naming made-up key ids cannot make Relay
hammer the issuer.

:class:`OidcUsers` turns a verified token into a :class:`~relay_es.adapters.authz.Principal` of
the configured org: the member's username (``email``, else ``preferred_username``, else ``sub``),
their permissions those of the role granted them (``grantRole``) or, without a grant, of the first
of their groups (the ``groups`` claim, or the one configured) that ``--oidc-group-roles`` maps; no
role, no permission. A member's first sign-in is recorded (``listMembers``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from relay_es.adapters.authz import Principal
from relay_es.domain.text import has_controls

log = logging.getLogger(__name__)

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
KEYS_LIFESPAN = 300.0  # seconds a fetched key set is used before it is fetched again
MIN_REFRESH = 30.0  # at most one fetch this often for an unknown key id
LEEWAY = 30  # seconds of clock skew allowed on exp, nbf, iat
HTTP_TIMEOUT = 5.0
MAX_TOKEN = 16 * 1024  # characters of a bearer JWT
MAX_GROUPS = 200


class OidcError(Exception):
    """A token that is not accepted, or an issuer that cannot be reached; the text says why."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    org: str  # the org every OIDC user belongs to
    groups_claim: str = "groups"
    group_roles: tuple[tuple[str, str], ...] = ()  # (group, role), first match wins


def looks_like_jwt(secret: str) -> bool:
    """A JWS compact serialization (three base64url parts), not one of Relay's tokens."""
    return secret.count(".") == 2 and secret.startswith("ey") and len(secret) <= MAX_TOKEN


def parse_group_roles(text: str) -> tuple[tuple[str, str], ...]:
    """``group=role,group2=role2`` (:class:`ValueError` for a part without ``=``)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        group, sep, role = part.partition("=")
        if not sep or not group.strip() or not role.strip():
            raise ValueError(f"{part[:60]!r} is not group=role")
        out.append((group.strip(), role.strip()))
    return tuple(out)


class Verifier:
    def __init__(self, issuer: str, audience: str, *, get: Callable[[str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``get(url)``: fetches a JSON document (an HTTP GET by default)."""
        self.issuer = issuer.rstrip("/")
        self.audience = audience
        self._get = get or _http_get
        self._clock = clock
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._keys: dict[str, Any] = {}  # kid -> PyJWK
        self._fetched_at: float | None = None
        self.fetches = 0  # key-set fetches (tests, metrics)

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or :class:`OidcError` saying why it is refused."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise OidcError(f"not a JWT: {e}") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise OidcError(f"algorithm {str(alg)[:20]!r} is not accepted")
        key = self._key(kid if isinstance(kid, str) else None)
        try:
            # only the header's algorithm, one of ALGORITHMS: the key's type must fit it or the check fails
            return jwt.decode(token, key=key.key, algorithms=[alg], audience=self.audience, issuer=self.issuer,
                              leeway=LEEWAY, options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise OidcError("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise OidcError("the token is for another audience") from None
        except jwt.InvalidIssuerError:
            raise OidcError("the token is from another issuer") from None
        except jwt.PyJWTError as e:
            raise OidcError(f"the token is not valid: {e}") from None

    def _key(self, kid: str | None) -> Any:
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= KEYS_LIFESPAN
            missing = kid not in self._keys if kid is not None else len(self._keys) != 1
            if stale or (missing and (self._fetched_at is None or now - self._fetched_at >= MIN_REFRESH)):
                self._refresh(now)
            if kid is None:
                if len(self._keys) != 1:
                    raise OidcError("the token names no key (kid) and the issuer has several")
                return next(iter(self._keys.values()))
            key = self._keys.get(kid)
            if key is None:
                raise OidcError(f"the issuer has no key {kid[:64]!r}")
            return key

    def _refresh(self, now: float) -> None:
        try:
            if self._jwks_uri is None:
                doc = self._get(self.issuer + "/.well-known/openid-configuration")
                if not isinstance(doc, dict) or str(doc.get("issuer", "")).rstrip("/") != self.issuer:
                    raise OidcError("the issuer's discovery document names another issuer")
                uri = doc.get("jwks_uri")
                if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                    raise OidcError("the issuer's discovery document has no jwks_uri")
                self._jwks_uri = uri
            keys = jwt.PyJWKSet.from_dict(self._get(self._jwks_uri))
        except OidcError:
            raise
        except (httpx.HTTPError, ValueError, jwt.PyJWTError, TypeError) as e:
            self._fetched_at = now  # not again before MIN_REFRESH: a failing issuer is not hammered
            if self._keys:
                log.warning("could not fetch the OIDC issuer's keys (%s); keeping the ones held", type(e).__name__)
                return
            raise OidcError(f"the OIDC issuer's keys cannot be fetched ({type(e).__name__})") from None
        self._keys = {k.key_id: k for k in keys.keys if k.key_id}
        if not self._keys and keys.keys:
            self._keys = {"": keys.keys[0]}
        self._fetched_at = now
        self.fetches += 1


def _http_get(url: str) -> Any:
    r = httpx.get(url, timeout=HTTP_TIMEOUT, follow_redirects=False, trust_env=False)
    r.raise_for_status()
    return r.json()


class OidcUsers:
    """Verified tokens -> principals of :attr:`settings.org` (blocking: call off the event loop)."""

    def __init__(self, settings: OidcSettings, relay: Any, verifier: Verifier | None = None) -> None:
        self.settings = settings
        self.relay = relay
        self.verifier = verifier or Verifier(settings.issuer, settings.audience)

    def principal(self, token: str) -> Principal:
        claims = self.verifier.verify(token)
        username = _claim(claims, "email") or _claim(claims, "preferred_username") or _claim(claims, "sub")
        if not username:
            raise OidcError("the token names nobody (no email, preferred_username or sub)")
        if has_controls(username):  # control, bidirectional, zero-width characters and lone surrogates
            raise OidcError("the token's username holds control characters or is not text")
        org = self.settings.org
        member = self.relay.member(org, username)
        if member is None or not member.get("email"):
            self.relay.member_seen(org, username, email=_claim(claims, "email"), name=_claim(claims, "name"),
                                   given_name=_claim(claims, "given_name"), family_name=_claim(claims, "family_name"))
            member = self.relay.member(org, username)
        role = (member or {}).get("role") or self.role_of_groups(claims)
        permissions = frozenset(self.relay.role(org, role) or ()) if role else frozenset()
        return Principal(org=org, token=None, app_names=None, permissions=permissions, user=username, role=role)

    def role_of_groups(self, claims: dict[str, Any]) -> str | None:
        groups = claims.get(self.settings.groups_claim)
        if isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list):
            return None
        have = {g for g in groups[:MAX_GROUPS] if isinstance(g, str)}
        for group, role in self.settings.group_roles:
            if group in have:
                return role
        return None


def _claim(claims: dict[str, Any], name: str) -> str:
    v = claims.get(name)
    return v[:256] if isinstance(v, str) else ""
