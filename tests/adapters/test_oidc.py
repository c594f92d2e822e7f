"""OIDC verification (``relay_es/adapters/oidc.py``) against a real issuer on loopback (discovery
and JWKS over HTTP, keys made here), with a fake clock for the key cache.

What is shown: a token of a published key is accepted with its claims; a rotated key is fetched
when a token names it, and a dropped key stops working once the set is fetched again; unknown key
ids cannot make Relay fetch more than once per :data:`MIN_REFRESH`; the held keys outlive an
issuer that is down, and one that is down from the start is said to be; algorithms outside the
asymmetric list are refused whatever the token says, and so is one its key's type cannot verify (a key
published without ``alg``), a refusal never an error of PyJWT; a slow issuer is given up on by the
deadline, headers included, and while one caller fetches the keys the others use those held or are
refused at once; groups map to roles (role names checked), a grant wins, and the first sign-in is
recorded.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import jwt
import pytest

from relay_es.adapters import oidc
from relay_es.adapters.oidc import OidcError, OidcSettings, OidcUsers, Verifier, looks_like_jwt, parse_group_roles
from relay_es.aggregates.members import members_stream_id
from relay_es.domain.clock import FakeClock
from relay_es.engine.service import Relay
from tests.oidc_issuer import Issuer
from tests.support import POPO


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def issuer():
    with Issuer() as i:
        yield i


def fetches(i: Issuer) -> int:
    return i.requests.count("/jwks")


def test_a_token_of_a_published_key_is_accepted(issuer: Issuer) -> None:
    v = Verifier(issuer.url, "relay")
    claims = v.verify(issuer.token("ada", groups=["ops"]))
    assert claims["sub"] == "ada" and claims["groups"] == ["ops"] and claims["iss"] == issuer.url
    assert issuer.requests == ["/.well-known/openid-configuration", "/jwks"]
    v.verify(issuer.token("bob"))
    assert fetches(issuer) == 1  # the keys are held


def test_an_ec_key_works_too(issuer: Issuer) -> None:
    issuer.rotate(ec_key=True)
    assert Verifier(issuer.url, "relay").verify(issuer.token("ada"))["sub"] == "ada"


def test_a_rotated_key_is_fetched_and_a_dropped_one_stops_working(issuer: Issuer) -> None:
    clock = Clock()
    v = Verifier(issuer.url, "relay", clock=clock)
    old_kid = issuer.kid
    old = issuer.token("ada")
    v.verify(old)
    clock.t += oidc.MIN_REFRESH  # a new key appears; the first token naming it fetches the set again
    issuer.rotate(drop_old=True)
    assert v.verify(issuer.token("ada"))["sub"] == "ada"
    assert fetches(issuer) == 2
    with pytest.raises(OidcError, match="no key"):
        v.verify(old)  # the old key is gone from the set just fetched
    assert old_kid not in v._keys


def test_unknown_key_ids_cannot_make_relay_hammer_the_issuer(issuer: Issuer) -> None:
    clock = Clock()
    v = Verifier(issuer.url, "relay", clock=clock)
    v.verify(issuer.token("ada"))
    for i in range(50):
        with pytest.raises(OidcError):
            v.verify(issuer.token("ada", kid=f"made-up-{i}", key=issuer.keys[issuer.kid]))
    assert fetches(issuer) == 1
    clock.t += oidc.MIN_REFRESH
    with pytest.raises(OidcError):
        v.verify(issuer.token("ada", kid="made-up-again", key=issuer.keys[issuer.kid]))
    assert fetches(issuer) == 2
    clock.t += oidc.KEYS_LIFESPAN  # and the set is fetched again when it is old, token or not
    v.verify(issuer.token("ada"))
    assert fetches(issuer) == 3


def test_the_held_keys_outlive_an_issuer_that_is_down() -> None:
    with Issuer() as issuer:
        clock = Clock()
        v = Verifier(issuer.url, "relay", clock=clock)
        token = issuer.token("ada")
        v.verify(token)
    clock.t += oidc.KEYS_LIFESPAN + 1  # stale, and the issuer is gone: the held keys still answer
    assert v.verify(token)["sub"] == "ada"
    with pytest.raises(OidcError, match="cannot be fetched"):
        Verifier(issuer.url, "relay").verify(token)  # a verifier that never had keys cannot


@pytest.mark.parametrize("alg", ["HS256", "none", "RS1", ""])
def test_algorithms_outside_the_list_are_refused(issuer: Issuer, alg: str) -> None:
    good = issuer.token("ada")
    head, body, _ = good.split(".")
    forged_head = jwt.utils.base64url_encode(
        jwt.utils.force_bytes(f'{{"alg":"{alg}","kid":"{issuer.kid}","typ":"JWT"}}')).decode()
    with pytest.raises(OidcError, match="not accepted|not a JWT"):
        Verifier(issuer.url, "relay").verify(f"{forged_head}.{body}.x")


def test_the_discovery_document_must_name_the_issuer() -> None:
    def get(url: str) -> Any:
        return {"issuer": "https://elsewhere.example.com", "jwks_uri": "https://elsewhere.example.com/jwks"}

    from cryptography.hazmat.primitives.asymmetric import rsa

    token = jwt.encode({"sub": "x"}, rsa.generate_private_key(65537, 2048), algorithm="RS256", headers={"kid": "k"})
    with pytest.raises(OidcError, match="another issuer"):
        Verifier("https://id.example.com", "relay", get=get).verify(token)


@pytest.mark.parametrize("claims, match", [({"exp": None}, "exp"), ({"sub": None}, "sub"), ({"iat": None}, "iat")])
def test_required_claims(issuer: Issuer, claims: dict[str, Any], match: str) -> None:
    import time

    now = int(time.time())
    full = {"sub": "ada", "aud": "relay", "iss": issuer.url, "iat": now, "exp": now + 60}
    for k, v in claims.items():
        full.pop(k) if v is None else full.__setitem__(k, v)
    token = jwt.encode(full, issuer.keys[issuer.kid], algorithm="RS256", headers={"kid": issuer.kid})
    with pytest.raises(OidcError, match=match):
        Verifier(issuer.url, "relay").verify(token)


def test_group_roles_grants_and_first_sign_in(issuer: Issuer) -> None:
    relay = Relay(POPO, clock=FakeClock())
    users = OidcUsers(OidcSettings(issuer.url, "relay", "acme", username_claim="email", group_roles=parse_group_roles(
        "admins=admin, ops=operator,watchers=viewer")), relay)
    p = users.principal(issuer.token("ada", email="ada@example.com", groups=["ops", "watchers"]))
    assert (p.org, p.user, p.role, p.token, p.app_names) == ("acme", "ada@example.com", "operator", None, None)
    assert "application.write" in p.permissions and "token.write" not in p.permissions
    assert relay.member("acme", "ada@example.com")["name"] == "Ada"
    relay.grant_role("acme", "ada@example.com", "viewer")
    p = users.principal(issuer.token("ada", email="ada@example.com", groups=["ops"]))
    assert p.role == "viewer" and "application.write" not in p.permissions
    nobody = users.principal(issuer.token("nemo", email="nemo@example.com", groups="staff"))
    assert (nobody.user, nobody.role, nobody.permissions) == ("nemo@example.com", None, frozenset())
    assert set(relay.members("acme")) == {"ada@example.com"}  # no role: not kept
    with pytest.raises(OidcError, match="not verified"):
        users.principal(issuer.token("eve", email="ada@example.com", email_verified=False))
    with pytest.raises(OidcError, match="no email claim"):
        users.principal(issuer.token("sam", email=None))
    by_sub = OidcUsers(OidcSettings(issuer.url, "relay", "acme", group_roles=(("ops", "operator"),)), relay)
    assert by_sub.principal(issuer.token("ada-sub-1", email="ada@example.com", groups=["ops"])).user == "ada-sub-1"


def test_a_group_role_is_recorded_from_a_newer_token_that_carries_the_groups_claim(issuer: Issuer) -> None:
    relay = Relay(POPO, clock=FakeClock())
    users = OidcUsers(OidcSettings(issuer.url, "relay", "acme", username_claim="email", group_roles=parse_group_roles(
        "admins=admin,ops=operator")), relay)
    now = int(time.time())

    def sign_in(iat: int, **kw: Any) -> dict[str, Any]:
        users.principal(issuer.token("ada", email="ada@example.com", iat=iat, **kw))
        return relay.member("acme", "ada@example.com")

    assert sign_in(now - 100, groups=["ops"])["group_role"] == "operator"
    assert sign_in(now - 90)["group_role"] == "operator"  # no groups claim: unknown, not none
    assert sign_in(now - 200, groups=["admins"])["group_role"] == "operator"  # an older token: nothing
    assert sign_in(now - 50, groups=["admins"])["group_role"] == "admin"
    assert sign_in(now - 40, groups=[])["group_role"] is None  # no mapped group: none, and recorded
    versions = relay.repository.get(members_stream_id("acme")).version
    sign_in(now - 100, groups=["ops"])
    sign_in(now - 30, groups=[])
    assert relay.repository.get(members_stream_id("acme")).version == versions  # nothing new: nothing written


@pytest.mark.parametrize("claims", [{"groups": ["x"], "iat": True}, {"groups": ["x"], "iat": "1700000000"},
                                    {"groups": ["x"], "iat": -1}, {"groups": ["x"], "iat": float("nan")},
                                    {"groups": ["x"]}, {"iat": 1700000000}, {"groups": 5, "iat": 1700000000}])
def test_a_token_without_usable_groups_or_iat_gives_no_issue_time(claims: dict[str, Any]) -> None:
    users = OidcUsers(OidcSettings("https://issuer.example.com", "relay", "acme"), Relay(POPO, clock=FakeClock()))
    assert users.groups_issued_at(claims) is None
    assert users.groups_issued_at({**claims, "groups": ["x"], "iat": 1700000000.7}) == 1700000000


def test_helpers() -> None:
    assert looks_like_jwt("eyJa.eyJb.sig") and not looks_like_jwt("relay_abc") and not looks_like_jwt("eyJa.b")
    assert parse_group_roles("a=bee, c = dee ,") == (("a", "bee"), ("c", "dee"))
    with pytest.raises(ValueError):
        parse_group_roles("a")
    for typo in ("everyone=view-r", "ops=op", "ops=" + "x" * 31, "ops=vi ewer"):
        with pytest.raises(ValueError, match="not a role name"):
            parse_group_roles(typo)  # settings make it RELAY_OIDC_GROUP_ROLES's InvalidSetting: relay serve exits 2


@pytest.mark.parametrize("name", ["bad\udc80name@example.com", "evil\u202e@example.com", "new\nline"])
def test_a_username_that_is_not_plain_text_is_refused(issuer: Issuer, name: str) -> None:
    relay = Relay(POPO, clock=FakeClock())
    users = OidcUsers(OidcSettings(issuer.url, "relay", "acme"), relay)  # named by sub
    claims_email = name if "@" in name else None
    token = jwt.encode({"sub": name, "aud": "relay", "iss": issuer.url, "iat": 1, "exp": 2**40,
                        **({"email": claims_email} if claims_email else {})},
                       issuer.keys[issuer.kid], algorithm="RS256", headers={"kid": issuer.kid})
    with pytest.raises(OidcError, match="control characters"):
        users.principal(token)
    assert relay.members("acme") == {}


def test_keys_for_encryption_or_another_algorithm_and_several_audiences(issuer: Issuer) -> None:
    real = Issuer.public_jwk

    def marked(kid: str, key: Any) -> dict[str, Any]:
        return {**real(kid, key), "use": "enc"}

    Issuer.public_jwk = staticmethod(marked)  # type: ignore[method-assign]
    try:
        with pytest.raises(OidcError):
            Verifier(issuer.url, "relay").verify(issuer.token("ada"))  # an encryption key verifies nothing
    finally:
        Issuer.public_jwk = staticmethod(real)  # type: ignore[method-assign]
    with pytest.raises(OidcError, match="not its key's"):
        Verifier(issuer.url, "relay").verify(issuer.token("ada", alg="PS256"))  # the key says RS256
    v = Verifier(issuer.url, "relay")
    with pytest.raises(OidcError, match="azp"):
        v.verify(issuer.token("ada", aud=["relay", "other"]))
    assert v.verify(issuer.token("ada", aud=["relay", "other"], azp="relay"))["sub"] == "ada"


def test_a_plain_http_issuer_elsewhere_than_loopback_is_not_trusted() -> None:
    from relay_es.adapters.oidc import secure_url

    assert secure_url("https://id.example.com") and secure_url("http://127.0.0.1:9/x", loopback_http=True)
    assert not secure_url("http://id.example.com", loopback_http=True) and not secure_url("http://127.0.0.1/")
    assert secure_url("http://[::1]:9/x", loopback_http=True) and secure_url("http://localhost/x", loopback_http=True)
    for name in ("http://127.evil.example/x", "http://127.corp.internal/keys", "http://localhost.evil.example/"):
        assert not secure_url(name, loopback_http=True), name  # a name that starts like loopback resolves anywhere
    docs = {"https://id.example.com/.well-known/openid-configuration":
            {"issuer": "https://id.example.com", "jwks_uri": "http://keys.example.com/jwks"}}
    with pytest.raises(OidcError, match="jwks_uri"):
        Verifier("https://id.example.com", "relay", get=docs.__getitem__).verify(
            jwt.encode({"sub": "x"}, _rsa(), algorithm="RS256", headers={"kid": "k"}))


def test_a_failing_issuer_is_asked_at_most_once_per_min_refresh(issuer: Issuer) -> None:
    asked: list[str] = []

    def broken(url: str) -> Any:
        asked.append(url)
        raise ValueError("not json")

    clock = Clock()
    v = Verifier(issuer.url, "relay", get=broken, clock=clock)
    with pytest.raises(OidcError, match="cannot be fetched"):
        v.verify(issuer.token("ada"))
    for _ in range(5):
        with pytest.raises(OidcError, match="cannot be fetched"):  # not "no key of its kid": it has none at all
            v.verify(issuer.token("ada"))
    assert len(asked) == 1
    clock.t += oidc.MIN_REFRESH
    with pytest.raises(OidcError):
        v.verify(issuer.token("ada"))
    assert len(asked) == 2


def _rsa() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(65537, 2048)


def _forged(kid: str, alg: str, iss: str) -> str:
    """A token whose header names ``alg`` for the key ``kid``: anyone can write one."""
    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{b64({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{b64({'sub': 'x', 'aud': 'relay', 'iss': iss, 'iat': now, 'exp': now + 60})}.AAAA"


FITS = {"rsa": {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}, "ec": {"ES256"}, "ec384": {"ES384"},
        "ed25519": {"EdDSA"}, "ed448": {"EdDSA"}}


@pytest.mark.parametrize("kind", sorted(FITS))
def test_a_key_without_alg_verifies_only_its_type_s_algorithms(issuer: Issuer, kind: str) -> None:
    issuer.publish_alg = False  # as Entra ID publishes its keys
    kid = issuer.rotate(kind=kind)
    v = Verifier(issuer.url, "relay")
    assert v.verify(issuer.token("ada"))["sub"] == "ada"  # its own algorithm
    for alg in oidc.ALGORITHMS:
        with pytest.raises(OidcError) as refused:  # never PyJWT's TypeError or ValueError: a 500
            v.verify(_forged(kid, alg, issuer.url))
        assert ("not its key's" in str(refused.value)) == (alg not in FITS[kind]), (alg, str(refused.value))
    if kind == "rsa":
        assert v.verify(issuer.token("ada", alg="PS384"))["sub"] == "ada"  # no alg named: any of its type


def test_a_shared_secret_key_verifies_nothing() -> None:
    jwks = {"keys": [{"kty": "oct", "k": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", "kid": "h", "use": "sig"}]}
    docs = {"https://id.example.com/.well-known/openid-configuration":
            {"issuer": "https://id.example.com", "jwks_uri": "https://id.example.com/jwks"},
            "https://id.example.com/jwks": jwks}
    v = Verifier("https://id.example.com", "relay", get=docs.__getitem__)
    for alg in oidc.ALGORITHMS:
        with pytest.raises(OidcError, match="no key Relay can use"):
            v.verify(_forged("h", alg, "https://id.example.com"))


def test_what_pyjwt_raises_on_a_key_it_cannot_use_is_a_refusal(issuer: Issuer, monkeypatch) -> None:
    issuer.publish_alg = False
    monkeypatch.setattr(oidc, "algorithms_of", lambda key: frozenset(oidc.ALGORITHMS))  # the type check undone
    with pytest.raises(OidcError, match="signature or claims"):  # PyJWT: TypeError, an RSA key loaded as EC
        Verifier(issuer.url, "relay").verify(_forged(issuer.kid, "ES256", issuer.url))


def test_a_key_whose_kid_is_not_text_is_skipped_not_the_whole_set(issuer: Issuer) -> None:
    good = Issuer.public_jwk(issuer.kid, issuer.keys[issuer.kid])
    odd = [{**good, "kid": ["x"]}, {**good, "kid": 7}, {**good, "kid": {"a": 1}}, {**good, "alg": ["RS256"]}, "key"]
    docs = {f"{issuer.url}/.well-known/openid-configuration": {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"},
            f"{issuer.url}/jwks": {"keys": [*odd, good]}}
    v = Verifier(issuer.url, "relay", get=docs.__getitem__)
    assert v.verify(issuer.token("ada"))["sub"] == "ada"
    assert list(v._keys) == [issuer.kid]


def test_an_issuer_trickling_its_headers_is_given_up_on_by_the_deadline(issuer: Issuer, monkeypatch) -> None:
    monkeypatch.setattr(oidc, "HTTP_TIMEOUT", 0.3)  # the whole exchange; the issuer takes 2 s over its headers alone
    issuer.trickle = 100
    with pytest.raises(OidcError, match="cannot be fetched"):
        Verifier(issuer.url, "relay").verify(issuer.token("ada"))
    assert not issuer.trickled.is_set()  # given up on while the headers still came, not once they were all in


class Stall:
    """The issuer's documents, each fetch held (once ``hold`` is set) until ``go`` is: the test says when."""

    def __init__(self) -> None:
        self.hold = False
        self.entered, self.go, self.done = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, url: str) -> Any:
        if self.hold:
            self.entered.set()
            self.go.wait(10)  # a bound for the run before the fix, where the other callers wait for this one
            self.done.set()
        return oidc._http_get(url)


