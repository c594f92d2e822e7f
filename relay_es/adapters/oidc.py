"""OIDC sign-in: bearer JWTs from an OpenID Connect issuer, verified against its JWKS (ADR 25).

:class:`Verifier` checks a token with PyJWT: signed (RSA, RSA-PSS, ECDSA or EdDSA only: never
``none``, never a shared-secret HMAC, whatever the token's header says) by a key of the issuer's
JWKS, issued by the configured issuer for the configured audience, not expired (30 s of clock
leeway), with ``sub``. The issuer's discovery document (``/.well-known/openid-configuration``)
names the JWKS; both are fetched when first needed, over https (http only for an issuer on
loopback), at most :data:`MAX_DOCUMENT` bytes, each exchange (connection, headers and body) ended
by :data:`HTTP_TIMEOUT` whatever the issuer trickles. A key marked for encryption is never used; a
key verifies only the algorithms of its type (RSA: RS* and PS*; EC: the ES* of its curve; Ed25519 and
Ed448: EdDSA), and of those only the one it names, if it names one; a token whose header names
another is refused, whatever PyJWT would make of the pair. A token for several audiences must name
Relay as its ``azp``. Keys are cached: the set is fetched again every :data:`KEYS_LIFESPAN`, and at
once for a key id it does not hold (a rotated key), at most once per :data:`MIN_REFRESH` so that
tokens naming made-up key ids cannot make Relay hammer the issuer. One fetch at a time, outside the
lock: meanwhile the other callers use the keys held, or are refused at once, never kept waiting.

:class:`OidcUsers` turns a verified token into a :class:`~relay_es.adapters.authz.Principal` of
the configured org: the member's username (``sub``, or the claim ``--oidc-username-claim`` names;
``email`` only when ``email_verified``), their permissions those of the role granted them
(``grantRole``) or, without a grant, of the first of their groups (the ``groups`` claim, or the one
configured) that ``--oidc-group-roles`` maps; no role, no permission. The first sign-in of a member
with a role is recorded (``listMembers``); one without a role is not (strangers fill nothing).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from relay_es.adapters.authz import Principal, StoreUnavailable
from relay_es.adapters.deadline import Deadline
from relay_es.adapters.failures import is_store_error
from relay_es.aggregates.members import groups_news
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.roles import ROLE_NAME
from relay_es.domain.text import has_controls
from relay_es.engine.member_commands import membership_of

log = logging.getLogger(__name__)

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
RSA_ALGORITHMS = frozenset(ALGORITHMS[:6])
CURVE_ALGORITHM = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}  # an EC key's one algorithm
KEYS_LIFESPAN = 300.0  # seconds a fetched key set is used before it is fetched again
MIN_REFRESH = 30.0  # at most one fetch this often for an unknown key id
LEEWAY = 30  # seconds of clock skew allowed on exp, nbf, iat
HTTP_TIMEOUT = 5.0  # seconds an exchange with the issuer may take in all, headers and body included
MAX_TOKEN = 16 * 1024  # characters of a bearer JWT
MAX_GROUPS = 200
MAX_KEYS = 50  # keys of a JWKS looked at
MAX_DOCUMENT = 512 * 1024  # bytes of a discovery document or a JWKS


class OidcError(Exception):
    """A token that is not accepted, or an issuer that cannot be reached; the text says why."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    org: str  # the org every OIDC user belongs to
    groups_claim: str = "groups"
    group_roles: tuple[tuple[str, str], ...] = ()  # (group, role), first match wins
    username_claim: str = "sub"  # what names a member: sub (never reassigned), or email (verified only)


def looks_like_jwt(secret: str) -> bool:
    """A JWS compact serialization (three base64url parts), not one of Relay's tokens."""
    return secret.count(".") == 2 and secret.startswith("ey") and len(secret) <= MAX_TOKEN


