"""Protocol clients for the fault suite.

* :class:`ReconnectingExecutor`: an executor that reconnects like the SDKs do
  (retry every second, same executor id), built from one
  :class:`~tests.fake_executor.FakeExecutor` per connection. It counts its
  sessions so a test can compare them with the events in the store.
* :class:`ScriptedExecutor`: a FakeExecutor whose answers to anything but
  ``executor_info`` are decided by the test (wrong types, malformed or huge
  replies).
* :class:`RawWebSocket` and :func:`dribble`: hand-made frames and handshakes
  (declared lengths over the limit, invalid UTF-8, slow or unfinished
  upgrade requests) that a well-behaved client library refuses to send.
* :func:`assert_invariants`: the store invariant checker, once Relay's read
  models have caught up.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import os
import random
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import websockets

from tests.fake_executor import FakeExecutor
from tests.fault.invariants import AUDITED, Report, check_store

# --------------------------------------------------------------- reconnecting


@dataclass
class ReconnectingExecutor:
    """One executor id, reconnecting every ``retry`` seconds after any loss
    (refused connection, close, abort), like dbos 3.2.0's conductor thread."""

    url: str
    executor_id: str
    app: str = "app"
    version: str = "v1"
    key: str = "dev-key"
    retry: float = 1.0
    open_timeout: float = 10.0
    attempts: int = 0
    failures: int = 0
    current: "ScriptedExecutor | None" = None
    history: list["ScriptedExecutor"] = field(default_factory=list)
    close_codes: list[int | None] = field(default_factory=list)
    connected_at: float | None = None  # monotonic time the current session answered executor_info
    _task: asyncio.Task[Any] | None = None
    _stopping: bool = False

    # -- life
    def start(self) -> "ReconnectingExecutor":
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        """Stops reconnecting and closes the current socket politely."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.current is not None and self.current.ws is not None:
            try:
                await asyncio.wait_for(self.current.close(), 5)
            except Exception:
                self.current.abort()

    async def _run(self) -> None:
        while not self._stopping:
            self.attempts += 1
            fx = ScriptedExecutor(self.url, app=self.app, key=self.key, executor_id=self.executor_id,
                                  version=self.version)
            try:
                await asyncio.wait_for(fx.connect(wait_registered=False), self.open_timeout)
                self.history.append(fx)
                await asyncio.wait_for(fx.info_answered.wait(), self.open_timeout)
            except Exception:  # refused, reset, timed out, handshake refused: retry like the SDKs
                self.failures += 1
                if fx.ws is not None:
                    fx.abort()
                    if fx._task is not None:
                        await asyncio.gather(fx._task, return_exceptions=True)
                    self.close_codes.append(fx.ws.close_code)
                await asyncio.sleep(self.retry)
                continue
            self.current = fx
            self.connected_at = time.monotonic()
            assert fx._task is not None
            await asyncio.gather(fx._task, return_exceptions=True)  # until the socket ends
            self.close_codes.append(fx.ws.close_code if fx.ws is not None else None)
            self.current = None
            self.connected_at = None
            await asyncio.sleep(self.retry)

    # -- control
    @property
    def connected(self) -> bool:
        fx = self.current
        return fx is not None and fx.ws is not None and fx.ws.close_code is None and fx._task is not None \
            and not fx._task.done()

    def drop(self) -> bool:
        """Kills the current TCP connection without a close frame (SIGKILL-like)."""
        fx = self.current
        if fx is None or fx.ws is None:
            return False
        fx.abort()
        return True

    @property
    def sessions(self) -> int:
        """Connections on which this executor answered ``executor_info``: each one
        is a Connected event in the store."""
        return sum(1 for fx in self.history if any(r.get("type") == "executor_info" for r in fx.requests))

    def requests_of(self, type_: str) -> list[dict[str, Any]]:
        return [r for fx in self.history for r in fx.requests if r.get("type") == type_]


async def flap(client: ReconnectingExecutor, until: float, rng: random.Random) -> int:
    """Drops ``client``'s connection 1-2 s (random each time) after each time it
    connects, until monotonic time ``until``. Returns how many drops it made."""
    drops = 0
    while time.monotonic() < until:
        if client.connected and client.connected_at is not None:
            hold = rng.uniform(1.0, 2.0)
            wait = client.connected_at + hold - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, max(0.0, until - time.monotonic())))
            if time.monotonic() >= until:
                break
            if client.drop():
                drops += 1
                await asyncio.sleep(0.05)
        else:
            await asyncio.sleep(0.05)
    return drops


# ------------------------------------------------------------------ scripted

Handler = Callable[["ScriptedExecutor", dict[str, Any]], Awaitable[None]]


@dataclass
class ScriptedExecutor(FakeExecutor):
    """Answers ``executor_info`` like the SDKs; every other request goes to
    ``handler`` (which sends whatever it likes), or is answered like
    FakeExecutor when ``handler`` is None."""

    handler: Handler | None = None
    info_answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def _loop(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                background = self._note(msg)  # a metrics collection is not the handler's business
                t = msg.get("type")
                if background or t == "executor_info" or self.handler is None:
                    await self._answer_like_sdk(msg)
                else:
                    await self.handler(self, msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            if self.ws is not None and self.ws.close_code is not None:
                self.close_code = self.ws.close_code

    async def _answer_like_sdk(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        t = msg.get("type")
        if t == "executor_info":
            reply = self._reply(msg, executor_id=self.executor_id, application_version=self.version,
                                hostname="fakehost", language="python", dbos_version="3.2.0",
                                executor_metadata={"fake": True})
            await self.ws.send(reply)
            self.info_answered.set()
            return
        elif t == "exist_pending_workflows":
            reply = self._reply(msg, exist=self.pending)
        elif t in ("recovery", "retention"):
            # Unlike FakeExecutor, ``pending`` stays: each dead executor has its own workflows.
            reply = self._reply(msg, success=True)
        else:
            reply = self._reply(msg, error_message="Unknown message type")
        await self.ws.send(reply)

    async def answer_like_sdk(self, msg: dict[str, Any]) -> None:
        await self._answer_like_sdk(msg)


# ------------------------------------------------------------------- raw I/O


class Closed(Exception):
    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed with {code} {reason!r}")
        self.code, self.reason = code, reason


class RawWebSocket:
    """A minimal RFC 6455 client on raw asyncio streams: no compression, no
    checks on what it sends, so a test can send what a library would refuse."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                 headers: dict[str, str], body: bytes) -> None:
        self.reader, self.writer = reader, writer
        self.status, self.headers, self.body = status, headers, body
        self.close_code: int | None = None
        self.close_reason = ""

    @classmethod
    async def connect(cls, host: str, port: int, path: str, *, extensions: str | None = None,
                      timeout: float = 10.0) -> "RawWebSocket":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if extensions:
            lines.append(f"Sec-WebSocket-Extensions: {extensions}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        headers = {}
        for h in header_lines:
            if ":" in h:
                k, _, v = h.partition(":")
                headers[k.strip().lower()] = v.strip()
        body = b""
        if status != 101 and "content-length" in headers:
            body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout)
        return cls(reader, writer, status, headers, body)

    def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True, rsv1: bool = False,
                   declared_length: int | None = None) -> None:
        """Writes one masked frame. ``declared_length`` lies about the payload
        length in the header (the payload sent is still ``payload``)."""
        first = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
        n = len(payload) if declared_length is None else declared_length
        if n < 126:
            header = struct.pack("!BB", first, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", first, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", first, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if len(payload) < 65536 else \
            _mask_fast(payload, mask)
        self.writer.write(header + mask + masked)

    async def send_text(self, text: str | bytes) -> None:
        self.send_frame(0x1, text.encode() if isinstance(text, str) else text)
        await self.writer.drain()

    async def recv_frame(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The next data frame as ``(opcode, payload)``; answers pings; raises
        :class:`Closed` on a close frame or EOF."""
        while True:
            try:
                b1, b2 = await asyncio.wait_for(self.reader.readexactly(2), timeout)
            except asyncio.IncompleteReadError:
                raise Closed(self.close_code or 1006) from None
            opcode, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", await self.reader.readexactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
            payload = await self.reader.readexactly(n) if n else b""
            if opcode == 0x8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                self.close_reason = payload[2:].decode(errors="replace")
                raise Closed(self.close_code, self.close_reason)
            if opcode == 0x9:
                self.send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            return opcode, payload

    async def recv_json(self, timeout: float = 10.0) -> dict[str, Any]:
        _, payload = await self.recv_frame(timeout)
        return json.loads(payload)

    async def answer_info(self, executor_id: str, version: str = "v1", timeout: float = 10.0) -> None:
        req = await self.recv_json(timeout)
        assert req["type"] == "executor_info", req
        await self.send_text(json.dumps({"type": "executor_info", "request_id": req["request_id"],
                                         "executor_id": executor_id, "application_version": version,
                                         "hostname": "raw", "language": "python", "dbos_version": "3.2.0",
                                         "executor_metadata": None, "error_message": None}))

    async def closed(self, timeout: float = 10.0) -> int | None:
        """Reads until the server closes; returns the close code (1006: no close frame)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.recv_frame(max(0.01, deadline - time.monotonic()))
            except Closed as c:
                return c.code
            except (ConnectionError, asyncio.IncompleteReadError):
                return 1006

    def abort(self) -> None:
        self.writer.transport.abort()


def _mask_fast(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ key).to_bytes(n, "big")


async def dribble(host: str, port: int, data: bytes, *, delay: float, stop: asyncio.Event) -> str:
    """Sends ``data`` one byte every ``delay`` seconds (a slowloris handshake),
    never more than ``data``; stops when ``stop`` is set. Returns how it ended:
    ``"server-closed"`` if the server hung up, ``"stopped"`` otherwise."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for i in range(len(data)):
            if stop.is_set():
                return "stopped"
            writer.write(data[i:i + 1])
            try:
                await writer.drain()
            except ConnectionError:
                return "server-closed"
            try:
                got = await asyncio.wait_for(reader.read(1024), delay)
                return "server-closed" if got == b"" else "answered:" + got[:60].decode("latin-1")
            except asyncio.TimeoutError:
                pass
            except ConnectionError:
                return "server-closed"
        # everything sent (or nothing to send): wait for the server to hang up or the test to stop
        closing = asyncio.ensure_future(reader.read(1024))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({closing, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if closing.done() and not closing.cancelled():
            try:
                got = closing.result()
            except ConnectionError:
                return "server-closed"
            return "server-closed" if got == b"" else "answered:" + got[:60].decode("latin-1")
        closing.cancel()
        return "stopped"
    finally:
        writer.transport.abort()


# ------------------------------------------------------------ store checks


def _only_protocol_violations(problem: str) -> bool:
    """True for a checker complaint that an executor's audit has extra
    ``protocol.violation`` entries and otherwise matches its stream: those
    entries carry the offending executor's id but are not events of its stream,
    and ``invariants.check_store`` does not know them (reported to the lead)."""
    if " does not match stream " not in problem or ": audit " not in problem:
        return False
    got_text, _, expected_text = problem.split(": audit ", 1)[1].partition(" does not match stream ")
    got = [a for a in ast.literal_eval(got_text) if a != "protocol.violation"]
    expected = ast.literal_eval(expected_text)
    return len(got) == len(expected) and all(a in AUDITED[n] for a, n in zip(got, expected))


def assert_invariants(store_url: str, timeout: float = 10.0) -> Report:
    """``check_store(store_url).assert_ok()``, once the read models have caught
    up with the last events (Relay may still be projecting them)."""
    deadline = time.monotonic() + timeout
    while True:
        report = check_store(store_url)
        report.violations = [v for v in report.violations if not _only_protocol_violations(v)]
        if not report.violations or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    report.assert_ok()
    return report
