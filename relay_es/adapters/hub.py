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
1007 a text frame that is not UTF-8
1008 the executor broke the protocol: an unusable ``executor_info`` reply, or
     any other frame before it
1009 a message over the cap: 64 KiB for the first (the ``executor_info``
     reply), 1 MiB for any other before registration, then 128 MiB
     (``relay_es.protocol.limits``); audited ``frame_too_large``
4001 superseded: a newer connection with the same executor id (and, in auth
     mode, the same token) took over
4002 handshake timeout: ``executor_info`` was not answered in time
4003 the token this executor connected with was revoked
4004 ``executor_info`` out of bounds: a field too long, a control or format
     character in an identifier, metadata too large or holding U+0000
4005 a resource limit: a new executor id over the key's or the
     application's limit of executor ids (``ResourceLimits``)
4006 executor id held by another key: in auth mode, the id is connected with
     another token; the newcomer is refused (audited ``supersede_refused``)
     and the live connection kept
4007 the executor's application was deleted
==== ==========================================================================

Every fatal violation is audited as ``protocol.violation`` (its ``kind`` in
the detail) and nothing of it reaches the store. Audit entries and warnings
of one kind are throttled (:class:`~relay_es.adapters.throttle.Throttle`):
one per window, counting the rest.

The hub is also the recovery :class:`~relay_es.engine.process_manager.Dispatcher`:
it owns the sockets, so it is the one that sends a dispatch, within the
deadline the process manager gave it (ADR 15).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote
from uuid import UUID

from relay_es.protocol import retention
from relay_es.aggregates.executor import executor_stream_id
from relay_es.adapters.faults import crash_point
from relay_es.engine.process_manager import ProcessManager, RecoveryOutcome, RecoveryRequest
from relay_es.protocol import messages as m
from relay_es.protocol.limits import MAX_FRAME, ResourceLimits, printable
from relay_es.protocol.session import Answered, Registered, Session, State, Violation
from relay_es.adapters.admission import Gate, Refused
from relay_es.adapters.logs import scrub_text
from relay_es.adapters.outbox import Outbox
from relay_es.adapters.throttle import Throttle
from relay_es.adapters.uvicorn_ws import Withdrawn
from relay_es.engine.service import ExecutorInfo, Relay

log = logging.getLogger(__name__)

CLOSE_SHUTDOWN = 1001
CLOSE_PROTOCOL = 1008
CLOSE_TOO_BIG = 1009
CLOSE_SUPERSEDED = 4001
CLOSE_HANDSHAKE_TIMEOUT = 4002
CLOSE_REVOKED = 4003
CLOSE_OUT_OF_BOUNDS = 4004
CLOSE_LIMIT = 4005
CLOSE_HELD = 4006
CLOSE_APP_DELETED = 4007

CLOSE_FOR = {"info_out_of_bounds": CLOSE_OUT_OF_BOUNDS, "limit_exceeded": CLOSE_LIMIT}  # other fatal kinds: 1008

__all__ = ["MAX_FRAME", "Hub", "Connection"]  # MAX_FRAME: the socket's cap once registered (limits.py)

VIOLATION_AUDIT_INTERVAL = 60.0  # seconds between audit entries (and warnings) of one kind per app
REFUSAL_QUIET = 60.0  # an address with no refusal for this long starts again at no delay


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
    """A path fit for a log line: the key segment never appears, however the path is
    spelt (the one rule of the log filter, ``logs.scrub_text``)."""
    return scrub_text(path)


