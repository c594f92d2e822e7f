"""The WebSocket hub: executors' sockets, on the same port as the REST API.

A thin asyncio layer around :class:`relay_es.protocol.session.Session`. It
speaks ASGI directly (no framework in the hot path) and is served by uvicorn,
whose ``websockets`` protocol sends Relay's pings every
``RELAY_PING_INTERVAL_SECS`` and closes a socket whose pong does not come back
within ``RELAY_PING_WAIT_SECS - RELAY_PING_INTERVAL_SECS``: a silent socket is
DISCONNECTED within the ping wait. Pings and pongs never reach the store.

Close codes Relay uses (executors reconnect after any of them):

==== ==========================================================================
1001 Relay is shutting down
1008 the executor broke the protocol (unusable ``executor_info`` reply)
4001 superseded: a newer connection with the same executor id took over
4002 handshake timeout: ``executor_info`` was not answered in time
4003 the token this executor connected with was revoked
==== ==========================================================================

The hub is also the recovery :class:`~relay_es.process_manager.Dispatcher`:
it owns the sockets, so it is the one that sends a dispatch.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote
from uuid import UUID

from relay_es import retention
from relay_es.aggregates.executor import executor_stream_id
from relay_es.faults import crash_point
from relay_es.process_manager import ProcessManager, RecoveryOutcome, RecoveryRequest
from relay_es.protocol import messages as m
from relay_es.protocol.session import Answered, Registered, Session, State, Violation
from relay_es.adapters.admission import Gate, Refused
from relay_es.adapters.outbox import Outbox
from relay_es.service import ExecutorInfo, Relay

log = logging.getLogger(__name__)

CLOSE_SHUTDOWN = 1001
CLOSE_PROTOCOL = 1008
CLOSE_SUPERSEDED = 4001
CLOSE_HANDSHAKE_TIMEOUT = 4002
CLOSE_REVOKED = 4003

# Largest frame accepted. list_workflows / export_workflow replies carry
# workflow inputs and outputs and run to many MB; the TypeScript SDK's own
# limit is 100 MiB. A larger frame closes the socket with 1009.
MAX_FRAME = 128 * 1024 * 1024

VIOLATION_AUDIT_INTERVAL = 60.0  # seconds between audit entries of one kind per app


class ConnectionLost(Exception):
    pass


def parse_path(path: str) -> tuple[str, str] | None:
    """``[anything]/websocket/{app}/{key}`` -> ``(app, key)``, percent-decoded."""
    marker = "/websocket/"
    i = path.rfind(marker)
    if i < 0:
        return None
    parts = path[i + len(marker):].split("/")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return unquote(parts[0]), unquote(parts[1])


def scrub(path: str) -> str:
    """A path fit for a log line: the key segment never appears."""
    i = path.rfind("/")
    return path[: i + 1] + "***" if "/websocket/" in path and i >= 0 else path


@dataclass
class Connection:
    id: str
    org: str
    app: str
    peer: str
    token: str | None
    send_message: Callable[[dict[str, Any]], Awaitable[None]]
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

    async def send_text(self, text: str) -> None:
        if self.closed:
            raise ConnectionLost(f"connection {self.id} is closed")
        try:
            async with self.lock:
                await self.send_message({"type": "websocket.send", "text": text})
        except Exception as e:  # the socket is going away under us (ClientDisconnected, OSError...)
            self.closed = True
            raise ConnectionLost(f"connection {self.id}: {e.__class__.__name__}") from e

    async def call(self, make: Callable[[str], m.Request], timeout: float) -> m.Response:
        if self.closed or self.session.state is not State.REGISTERED:
            raise ConnectionLost(f"connection {self.id} is not open")
        request_id, frame = self.session.request(make)
        fut: asyncio.Future[m.Response] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = fut
        try:
            await self.send_text(frame)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.waiters.pop(request_id, None)
            self.session.forget(request_id)

    async def close(self, code: int, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        try:
            async with self.lock:
                await self.send_message({"type": "websocket.close", "code": code, "reason": reason[:120]})
        except Exception:  # already gone
            pass


class Hub:
    def __init__(
        self,
        relay: Relay,
        *,
        owner: str,
        response_timeout: float,
        handshake_timeout: float = 10.0,
        retention_interval: float = 300.0,
        workers: int = 8,
    ) -> None:
        self.relay = relay
        self.owner = owner
        self.response_timeout = response_timeout
        self.handshake_timeout = handshake_timeout
        self.retention_interval = retention_interval
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relay-cmd")
        self.gate: Any = Gate(relay, self.run)
        self.pm: ProcessManager | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connections: dict[str, Connection] = {}
        self.by_executor: dict[tuple[str, str, str], Connection] = {}
        self.shutting_down = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._violations: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._refusals: dict[str, tuple[float, int]] = {}  # peer host -> (last refusal, strikes)
        self._refusal_audit: dict[tuple[str, str, str], tuple[float, int]] = {}
        self.on_refused: Callable[[], None] = lambda: None
        self.outbox = Outbox(relay, self.run)
        self.on_connection_change: Callable[[int], None] = lambda n: None

    # --------------------------------------------------------------- helpers
    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._spawn(self._retention_loop())

    async def stop(self) -> None:
        """Closes every socket without recording disconnects: an executor that
        was HEALTHY when Relay stopped gets a fresh grace on restart."""
        self.shutting_down = True
        for conn in list(self.connections.values()):
            await conn.close(CLOSE_SHUTDOWN, "relay is shutting down")
        await self.outbox.drained(timeout=5.0)
        for t in list(self._tasks):
            t.cancel()
        self.pool.shutdown(wait=False, cancel_futures=False)

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        peer = "%s:%s" % tuple(scope.get("client") or ("?", "?"))
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        parsed = parse_path(path)
        try:
            if parsed is None:
                raise Refused(404, "Not found", "executors connect at /websocket/{appName}/{conductorKey}", audit=False)
            if self.shutting_down:
                raise Refused(503, "Shutting down", "Relay is shutting down; retry shortly", audit=False)
            app, key = parsed
            org, token = await self.gate.admit(app, key, peer, headers=scope.get("headers") or [])
        except Refused as r:
            log.info("refused executor handshake from %s on %s: %s %s", peer, scrub(path), r.status, r.detail)
            await self._slow_down(peer)
            if r.audit and parsed is not None:
                await self._audit_refusal(parsed[0], peer, r)
            await self._refuse(send, r)
            return
        self._refusals.pop(peer.rsplit(":", 1)[0], None)
        await send({"type": "websocket.accept"})
        conn = Connection(id=uuid.uuid4().hex, org=org, app=app, peer=peer, token=token, send_message=send)
        self.connections[conn.id] = conn
        self.on_connection_change(len(self.connections))
        code: int | None = None
        # A timer, not a task: most executors answer at once, and a task per socket is memory and work.
        handshake = asyncio.get_running_loop().call_later(self.handshake_timeout, self._handshake_expired, conn)
        try:
            await conn.send_text(conn.session.open())
            while True:
                message = await receive()
                kind = message["type"]
                if kind == "websocket.receive":
                    data = message.get("text")
                    if data is None:
                        data = message.get("bytes") or b""
                    for ev in conn.session.receive(data):
                        await self._on_event(conn, ev)
                elif kind == "websocket.disconnect":
                    code = message.get("code")
                    break
        except (ConnectionLost, OSError) as e:
            log.debug("connection %s ended: %s", conn.id, e)
        finally:
            handshake.cancel()
            await self._cleanup(conn, code)

    async def _slow_down(self, peer: str) -> None:
        """Repeated refusals from one address are answered more and more slowly
        (0.1 s doubling to 5 s; forgotten after a minute of quiet)."""
        self.on_refused()
        host = peer.rsplit(":", 1)[0]
        now = time.monotonic()
        last, strikes = self._refusals.get(host, (now, 0))
        strikes = 0 if now - last > 60 else strikes
        self._refusals[host] = (now, strikes + 1)
        if strikes:
            await asyncio.sleep(min(0.1 * 2 ** (strikes - 1), 5.0))

    async def _audit_refusal(self, app: str, peer: str, r: Refused) -> None:
        """One audit entry per (org, app, address) per interval, counting the rest."""
        orgs = [r.org] if r.org else await self.gate.orgs_for(app)
        host = peer.rsplit(":", 1)[0]
        for org in orgs:
            k = (org, app, host)
            now = time.monotonic()
            last, suppressed = self._refusal_audit.get(k, (-1e18, 0))
            if now - last < VIOLATION_AUDIT_INTERVAL:
                self._refusal_audit[k] = (last, suppressed + 1)
                continue
            self._refusal_audit[k] = (now, 0)
            try:
                await self.run(self.relay.record_refusal, org, app=app, peer=host, status=r.status, reason=r.detail,
                               suppressed=suppressed)
            except Exception:
                log.exception("could not record a refused handshake")

    async def close_token(self, org: str, name: str) -> int:
        """Disconnects every executor that connected with a revoked token."""
        self.gate.forget(org, token=name)
        closed = 0
        for conn in list(self.connections.values()):
            if conn.org == org and conn.token == name and not conn.closed:
                conn.close_reason = "token_revoked"
                await conn.close(CLOSE_REVOKED, "token revoked")
                closed += 1
        return closed

    async def _refuse(self, send: Any, r: Refused) -> None:
        body = json.dumps({"type": "about:blank", "title": r.title, "status": r.status, "detail": r.detail}).encode()
        await send({
            "type": "websocket.http.response.start",
            "status": r.status,
            "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "websocket.http.response.body", "body": body})

    def _handshake_expired(self, conn: Connection) -> None:
        if conn.session.state is State.AWAITING_INFO and not conn.closed:
            self._spawn(self._handshake_timed_out(conn))

    async def _handshake_timed_out(self, conn: Connection) -> None:
        if conn.session.state is State.AWAITING_INFO and not conn.closed:
            await self._violation(conn, Violation("handshake_timeout", f"executor_info not answered within {self.handshake_timeout:g}s"))
            await conn.close(CLOSE_HANDSHAKE_TIMEOUT, "executor_info not answered in time")

    async def _on_event(self, conn: Connection, ev: Any) -> None:
        if isinstance(ev, Answered):
            fut = conn.waiters.get(ev.request_id)
            if fut is not None and not fut.done():
                fut.set_result(ev.response)
        elif isinstance(ev, Registered):
            await self._register(conn, ev.info)
        elif isinstance(ev, Violation):
            await self._violation(conn, ev)
            if ev.fatal:
                await conn.close(CLOSE_PROTOCOL, ev.kind)

    async def _register(self, conn: Connection, info: m.ExecutorInfoResponse) -> None:
        key = (conn.org, conn.app, info.executor_id)
        conn.executor_id = info.executor_id
        conn.app_version = info.application_version
        conn.stream_id = executor_stream_id(*key)
        old = self.by_executor.get(key)
        self.by_executor[key] = conn
        self.outbox.submit(key, self.relay.op_connected(
            conn.org,
            conn.app,
            ExecutorInfo(
                executor_id=info.executor_id,
                application_version=info.application_version,
                hostname=info.hostname,
                language=info.language,
                dbos_version=info.dbos_version,
                executor_metadata=info.executor_metadata,
            ),
            connection_id=conn.id,
            owner=self.owner,
            at=self.relay.clock.now(),
        ))
        if old is not None and old is not conn and not old.closed:
            old.superseded = True
            log.info("executor %s: connection %s superseded by %s", info.executor_id, old.id, conn.id)
            await old.close(CLOSE_SUPERSEDED, "superseded by a newer connection")
        log.info("executor %s of %s/%s connected (version %s) from %s", info.executor_id, conn.org, conn.app,
                 info.application_version, conn.peer)

    async def _violation(self, conn: Connection, v: Violation) -> None:
        log.warning("executor %s (%s/%s from %s): %s: %s", conn.executor_id or "?", conn.org, conn.app, conn.peer,
                    v.kind, v.detail)
        k = (conn.org, conn.app, v.kind)
        now = time.monotonic()
        last, suppressed = self._violations.get(k, (-1e18, 0))
        if now - last < VIOLATION_AUDIT_INTERVAL:
            self._violations[k] = (last, suppressed + 1)
            return
        self._violations[k] = (now, 0)
        try:
            await self.run(self.relay.record_violation, conn.org, conn.app, kind=v.kind, detail=v.detail,
                           executor_id=conn.executor_id, peer=conn.peer, suppressed=suppressed)
        except Exception:
            log.exception("could not record a protocol violation")

    async def _cleanup(self, conn: Connection, code: int | None) -> None:
        conn.closed = True
        for rid in conn.session.close():
            fut = conn.waiters.get(rid)
            if fut is not None and not fut.done():
                fut.set_exception(ConnectionLost(f"connection {conn.id} closed"))
        self.connections.pop(conn.id, None)
        self.on_connection_change(len(self.connections))
        if conn.executor_id is None:
            return
        key = (conn.org, conn.app, conn.executor_id)
        if self.by_executor.get(key) is conn:
            del self.by_executor[key]
        if self.shutting_down or conn.superseded or conn.stream_id is None:
            return
        reason = conn.close_reason or ("ping_timeout" if code == 1011 else "socket_closed")
        self.outbox.submit(key, self.relay.op_disconnected(conn.stream_id, connection_id=conn.id, reason=reason,
                                                           at=self.relay.clock.now()))

    # ------------------------------------------------------------- dispatch
    def is_connected(self, org: str, app: str, executor_id: str) -> bool:
        """Dispatcher interface: a registered, open socket for this executor
        exists here, or transitions of it are still on their way to the store
        (while Postgres restarts, a reconnect may wait in the outbox). Either
        way the store's view of it is stale, so it must not be declared dead."""
        key = (org, app, executor_id)
        if self.outbox.holds(key):
            return True
        conn = self.by_executor.get(key)
        return conn is not None and not conn.closed and conn.session.state is State.REGISTERED

    def send_recovery(self, request: RecoveryRequest) -> None:
        """Dispatcher interface: called from the process manager's thread."""
        assert self.loop is not None, "hub not started"
        self.loop.call_soon_threadsafe(self._spawn, self._recover(request))

    def _answer(self, outcome: RecoveryOutcome) -> None:
        if self.pm is not None:
            self.pm.recovery_answered(outcome)

    async def _recover(self, req: RecoveryRequest) -> None:
        conn = self.by_executor.get((req.org, req.app, req.target_executor_id))
        if conn is None or conn.closed or (req.target_connection_id and conn.id != req.target_connection_id):
            self._answer(RecoveryOutcome(req.request_id, False, reason=f"target {req.target_executor_id} is not connected"))
            return
        version = req.app_version or ""
        try:
            exist = await conn.call(
                lambda rid: m.ExistPendingWorkflowsRequest(request_id=rid, executor_id=req.dead_executor_id,
                                                           application_version=version),
                self.response_timeout,
            )
            if exist.failed:
                self._answer(RecoveryOutcome(req.request_id, False, reason=f"exist_pending_workflows failed: {exist.error_message}"))
                return
            if not getattr(exist, "exist", False):
                self._answer(RecoveryOutcome(req.request_id, True, pending_found=False))
                return
            answer = await conn.call(
                lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=[req.dead_executor_id]),
                self.response_timeout,
            )
            crash_point("before_answer_recorded")
            if answer.failed:
                self._answer(RecoveryOutcome(req.request_id, False, reason=f"recovery failed: {answer.error_message or 'success is not true'}"))
                return
            self._answer(RecoveryOutcome(req.request_id, True, pending_found=True))
        except asyncio.TimeoutError:
            self._answer(RecoveryOutcome(req.request_id, False, reason=f"no answer within {self.response_timeout:g}s"))
        except ConnectionLost as e:
            self._answer(RecoveryOutcome(req.request_id, False, reason=f"target connection lost: {e}"))

    # ------------------------------------------------------------- retention
    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_interval)
            try:
                await self.retention_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention round failed")

    async def retention_round(self) -> int:
        """Sends one retention message per application that wants one. Returns how many were sent."""
        sent = 0
        apps: dict[tuple[str, str], list[Connection]] = {}
        for conn in self.connections.values():
            if conn.session.state is State.REGISTERED and not conn.closed:
                apps.setdefault((conn.org, conn.app), []).append(conn)
        for (org, app), conns in apps.items():
            settings = await self.run(self.relay.app_settings, org, app)
            p = retention.plan(settings, self.relay.clock.now())
            if p is None:
                continue
            target = max(conns, key=lambda c: c.connected_at)  # the newest connection
            self._spawn(self._send_retention(target, p))
            sent += 1
        return sent

    async def _send_retention(self, conn: Connection, p: retention.RetentionPlan) -> None:
        """Recorded first, then sent; the answer is recorded when it comes (or does not)."""
        rid = str(uuid.uuid4())
        try:
            await self.run(self.relay.record_retention_dispatched, conn.org, conn.app, request_id=rid,
                           target_executor_id=conn.executor_id or "", gc_cutoff=p.gc_cutoff,
                           gc_rows_threshold=p.gc_rows_threshold, timeout_cutoff=p.timeout_cutoff)
        except Exception:
            log.exception("could not record a retention round for %s/%s; not sending it", conn.org, conn.app)
            return
        try:
            answer = await conn.call(lambda _: m.RetentionRequest(request_id=rid, body=p.body()), self.response_timeout)
            success, error = not answer.failed, answer.error_message
        except asyncio.TimeoutError:
            success, error = False, f"no answer within {self.response_timeout:g}s"
        except ConnectionLost as e:
            success, error = False, f"connection lost: {e}"
        try:
            await self.run(self.relay.record_retention_answered, conn.org, conn.app, request_id=rid,
                           success=success, error=error)
        except Exception:
            log.exception("could not record the retention answer of %s/%s", conn.org, conn.app)