def test_one_fetch_at_a_time_and_the_other_callers_do_not_wait_for_it(issuer: Issuer) -> None:
    clock, stall = Clock(), Stall()
    v = Verifier(issuer.url, "relay", get=stall, clock=clock)
    token = issuer.token("ada")
    v.verify(token)
    clock.t += oidc.KEYS_LIFESPAN  # the set is old: the next caller fetches it again
    stall.hold = True
    fetcher = threading.Thread(target=v.verify, args=(token,))
    fetcher.start()
    try:
        assert stall.entered.wait(10)
        assert v.verify(token)["sub"] == "ada"  # the keys held, while the fetch hangs
        with pytest.raises(OidcError, match="no key of its kid .its keys are being fetched again"):
            v.verify(issuer.token("ada", kid=issuer.rotate()))
        hung = not stall.done.is_set()
    finally:
        stall.go.set()
        fetcher.join()
    assert hung  # all of that answered while the fetch still hung
    assert issuer.requests.count("/jwks") == 2
    assert v.verify(issuer.token("ada"))["sub"] == "ada"  # the new key, fetched by the caller that hung


def test_a_caller_finding_the_first_fetch_under_way_is_refused_at_once(issuer: Issuer) -> None:
    stall = Stall()
    stall.hold = True
    v = Verifier(issuer.url, "relay", get=stall)
    token = issuer.token("ada")
    fetcher = threading.Thread(target=v.verify, args=(token,))
    fetcher.start()
    try:
        assert stall.entered.wait(10)
        with pytest.raises(OidcError, match="keys are being fetched"):
            v.verify(token)
        hung = not stall.done.is_set()
    finally:
        stall.go.set()
        fetcher.join()
    assert hung
    assert v.verify(token)["sub"] == "ada"


def test_a_mapped_role_the_org_does_not_have_is_logged_once(issuer: Issuer, caplog) -> None:
    users = OidcUsers(OidcSettings(issuer.url, "relay", "acme", group_roles=parse_group_roles("everyone=viewr")),
                      Relay(POPO, clock=FakeClock()))  # a typo: a role name, but no role
    for _ in range(3):
        assert users.principal(issuer.token("ada", groups=["everyone"])).permissions == frozenset()
    assert [r.getMessage() for r in caplog.records if "viewr" in r.getMessage()] == [
        "--oidc-group-roles maps groups to role 'viewr', which org acme does not have: it gives them nothing"]
