"""One deadline over a whole HTTP exchange, for httpcore.

httpcore bounds each step of an exchange alone (connecting, TLS, each read and each write): a
server that trickles its headers a byte at a time never times out. A :class:`Deadline` is an
httpcore network backend whose connections bound every step by what is left of one deadline,
set with :meth:`Deadline.start` before each exchange (a connection kept alive serves the next).
Used by the OIDC fetches (:mod:`relay_es.adapters.oidc`) and the client command line
(:mod:`relay_es.composition.client_cli`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import httpcore


class Deadline(httpcore.NetworkBackend):
    """Connections whose every step ends by :attr:`at` (monotonic seconds); past it, a step raises
    ``httpcore.ReadTimeout(what)``."""

    def __init__(self, what: str, *, monotonic: Callable[[], float] = time.monotonic,
                 backend: httpcore.NetworkBackend | None = None) -> None:
        self.what = what
        self.monotonic = monotonic
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
        return _Stream(self._backend.connect_tcp(host, port, self.left(timeout), local_address, socket_options),
                       self)


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
