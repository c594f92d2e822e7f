"""The HTTP side: one ASGI application serving the REST API and the hub.

:class:`ScopeRouter` sends WebSocket scopes to the hub (any path ending in
``/websocket/{app}/{key}``) and everything else -- HTTP and the server's
lifespan -- to the REST application. :class:`RelayASGI` is that router for a
:class:`Runtime`: the hub, and the REST API built from :func:`rest_context`,
the part of the runtime the routes use, behind
:class:`~relay_es.adapters.rest.slashes.EncodedSlashes` (a workflow id may hold ``/``) and
:class:`AnswerCancelled` (a request cut short as the server stops is a 503, not a 500).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from relay_es.adapters.failures import is_store_error
from relay_es.adapters.rest import RestContext, build_app
from relay_es.adapters.rest.problems import PROBLEM, STORE_RETRY_AFTER
from relay_es.adapters.rest.slashes import EncodedSlashes
from relay_es.composition.runtime import Runtime
from relay_es.domain.text import first_line

log = logging.getLogger(__name__)

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

READ_YOUR_WRITES_TIMEOUT = 10.0  # seconds a write's answer waits for the read models
# The event loop's default executor runs every blocking REST call: asyncio.to_thread (the guard's key
# checks, the writes and their wait for the read models) and Litestar's sync_to_thread handlers alike
# (under asyncio Litestar runs them there, not on anyio's limiter). Python's default size, min(32,
# cores + 4), is 6 on two cores: six writes waiting for stuck read models held every thread, and an
# unrelated read waited 9 s behind them. 64: an idle pool starts no thread (one is started only when
# none is free), a thread parked in a wait takes no CPU, and the store's calls queue on its own pools
# as before; half of them may wait for the read models, the other half is always there for the rest.
REST_THREADS = 64
READ_YOUR_WRITES_WAITERS = 32  # writes waiting at once; the rest of REST_THREADS serve every other call


class ScopeRouter:
    """WebSocket scopes to ``websocket``, every other scope to ``http``."""

    def __init__(self, *, websocket: ASGIApp, http: ASGIApp) -> None:
        self.websocket = websocket
        self.http = http

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self.websocket(scope, receive, send)
        else:
            await self.http(scope, receive, send)


class AnswerCancelled:
    """An HTTP request cancelled before it was answered is answered 503 with ``Retry-After``: uvicorn
    cancels the requests still running when its graceful shutdown's time is up (a write waiting through
    a store outage when the server stops after 30 s without its lease), and answered them 500 with a
    traceback in the log. What the request was doing may have been done (a thread runs on), as with any
    503 of a write the store failed."""

    BODY = json.dumps({"type": "about:blank", "title": "Service unavailable", "status": 503,
                       "detail": "Relay is stopping; this request may or may not have taken effect"}).encode()

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:  # part of an answer is out: nothing better than to end the connection
                raise
            log.warning("%s %s was cut short as Relay stops: answered 503", scope.get("method"), scope.get("path"))
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", PROBLEM.encode()), (b"retry-after", STORE_RETRY_AFTER.encode()),
                                    (b"content-length", str(len(self.BODY)).encode()), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": self.BODY})


class RelayASGI(ScopeRouter):
    """The process's ASGI application: the runtime's hub and its REST API."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(websocket=runtime.hub,
                         http=AnswerCancelled(EncodedSlashes(build_app(rest_context(runtime)))))


def rest_context(runtime: Runtime) -> RestContext:
    """What the REST API uses of the runtime."""
    settings = runtime.settings

    waiting = threading.BoundedSemaphore(READ_YOUR_WRITES_WAITERS)

    def read_your_writes() -> None:
        """Waits until the read models have every event recorded so far; at most
        :data:`READ_YOUR_WRITES_WAITERS` writes at once (a write beyond them is answered at once, as one
        whose wait ran out), so the waits never take the threads every other call needs."""
        if not waiting.acquire(blocking=False):
            log.warning("read models are lagging behind the event store (%d writes wait for them already; this "
                        "one is answered without waiting)", READ_YOUR_WRITES_WAITERS)
            return
        try:
            if runtime.wait_for_read_models(READ_YOUR_WRITES_TIMEOUT) is False:
                log.warning("read models are lagging behind the event store")
        except Exception as e:  # the write is recorded: a 503 now would invite a retry that does it twice
            if not is_store_error(e):
                raise
            log.warning("the store failed as a write waited for the read models (%s: %s); answered as done",
                        type(e).__name__, first_line(e))
        finally:
            waiting.release()

    def started() -> None:
        loop = asyncio.get_running_loop()
        serve_blocking_calls(loop)
        runtime.start(loop)

    return RestContext(
        relay=runtime.relay,
        db=runtime.db,
        credentials=runtime.gate.credentials,
        read_your_writes=read_your_writes,
        app_deleted=runtime.app_deleted,
        token_revoked=runtime.token_revoked,
        urgent=runtime.pm.urgent,
        metrics=runtime.metrics,
        faults=lambda: [] if runtime.pm.last_bug is None else [f"process manager: {runtime.pm.last_bug}"],
        readiness=runtime.readiness,
        auth=settings.auth,
        host=settings.host,
        instance=settings.instance,
        store_kind=runtime.store.kind,
        default_executor_timeout=settings.default_executor_timeout,
        on_startup=started,
        on_shutdown=runtime.stop,
        calls=runtime.calls,
        executor_here=runtime.dispatcher.is_connected,
        call_timeout=settings.call_timeout,
        series=runtime.series,
        metrics_interval=int(settings.metrics_interval.total_seconds()),
        metrics_retention=int(settings.metrics_retention.total_seconds()),
        oidc=runtime.oidc,
    )


def serve_blocking_calls(loop: asyncio.AbstractEventLoop) -> None:
    """Sets ``loop``'s default executor: :data:`REST_THREADS` threads for the blocking REST calls."""
    loop.set_default_executor(ThreadPoolExecutor(max_workers=REST_THREADS, thread_name_prefix="relay-rest"))