def parse_group_roles(text: str) -> tuple[tuple[str, str], ...]:
    """``group=role,group2=role2`` (:class:`ValueError` for a part without ``=``, or whose role is not a role
    name: settings turn it into an :class:`InvalidSetting` of ``RELAY_OIDC_GROUP_ROLES``)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        group, sep, role = part.partition("=")
        group, role = group.strip(), role.strip()
        if not sep or not group or not role:
            raise ValueError(f"{part[:60]!r} is not group=role")
        if not ROLE_NAME.fullmatch(role):
            raise ValueError(f"{part[:60]!r}: its role is not a role name (3-30 letters, digits or underscores)")
        out.append((group, role))
    return tuple(out)


def algorithms_of(key: object) -> frozenset[str]:
    """The algorithms of :data:`ALGORITHMS` a public key verifies: an RSA key RS* and PS*, an EC key the ES*
    of its curve, an Ed25519 or Ed448 key EdDSA; any other key (a shared secret, a private key, another
    curve) none."""
    if isinstance(key, rsa.RSAPublicKey):
        return RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey):
        alg = CURVE_ALGORITHM.get(key.curve.name)
        return frozenset({alg}) if alg else frozenset()
    if isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return frozenset({"EdDSA"})
    return frozenset()


def usable_key(item: object) -> tuple[str, Any, frozenset[str]] | None:
    """A JWKS entry as ``(kid, PyJWK, the algorithms it verifies)``, or None for one that verifies nothing
    Relay accepts: marked for encryption, a type PyJWT cannot read, a kid that is not text, no algorithm
    of :data:`ALGORITHMS` that fits both its type and the ``alg`` it names."""
    if not isinstance(item, dict) or item.get("use", "sig") != "sig":
        return None  # encryption keys never verify a signature
    kid, named = item.get("kid", ""), item.get("alg")
    if not isinstance(kid, str):
        return None  # a token's kid is text: this key could only be mistaken for another
    try:  # an OKP key without alg: PyJWT guesses Ed25519 only, so it is told (Ed448 is EdDSA too)
        k = jwt.PyJWK.from_dict(item, "EdDSA" if item.get("kty") == "OKP" and named is None else None)
    except Exception:  # noqa: BLE001  # PyJWT's, cryptography's or a malformed field's: the others still count
        return None
    algorithms = algorithms_of(k.key)
    if named is not None:
        algorithms = algorithms & {named} if isinstance(named, str) else frozenset()
    return (kid, k, algorithms) if algorithms else None


class Verifier:
    def __init__(self, issuer: str, audience: str, *, get: Callable[[str], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``get(url)``: fetches a JSON document (an HTTP GET by default)."""
        self.issuer = issuer
        self.audience = audience
        self._get = get or _http_get
        self._clock = clock
        self._lock = threading.Lock()  # held for bookkeeping only, never over a fetch
        self._iss: str | None = None  # the issuer exactly as its discovery document spells it (tokens must match)
        self._jwks_uri: str | None = None
        self._keys: dict[str, tuple[Any, frozenset[str]]] = {}  # kid -> (PyJWK, the algorithms it verifies)
        self._fetched_at: float | None = None  # when the last fetch began, whatever came of it
        self._fetching = False  # a caller is fetching the key set now: the others do not wait for it
        self._failure: str | None = None  # why the last fetch failed; None once one succeeded
        self.fetches = 0  # key-set fetches (tests, metrics)

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or :class:`OidcError` saying why it is refused (in Relay's words:
        nothing of the token is echoed)."""
        if len(token) > MAX_TOKEN:
            raise OidcError("the token is too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise OidcError("it is not a JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise OidcError("its algorithm is not accepted (RSA, RSA-PSS, ECDSA or EdDSA only)")
        key, key_algorithms = self._key(kid if isinstance(kid, str) else None)
        if alg not in key_algorithms:  # PyJWT given a key of another type raises what it likes (TypeError...)
            raise OidcError(f"its algorithm is not its key's (the key verifies {', '.join(sorted(key_algorithms))})")
        try:
            # only the header's algorithm, one of ALGORITHMS that the key's type fits
            claims = jwt.decode(token, key=key.key, algorithms=[alg], audience=self.audience, issuer=self._iss,
                                leeway=LEEWAY, options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise OidcError("it has expired") from None
        except jwt.InvalidAudienceError:
            raise OidcError("it is for another audience") from None
        except jwt.InvalidIssuerError:
            raise OidcError("it is from another issuer") from None
        except jwt.MissingRequiredClaimError as e:
            raise OidcError(f"it lacks the {e.claim} claim") from None
        except jwt.PyJWTError:
            raise OidcError("its signature or claims are not valid") from None
        except Exception as e:  # noqa: BLE001  # a key PyJWT could not use after all: a refusal, never a 500
            log.warning("an OIDC token's check failed in PyJWT (%s); the token is refused", type(e).__name__)
            raise OidcError("its signature or claims are not valid") from None
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != self.audience:
            raise OidcError("it was issued to another client (azp)")
        return claims

    def _key(self, kid: str | None) -> tuple[Any, frozenset[str]]:
        if self._claim_fetch(kid):
            self._refresh()
        with self._lock:
            return self._held(kid)

    def _claim_fetch(self, kid: str | None) -> bool:
        """Whether this caller fetches the key set now: it is old, or lacks the token's key and was not fetched
        within :data:`MIN_REFRESH`, and nobody is fetching it already (one fetch at a time)."""
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= KEYS_LIFESPAN
            missing = kid not in self._keys if kid is not None else len(self._keys) != 1
            due = stale or (missing and (self._fetched_at is None or now - self._fetched_at >= MIN_REFRESH))
            if not due or self._fetching:
                return False
            self._fetching = True
            self._fetched_at = now  # tried now, whatever comes of it: a failing issuer is not asked again before MIN_REFRESH
            return True

    def _held(self, kid: str | None) -> tuple[Any, frozenset[str]]:
        """The held key of ``kid`` (the only key, for a token naming none); the caller holds the lock."""
        if not self._keys:
            raise OidcError("the OIDC issuer's keys are being fetched: try again" if self._fetching
                            else self._failure or "the issuer publishes no key Relay can use")
        if kid is None:
            if len(self._keys) != 1:
                raise OidcError("it names no key (kid) and the issuer has several")
            return next(iter(self._keys.values()))
        key = self._keys.get(kid)
        if key is None:
            raise OidcError("the issuer has no key of its kid" + (" (its keys are being fetched again)"
                                                                   if self._fetching else ""))
        return key

    def _refresh(self) -> None:
        """Fetches the key set, outside the lock (this caller claimed the fetch): a usable set replaces the keys
        held; a failure leaves them in use, and is :class:`OidcError` when there are none."""
        found: tuple[str, str, dict[str, tuple[Any, frozenset[str]]]] | str = "the fetch was interrupted"
        try:
            found = self._fetch()
        except OidcError as e:
            found = str(e)
        except Exception as e:  # noqa: BLE001  # the network, a bad document: the held keys stay in use
            found = f"the OIDC issuer's keys cannot be fetched ({type(e).__name__})"
        finally:
            with self._lock:
                self._fetching = False
                if isinstance(found, str):
                    self._failure = found
                else:
                    (self._iss, self._jwks_uri, self._keys), self._failure = found, None
                    self.fetches += 1
                held = bool(self._keys)
        if isinstance(found, str):
            if not held:
                raise OidcError(found)
            log.warning("the OIDC issuer's keys could not be fetched again (%s); keeping the ones held", found)

    def _fetch(self) -> tuple[str, str, dict[str, tuple[Any, frozenset[str]]]]:
        """The issuer's name and ``jwks_uri`` (its discovery document, the first time) and its usable keys."""
        iss, uri = self._iss, self._jwks_uri
        if iss is None or uri is None:
            doc = self._get(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
            iss = doc.get("issuer") if isinstance(doc, dict) else None
            if not isinstance(iss, str) or iss.rstrip("/") != self.issuer.rstrip("/"):
                raise OidcError("the issuer's discovery document names another issuer")
            uri = doc.get("jwks_uri")
            if not isinstance(uri, str) or not secure_url(uri, loopback_http=self.issuer.startswith("http://")):
                raise OidcError("the issuer's discovery document has no usable jwks_uri (https)")
        data = self._get(uri)
        raw = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise OidcError("the issuer's key set is not a JWKS")
        keys: dict[str, tuple[Any, frozenset[str]]] = {}
        for item in raw[:MAX_KEYS]:
            usable = usable_key(item)
            if usable is not None:
                keys[usable[0]] = usable[1:]
        if "" in keys and len(keys) > 1:
            del keys[""]  # a key without a kid is usable only when it is the only one
        return iss, uri, keys


def secure_url(url: str, *, loopback_http: bool = False) -> bool:
    """An https URL; or an http one on loopback, where the issuer itself is a loopback http one (tests, a
    sidecar)."""
    if url.startswith("https://"):
        return True
    if loopback_http and url.startswith("http://"):
        host = urlsplit(url).hostname or ""
        if host == "localhost":
            return True
        try:  # an address, not a name that merely starts like one (127.evil.example resolves anywhere)
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return False


def _http_get(url: str) -> Any:
    """A JSON document, at most :data:`MAX_DOCUMENT` bytes, the whole exchange within :data:`HTTP_TIMEOUT`
    (no proxy from the environment, no redirect followed)."""
    timeout = HTTP_TIMEOUT
    steps = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    with httpcore.ConnectionPool(network_backend=Deadline("the OIDC issuer did not answer in time").start(timeout), retries=0) as pool, \
            pool.stream("GET", url, headers=[(b"Accept", b"application/json")],
                        extensions={"timeout": steps}) as r:
        if not 200 <= r.status < 300:
            raise OidcError(f"the OIDC issuer's keys cannot be fetched (it answered HTTP {r.status})")
        body = bytearray()
        for chunk in r.iter_stream():
            body += chunk
            if len(body) > MAX_DOCUMENT:
                raise ValueError("the document is too large")
    return json.loads(body)


class OidcUsers:
    """Verified tokens -> principals of :attr:`settings.org` (blocking: call off the event loop)."""

    def __init__(self, settings: OidcSettings, relay: Any, verifier: Verifier | None = None) -> None:
        self.settings = settings
        self.relay = relay
        self.verifier = verifier or Verifier(settings.issuer, settings.audience)
        self._unknown_roles: set[str] = set()  # roles of --oidc-group-roles found missing, told once (bounded by it)

    def principal(self, token: str) -> Principal:
        """The signed-in user. A store that is away is :class:`~relay_es.adapters.authz.StoreUnavailable` (503)."""
        claims = self.verifier.verify(token)
        username = self.username(claims)
        org = self.settings.org
        try:
            member = self.relay.member(org, username)
            membership = membership_of(member)  # what a key made on this sign-in is made on (Principal.membership)
            from_groups = self.role_of_groups(claims)
            role = (member or {}).get("role") or from_groups
            # Kept once they have a role (strangers are not); and what their groups give them each time it
            # changes, from a token that carries the groups claim and was issued after the one recorded.
            issued = self.groups_issued_at(claims)
            first = role and (member is None or not member.get("email"))
            if first or groups_news(member, from_groups, issued):
                try:
                    self.relay.member_seen(org, username, email=_claim(claims, "email"), name=_claim(claims, "name"),
                                           given_name=_claim(claims, "given_name"),
                                           family_name=_claim(claims, "family_name"), group_role=from_groups,
                                           groups_issued_at=issued)
                except InvalidSetting:
                    log.warning("org %s is full: a member's first sign-in is not recorded", org)
                if member is None:  # recorded just now: let in on that record, with their groups' role (granted none)
                    made = membership_of(self.relay.member(org, username))
                    membership = None if made is None else (made[0], None)
            granted = self.relay.role(org, role) if role else None
            if role and granted is None:
                self.no_such_role(role)
            permissions = frozenset(granted or ())
        except Exception as e:
            if is_store_error(e):
                raise StoreUnavailable("the store is unavailable; the sign-in cannot be checked now") from None
            raise
        return Principal(org=org, token=None, app_names=None, permissions=permissions, user=username, role=role,
                         membership=membership)

    def no_such_role(self, role: str) -> None:
        """Logs, once per role, that a role ``--oidc-group-roles`` maps is not a role of the org (a typo, or one
        not made yet): it gives its groups nothing."""
        if role in self._unknown_roles or role not in {r for _, r in self.settings.group_roles}:
            return
        self._unknown_roles.add(role)
        log.warning("--oidc-group-roles maps groups to role %r, which org %s does not have: it gives them nothing",
                    role, self.settings.org)

    def username(self, claims: dict[str, Any]) -> str:
        """The claim that names the user (``--oidc-username-claim``, ``sub`` by default: the one the issuer
        never reassigns). ``email`` counts only when the issuer says it is verified."""
        name = self.settings.username_claim
        value = claims.get(name)
        if not isinstance(value, str) or not value:
            raise OidcError(f"it has no {name} claim to name the user by")
        if name == "email" and claims.get("email_verified") is not True:
            raise OidcError("its email is not verified by the issuer (email_verified)")
        if len(value) > 256 or has_controls(value):  # control, bidirectional, zero-width characters, lone surrogates
            raise OidcError(f"its {name} is not a plain name of at most 256 characters (control characters)")
        return value

    def groups_issued_at(self, claims: dict[str, Any]) -> int | None:
        """When a token that carries the groups claim was issued (``iat``, epoch seconds); None for a
        token without the claim (its groups are unknown, not empty) or without a usable ``iat``."""
        groups, iat = claims.get(self.settings.groups_claim), claims.get("iat")
        if not isinstance(groups, (list, str)) or type(iat) not in (int, float) or not 0 <= iat < 2**53:
            return None
        return int(iat)

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
