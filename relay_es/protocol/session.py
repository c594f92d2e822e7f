"""One executor connection's protocol state, Sans-I/O.

The session turns frames into events and requests into frames; it never
touches a socket or a clock. The hub (:mod:`relay_es.adapters.hub`) feeds it
what arrives and sends what it returns.

States: ``AWAITING_INFO`` (Relay has sent ``executor_info`` and knows nothing
yet about who is on the other end) -> ``REGISTERED`` -> ``CLOSED``.

Replies are matched to requests by ``request_id`` only: TypeScript and Java
executors answer out of order.

Before registration the only frame an executor may send is its
``executor_info`` reply; anything else then is fatal (``handshake_frame``).
The reply is checked by :func:`relay_es.protocol.limits.check_executor_info`
before it becomes :class:`Registered`: one out of bounds is fatal
(``info_out_of_bounds``) and nothing of it is recorded. Every detail quoting
executor-sent text goes through :func:`~relay_es.protocol.limits.printable`.

Replies decode into the catalogue's type for their request
(:data:`relay_es.protocol.catalogue.RESPONSES`), straight from the frame. A reply
Relay cannot use -- not the type of its request, a field of the wrong type -- is a
non-fatal violation, and the request is answered with a :class:`RefusedReply` (its
``error_message`` says why) so that its caller stops waiting; an answer to a request
never made (``unsolicited``) or given up on (``late_reply``) is a violation and
answers nothing. None of them disturbs another request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import msgspec

from relay_es.domain.ids import new_id
from relay_es.protocol import limits
from relay_es.protocol import messages as m
from relay_es.protocol.catalogue import RESPONSES


class State(Enum):
    AWAITING_INFO = "awaiting_info"
    REGISTERED = "registered"
    CLOSED = "closed"


@dataclass(frozen=True)
class Registered:
    info: m.ExecutorInfoResponse


@dataclass(frozen=True)
class Answered:
    request_id: str
    type: str
    response: m.Response


@dataclass(frozen=True)
class Violation:
    """Input Relay could not use. ``fatal`` ones end the connection."""

    kind: str
    detail: str
    fatal: bool = False
    request_id: str | None = None


class RefusedReply(m.Response, kw_only=True):
    """Stands for a reply Relay refused (its ``error_message`` says why): the request is
    answered, failed, and nothing the executor sent is used."""


SessionEvent = Registered | Answered | Violation


class Session:
    __slots__ = ("state", "_new_id", "_responses", "pending", "info", "_info_request", "_expired")  # one per socket

    def __init__(
        self,
        *,
        new_request_id: Callable[[], str] = new_id,
        responses: dict[str, type[m.Response]] | None = None,
    ) -> None:
        self.state = State.AWAITING_INFO
        self._new_id = new_request_id
        self._responses = responses or RESPONSES
        self.pending: dict[str, str] = {}  # request id -> type
        self.info: m.ExecutorInfoResponse | None = None
        self._info_request: str | None = None
        self._expired: dict[str, str] = {}  # request id -> type, of requests given up on (the newest LATE_KEPT)

    def open(self) -> str:
        """The first frame: Relay speaks first, asking who is there."""
        req = m.ExecutorInfoRequest(request_id=self._new_id())
        self._info_request = req.request_id
        self.pending[req.request_id] = req.type
        return m.encode(req)

    def request(self, make: Callable[[str], m.Request]) -> tuple[str, str]:
        """Builds a request with a fresh id; returns ``(request_id, frame)``."""
        if self.state is not State.REGISTERED:
            raise RuntimeError(f"cannot send requests while {self.state.value}")
        req = make(self._new_id())
        self.pending[req.request_id] = req.type
        return req.request_id, m.encode(req)

    LATE_KEPT = 64

    def forget(self, request_id: str) -> None:
        """The caller gave up waiting (its deadline passed, or it was answered). A
        reply that comes after a deadline is a ``late_reply`` violation: it is
        audited, and never acted on."""
        expected = self.pending.pop(request_id, None)
        if expected is not None:
            self._expired[request_id] = expected
            if len(self._expired) > self.LATE_KEPT:
                del self._expired[next(iter(self._expired))]

    def close(self) -> list[str]:
        """Returns the ids of requests that will never be answered."""
        self.state = State.CLOSED
        ids = list(self.pending)
        self.pending.clear()
        return ids

    def receive(self, data: str | bytes) -> list[SessionEvent]:
        """Events of one frame. After a fatal violation the session is CLOSED:
        frames already on their way (an executor_info reply right behind junk)
        are never acted on."""
        if self.state is State.CLOSED:
            return []
        events = self._receive(data)
        if any(isinstance(e, Violation) and e.fatal for e in events):
            self.close()
        return events

    def _receive(self, data: str | bytes) -> list[SessionEvent]:
        handshake = self.state is State.AWAITING_INFO
        if isinstance(data, (bytes, bytearray)):
            return [Violation("binary_frame" if not handshake else "handshake_frame",
                              f"binary frame of {len(data)} bytes", fatal=handshake)]
        try:
            env = m.decode_envelope(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            return [Violation("invalid_frame" if not handshake else "handshake_frame",
                              f"not a JSON object with type and request_id: {_short(e)}", fatal=handshake)]
        if handshake and env.request_id != self._info_request:
            return [Violation("handshake_frame", f"frame of type {_short(env.type)!r} before the executor_info reply",
                              fatal=True)]
        expected = self.pending.pop(env.request_id, None)
        if expected is None:
            late = self._expired.pop(env.request_id, None)
            if late is not None:
                return [Violation("late_reply", f"reply of type {_short(env.type)!r} to a {late!r} request "
                                                "after Relay stopped waiting for it", request_id=env.request_id)]
            return [Violation("unsolicited", f"reply of type {_short(env.type)!r} to no outstanding request")]
        if env.type != expected:
            if env.request_id == self._info_request:
                return [Violation("type_mismatch", f"reply of type {_short(env.type)!r} to executor_info", fatal=True)]
            return [
                Violation("type_mismatch", f"reply of type {_short(env.type)!r} to a {expected!r} request",
                          request_id=env.request_id),
                Answered(env.request_id, expected, RefusedReply(type=expected, request_id=env.request_id,
                                                                error_message=f"reply had type {_short(env.type)!r}")),
            ]
        cls = self._responses.get(expected, m.Response)
        try:
            resp: Any = m.decode_response(data, cls)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            detail = f"malformed {expected!r} reply: {_short(e)}"
            out: list[SessionEvent] = [Violation("malformed_reply", detail, request_id=env.request_id)]
            if env.request_id == self._info_request:
                out[0] = Violation("malformed_reply", detail, fatal=True, request_id=env.request_id)
            else:
                out.append(Answered(env.request_id, expected, RefusedReply(type=expected, request_id=env.request_id,
                                                                            error_message=detail)))
            return out
        if env.request_id == self._info_request:
            if resp.error_message is not None or not resp.executor_id:
                return [Violation("info_refused",
                                  f"executor_info failed: {_short(resp.error_message or 'empty executor_id')}",
                                  fatal=True)]
            try:
                limits.check_executor_info(resp)
            except limits.OutOfBounds as e:
                return [Violation("info_out_of_bounds", f"executor_info refused: {e}", fatal=True)]
            self.info = resp
            self.state = State.REGISTERED
            return [Registered(resp)]
        return [Answered(env.request_id, expected, resp)]


def _short(e: Any, limit: int = 200) -> str:
    """Executor-derived text (a message, or an error quoting the frame), escaped and bounded."""
    return limits.printable(e, limit)
