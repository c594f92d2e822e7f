"""Random ids (UUID version 4) without a system call for each one.

``uuid.uuid4()`` asks the kernel for 16 bytes (``os.urandom``) every time, and CPython lets go of
the GIL around that call. A thread that shares the GIL with a busy one (the event loop in a storm
of sockets) then waits for it to come back after every id, up to the switch interval (5 ms):
measured on the 2-core benchmark machine on 2026-12-04, 1.7 us an id alone and 300-370 us beside
a thread running Python; ``uuid4`` had 6% of the samples of a server recording 10,000 deaths and
sending their recoveries (a request id or two for each).

:func:`new_uuid` and :func:`new_id` take the same kernel randomness 4 KiB at a time (one system
call for 256 ids), so the ids are as unpredictable as ``uuid4``'s. A forked child starts with an
empty pool, so it never hands out its parent's ids.
"""

from __future__ import annotations

import os
import threading
from uuid import UUID

POOL_BYTES = 4096  # 256 ids a refill
# uuid4's fixed bits: version 4 (bits 76-79) and the RFC 4122 variant (bits 62-63).
_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_SET = (4 << 76) | (0x8000 << 48)


class _Pool:
    __slots__ = ("_lock", "_buf", "_at")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf, self._at = b"", 0

    def take(self) -> int:
        """128 random bits, never handed out before, as an int."""
        with self._lock:
            buf, at = self._buf, self._at
            if at >= len(buf):
                buf, at = os.urandom(POOL_BYTES), 0
                self._buf = buf
            self._at = at + 16
            return int.from_bytes(buf[at:at + 16], "big")

    def _after_fork(self) -> None:
        # In the child, which has one thread: the parent's bytes are dropped, and the lock is new,
        # since one held by another thread at the fork would stay held here for ever.
        self._lock = threading.Lock()
        self._buf, self._at = b"", 0


_pool = _Pool()
os.register_at_fork(after_in_child=_pool._after_fork)


def _v4() -> int:
    """A version 4 UUID's 128 bits: random ones from the pool, uuid4's fixed bits set."""
    return (_pool.take() & _KEEP) | _SET


def new_uuid() -> UUID:
    """A random UUID (version 4), as ``uuid.uuid4()`` makes."""
    return UUID(int=_v4())


def new_id() -> str:
    """``str(new_uuid())``, formatted without the ``UUID`` object: a request or record id."""
    h = "%032x" % _v4()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
