"""The executors' WebSocket endpoint: an ASGI application on the REST API's port.

:class:`Hub` accepts a socket (after admission and the resource limits), runs its read loop
through the Sans-I/O :class:`~relay_es.protocol.session.Session`, registers the executor
(its ``Connected`` into the outbox, a former connection of the same id superseded), audits
violations and refusals, and on the way out records the disconnect. It speaks ASGI directly
(no framework in the hot path) and is served by uvicorn, whose ``websockets`` protocol
(``uvicorn_ws``) pings a socket after each ``RELAY_PING_INTERVAL_SECS`` with nothing read from
it and fails it (1011, recorded ``ping_timeout``) once nothing at all has been read from it for
``RELAY_PING_WAIT_SECS``: any bytes count, a pong, the executor's own ping, part of a large
reply still arriving. Pings and pongs never reach the store.

Close codes Relay uses (executors reconnect after any of them):

==== ==========================================================================
1001 Relay is shutting down
1002 a frame that breaks RFC 6455 (unmasked, reserved bits set...) or the bounds
     on pings and pongs and on the frames of one message; audited ``protocol_error``
1007 a text frame that is not UTF-8; audited ``invalid_utf8``
1008 the executor broke the protocol: an unusable ``executor_info`` reply, or
     any other frame before it
1009 a message over the cap: 64 KiB for the first (the ``executor_info``
     reply), 1 MiB for any other before registration, then 128 MiB
     (``relay_es.protocol.limits``); audited ``frame_too_large``, the calls
     waiting on it failed as a reply too large (``ReplyOverCap``), not a socket gone
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
of one kind are throttled (:class:`~relay_es.adapters.hub.throttle.Throttle`):
one per window, counting the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from relay_es.adapters.failures import OutageLog
from relay_es.adapters.hub.admission import Gate, Refused
from relay_es.adapters.hub.connection import Connection, ConnectionLost
from relay_es.adapters.hub.limits import Counted, Quotas, Roster, key_id
from relay_es.adapters.hub.outbox import Outbox
from relay_es.adapters.hub.pool import CommandPool
from relay_es.adapters.hub.registry import Registry
from relay_es.adapters.hub.throttle import Throttle
from relay_es.adapters.logs import scrub_text
from relay_es.aggregates.executor import DisconnectReason, executor_stream_id
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.ids import new_uuid
from relay_es.engine.executor_commands import ExecutorInfo
from relay_es.engine.service import Relay
from relay_es.protocol import messages as m
from relay_es.protocol.limits import MAX_FRAME, ResourceLimits, printable
from relay_es.protocol.session import Answered, Registered, State, Violation

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
CLOSED_KEPT = 10_000  # tokens revoked and applications deleted remembered for handshakes under way

CLOSE_FOR = {"info_out_of_bounds": CLOSE_OUT_OF_BOUNDS, "limit_exceeded": CLOSE_LIMIT}  # other fatal kinds: 1008

VIOLATION_AUDIT_INTERVAL = 60.0  # seconds between audit entries (and warnings) of one kind per app
REFUSAL_QUIET = 60.0  # an address with no refusal for this long starts again at no delay
KEY_SWEEP_INTERVAL = 60.0  # seconds between two sweeps of the executor ids remembered per key


def parse_path(path: bytes | str) -> tuple[str, str] | None:
    """``[anything]/websocket/{app}/{key}`` -> ``(app, key)``. ``path`` as the request sent it (ASGI's
    ``raw_path``, bytes) is split at its slashes and each segment percent-decoded once, so a
    double-encoded key stays encoded once and an encoded slash stays in its segment; a ``str`` is
    ASGI's ``path``, which the server decoded already (where it gives no ``raw_path``): split only."""
    if isinstance(path, bytes):
        segments = [unquote_to_bytes(s).decode("utf-8", "replace") for s in path.split(b"/")]
    else:
        segments = path.split("/")
    # the last "websocket" segment with a segment after it, as the path's last "/websocket/"
    marker = next((i for i in range(len(segments) - 2, 0, -1) if segments[i] == "websocket"), None)
    if marker is None or len(segments) - marker != 3 or not segments[-2] or not segments[-1]:
        return None
    return segments[-2], segments[-1]


def scrub(path: str) -> str:
    """A path fit for a log line: the key segment never appears, however the path is
    spelt (the one rule of the log filter, ``logs.scrub_text``)."""
    return scrub_text(path)


