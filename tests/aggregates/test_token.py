"""The Token aggregate and the secret hashing."""

from __future__ import annotations

import copy
import hashlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.token import (
    PREFIX,
    Token,
    hash_secret,
    new_secret,
    secret_matches,
    token_stream_id,
)
from relay_es.domain.errors import IllegalTransition

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make(app_names: list[str] | None = None, secret: str | None = None) -> tuple[Token, str]:
    secret = secret or new_secret()
    return Token(org="o", name="ci", secret_hash=hash_secret(secret), app_names=app_names, timestamp=T0), secret


def replay(events: list[Any]) -> Token:
    agg = None
    for e in events:
        agg = e.mutate(agg)
    assert isinstance(agg, Token)
    return agg


def _all_values(obj: Any) -> list[Any]:
    """Every value reachable from an event's ``__dict__`` (lists flattened)."""
    out: list[Any] = []
    stack = list(vars(obj).values())
    while stack:
        v = stack.pop()
        out.append(v)
        if isinstance(v, (list, tuple, set)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return out


def assert_secret_nowhere(secret: str, events: list[Any], token: Token) -> None:
    for e in events:
        for v in _all_values(e):
            assert v != secret
            if isinstance(v, str):
                assert secret not in v
        assert secret not in repr(e)
    for v in vars(token).values():
        if isinstance(v, str):
            assert secret not in v


# ------------------------------------------------------------------ secrets


def test_new_secret_shape_and_uniqueness() -> None:
    secrets = {new_secret() for _ in range(100)}
    assert len(secrets) == 100
    for s in secrets:
        assert s.startswith(PREFIX)
        assert len(s) == len(PREFIX) + 43  # 32 bytes, base64url without padding


def test_hash_secret_is_sha256_hex() -> None:
    assert hash_secret("relay_abc") == hashlib.sha256(b"relay_abc").hexdigest()
    assert len(hash_secret("x")) == 64
    assert hash_secret("x") != hash_secret("y")


def test_secret_matches() -> None:
    s = new_secret()
    stored = hash_secret(s)
    assert secret_matches(s, stored)
    assert not secret_matches(s + "x", stored)
    assert not secret_matches(s[:-1], stored)
    assert not secret_matches("", stored)
    assert not secret_matches(stored, stored)  # the hash is not a secret
    assert not secret_matches(s, stored.upper())


# ------------------------------------------------------------------- token


def test_created_token_stores_only_the_hash() -> None:
    token, secret = make(["shop"])
    assert token.id == token_stream_id("o", "ci") == Token.create_id("o", "ci")
    assert token.id != token_stream_id("o", "other") != token_stream_id("p", "ci")
    assert token.secret_hash == hash_secret(secret)
    assert token.revoked is False
    events = token.collect_events()
    assert [type(e).__name__ for e in events] == ["Created"]
    assert events[0].secret_hash == hash_secret(secret)
    assert_secret_nowhere(secret, events, token)
    assert secret_matches(secret, replay(events).secret_hash)


def test_reissue_stores_only_the_new_hash() -> None:
    token, first = make()
    token.revoke(at=at(1))
    second = new_secret()
    token.reissue(secret_hash=hash_secret(second), app_names=["a"], at=at(2))
    events = token.collect_events()
    assert_secret_nowhere(first, events, token)
    assert_secret_nowhere(second, events, token)
    assert secret_matches(second, token.secret_hash)
    assert not secret_matches(first, token.secret_hash)


def test_covers_every_app_when_unrestricted() -> None:
    token, _ = make(None)
    assert token.covers("shop") and token.covers("anything")


def test_covers_only_the_listed_apps() -> None:
    token, _ = make(["shop", "billing"])
    assert token.covers("shop") and token.covers("billing")
    assert not token.covers("other")
    assert not token.covers("sho")


def test_a_revoked_token_covers_nothing() -> None:
    token, _ = make(None)
    token.revoke(at=at(1))
    assert token.revoked
    assert not token.covers("shop")
    restricted, _ = make(["shop"])
    restricted.revoke(at=at(1))
    assert not restricted.covers("shop")


def test_revoke_twice_is_refused() -> None:
    token, _ = make()
    token.revoke(at=at(1))
    token.collect_events()
    before = copy.deepcopy(vars(token))
    with pytest.raises(IllegalTransition) as info:
        token.revoke(at=at(2))
    assert vars(token) == before
    assert str(info.value) == "token 'ci': cannot revoke while revoked (it is already revoked)"
    assert token.collect_events() == []


def test_reissue_of_a_live_token_is_refused() -> None:
    token, secret = make(["shop"])
    token.collect_events()
    before = copy.deepcopy(vars(token))
    with pytest.raises(IllegalTransition) as info:
        token.reissue(secret_hash=hash_secret(new_secret()), app_names=None, at=at(1))
    assert vars(token) == before
    assert "token 'ci'" in str(info.value) and "cannot create while live" in str(info.value)
    assert "revoke it first" in str(info.value)
    assert token.collect_events() == []
    assert secret_matches(secret, token.secret_hash)


def test_reissue_of_a_revoked_token_makes_it_live_with_new_scope() -> None:
    token, _ = make(["shop"])
    token.revoke(at=at(1))
    secret = new_secret()
    token.reissue(secret_hash=hash_secret(secret), app_names=["billing"], at=at(2))
    assert token.revoked is False
    assert token.covers("billing") and not token.covers("shop")
    assert token.app_names == ["billing"]
    events = token.collect_events()
    assert [type(e).__name__ for e in events] == ["Created", "Revoked", "Reissued"]
    rebuilt = replay(events)
    assert vars(rebuilt) == vars(token)
    assert rebuilt.modified_on == at(2)
    # It can be revoked again.
    token.revoke(at=at(3))
    assert not token.covers("billing")
