"""Random ids drawn from a pool of kernel randomness (relay_es/domain/ids.py)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from relay_es.domain import ids


def test_ids_are_version_4_uuids_and_their_text_is_uuids_text():
    for _ in range(2_000):
        u = ids.new_uuid()
        assert u.version == 4 and u.variant == uuid.RFC_4122
        s = ids.new_id()
        parsed = uuid.UUID(s)
        assert str(parsed) == s and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_one_system_call_per_256_ids(monkeypatch):
    calls = []
    real = os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(ids.os, "urandom", counting)
    ids._pool.reset()
    made = {ids.new_id() for _ in range(1_000)}
    assert len(made) == 1_000
    assert calls == [ids.POOL_BYTES] * 4  # 256 ids a call


def test_no_id_twice_across_threads():
    out: list[list[str]] = [[] for _ in range(4)]

    def make(i):
        out[i].extend(ids.new_id() for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [s for part in out for s in part]
    assert len(set(every)) == len(every) == 20_000


def test_the_ids_change_with_the_kernels_bytes(monkeypatch):
    # The bits are the kernel's, not a generator's seeded once: two pools fed the same bytes agree.
    monkeypatch.setattr(ids.os, "urandom", lambda n: bytes(range(16)) * (n // 16))
    ids._pool.reset()
    assert ids.new_uuid() == uuid.UUID(bytes=bytes(range(16)), version=4)
    ids._pool.reset()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_does_not_repeat_its_parents_ids():
    ids._pool.reset()
    ids.new_id()  # the pool is filled; the next 255 ids are in it
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