class Hub:
    def __init__(
        self,
        relay: Relay,
        *,
        owner: str,
        gate: Gate,
        roster: Roster,
        registry: Registry,
        outbox: Outbox,
        pool: CommandPool,
        handshake_timeout: float,
        limits: ResourceLimits,
        monotonic: Callable[[], float] = time.monotonic,
        on_connection_change: Callable[[int], None] = lambda n: None,
        on_refused: Callable[[], None] = lambda: None,
        frame_cap: int = MAX_FRAME,
    ) -> None:
        """``owner``: this instance, recorded with each connection. ``gate``: admission.
        ``roster``: which executors exist (the process manager), for the limits of executor
        ids. ``registry``, ``outbox``: shared with the dispatcher. ``pool``: where store
        commands run. ``monotonic``: the throttles' clock. ``on_connection_change``: called
        with the number of open sockets when it changes; ``on_refused``: on each handshake refused for
        its credentials or its origin (401, 403), not for a limit, a full queue or a bad path.
        ``frame_cap``: the largest message (bytes) a registered executor may send, :data:`MAX_FRAME`."""
        self.relay = relay
        self.owner = owner
        self.gate = gate
        self.registry = registry
        self.outbox = outbox
        self.pool = pool
        self.handshake_timeout = handshake_timeout
        self.limits = limits
        self.quotas = Quotas(limits, roster=roster, registry=registry, outbox=outbox)
        self.on_connection_change = on_connection_change
        self.on_refused = on_refused
        self.frame_cap = frame_cap
        self.loop: asyncio.AbstractEventLoop | None = None
        self.shutting_down = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # One throttle class for every repeated thing a hostile peer can cause; each prunes itself.
        self._violations = Throttle(VIOLATION_AUDIT_INTERVAL, clock=monotonic)  # (org, app, kind)
        self._refusals = Throttle(REFUSAL_QUIET, clock=monotonic)  # address: slow-down strikes, one log line
        self._refusal_audit = Throttle(VIOLATION_AUDIT_INTERVAL, clock=monotonic)  # (org, app, address)
        # The audit entries of refusals and violations the store failed to write: told as an outage (a store
        # away fails them all alike), only a bug with its traceback.
        self.audit_outage = OutageLog(log, "the hub", monotonic=monotonic, then="not in the audit log")
        # What was closed for good, for the handshakes admitted before it and registered after it (close_token
        # and close_app close only the registered sockets): ("token" | "app", org, name) -> its number in
        # self._closings, the last CLOSED_KEPT of them.
        self._closings = 0
        self._closed: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._forgotten = 0  # the latest number of a closing no longer kept

    # ------------------------------------------------------------- lifecycle
    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._spawn(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        """The executor ids remembered per key are forgotten once deleted (``Quotas.sweep_keys``)."""
        while True:
            await asyncio.sleep(KEY_SWEEP_INTERVAL)
            self.quotas.sweep_keys()

    def begin_shutdown(self) -> None:
        """From now on a socket that closes is not a disconnect, and no handshake is accepted:
        called before the server closes the sockets (a signal, the lease lost)."""
        self.shutting_down = True

    async def stop(self) -> None:
        """Closes every socket without recording disconnects: an executor that
        was HEALTHY when Relay stopped gets a fresh grace on restart."""
        self.shutting_down = True
        await self._close_all(list(self.registry.connections.values()), CLOSE_SHUTDOWN, "relay is shutting down")
        await self.outbox.drained(timeout=5.0)
        self.outbox.stop()
        for t in list(self._tasks):
            t.cancel()

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        peer = "%s:%s" % tuple(scope.get("client") or ("?", "?"))
        host = peer.rsplit(":", 1)[0]
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        raw_path = scope.get("raw_path")  # bytes, not decoded (uvicorn gives it; ASGI lets a server omit it)
        parsed = parse_path(raw_path if isinstance(raw_path, bytes) else path)
        quotas = self.quotas
        quotas.handshake_begins(host)
        registered = False
        counted: Counted | None = None  # (key, app) this socket is counted against
        try:
            try:
                if parsed is None:
                    raise Refused(404, "Not found", "executors connect at /websocket/{appName}/{conductorKey}",
                                  audit=False)
                if self.shutting_down:
                    raise Refused(503, "Shutting down", "Relay is shutting down; retry shortly", audit=False)
                quotas.check_queue()
                quotas.check_handshakes(host)
                app, key = parsed
                admitting = self._closings  # what is closed from now on, this handshake's admission may not know
                org, token = await self.gate.admit(app, key, peer, headers=scope.get("headers") or [])
                kid = key_id(org, token, key)
                counted = quotas.take_socket(kid, org, app)
            except Refused as r:
                hit = self._refusals.hit(host)
                if hit.passed:  # one line per address per quiet period, not one per refusal
                    log.info("refused executor handshake from %s on %s: %s %s%s", printable(peer, 300),
                             printable(scrub(path)),
                             r.status, r.detail, f" ({hit.suppressed} more refused)" if hit.suppressed else "")
                if r.status in (401, 403):
                    self.on_refused()
                await self._slow_down(hit.strikes)
                if r.audit and parsed is not None:
                    await self._audit_refusal(parsed[0], host, r)
                await self._refuse(send, r)
                return
            self._refusals.forget(host)
            await send({"type": "websocket.accept"})
            ext = (scope.get("extensions") or {}).get("relay.frame_cap")
            conn = Connection(id=new_uuid().hex, org=org, app=app, peer=peer, token=token, send_message=send,
                              key_id=kid, raise_frame_cap=ext)
            self.registry.add(conn)
            self.on_connection_change(len(self.registry))
            if self._closings != admitting:  # a token revoked or the application deleted since it was admitted
                await self._close_if_closed(conn, admitting)
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
                        del message, data  # a multi-MiB frame is not kept until the next one arrives
                        if not registered and conn.session.state is State.REGISTERED:
                            registered = True
                            quotas.handshake_ends(host)
                    elif kind == "websocket.disconnect":
                        code = message.get("code")
                        violation = _socket_violation(message, registered)
                        if violation is not None and violation.kind == "frame_too_large" and registered:
                            # a reply over the cap: the calls waiting fail as such (no other executor
                            # is asked: it would send the same), before the violation is recorded
                            conn.over_cap(self.frame_cap)
                        if violation is not None:
                            await self._violation(conn, violation)
                        break
            except (ConnectionLost, OSError) as e:
                log.debug("connection %s ended: %s", conn.id, e)
            finally:
                handshake.cancel()
                await self._cleanup(conn, code)
        finally:
            if counted is not None:
                quotas.release_socket(counted)
            if not registered:
                quotas.handshake_ends(host)

    # -------------------------------------------------------------- refusals
    async def _slow_down(self, strikes: int) -> None:
        """Repeated refusals from one address are answered more and more slowly
        (0.1 s doubling to 5 s; forgotten after a minute of quiet)."""
        if strikes:
            await asyncio.sleep(min(0.1 * 2 ** (strikes - 1), 5.0))

    async def _audit_refusal(self, app: str, host: str, r: Refused) -> None:
        """One audit entry per (org, address, status) per interval, counting the rest (the entry names
        the first refusal's application). Not per application: the path's application is the client's
        choice, and a revoked key sent under a new name each time would write an entry each time. A
        refusal that names no org (a key no token ever had) is counted and logged, never
        audited: an anonymous client must not write into anyone's audit log (ADR 14)."""
        org = r.org
        if org is None:
            return
        hit = self._refusal_audit.hit((org, host, r.status))
        if not hit.passed:
            return
        try:
            await self.pool.run(self.relay.record_refusal, org, app=app, peer=host, status=r.status, reason=r.detail,
                                suppressed=hit.suppressed)
        except Exception as e:
            if not self.audit_outage.store_failed("failed recording a refused handshake", e):
                log.exception("could not record a refused handshake")
            return
        self.audit_outage.worked("records audit entries on the store again")

    async def _refuse(self, send: Any, r: Refused) -> None:
        body = json.dumps({"type": "about:blank", "title": r.title, "status": r.status, "detail": r.detail}).encode()
        await send({
            "type": "websocket.http.response.start",
            "status": r.status,
            "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "websocket.http.response.body", "body": body})

    # ---------------------------------------------------------- closing many
    async def close_app(self, org: str, app: str) -> int:
        """Closes every socket of a deleted application (4007). Their disconnects are
        recorded (reason ``app_deleted``); the process manager declares none of them dead."""
        self.gate.forget(org, app=app)
        self._closing("app", org, app)
        closed = await self._close_where(lambda c: c.org == org and c.app == app,
                                         DisconnectReason.APP_DELETED.value,
                                         CLOSE_APP_DELETED, "application deleted")
        if closed:
            log.info("application %s/%s deleted: %d executor socket(s) closed", org, app, closed)
        return closed

    async def close_token(self, org: str, name: str) -> int:
        """Disconnects every executor that connected with a revoked token."""
        self.gate.forget(org, token=name)
        self._closing("token", org, name)
        return await self._close_where(lambda c: c.org == org and c.token == name, "token_revoked",
                                       CLOSE_REVOKED, "token revoked")

    def close_app_soon(self, org: str, app: str) -> None:
        """From any thread: :meth:`close_app` on the hub's loop (once started)."""
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.close_app(org, app), self.loop)

    def close_token_soon(self, org: str, name: str) -> None:
        """From any thread: :meth:`close_token` on the hub's loop (once started)."""
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self.close_token(org, name), self.loop)

    def _closing(self, kind: str, org: str, name: str) -> None:
        self._closings += 1
        self._closed[(kind, org, name)] = self._closings
        self._closed.move_to_end((kind, org, name))
        while len(self._closed) > CLOSED_KEPT:
            self._forgotten = max(self._forgotten, self._closed.popitem(last=False)[1])

    async def _close_if_closed(self, conn: Connection, admitting: int) -> None:
        """Closes ``conn``, registered just now, if its token was revoked or its application deleted after
        its handshake's admission read them (number ``admitting`` in :attr:`_closings`): the close of
        those did not find it in the registry, and it would have stayed open for good (a helper's run:
        about one revocation in five, under a stream of handshakes). A handshake admitted before the last
        :data:`CLOSED_KEPT` closings is closed, whatever they were."""
        token_gone = self._closed.get(("token", conn.org, conn.token or ""), 0) > admitting
        app_gone = self._closed.get(("app", conn.org, conn.app), 0) > admitting
        if admitting < self._forgotten or token_gone or app_gone:
            conn.close_reason = (DisconnectReason.APP_DELETED if app_gone else DisconnectReason.TOKEN_REVOKED).value
            await conn.close(*((CLOSE_APP_DELETED, "application deleted") if app_gone
                               else (CLOSE_REVOKED, "token revoked")))

    async def _close_where(self, which: Callable[[Connection], bool], reason: str, code: int, text: str) -> int:
        """Closes every open connection ``which`` picks, recording ``reason`` as its disconnect's."""
        picked = [c for c in list(self.registry.connections.values()) if which(c) and not c.closed]
        for conn in picked:
            conn.close_reason = reason
        await self._close_all(picked, code, text)
        return len(picked)

    @staticmethod
    async def _close_all(conns: list[Connection], code: int, text: str) -> None:
        """Closes ``conns``: every one is marked closed at once (no request goes to it from then on), then
        their close frames are written together. A socket that stopped reading holds its own close up to
        the socket's ``close_timeout``, and only its own: written one after the other, the last of many
        would stay open (and the peer connected) for as long as all those before it took."""
        sends = [send for conn in conns if (send := conn.closing(code, text)) is not None]
        await asyncio.gather(*sends, return_exceptions=True)

    # ------------------------------------------------------------- handshake
    def _handshake_expired(self, conn: Connection) -> None:
        if conn.session.state is State.AWAITING_INFO and not conn.closed:
            self._spawn(self._handshake_timed_out(conn))

    async def _handshake_timed_out(self, conn: Connection) -> None:
        if conn.session.state is State.AWAITING_INFO and not conn.closed:
            # Closed before anything is awaited (close marks it closed at once): an executor_info reply that
            # arrived while the violation was being recorded registered an executor only to see it closed.
            await conn.close(CLOSE_HANDSHAKE_TIMEOUT, "executor_info not answered in time")
            await self._violation(conn, Violation("handshake_timeout",
                                                  f"executor_info not answered within {self.handshake_timeout:g}s"))

    async def _on_event(self, conn: Connection, ev: Any) -> None:
        if isinstance(ev, Answered):
            conn.answered(ev.request_id, ev.response)
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
            refusal = self.quotas.over_limit(conn, ev.info.executor_id)
            if refusal is not None:
                conn.session.close()
                await conn.close(CLOSE_LIMIT, "limit reached")
                await self._violation(conn, Violation("limit_exceeded", refusal, fatal=True))
                return
            if conn.raise_frame_cap is not None:
                # Registered: replies may carry workflow data now. Before any await, so that
                # nothing more is parsed under the handshake's cap, and before any request goes out.
                conn.raise_frame_cap(self.frame_cap)
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
        held = self.registry.executor((conn.org, conn.app, executor_id))
        if held is None or held is conn or held.closed or held.token is None or held.token == conn.token:
            return None
        return held

    async def _register(self, conn: Connection, info: m.ExecutorInfoResponse) -> None:
        """Records the executor connected and makes ``conn`` its connection. What the store cannot hold
        (``op_connected`` refuses it) is refused first, with 4004: the connection is closed, the
        violation audited, and the executor's live connection, if any, keeps its place."""
        key = (conn.org, conn.app, info.executor_id)
        try:
            op = self.relay.op_connected(
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
            )
        except InvalidSetting as e:
            conn.session.close()
            await conn.close(CLOSE_OUT_OF_BOUNDS, "executor_info out of bounds")
            await self._violation(conn, Violation("info_out_of_bounds", printable(str(e)), fatal=True))
            return
        conn.executor_id = info.executor_id
        conn.app_version = info.application_version
        conn.stream_id = executor_stream_id(*key)
        old = self.registry.claim(key, conn)
        self.outbox.submit(key, op)
        if old is not None and old is not conn and not old.closed:
            old.superseded = True
            log.info("executor %s: connection %s superseded by %s", printable(info.executor_id), old.id, conn.id)
            send = old.closing(CLOSE_SUPERSEDED, "superseded by a newer connection")
            if send is not None:  # not awaited here: a socket that stopped reading would hold this one's frames
                self._spawn(send)
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
                    f" ({hit.suppressed} more of this kind since the last one logged)"
                    if hit.suppressed else "")
        try:
            await self.pool.run(self.relay.record_violation, conn.org, conn.app, kind=v.kind, detail=v.detail,
                                executor_id=conn.executor_id, peer=conn.peer, suppressed=hit.suppressed)
        except Exception as e:
            if not self.audit_outage.store_failed("failed recording a protocol violation", e):
                log.exception("could not record a protocol violation")
            return
        self.audit_outage.worked("records audit entries on the store again")

    async def _cleanup(self, conn: Connection, code: int | None) -> None:
        """The socket is gone: a registered executor is DISCONNECTED, with why (:func:`_reason`)."""
        conn.lost()
        self.registry.remove(conn)
        self.on_connection_change(len(self.registry))
        if conn.executor_id is None:
            return
        if self.shutting_down or conn.superseded or conn.stream_id is None:
            return
        key = (conn.org, conn.app, conn.executor_id)
        reason = conn.close_reason or _reason(code)
        self.outbox.submit(key, self.relay.op_disconnected(conn.stream_id, connection_id=conn.id, reason=reason,
                                                           at=self.relay.clock.now()))


