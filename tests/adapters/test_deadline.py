"""Deadline: every step of an exchange ends by one deadline (a server trickling its reply a byte at a
time is cut there, whatever each step's own timeout). The real exchanges: tests/adapters/test_oidc.py
(an issuer trickling its headers) and tests/composition/test_client_cli_resilience.py."""

from __future__ import annotations

import socket
import threading
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
    stream = deadline.connect_tcp("192.0.2.1", 80, timeout=30.0)
    stream.write(b"GET", timeout=30.0)
    got = b"".join(stream.read(1, timeout=30.0) for _ in range(3))  # each step well within its own 30 s
    assert got == b"xxx" and trickle.timeouts == [3.5, 3.5, 2.5, 1.5]
    assert not deadline.passed()
    stream.read(1, timeout=30.0)
    assert deadline.passed()
    with pytest.raises(httpcore.ReadTimeout, match="too slow"):
        stream.read(1, timeout=30.0)
    assert deadline.start(10).left(None) == 10  # the next exchange has a deadline of its own


class Recording(httpcore.NetworkBackend):
    """Connects to nothing: records the host it was asked to connect to, gives a stream that records
    the name TLS is started with."""

    def __init__(self, refused: tuple[str, ...] = ()) -> None:
        self.hosts: list[str] = []
        self.refused = refused
        self.tls_names: list[str | None] = []

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        self.hosts.append(host)
        if host in self.refused:
            raise httpcore.ConnectError("refused")
        backend = self

        class Stream(Trickle):
            def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                          timeout: float | None = None) -> httpcore.NetworkStream:
                backend.tls_names.append(server_hostname)
                return self

        return Stream([0.0])


def test_a_name_is_looked_up_within_the_deadline_and_its_address_connected_to() -> None:
    """The name is resolved here, within what is left, and the backend connects to the address (the
    next one when one refuses); TLS names the host, as httpcore asks."""
    backend = Recording(refused=("2001:db8::7",))
    looked_up: list[tuple[str, int]] = []

    def look_up(host: str, port: int) -> list[str]:
        looked_up.append((host, port))
        return ["2001:db8::7", "192.0.2.7"]

    deadline = Deadline("too slow", monotonic=lambda: 100.0, backend=backend).start(5)
    deadline.look_up = look_up
    stream = deadline.connect_tcp("idp.example", 443, timeout=30.0)
    stream.start_tls(None, server_hostname="idp.example", timeout=30.0)
    assert looked_up == [("idp.example", 443)]
    assert backend.hosts == ["2001:db8::7", "192.0.2.7"] and backend.tls_names == ["idp.example"]
    assert deadline.connect_tcp("192.0.2.9", 443) and backend.hosts[-1] == "192.0.2.9"  # an address: no lookup
    assert looked_up == [("idp.example", 443)]


def test_a_lookup_that_hangs_ends_at_the_deadline_as_a_connect_timeout() -> None:
    """A name whose DNS never answers held the OIDC fetch for as long as the resolver took (20 s against
    its 5: a helper's oidc_dns.py). The lookup runs on in its thread; the exchange ends when its
    deadline does."""
    release = threading.Event()
    backend = Recording()

    def hang(host: str, port: int) -> list[str]:
        release.wait()
        return ["192.0.2.7"]

    deadline = Deadline("too slow", monotonic=lambda: 100.0, backend=backend).start(0.05)
    deadline.look_up = hang
    try:
        with pytest.raises(httpcore.ConnectTimeout, match="too slow"):
            deadline.connect_tcp("idp.example", 443, timeout=30.0)
    finally:
        release.set()
    assert backend.hosts == []


def test_a_name_that_does_not_resolve_is_a_connect_error() -> None:
    def fail(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    deadline = Deadline("too slow", monotonic=lambda: 100.0, backend=Recording()).start(5)
    deadline.look_up = fail
    with pytest.raises(httpcore.ConnectError, match="Name or service not known"):
        deadline.connect_tcp("nowhere.example", 443)
