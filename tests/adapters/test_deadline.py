"""Deadline: every step of an exchange ends by one deadline (a server trickling its reply a byte at a
time is cut there, whatever each step's own timeout). The real exchanges: tests/adapters/test_oidc.py
(an issuer trickling its headers) and tests/composition/test_client_cli_resilience.py."""

from __future__ import annotations

from typing import Any

import httpcore
import pytest

from relay_es.adapters.deadline import Deadline


class Trickle(httpcore.NetworkStream):
    """A stream whose every read takes a second of the test's clock and gives one byte."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.timeouts: list[float | None] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.timeouts.append(timeout)
        self.now[0] += 1.0
        return b"x"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.timeouts.append(timeout)

    def close(self) -> None:
        pass


class Backend(httpcore.NetworkBackend):
    def __init__(self, stream: Trickle) -> None:
        self.stream = stream

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return self.stream


def test_every_step_gets_what_is_left_and_none_past_the_deadline() -> None:
    now = [100.0]
    trickle = Trickle(now)
    deadline = Deadline("too slow", monotonic=lambda: now[0], backend=Backend(trickle)).start(3.5)
    stream = deadline.connect_tcp("example", 80, timeout=30.0)
    stream.write(b"GET", timeout=30.0)
    got = b"".join(stream.read(1, timeout=30.0) for _ in range(3))  # each step well within its own 30 s
    assert got == b"xxx" and trickle.timeouts == [3.5, 3.5, 2.5, 1.5]
    assert not deadline.passed()
    stream.read(1, timeout=30.0)
    assert deadline.passed()
    with pytest.raises(httpcore.ReadTimeout, match="too slow"):
        stream.read(1, timeout=30.0)
    assert deadline.start(10).left(None) == 10  # the next exchange has a deadline of its own
