"""A tiny stand-in conductor, used ONLY to validate the e2e harness (never to test Relay).

It speaks just enough of the conductor protocol (docs: conductor-protocol.md §2, §5.1-§5.3, §13):
it accepts ``/websocket/<app>/<key>`` (any prefix), sends ``executor_info`` on every new
connection, logs every frame, and lets a test send ``exist_pending_workflows`` and ``recovery``
(or any other request) to the connection of a chosen executor and wait for the reply.

The asyncio server runs on its own thread, so synchronous pytest code can drive it::

    with ProbeServer() as probe:
        ...start executors with RELAY_URL=probe.url...
        probe.wait_for_executor(a.executor_id)
        probe.exist_pending_workflows(via=b.executor_id, executor_id=a.executor_id, version="v1")

Stdlib + websockets (>=14, asyncio API) only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import unquote

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request


@dataclass
class ProbeConnection:
    """One accepted WebSocket connection (an executor may have several over time)."""

    conn_no: int
    app: str
    key: str
    opened_at: float
    ws: ServerConnection | None = None
    info: dict[str, Any] | None = None  # the executor_info reply
    closed_at: float | None = None
    close_code: int | None = None
    pending: dict[str, asyncio.Future] = field(default_factory=dict)

    @property
    def executor_id(self) -> str | None:
        return None if self.info is None else self.info.get("executor_id")

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass
class Frame:
    at: float
    conn_no: int
    direction: str  # "in" (executor -> probe) or "out"
    message: Any    # parsed JSON, or the raw text if it was not JSON


class ProbeServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> None:
        self.host = host
        self.port = port
        self.verbose = verbose
        self.connections: list[ProbeConnection] = []
        self.frames: list[Frame] = []
        self.rejected: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None
        self._stopped: asyncio.Event | None = None
        self._lock = threading.Lock()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> "ProbeServer":
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._main(ready))
            except BaseException as exc:  # surface bind errors to start()
                errors.append(exc)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="probe-server", daemon=True)
        self._thread.start()
        if not ready.wait(10) or errors:
            raise RuntimeError(f"probe server failed to start: {errors!r}")
        return self

    async def _main(self, ready: threading.Event) -> None:
        self._stopped = asyncio.Event()
        async with serve(self._handler, self.host, self.port, process_request=self._process_request,
                         max_size=None) as server:
            self._server = server
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await self._stopped.wait()

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            try:
                self._loop.call_soon_threadsafe(self._stopped.set)
            except RuntimeError:  # loop already closed
                pass
            self._thread.join(10)

    def __enter__(self) -> "ProbeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    # ---- server side -----------------------------------------------------------------------

    def _log(self, conn_no: int, direction: str, raw: Any) -> Any:
        try:
            message = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            message = raw
        with self._lock:
            self.frames.append(Frame(time.time(), conn_no, direction, message))
        if self.verbose:
            print(f"[probe] conn#{conn_no} {direction}: {raw}", flush=True)
        return message

    @staticmethod
    def _split_path(path: str) -> tuple[str, str] | None:
        path = path.split("?", 1)[0]
        marker = "/websocket/"
        if marker not in path:
            return None
        rest = [seg for seg in path.split(marker, 1)[1].split("/") if seg]
        if len(rest) < 2:
            return None
        return unquote(rest[-2]), unquote(rest[-1])

    def _process_request(self, connection: ServerConnection, request: Request):
        if self._split_path(request.path) is None:
            self.rejected.append(request.path)
            return connection.respond(404, "expected /websocket/<app>/<key>\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        app, key = self._split_path(ws.request.path) or ("?", "?")
        with self._lock:
            conn = ProbeConnection(conn_no=len(self.connections) + 1, app=app, key=key,
                                   opened_at=time.time(), ws=ws)
            self.connections.append(conn)
        request_id = str(uuid.uuid4())
        conn.pending[request_id] = asyncio.get_running_loop().create_future()
        await self._send(conn, {"type": "executor_info", "request_id": request_id})
        try:
            async for raw in ws:
                message = self._log(conn.conn_no, "in", raw)
                if not isinstance(message, dict):
                    continue
                if message.get("type") == "executor_info":
                    conn.info = message
                fut = conn.pending.pop(str(message.get("request_id")), None)
                if fut is not None and not fut.done():
                    fut.set_result(message)
        except ConnectionClosed:
            pass
        finally:
            conn.close_code = ws.close_code
            conn.closed_at = time.time()
            for fut in conn.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection #{conn.conn_no} closed"))
            conn.pending.clear()
            if self.verbose:
                print(f"[probe] conn#{conn.conn_no} closed with code {conn.close_code}", flush=True)

    async def _send(self, conn: ProbeConnection, message: dict) -> None:
        raw = json.dumps(message)
        self._log(conn.conn_no, "out", raw)
        assert conn.ws is not None
        await conn.ws.send(raw)

    # ---- test side (called from other threads) ---------------------------------------------

    def _snapshot(self) -> list[ProbeConnection]:
        with self._lock:
            return list(self.connections)

    def connection_of(self, executor_id: str, *, open_only: bool = True) -> ProbeConnection | None:
        """The newest connection whose executor_info reported ``executor_id``."""
        for conn in reversed(self._snapshot()):
            if conn.executor_id == executor_id and (conn.is_open or not open_only):
                return conn
        return None

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"probe: timed out after {timeout}s waiting for {what}")
            time.sleep(0.05)

    def wait_for_executor(self, executor_id: str, timeout: float = 15.0) -> ProbeConnection:
        """Waits until an open connection has answered executor_info with ``executor_id``."""
        return self._wait(lambda: self.connection_of(executor_id), timeout,
                          f"executor {executor_id} to connect and answer executor_info")

    def wait_disconnected(self, executor_id: str, timeout: float = 15.0) -> int | None:
        """Waits until no connection of ``executor_id`` is open; returns the last close code."""
        def closed() -> tuple[int | None] | None:
            if self.connection_of(executor_id) is not None:
                return None
            last = self.connection_of(executor_id, open_only=False)
            return (None if last is None else last.close_code,)
        return self._wait(closed, timeout, f"executor {executor_id} to disconnect")[0]

    def request(self, via: str, msg_type: str, timeout: float = 15.0, **fields: Any) -> dict:
        """Sends ``{type, request_id, **fields}`` to executor ``via``'s connection; returns the reply."""
        conn = self.connection_of(via)
        if conn is None:
            raise LookupError(f"probe: no open connection for executor {via}")
        assert self._loop is not None

        async def go() -> dict:
            request_id = str(uuid.uuid4())
            fut = asyncio.get_running_loop().create_future()
            conn.pending[request_id] = fut
            await self._send(conn, {"type": msg_type, "request_id": request_id, **fields})
            return await asyncio.wait_for(fut, timeout)

        return asyncio.run_coroutine_threadsafe(go(), self._loop).result(timeout + 5)

    def exist_pending_workflows(self, via: str, executor_id: str, application_version: str,
                                timeout: float = 15.0) -> dict:
        return self.request(via, "exist_pending_workflows", timeout,
                            executor_id=executor_id, application_version=application_version)

    def recovery(self, via: str, executor_ids: list[str], timeout: float = 15.0) -> dict:
        return self.request(via, "recovery", timeout, executor_ids=list(executor_ids))

    def transcript(self) -> str:
        """All frames so far, one per line, for failure messages."""
        with self._lock:
            frames = list(self.frames)
        return "\n".join(f"{f.at:.3f} conn#{f.conn_no} {f.direction} {json.dumps(f.message)}" for f in frames)


if __name__ == "__main__":  # manual use: python probe_server.py [port]
    import sys

    server = ProbeServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0, verbose=True).start()
    print(f"probe listening on {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
