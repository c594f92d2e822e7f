"""One executor's socket, as the hub holds it: its session, its pending calls, its writes.

:class:`Connection` wraps the ASGI ``send`` of one WebSocket with the Sans-I/O
:class:`~relay_es.protocol.session.Session` that speaks the protocol on it: one write at a
time (``send_text``), a request and its awaited answer (``call``), a close sent once
(``close``). :class:`Guard` is how a recovery frame is written only while its attempt is alive.

A call waits for its answer at most its timeout, the write included. Once the socket is
closing (Relay closed it, a write failed, or the peer went away) no answer can come: every
call still waiting fails at once with :class:`ConnectionLost` (:class:`ReplyOverCap` when the
socket failed for a message over the frame cap).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from relay_es.adapters.uvicorn_ws import Withdrawn
from relay_es.protocol import messages as m
from relay_es.protocol.session import Session, State


class ConnectionLost(Exception):
    """The socket closed (or was closed) before a write or an answer."""


class ReplyOverCap(ConnectionLost):
    """The socket failed for a message of the executor's over the frame cap (``cap`` bytes, 1009): a
    reply Relay cannot read, this call's or that of another call waiting on the socket with it
    (``others``: how many other calls waited). Not a sign the executor went: another executor would
    send the same reply."""

    def __init__(self, reason: str, cap: int, others: int) -> None:
        super().__init__(reason)
        self.cap, self.others = cap, others


class Guard:
    """Held while a recovery frame is written: the frame goes out only if its
    attempt has not expired, and an expiry (from the process manager's thread)
    waits until the write is done. Used by the socket (``relay.guard`` in the
    ASGI message, see ``uvicorn_ws.py``) right before it writes."""

    def __init__(self, lock: threading.Lock, allowed: Callable[[], bool]) -> None:
        self.lock, self.allowed = lock, allowed

    def __enter__(self) -> bool:
        self.lock.acquire()
        return self.allowed()

    def __exit__(self, *exc: Any) -> None:
        self.lock.release()


@dataclass(slots=True)
class Connection:
    id: str
    org: str
    app: str
    peer: str
    token: str | None
    send_message: Callable[[dict[str, Any]], Awaitable[None]]
    key_id: tuple[str, ...] = ()
    raise_frame_cap: Callable[[int], None] | None = None
    session: Session = field(default_factory=Session)
    waiters: dict[str, asyncio.Future[m.Response]] = field(default_factory=dict)
    stream_id: UUID | None = None
    executor_id: str | None = None
    app_version: str | None = None
    connected_at: float = field(default_factory=time.monotonic)
    closed: bool = False
    superseded: bool = False
    close_reason: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def registered(self) -> bool:
        """Open, and its executor answered ``executor_info``: requests may go to it."""
        return not self.closed and self.session.state is State.REGISTERED

    async def send_text(self, text: str, guard: Guard | None = None) -> None:
        if self.closed:
            raise ConnectionLost(f"connection {self.id} is closed")
        message: dict[str, Any] = {"type": "websocket.send", "text": text}
        try:
            async with self.lock:
                if guard is None:
                    await self.send_message(message)
                    return
                message["relay.guard"] = guard  # the socket checks it again right before writing
                with guard as allowed:
                    if not allowed:
                        raise Withdrawn()
                await self.send_message(message)
        except Withdrawn:
            raise
        except Exception as e:  # the socket is going away under us (ClientDisconnected, OSError...)
            self.closed = True
            self._fail_waiting(f"connection {self.id}: {e.__class__.__name__}")
            raise ConnectionLost(f"connection {self.id}: {e.__class__.__name__}") from e

    async def call(self, make: Callable[[str], m.Request], timeout: float, guard: Guard | None = None) -> m.Response:
        if self.closed or self.session.state is not State.REGISTERED:
            raise ConnectionLost(f"connection {self.id} is not open")
        request_id, frame = self.session.request(make)
        fut: asyncio.Future[m.Response] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = fut
        try:
            async with asyncio.timeout(max(0.0, timeout)):  # one deadline for the write and the answer
                await self.send_text(frame, guard)
                return await fut
        finally:
            self.waiters.pop(request_id, None)
            self.session.forget(request_id)
            if fut.done() and not fut.cancelled():
                # Failed with the others (``_fail_waiting``) by a write of its own that failed, or as the
                # timeout fell: its exception is the one raised here, not asyncio's "never retrieved" ERROR.
                fut.exception()

    def answered(self, request_id: str, response: m.Response) -> None:
        """An answer arrived: the call awaiting it (if still waiting) returns it."""
        fut = self.waiters.get(request_id)
        if fut is not None and not fut.done():
            fut.set_result(response)

    def lost(self) -> None:
        """The socket is gone: closed, and every call still waiting fails with ConnectionLost."""
        self.closed = True
        self.session.close()
        self._fail_waiting(f"connection {self.id} closed")

    def over_cap(self, cap: int) -> None:
        """The socket failed for a message over ``cap`` bytes the executor sent (unread): closed, and
        every call still waiting fails with :class:`ReplyOverCap`, before anything else is awaited."""
        self.closed = True
        self.session.close()
        others = sum(1 for fut in self.waiters.values() if not fut.done()) - 1
        self._fail_waiting(f"connection {self.id}: a message over {cap} bytes",
                           lambda reason: ReplyOverCap(reason, cap, max(0, others)))

    def _fail_waiting(self, reason: str, error: Callable[[str], ConnectionLost] = ConnectionLost) -> None:
        """Every call still waiting fails with ``error(reason)``, ConnectionLost unless said (a session
        already closed by a fatal violation has forgotten its requests: the waiters are what is failed)."""
        for fut in list(self.waiters.values()):
            if not fut.done():
                fut.set_exception(error(reason))

    async def close(self, code: int, reason: str = "") -> None:
        send = self.closing(code, reason)
        if send is not None:
            await send

    def closing(self, code: int, reason: str = "") -> Coroutine[Any, Any, None] | None:
        """Marks the connection closed at once (no request goes to it, nothing more read from it is
        acted on, every call waiting fails) and returns the write of its close frame, to be awaited;
        None if it was closed already. A peer that stopped reading holds that write up to the
        socket's ``close_timeout``: closing many, the hub marks them all, then writes together."""
        if self.closed:
            return None
        self.closed = True
        self._fail_waiting(f"connection {self.id} closed by Relay ({code})")  # nothing more is read from it
        return self._send_close(code, reason)

    async def _send_close(self, code: int, reason: str) -> None:
        try:
            async with self.lock:
                await self.send_message({"type": "websocket.close", "code": code, "reason": reason[:120]})
        except Exception:  # already gone
            pass
