"""A lightweight protocol client that answers like the DBOS SDKs.

Used where a test needs numbers or control, not real workflows: it answers
``executor_info``, ``exist_pending_workflows``, ``recovery`` and ``retention``
the way dbos 3.2.0 does, records every request, and can go silent (stop
reading, so no pong goes back) to look like a frozen process.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection


@dataclass
class FakeExecutor:
    url: str  # ws://host:port
    app: str = "app"
    key: str = "dev-key"
    executor_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    version: str = "v1"
    pending: bool = True  # what exist_pending_workflows answers
    recovery_success: bool = True
    answer: bool = True  # answer requests at all
    style: str = "python"  # "python" sends nulls, "typescript" omits keys
    # The ``language`` and ``dbos_version`` its executor_info names; None: neither key sent, as a
    # old Python SDK (2.10, say: no bulk form of cancel, resume and delete) answers.
    sdk: tuple[str, str] | None = ("python", "3.2.0")
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Answers to other message types (list_workflows, cancel, ...): ``type -> handler(request)``,
    # the handler returning the reply's fields (a dict: type and request_id added, styled like
    # the SDK), or a raw ``str``/``bytes`` frame sent as is (hostile replies), or None: no answer.
    answers: dict[str, Callable[[dict[str, Any]], dict[str, Any] | str | bytes | None]] = field(default_factory=dict)
    # Relay's periodic metrics collection (get_metrics) when the test gave no answer for it: kept
    # apart, so that a test counting what an executor was asked is not told of a timer's request.
    background: list[dict[str, Any]] = field(default_factory=list)
    ws: ClientConnection | None = None
    close_code: int | None = None
    receive_buffer: int | None = None  # SO_RCVBUF of its socket (None: the system's)
    _task: asyncio.Task[Any] | None = None

    async def connect(self, *, wait_registered: bool = True) -> "FakeExecutor":
        sock = None
        if self.receive_buffer is not None:  # set before connecting: the window is agreed at the handshake
            host, _, port = self.url.removeprefix("ws://").partition(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        self.ws = await websockets.connect(f"{self.url}/websocket/{self.app}/{self.key}", ping_interval=None,
                                           max_size=None, open_timeout=5, sock=sock)
        self._task = asyncio.ensure_future(self._loop())
        if wait_registered:
            await self.wait_for("executor_info")
        return self

    async def wait_for(self, type_: str, count: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        async def seen() -> list[dict[str, Any]]:
            while True:
                found = [r for r in self.requests if r.get("type") == type_]
                if len(found) >= count:
                    return found
                await asyncio.sleep(0.01)

        return await asyncio.wait_for(seen(), timeout)

    def sdk_fields(self) -> dict[str, str]:
        """The executor_info keys naming its SDK (:attr:`sdk`), none for an old one."""
        return {} if self.sdk is None else {"language": self.sdk[0], "dbos_version": self.sdk[1]}

    def _reply(self, msg: dict[str, Any], **fields: Any) -> str:
        out = {"type": msg["type"], "request_id": msg["request_id"], **fields}
        if self.style == "python":
            out.setdefault("error_message", None)
        else:
            out = {k: v for k, v in out.items() if v is not None}
        return json.dumps(out)

    def _note(self, msg: dict[str, Any]) -> bool:
        """Keeps a request Relay sent: in :attr:`background` (returns True) for a metrics collection
        the test gave no answer for, else in :attr:`requests`."""
        if msg.get("type") == "get_metrics" and "get_metrics" not in self.answers:
            self.background.append(msg)
            return True
        self.requests.append(msg)
        return False

    async def _loop(self) -> None:
        assert self.ws is not None
        reply: str | bytes
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                self._note(msg)
                if not self.answer:
                    continue
                t = msg.get("type")
                if t == "executor_info":
                    reply = self._reply(msg, executor_id=self.executor_id, application_version=self.version,
                                        hostname="fakehost", executor_metadata={"fake": True},
                                        **self.sdk_fields())
                elif t == "exist_pending_workflows":
                    reply = self._reply(msg, exist=self.pending)
                elif t == "recovery":
                    self.pending = False
                    reply = self._reply(msg, success=self.recovery_success,
                                        error_message=None if self.recovery_success else "recovery failed")
                elif t == "retention":
                    reply = self._reply(msg, success=True)
                elif t in self.answers:
                    given = self.answers[t](msg)
                    if given is None:
                        continue
                    reply = given if isinstance(given, (str, bytes)) else self._reply(msg, **given)
                else:
                    reply = self._reply(msg, error_message="Unknown message type")
                await self.ws.send(reply)
        except websockets.ConnectionClosed:
            pass
        finally:
            if self.ws is not None and self.ws.close_code is not None:
                self.close_code = self.ws.close_code

    def freeze(self) -> None:
        """Stop reading: pings go unanswered, like a SIGSTOPped process."""
        assert self.ws is not None
        self.ws.transport.pause_reading()

    def thaw(self) -> None:
        assert self.ws is not None
        self.ws.transport.resume_reading()

    async def send_raw(self, data: str | bytes) -> None:
        assert self.ws is not None
        await self.ws.send(data)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def abort(self) -> None:
        """Drop the TCP connection with no close frame, like SIGKILL."""
        assert self.ws is not None
        self.ws.transport.abort()

    async def closed(self, timeout: float = 10.0) -> int | None:
        assert self._task is not None
        await asyncio.wait_for(asyncio.shield(self._task), timeout)
        return self.ws.close_code if self.ws else None