def _release(counter: Counter[Any], key: Any) -> None:
    """One less; a key at zero is dropped (keys are the client's choice)."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


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


@dataclass
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
            raise ConnectionLost(f"connection {self.id}: {e.__class__.__name__}") from e

    async def call(self, make: Callable[[str], m.Request], timeout: float, guard: Guard | None = None) -> m.Response:
        if self.closed or self.session.state is not State.REGISTERED:
            raise ConnectionLost(f"connection {self.id} is not open")
        request_id, frame = self.session.request(make)
        fut: asyncio.Future[m.Response] = asyncio.get_running_loop().create_future()
        self.waiters[request_id] = fut
        try:
            await self.send_text(frame, guard)
            return await asyncio.wait_for(fut, max(0.0, timeout))
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
        limits: ResourceLimits = ResourceLimits(),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.relay = relay
        self.owner = owner
        self.response_timeout = response_timeout
        self.handshake_timeout = handshake_timeout
        self.retention_interval = retention_interval
        self.limits = limits
        self.monotonic = monotonic  # the process manager's clock: recovery deadlines are on it
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relay-cmd")
        self.gate: Any = Gate(relay, self.run)
        self.pm: ProcessManager | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connections: dict[str, Connection] = {}
        self.by_executor: dict[tuple[str, str, str], Connection] = {}
        self.shutting_down = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # One throttle class for every repeated thing a hostile peer can cause; each prunes itself.
        self._violations = Throttle(VIOLATION_AUDIT_INTERVAL, clock=monotonic)  # (org, app, kind)
        self._refusals = Throttle(REFUSAL_QUIET, clock=monotonic)  # address: slow-down strikes, one log line
        self._refusal_audit = Throttle(VIOLATION_AUDIT_INTERVAL, clock=monotonic)  # (org, app, address)
        # Resources held, for ResourceLimits:
        self._handshaking: Counter[str] = Counter()  # address -> sockets not yet registered
        self._by_key: Counter[tuple[str, ...]] = Counter()  # key -> open sockets
        self._by_app: Counter[tuple[str, str]] = Counter()  # (org, app) -> open sockets
        self._key_ids: dict[tuple[str, ...], dict[tuple[str, str, str], None]] = {}  # key -> executor ids it registered
        # Recovery attempts the process manager expired (see Guard); guarded by _dispatch_lock.
        self._dispatch_lock = threading.Lock()
        self._expired: set[str] = set()
        self._recovering: set[str] = set()
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
        self._spawn(self._sweep_loop())

    KEY_SWEEP_INTERVAL = 60.0

    async def _sweep_loop(self) -> None:
        """The executor ids remembered per key are forgotten once deleted, and a
        key with none left is dropped: keys are the client's choice in development
        mode, so the table must not keep every key ever used."""
        while True:
            await asyncio.sleep(self.KEY_SWEEP_INTERVAL)
            self.sweep_keys()

    def sweep_keys(self) -> int:
        """Returns how many keys are still remembered."""
        for key_id, ids in list(self._key_ids.items()):
            self._prune_key_ids(ids)
            if not ids:
                del self._key_ids[key_id]
        return len(self._key_ids)

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

    @staticmethod
    def key_id(org: str, token: str | None, key: str) -> tuple[str, ...]:
        """What a key is counted as: its token in auth mode; in development mode a
        digest of the key (any key is accepted there, and none is kept in memory)."""
        if token is not None:
            return ("token", org, token)
        return ("key", org, hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32])

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        peer = "%s:%s" % tuple(scope.get("client") or ("?", "?"))
        host = peer.rsplit(":", 1)[0]
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        parsed = parse_path(path)
        self._handshaking[host] += 1
        registered = False
        counted: tuple[tuple[str, ...], tuple[str, str]] | None = None  # (key, app) this socket is counted against
        try:
            try:
                if parsed is None:
                    raise Refused(404, "Not found", "executors connect at /websocket/{appName}/{conductorKey}",
                                  audit=False)
                if self.shutting_down:
                    raise Refused(503, "Shutting down", "Relay is shutting down; retry shortly", audit=False)
                if self.outbox.queued >= self.limits.queued_transitions:  # the store is away: queue no more
                    raise Refused(503, "Service Unavailable",
                                  f"{self.outbox.queued} executor transitions wait for the store "
                                  "(RELAY_MAX_QUEUED_TRANSITIONS); try again later", audit=False)
                if self._handshaking[host] > self.limits.handshakes_per_address:
                    raise Refused(429, "Too many handshakes",
                                  f"more than {self.limits.handshakes_per_address} handshakes in flight from this "
                                  "address (RELAY_MAX_HANDSHAKES_PER_ADDRESS)", audit=False)
                app, key = parsed
                org, token = await self.gate.admit(app, key, peer, headers=scope.get("headers") or [])
                key_id = self.key_id(org, token, key)
                if self._by_key[key_id] >= self.limits.connections_per_key:
                    raise Refused(429, "Too many connections",
                                  f"this key has {self.limits.connections_per_key} open connections "
                                  "(RELAY_MAX_CONNECTIONS_PER_KEY)", org=org)
                if self._by_app[(org, app)] >= self.limits.connections_per_app:
                    raise Refused(429, "Too many connections",
                                  f"application {app!r} has {self.limits.connections_per_app} open connections "
                                  "(RELAY_MAX_CONNECTIONS_PER_APP)", org=org)
                counted = (key_id, (org, app))  # with no await since the checks: concurrent handshakes see it
                self._by_key[key_id] += 1
                self._by_app[(org, app)] += 1
            except Refused as r:
                hit = self._refusals.hit(host)
                if hit.passed:  # one line per address per quiet period, not one per refusal
                    log.info("refused executor handshake from %s on %s: %s %s%s", peer, printable(scrub(path)),
                             r.status, r.detail, f" ({hit.suppressed} more refused)" if hit.suppressed else "")
                await self._slow_down(hit.strikes)
                if r.audit and parsed is not None:
                    await self._audit_refusal(parsed[0], host, r)
                await self._refuse(send, r)
                return
            self._refusals.forget(host)
            await send({"type": "websocket.accept"})
            ext = (scope.get("extensions") or {}).get("relay.frame_cap")
            conn = Connection(id=uuid.uuid4().hex, org=org, app=app, peer=peer, token=token, send_message=send,
                              key_id=key_id, raise_frame_cap=ext)
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
                        if conn.closed:  # closing: what is still on its way is not acted on
                            continue
                        data = message.get("text")
                        if data is None:
                            data = message.get("bytes") or b""
                        for ev in conn.session.receive(data):
                            await self._on_event(conn, ev)
                        if not registered and conn.session.state is State.REGISTERED:
                            registered = True
                            _release(self._handshaking, host)
                    elif kind == "websocket.disconnect":
                        code = message.get("code")
                        if message.get("relay.too_big"):  # our own 1009: the frame cap
                            await self._violation(conn, Violation(
                                "frame_too_large", printable(message.get("reason") or "frame over the cap")
                                + ("" if registered else " (before executor_info was answered)"), fatal=True))
                        break
            except (ConnectionLost, OSError) as e:
                log.debug("connection %s ended: %s", conn.id, e)
            finally:
                handshake.cancel()
                await self._cleanup(conn, code)
        finally:
            if counted is not None:
                _release(self._by_key, counted[0])
                _release(self._by_app, counted[1])
            if not registered:
                _release(self._handshaking, host)

    async def _slow_down(self, strikes: int) -> None:
        """Repeated refusals from one address are answered more and more slowly
        (0.1 s doubling to 5 s; forgotten after a minute of quiet)."""
        self.on_refused()
        if strikes:
            await asyncio.sleep(min(0.1 * 2 ** (strikes - 1), 5.0))

    async def _audit_refusal(self, app: str, host: str, r: Refused) -> None:
        """One audit entry per (org, app, address) per interval, counting the rest. A
        refusal that names no org (a key no token ever had) is counted and logged, never
        audited: an anonymous client must not write into anyone's audit log (ADR 14)."""
        org = r.org
        if org is None:
            return
        hit = self._refusal_audit.hit((org, app, host))
        if not hit.passed:
            return
        try:
            await self.run(self.relay.record_refusal, org, app=app, peer=host, status=r.status, reason=r.detail,
                           suppressed=hit.suppressed)
        except Exception:
            log.exception("could not record a refused handshake")

    async def close_app(self, org: str, app: str) -> int:
        """Closes every socket of a deleted application (4007). Their disconnects are
        recorded (reason ``app_deleted``); the process manager declares none of them dead."""
        self.gate.forget(org, app=app)
        closed = await self._close_where(lambda c: c.org == org and c.app == app, "app_deleted",
                                         CLOSE_APP_DELETED, "application deleted")
        if closed:
            log.info("application %s/%s deleted: %d executor socket(s) closed", org, app, closed)
        return closed

    async def close_token(self, org: str, name: str) -> int:
        """Disconnects every executor that connected with a revoked token."""
        self.gate.forget(org, token=name)
        return await self._close_where(lambda c: c.org == org and c.token == name, "token_revoked",
                                       CLOSE_REVOKED, "token revoked")

    async def _close_where(self, which: Callable[[Connection], bool], reason: str, code: int, text: str) -> int:
        """Closes every open connection ``which`` picks, recording ``reason`` as its disconnect's."""
        closed = 0
        for conn in list(self.connections.values()):
            if which(conn) and not conn.closed:
                conn.close_reason = reason
                await conn.close(code, text)
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
            held = self._held_by_another_token(conn, ev.info.executor_id)
            if held is not None:
                conn.session.close()
                await conn.close(CLOSE_HELD, "executor id held by another key")
                await self._violation(conn, Violation(
                    "supersede_refused",
                    f"executor {printable(ev.info.executor_id, 80)!r} is connected with token "
                    f"{printable(held.token or '', 80)!r}; a connection with token {printable(conn.token or '', 80)!r} "
                    "may not take it over while that socket is open", fatal=True))
                return
            refusal = self._over_limit(conn, ev.info.executor_id)
            if refusal is not None:
                conn.session.close()
                await conn.close(CLOSE_LIMIT, "limit reached")
                await self._violation(conn, Violation("limit_exceeded", refusal, fatal=True))
                return
            if conn.raise_frame_cap is not None:
                # Registered: replies may carry workflow data now. Before any await, so that
                # nothing more is parsed under the handshake's cap, and before any request goes out.
                conn.raise_frame_cap(MAX_FRAME)
            await self._register(conn, ev.info)
        elif isinstance(ev, Violation):
            if ev.fatal:  # closed first: nothing more is read from it while the violation is recorded
                await conn.close(CLOSE_FOR.get(ev.kind, CLOSE_PROTOCOL), ev.kind)
            await self._violation(conn, ev)

    def _held_by_another_token(self, conn: Connection, executor_id: str) -> Connection | None:
        """The live connection of this executor id if it came with another token (auth
        mode): a key covering the application must not take over, and start the death
        clock of, an executor another key holds. Same token, or development mode: a
        newer connection supersedes (4001)."""
        held = self.by_executor.get((conn.org, conn.app, executor_id))
        if held is None or held is conn or held.closed or held.token is None or held.token == conn.token:
            return None
        return held

    def _over_limit(self, conn: Connection, executor_id: str) -> str | None:
        """Why a new executor id may not register on this connection, or None.
        An id that already exists (a reconnect, a takeover) is never refused."""
        key = (conn.org, conn.app, executor_id)
        if key in self.by_executor:
            return None
        sid = str(executor_stream_id(*key))
        known = self.pm is not None and self.pm.is_listed(sid)
        ids = self._key_ids.setdefault(conn.key_id, {})
        if key not in ids and not known and len(ids) >= self.limits.executors_per_key:
            self._prune_key_ids(ids)
            if len(ids) >= self.limits.executors_per_key:
                return (f"this key already has {len(ids)} executor ids (RELAY_MAX_EXECUTORS_PER_KEY); "
                        f"executor {printable(executor_id, 80)!r} refused")
        if not known and self.pm is not None and self.pm.listed(conn.org, conn.app) >= self.limits.executors_per_app:
            return (f"application {conn.app!r} already has {self.limits.executors_per_app} executors "
                    f"(RELAY_MAX_EXECUTORS_PER_APP); executor {printable(executor_id, 80)!r} refused")
        ids[key] = None
        return None

    def _prune_key_ids(self, ids: dict[tuple[str, str, str], None]) -> None:
        """Forgets the executor ids that are gone: not connected here, deleted (or never recorded)."""
        for key in list(ids):
            if key in self.by_executor or self.outbox.holds(key):
                continue
            if self.pm is None or not self.pm.is_listed(str(executor_stream_id(*key))):
                del ids[key]

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
            token=conn.token,  # who registered it: the token's name (None in development mode) and the address
            peer=conn.peer.rsplit(":", 1)[0],
        ))
        if old is not None and old is not conn and not old.closed:
            old.superseded = True
            log.info("executor %s: connection %s superseded by %s", printable(info.executor_id), old.id, conn.id)
            await old.close(CLOSE_SUPERSEDED, "superseded by a newer connection")
        log.info("executor %s of %s/%s connected (version %s) from %s", printable(info.executor_id), conn.org,
                 conn.app, printable(info.application_version), conn.peer)

    async def _violation(self, conn: Connection, v: Violation) -> None:
        """Audited and logged once per (org, app, kind) per interval, counting the rest."""
        hit = self._violations.hit((conn.org, conn.app, v.kind))
        if not hit.passed:
            log.debug("executor %s (%s/%s from %s): %s: %s", printable(conn.executor_id or "?"), conn.org, conn.app,
                      conn.peer, v.kind, v.detail)
            return
        log.warning("executor %s (%s/%s from %s): %s: %s%s", printable(conn.executor_id or "?"), conn.org, conn.app,
                    conn.peer, v.kind, v.detail,
                    f" ({hit.suppressed} more of this kind in the last {VIOLATION_AUDIT_INTERVAL:g}s)"
                    if hit.suppressed else "")
        try:
            await self.run(self.relay.record_violation, conn.org, conn.app, kind=v.kind, detail=v.detail,
                           executor_id=conn.executor_id, peer=conn.peer, suppressed=hit.suppressed)
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
        with self._dispatch_lock:
            self._recovering.add(request.request_id)
        self.loop.call_soon_threadsafe(self._spawn, self._recover(request))

    def expire(self, request_id: str) -> None:
        """Dispatcher interface, from the process manager's thread: the attempt's
        deadline came and its failure is about to be recorded. Once this returns,
        no frame of it is being written or will be."""
        with self._dispatch_lock:
            if request_id in self._recovering:
                self._expired.add(request_id)

    def _answer(self, outcome: RecoveryOutcome) -> None:
        if self.pm is not None:
            self.pm.recovery_answered(outcome)

    async def _recover(self, req: RecoveryRequest) -> None:
        """Asks the target within the attempt's one deadline: nothing is sent
        after it, whatever the process manager's thread is doing."""
        deadline = req.deadline if req.deadline is not None else self.monotonic() + self.response_timeout
        timeout = f"no answer within {self.response_timeout:g}s"
        guard = Guard(self._dispatch_lock,
                      lambda: req.request_id not in self._expired and self.monotonic() < deadline)
        with self._dispatch_lock:
            self._recovering.add(req.request_id)
        try:
            conn = self.by_executor.get((req.org, req.app, req.target_executor_id))
            if conn is None or conn.closed or (req.target_connection_id and conn.id != req.target_connection_id):
                self._answer(RecoveryOutcome(req.request_id, False, reason=f"target {req.target_executor_id} is not connected"))
                return
            version = req.app_version or ""
            exist = await conn.call(
                lambda rid: m.ExistPendingWorkflowsRequest(request_id=rid, executor_id=req.dead_executor_id,
                                                           application_version=version),
                deadline - self.monotonic(), guard,
            )
            if exist.failed:
                self._answer(RecoveryOutcome(req.request_id, False, reason=f"exist_pending_workflows failed: {printable(exist.error_message)}"))
                return
            if not getattr(exist, "exist", False):
                self._answer(RecoveryOutcome(req.request_id, True, pending_found=False))
                return
            answer = await conn.call(
                lambda rid: m.RecoveryRequest(request_id=rid, executor_ids=[req.dead_executor_id]),
                deadline - self.monotonic(), guard,
            )
            crash_point("before_answer_recorded")
            if answer.failed:
                self._answer(RecoveryOutcome(req.request_id, False, reason=f"recovery failed: {printable(answer.error_message or 'success is not true')}"))
                return
            self._answer(RecoveryOutcome(req.request_id, True, pending_found=True))
        except (asyncio.TimeoutError, Withdrawn):
            self._answer(RecoveryOutcome(req.request_id, False, reason=timeout))
        except ConnectionLost as e:
            self._answer(RecoveryOutcome(req.request_id, False, reason=f"target connection lost: {e}"))
        finally:
            with self._dispatch_lock:
                self._recovering.discard(req.request_id)
                self._expired.discard(req.request_id)

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
            # the executor's own text, on its way to the store: escaped and bounded like any other
            success, error = not answer.failed, None if answer.error_message is None else printable(answer.error_message)
        except asyncio.TimeoutError:
            success, error = False, f"no answer within {self.response_timeout:g}s"
        except ConnectionLost as e:
            success, error = False, f"connection lost: {e}"
        try:
            await self.run(self.relay.record_retention_answered, conn.org, conn.app, request_id=rid,
                           success=success, error=error)
        except Exception:
            log.exception("could not record the retention answer of %s/%s", conn.org, conn.app)