_SOCKET_VIOLATIONS = (  # the socket's flag on a disconnect it caused -> the violation's kind, its detail if none
    ("relay.too_big", "frame_too_large", "frame over the cap"),
    ("relay.invalid_utf8", "invalid_utf8", "invalid UTF-8"),
    ("relay.protocol_error", "protocol_error", "a frame that breaks the WebSocket protocol"),
)


def _socket_violation(message: dict[str, Any], registered: bool) -> Violation | None:
    """The fatal violation a disconnect records, if the socket itself failed the connection for the
    peer's frames (``uvicorn_ws``: 1009 over the cap, 1007 not UTF-8, 1002 broken framing or a
    flood of control frames or fragments); None for any other disconnect."""
    for flag, kind, detail in _SOCKET_VIOLATIONS:
        if message.get(flag):
            detail = printable(message.get("reason") or detail)
            if kind == "frame_too_large" and not registered:
                detail += " (before executor_info was answered)"
            return Violation(kind, detail, fatal=True)
    return None


def _reason(code: int | None) -> str:
    """Why a socket Relay did not close itself ended, from the close code the server saw: the
    executor's own close (1000, 1001, or a close frame without a code, 1005: it shut down, e.g. in
    a deploy; TypeScript's ``DBOS.shutdown()`` sends no code), Relay's ping timeout (1011), else a
    drop (no close frame: 1006, a kill or the network) or a close for a violation."""
    if code in (1000, 1001, 1005):
        return DisconnectReason.CLEAN_CLOSE.value
    if code == 1011:
        return DisconnectReason.PING_TIMEOUT.value
    return DisconnectReason.SOCKET_CLOSED.value
