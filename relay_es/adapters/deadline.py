"""One deadline over a whole HTTP exchange, for httpcore.

httpcore bounds each step of an exchange alone (connecting, TLS, each read and each write): a
server that trickles its headers a byte at a time never times out. A :class:`Deadline` is an
httpcore network backend whose connections bound every step by what is left of one deadline,
set with :meth:`Deadline.start` before each exchange (a connection kept alive serves the next).
The host's name is looked up within it too, in a thread of its own (a lookup cannot be cut short:
one that hangs runs on, and the exchange ends with ``httpcore.ConnectTimeout``). Used by the OIDC
fetches (:mod:`relay_es.adapters.oidc`) and the client command line
(:mod:`relay_es.composition.client_cli`).
"""

from __future__ import annotations

import ipaddress
import math
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import httpcore

LookUp = Callable[[str, int], list[str]]  # a host's addresses for a port; blocking
# Name lookups under way at once, at most: one that hangs keeps its thread until its resolver gives up.
LOOKUPS = threading.BoundedSemaphore(8)


def look_up(host: str, port: int) -> list[str]:
    """``host``'s addresses for TCP to ``port``, in the resolver's order, each once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Deadline(httpcore.NetworkBackend):
    """Connections whose every step ends by :attr:`at` (monotonic seconds); past it, a step raises
    ``httpcore.ReadTimeout(what)``. ``look_up``: a host's addresses (tests replace it)."""

    def __init__(self, what: str, *, monotonic: Callable[[], float] = time.monotonic,
                 backend: httpcore.NetworkBackend | None = None, look_up: LookUp = look_up) -> None:
        self.what = what
        self.monotonic = monotonic
        self.look_up = look_up
        self.at = math.inf
        self._backend = backend or httpcore.SyncBackend()

    def start(self, secs: float) -> Deadline:
        """The exchange under way ends within ``secs`` from now."""
        self.at = self.monotonic() + secs
        return self

    def passed(self) -> bool:
        return self.monotonic() >= self.at

    def left(self, timeout: float | None) -> float:
        """What is left for a step httpcore would give ``timeout``; raises once nothing is."""
        left = self.at - self.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout(self.what)
        return left if timeout is None else min(timeout, left)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        """A connection to the first of ``host``'s addresses that takes one (TLS still names ``host``:
        httpcore gives ``start_tls`` the name)."""
        failed: httpcore.ConnectError | None = None
        for address in self._addresses(host, port, timeout):
            try:
                stream = self._backend.connect_tcp(address, port, self.left(timeout), local_address, socket_options)
            except httpcore.ConnectError as e:
                failed = e
                continue
            return _Stream(stream, self)
        raise failed or httpcore.ConnectError("the host has no address")

    def _addresses(self, host: str, port: int, timeout: float | None) -> list[str]:
        """``host``'s addresses (an address is its own), looked up in a thread waited on for what is left."""
        try:
            return [str(ipaddress.ip_address(host))]
        except ValueError:
            pass
        if not LOOKUPS.acquire(timeout=_finite(self.left(timeout))):
            raise httpcore.ConnectTimeout(self.what)
        found: Future[list[str]] = Future()
        try:
            threading.Thread(target=_look_up, args=(self.look_up, host, port, found), name="relay-dns",
                             daemon=True).start()  # a daemon: one that hangs does not hold the process at exit
        except BaseException:
            LOOKUPS.release()
            raise
        try:
            return found.result(_finite(self.left(timeout)))
        except TimeoutError:  # the lookup's, or the wait's (concurrent.futures.TimeoutError is TimeoutError)
            raise httpcore.ConnectTimeout(self.what) from None
        except (OSError, ValueError) as e:  # ValueError: UnicodeError, a name no resolver takes
            raise httpcore.ConnectError(str(e)) from None


def _finite(secs: float) -> float | None:
    """A wait of ``secs``, as threading takes it (no deadline: None, not infinity)."""
    return None if math.isinf(secs) else secs


def _look_up(look_up: LookUp, host: str, port: int, found: Future[list[str]]) -> None:
    try:
        found.set_result(look_up(host, port))
    except Exception as e:  # noqa: BLE001  # the waiter raises it
        found.set_exception(e)
    finally:
        LOOKUPS.release()


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._deadline.left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, self._deadline.left(timeout)),
                       self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)
