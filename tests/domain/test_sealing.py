from __future__ import annotations

import base64

import pytest

from relay_es.domain.sealing import KEY_BYTES, MemoryKeys, Unsealable, new_key, seal, unseal


def test_a_sealed_text_opens_with_its_key_where_it_was_sealed() -> None:
    key = new_key()
    assert len(key) == KEY_BYTES
    sealed = seal(key, b"the secret", b"rule 1 webhook 0")
    assert sealed.startswith("v1.") and "secret" not in sealed
    assert unseal(key, sealed, b"rule 1 webhook 0") == b"the secret"


def test_each_seal_draws_its_own_nonce() -> None:
    key = new_key()
    assert seal(key, b"same", b"aad") != seal(key, b"same", b"aad")


@pytest.mark.parametrize("how", ["other key", "other place", "altered", "truncated", "not sealed", "not base64"])
def test_a_sealed_text_does_not_open_elsewhere(how: str) -> None:
    key = new_key()
    sealed = seal(key, b"the secret", b"rule 1 webhook 0")
    aad = b"rule 1 webhook 0"
    if how == "other key":
        key = new_key()
    elif how == "other place":
        aad = b"rule 2 webhook 0"
    elif how == "altered":  # a bit of the box flipped (a base64 character may change only padding bits)
        box = bytearray(base64.urlsafe_b64decode(sealed[3:]))
        box[-1] ^= 1
        sealed = "v1." + base64.urlsafe_b64encode(bytes(box)).decode("ascii")
    elif how == "truncated":
        sealed = sealed[:10]
    elif how == "not sealed":
        sealed = "https://hooks.example.com/x"
    else:
        sealed = "v1.not*base64!"
    with pytest.raises(Unsealable):
        unseal(key, sealed, aad)


def test_memory_keys_are_made_read_and_forgotten() -> None:
    keys = MemoryKeys()
    assert keys.get("rule:1") is None
    made = keys.create("rule:1")
    assert keys.get("rule:1") == made
    assert keys.create("rule:1") != made  # a new key replaces the old
    keys.delete("rule:1")
    assert keys.get("rule:1") is None
    keys.delete("rule:1")  # deleting again is no error
