"""Sealing: what an event must carry but no reader of the store may see, and what must be
erasable from a log that keeps everything (crypto-shredding).

A value is sealed with AES-256-GCM under a key of its own *scope* (an alerting rule), and
the key is kept outside the event log, in a :class:`KeyStore`. The event holds only the sealed
text; deleting the scope's key makes every copy of it -- the event, the snapshots that carry it,
a backup of the events table -- unreadable for good, while the log keeps its history.

``aad`` (additional authenticated data) binds a sealed text to where it belongs (the rule and the
webhook's place in it): moved elsewhere, it no longer opens. Keys are 32 random bytes; each
seal draws a fresh 12-byte nonce, so one key seals many values. The text format is
``v1.<base64url of nonce + ciphertext + tag>``.
"""

from __future__ import annotations

import base64
import os
import threading
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
_NONCE_BYTES = 12
_PREFIX = "v1."


class Unsealable(Exception):
    """A sealed text that does not open with the key given: not a sealed text, altered, moved from
    where it was sealed, or sealed under another key."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, aad: bytes) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    box = nonce + AESGCM(key).encrypt(nonce, plaintext, aad)
    return _PREFIX + base64.urlsafe_b64encode(box).decode("ascii")


def unseal(key: bytes, sealed: str, aad: bytes) -> bytes:
    if not isinstance(sealed, str) or not sealed.startswith(_PREFIX):
        raise Unsealable("not a sealed text")
    try:
        box = base64.urlsafe_b64decode(sealed[len(_PREFIX):].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise Unsealable("not a sealed text") from None
    if len(box) < _NONCE_BYTES + 16:
        raise Unsealable("not a sealed text")
    try:
        return AESGCM(key).decrypt(box[:_NONCE_BYTES], box[_NONCE_BYTES:], aad)
    except InvalidTag:
        raise Unsealable("does not open with this key here") from None


class KeyStore(Protocol):
    """Where the keys of sealed values live, outside the event log (the event store's database
    keeps them in a table of their own: ``relay_es.adapters.sealing``). Keyed by scope."""

    def create(self, scope: str) -> bytes:
        """A new key for ``scope`` (replacing any it had), kept before it is returned."""

    def get(self, scope: str) -> bytes | None:
        """``scope``'s key, or None once it was deleted (or never made)."""

    def delete(self, scope: str) -> None:
        """Forgets ``scope``'s key for good: what it sealed cannot be opened again."""


class MemoryKeys:
    """:class:`KeyStore` of an in-memory event store: the keys live exactly as long as the events."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def create(self, scope: str) -> bytes:
        key = new_key()
        with self._lock:
            self._keys[scope] = key
        return key

    def get(self, scope: str) -> bytes | None:
        with self._lock:
            return self._keys.get(scope)

    def delete(self, scope: str) -> None:
        with self._lock:
            self._keys.pop(scope, None)
