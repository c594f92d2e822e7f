"""A fleet of simulated executors in one process: ``python -m bench.clients``.

Each client is a plain ``websockets`` asyncio connection that behaves like the
DBOS SDKs on the wire (the model is ``tests/fake_executor.py``): it answers
``executor_info`` (Python style, nulls included), ``exist_pending_workflows``,
``recovery`` and ``retention``, pings every 20 s with a 20 s timeout (the
library's keepalive, what dbos 3.2.0's ``websockets.sync`` client does) and
offers permessage-deflate (the library default, as the SDK does). In retry
mode a client whose socket goes away tries again every second, like the SDK.

Driven over stdin/stdout, one JSON command per line, one JSON answer per line:

``connect``  {url, app, n, version?, retry?, hold?, open_timeout?, timeout?, record?, exist?, sources?}
             starts ``n`` new clients at once; answers when all registered (or
             gave up). ``hold``: do not expect ``executor_info`` (bare server).
             ``sources``: loopback addresses to connect from, 127.0.0.2 and
             up, in turn (default 16; 0: the kernel's choice): one address's
             ephemeral ports (about 28,000) and Relay's per-address
             handshake cap are not what a storm measures.
``reconnect`` {timeout?}: the clients that are not running start again (same ids).
``mark``     remembers now; ``wait`` {timeout} answers when every client has
             registered after the mark.
``status``   open sockets, registrations since the mark.
``abort``    drops every TCP connection at once (no close frame, like SIGKILL);
             retrying clients stop retrying unless {keep_retry: true}.
``close``    closes every socket with a close frame.
``frames``   the requests other than ``executor_info`` received, with their time.
``ids``      the executor ids.
``quit``
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
import uuid
from typing import Any

from websockets.asyncio.client import connect

SOURCES = 16


class Client:
    def __init__(self, fleet: "FleetState", url: str, executor_id: str, version: str, retry: bool, hold: bool,
                 open_timeout: float, source: str | None = None) -> None:
        self.fleet = fleet
        self.url = url
        self.executor_id = executor_id
        self.version = version
        self.retry = retry
        self.hold = hold
        self.open_timeout = open_timeout
        self.source = source  # the loopback address it connects from (127.0.0.2 and up), or the kernel's choice
        self.ws: Any = None
        self.task: asyncio.Task[Any] | None = None
        self.registered_at: float | None = None  # wall time of the latest registration
        self.first_attempt_done = asyncio.Event()
        self.failures = 0
        self.stopped = False

    def start(self) -> None:
        self.stopped = False
        self.first_attempt_done = asyncio.Event()
        self.task = asyncio.ensure_future(self.run())

    async def run(self) -> None:
        while not self.stopped:
            try:
                async with connect(self.url, ping_interval=20, ping_timeout=20, max_size=None,
                                   **({"local_addr": (self.source, 0)} if self.source else {}),
                                   open_timeout=self.open_timeout, close_timeout=5) as ws:
                    self.ws = ws
                    self.fleet.open += 1
                    try:
                        if self.hold:
                            self.registered_at = time.time()
                            self.first_attempt_done.set()
                        async for raw in ws:
                            await self.handle(ws, raw)
                    finally:
                        self.fleet.open -= 1
                        self.ws = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # refused, reset, timed out, closed...
                self.failures += 1
                name = type(e).__name__
                self.fleet.errors[name] = self.fleet.errors.get(name, 0) + 1
            self.first_attempt_done.set()
            if not self.retry or self.stopped:
                return
            await asyncio.sleep(1.0)

    async def handle(self, ws: Any, raw: Any) -> None:
        msg = json.loads(raw)
        t = msg.get("type")
        out: dict[str, Any] = {"type": t, "request_id": msg.get("request_id")}
        if t == "executor_info":
            out.update(executor_id=self.executor_id, application_version=self.version, hostname="benchhost",
                       language="python", dbos_version="3.2.0", executor_metadata={"bench": True})
        elif t == "exist_pending_workflows":
            if self.fleet.record:
                self.fleet.frames.append({"type": t, "t": time.time(), "executor_id": msg.get("executor_id"),
                                          "by": self.executor_id})
            out["exist"] = self.fleet.exist
        elif t == "recovery":
            if self.fleet.record:
                self.fleet.frames.append({"type": t, "t": time.time(), "executor_ids": msg.get("executor_ids"),
                                          "by": self.executor_id})
            out["success"] = True
        elif t == "retention":
            out["success"] = True
        else:
            out["error_message"] = "Unknown message type"
        out.setdefault("error_message", None)
        await ws.send(json.dumps(out))
        if t == "executor_info":
            self.registered_at = time.time()
            self.first_attempt_done.set()


class FleetState:
    def __init__(self) -> None:
        self.clients: list[Client] = []
        self.open = 0
        self.errors: dict[str, int] = {}
        self.frames: list[dict[str, Any]] = []
        self.record = False
        self.exist = True
        self.mark = 0.0
        self.made = 0  # clients made so far: the next one's source address

    def registered_since(self, since: float) -> list[Client]:
        return [c for c in self.clients if c.registered_at is not None and c.registered_at >= since]


async def wait_first_attempts(clients: list[Client], timeout: float) -> None:
    try:
        await asyncio.wait_for(asyncio.gather(*(c.first_attempt_done.wait() for c in clients)), timeout)
    except asyncio.TimeoutError:
        pass


async def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200_000, max(hard, 200_000)))
    except (ValueError, PermissionError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    st = FleetState()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def answer(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        kind = cmd.get("cmd")
        try:
            if kind == "connect":
                st.record = bool(cmd.get("record", st.record))
                st.exist = bool(cmd.get("exist", st.exist))
                url = f"{cmd['url']}/websocket/{cmd['app']}/{cmd.get('key', 'dev-key')}"
                sources = int(cmd.get("sources", SOURCES))
                new = []
                for _ in range(int(cmd["n"])):
                    source = f"127.0.0.{2 + st.made % sources}" if sources else None
                    st.made += 1
                    new.append(Client(st, url, str(uuid.uuid4()), cmd.get("version", "v1"), bool(cmd.get("retry")),
                                      bool(cmd.get("hold")), float(cmd.get("open_timeout", 60)), source))
                st.clients.extend(new)
                t0 = time.time()
                for c in new:
                    c.start()
                await wait_first_attempts(new, float(cmd.get("timeout", 300)))
                done = [c.registered_at for c in new if c.registered_at is not None]
                answer({"registered": len(done), "failed": len(new) - len(done), "t0": t0,
                        "t_last": max(done) if done else None, "open": st.open, "errors": st.errors})
            elif kind == "reconnect":
                todo = [c for c in st.clients if c.task is None or c.task.done()]
                if "open_timeout" in cmd:
                    for c in todo:
                        c.open_timeout = float(cmd["open_timeout"])
                st.mark = time.time()
                for c in todo:
                    c.start()
                await wait_first_attempts(todo, float(cmd.get("timeout", 300)))
                done = [c.registered_at for c in todo if c.registered_at is not None and c.registered_at >= st.mark]
                answer({"registered": len(done), "failed": len(todo) - len(done), "t0": st.mark,
                        "t_last": max(done) if done else None, "open": st.open, "errors": st.errors})
            elif kind == "mark":
                st.mark = time.time()
                answer({"mark": st.mark})
            elif kind == "wait":
                deadline = time.monotonic() + float(cmd.get("timeout", 120))
                while len(st.registered_since(st.mark)) < len(st.clients) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                regs = [c.registered_at for c in st.registered_since(st.mark)]
                answer({"registered": len(regs), "of": len(st.clients), "t_last": max(regs) if regs else None,
                        "open": st.open, "errors": st.errors})
            elif kind == "status":
                answer({"open": st.open, "clients": len(st.clients),
                        "registered_since_mark": len(st.registered_since(st.mark)), "errors": st.errors})
            elif kind == "abort":
                t = time.time()
                open_before = st.open
                for c in st.clients:
                    if not cmd.get("keep_retry"):
                        c.stopped = True
                    if c.ws is not None:
                        c.ws.transport.abort()
                await asyncio.sleep(0.2)
                answer({"t": t, "open": st.open, "open_before": open_before})
            elif kind == "close":
                for c in st.clients:
                    c.stopped = True
                await asyncio.gather(*(c.ws.close() for c in st.clients if c.ws is not None), return_exceptions=True)
                answer({"open": st.open})
            elif kind == "regtimes":
                answer({"times": [c.registered_at for c in st.registered_since(st.mark)], "mark": st.mark})
            elif kind == "frames":
                answer({"frames": st.frames})
            elif kind == "ids":
                answer({"ids": [c.executor_id for c in st.clients]})
            elif kind == "quit":
                for c in st.clients:
                    c.stopped = True
                    if c.ws is not None:
                        c.ws.transport.abort()
                answer({"bye": True})
                break
            else:
                answer({"error": f"unknown command {kind!r}"})
        except Exception as e:  # report, keep serving
            answer({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
