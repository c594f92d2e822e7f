"""Random ids drawn from a pool of kernel randomness (relay_es/domain/ids.py)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from relay_es.domain import ids


@pytest.fixture
def pool(monkeypatch):
    """A pool of its own, so that what a test feeds it never reaches another test's ids."""
    fresh = ids._Pool()
    monkeypatch.setattr(ids, "_pool", fresh)
    return fresh


def test_ids_are_version_4_uuids_and_their_text_is_uuids_text():
    for _ in range(2_000):
        u = ids.new_uuid()
        assert u.version == 4 and u.variant == uuid.RFC_4122
        s = ids.new_id()
        parsed = uuid.UUID(s)
        assert str(parsed) == s and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_one_system_call_per_256_ids(pool, monkeypatch):
    calls = []
    real = os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(ids.os, "urandom", counting)
    made = {ids.new_id() for _ in range(1_000)}
    assert len(made) == 1_000
    assert calls == [ids.POOL_BYTES] * 4  # 256 ids a call


def test_the_ids_bits_are_the_kernels(pool, monkeypatch):
    # Not a generator seeded once: each id is 16 of the bytes os.urandom gave, with uuid4's fixed bits set.
    monkeypatch.setattr(ids.os, "urandom", lambda n: bytes(range(16)) * (n // 16))
    assert ids.new_uuid() == uuid.UUID(bytes=bytes(range(16)), version=4)
    assert ids.new_id() == str(uuid.UUID(bytes=bytes(range(16)), version=4))


def test_a_thread_waits_for_anothers_refill_rather_than_make_its_own(pool, monkeypatch):
    """While one thread refills the pool, another asking for an id waits and then takes from the
    same refill: one system call, two different ids."""
    entered, release = threading.Event(), threading.Event()
    calls = []
    real = os.urandom

    def slow(n):
        calls.append(n)
        entered.set()
        release.wait(10)
        return real(n)

    monkeypatch.setattr(ids.os, "urandom", slow)
    got: list[str] = []
    first = threading.Thread(target=lambda: got.append(ids.new_id()))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=lambda: got.append(ids.new_id()))
    second.start()
    second.join(0.3)  # without the lock it would be in os.urandom by now, a second call
    assert len(calls) == 1
    release.set()
    first.join(10)
    second.join(10)
    assert len(calls) == 1 and len(got) == 2 and got[0] != got[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_does_not_repeat_its_parents_ids():
    ids.new_id()  # the pool holds bytes for the next ids
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(w, ids.new_id().encode())
        finally:
            os._exit(0)
    os.close(w)
    child = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert uuid.UUID(child).version == 4
    assert child != ids.new_id()
