"""The Relay application service: every command, on one event store.

One ``eventsourcing`` Application (``name = "Relay"``: tables ``relay_events``)
holds all three aggregate types, so the notification log is a single total
order that projections and the process manager follow.

Each command loads a fresh aggregate, runs the domain command with the time
read from the injected clock, and saves. A conflicting save (another writer got
there first) raises ``IntegrityError``; the whole command is retried on a fresh
load. Conditional commands used by timers and the process manager return
``False`` when the state has moved on, instead of raising.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application as ESApplication
from eventsourcing.persistence import IntegrityError, Transcoder, Transcoding
from eventsourcing.utils import Environment

from relay_es.aggregates.application import (
    Application,
    AppSettings,
    SettingsPatch,
    app_stream_id,
    check_app_name,
    check_org_name,
)
from relay_es.aggregates.executor import Executor, OpaqueJSON, executor_stream_id
from relay_es.aggregates.gate import Gate, gate_stream_id
from relay_es.aggregates.skip import ProjectionSkip, skip_stream_id
from relay_es.domain.text import check_id, check_text, sanitized
from relay_es.aggregates.token import Token, hash_secret, new_secret, token_stream_id
from relay_es.domain.clock import Clock
from relay_es.domain.errors import DomainError, InvalidSetting, UnknownApplication, UnknownExecutor, UnknownToken

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_GRACE = timedelta(seconds=60)
CACHE_MAX = 100_000  # executors held in memory (emptied when exceeded)
MAX_ATTEMPTS = 8


class TimedeltaAsMicroseconds(Transcoding):
    """Durations are stored as whole microseconds: exact, unit in the name."""

    type = timedelta
    name = "timedelta_us"

    def encode(self, obj: timedelta) -> int:
        return obj // timedelta(microseconds=1)

    def decode(self, data: int) -> timedelta:
        return timedelta(microseconds=data)


class AppSettingsAsDict(Transcoding):
    """An application's settings, in its snapshots (events carry the fields one by one)."""

    type = AppSettings
    name = "app_settings"

    def encode(self, obj: AppSettings) -> dict[str, Any]:
        return {f: getattr(obj, f) for f in _SETTINGS_FIELDS}

    def decode(self, data: dict[str, Any]) -> AppSettings:
        return AppSettings(**data)


_SETTINGS_FIELDS = tuple(AppSettings.__dataclass_fields__)

# Streams that grow for ever: an org's Gate gets every refusal recorded, an Application its
# retention rounds and violations, an executor that reconnects for months two events a
# reconnect. Loading one replays the latest snapshot and at most this many events after it
# (ADR 16); most executor streams never reach one.
SNAPSHOT_EVERY = 100


class OpaqueJSONAsText(Transcoding):
    """An executor's own JSON, stored as one string (see :class:`OpaqueJSON`)."""

    type = OpaqueJSON
    name = "json_text"

    def encode(self, obj: OpaqueJSON) -> str:
        return obj.text

    def decode(self, data: str) -> OpaqueJSON:
        return OpaqueJSON.from_text(data)


@dataclass(frozen=True)
class Op:
    """One command on one aggregate, to be run in a batch.

    ``run(aggregate_or_None, batch)`` applies the domain command to the
    aggregate (creating it if it returns a new one) and returns the aggregate
    to save, or ``None`` when there is nothing to do. A domain refusal
    (``IllegalTransition``) makes the op a no-op.
    """

    stream_id: UUID
    run: Callable[[Any, "Batch"], Any]


class Batch:
    """What the ops of one batch share: one clock reading each, and
    application settings read once."""

    def __init__(self, relay: "Relay") -> None:
        self.relay = relay
        self._grace: dict[tuple[str, str], timedelta] = {}

    def grace_for(self, org: str, app: str) -> timedelta:
        key = (org, app)
        if key not in self._grace:
            self._grace[key] = self.relay.grace_for(org, app)
        return self._grace[key]


@dataclass(frozen=True)
class ExecutorInfo:
    """What an executor reports in its ``executor_info`` reply."""

    executor_id: str
    application_version: str
    hostname: str | None = None
    language: str | None = None
    dbos_version: str | None = None
    executor_metadata: Any = None


def _copy_aggregate(a: Any) -> Any:
    """A copy a command can change without touching the original. Attribute
    values are immutable or replaced whole (never changed in place), so a
    copy of the attribute dict suffices; pending events are the copy's own."""
    new = object.__new__(type(a))
    d = new.__dict__
    d.update(a.__dict__)
    d["_pending_events"] = []
    return new


def is_store_error(e: BaseException) -> bool:
    """The store is unreachable or failing (retry later), as opposed to a bug."""
    import sqlite3

    import psycopg
    from eventsourcing.persistence import PersistenceError

    return isinstance(e, (PersistenceError, psycopg.Error, sqlite3.Error, OSError, TimeoutError))


class Relay(ESApplication[UUID]):
    name = "Relay"
    snapshotting_intervals: ClassVar[dict[type, int]] = {
        Application: SNAPSHOT_EVERY, Gate: SNAPSHOT_EVERY, Executor: SNAPSHOT_EVERY}

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        clock: Clock,
        default_grace: timedelta = DEFAULT_GRACE,
    ) -> None:
        super().__init__(env=env)
        self.clock = clock
        self.default_grace = default_grace
        self._listeners: list[Callable[[int], None]] = []
        self._listeners_lock = threading.Lock()
        self.save_observers: list[Callable[[float, list[Any]], None]] = []
        self._log: Any = None
        self._cache: dict[UUID, Any] = {}
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------ plumbing
    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        """Only the environment Relay builds (:func:`~relay_es.adapters.stores.event_store_env`).

        The library's merges the whole process environment under it, and reads
        ``RELAY_<KEY>`` before ``<KEY>`` (the application is named "Relay"): an
        operator's ``RELAY_SQLITE_DBNAME`` put the events in another file than
        ``--database-url``'s, and ``RELAY_PERSISTENCE_MODULE``, ``CIPHER_TOPIC``
        or ``TRANSCODER_TOPIC`` changed where and how they were written, silently.
        The name is kept: the store's table names derive from it."""
        built = dict(type(self).env)
        if type(self).is_snapshotting_enabled or type(self).snapshotting_intervals:
            built["IS_SNAPSHOTTING_ENABLED"] = "y"
        built.update(env or {})
        return Environment(name, built)

    def register_transcodings(self, transcoder: Transcoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(TimedeltaAsMicroseconds())
        transcoder.register(OpaqueJSONAsText())
        transcoder.register(AppSettingsAsDict())

    def _take_snapshots(self, processing_event: Any) -> None:
        """After a save: a snapshot is a saving, never a command's outcome. Failing to take
        one (the store went away just after the events were recorded) must not make a
        recorded command look failed, and be run again; the next interval takes one."""
        try:
            super()._take_snapshots(processing_event)
        except Exception as e:
            log.warning("snapshot not taken (%s: %s); the next one will be", type(e).__name__, e)

    def notifications(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
                      unreadable: bool = False) -> list[tuple[int, str, Any]]:
        """``[(notification_id, stream_id, domain_event), ...]`` after ``after``, in
        order: what projections and the process manager follow (ADR 11). ``unreadable``:
        an event that cannot be decoded comes as ``eventlog.Unreadable`` rather than
        failing the read (ADR 16)."""
        return self._event_log().read(after, limit, topics, unreadable=unreadable)

    def _event_log(self) -> Any:
        log = self._log
        if log is None:
            from relay_es.adapters.eventlog import EventLog

            log = self._log = EventLog(self)
        return log

    def add_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(max_notification_id)`` is called after every save in this process."""
        with self._listeners_lock:
            self._listeners.append(fn)

    def save(self, *objs: Any, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        started = time.perf_counter()
        try:
            recordings = super().save(*objs, **kwargs)
        except IntegrityError:
            self._forget(obj.id for obj in objs if isinstance(obj, Executor))
            raise
        self._remember(obj for obj in objs if isinstance(obj, Executor))
        if self.save_observers:
            took = time.perf_counter() - started
            events = [r.domain_event for r in recordings]
            for fn in self.save_observers:
                try:
                    fn(took, events)
                except Exception:
                    log.exception("save observer failed")
        return recordings

    def _notify(self, recordings: list[Any]) -> None:
        if not recordings:
            return
        top = max(r.notification.id for r in recordings)
        with self._listeners_lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(top)
            except Exception:  # a listener must never fail a save
                log.exception("notification listener failed")

    def _retrying(self, fn: Callable[[], T]) -> T:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return fn()
            except IntegrityError:
                if attempt == MAX_ATTEMPTS:
                    raise
                log.debug("conflicting save, retrying (attempt %d)", attempt)
        raise AssertionError("unreachable")

    def _maybe(self, aggregate_id: UUID) -> Any | None:
        try:
            return self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None

    def now(self) -> datetime:
        return self.clock.now()

    # ------------------------------------------------------- aggregate cache
    # Executors as last saved by this process, so a burst of commands (a storm of
    # disconnects, a thousand deaths) does not read every stream back. The store
    # stays the judge: a cached copy that is stale (another writer saved since)
    # fails its save on the version check, is forgotten, and the command is run
    # again on what the store holds. Commands work on copies, never on the cache.

    def _remember(self, aggregates: Iterable[Any]) -> None:
        with self._cache_lock:
            cache = self._cache
            if len(cache) > CACHE_MAX:
                cache.clear()
            for a in aggregates:
                held = cache.get(a.id)
                if held is None or held.version < a.version:
                    cache[a.id] = _copy_aggregate(a)

    def _forget(self, ids: Iterable[UUID]) -> None:
        with self._cache_lock:
            for i in ids:
                self._cache.pop(i, None)

    # ------------------------------------------------------- group commit
    def load_many(self, ids: list[UUID]) -> dict[UUID, Any]:
        """Many aggregates: cached executors copied, the rest read in one query."""
        from relay_es.adapters.stores import select_streams

        out: dict[UUID, Any] = {}
        missing = []
        cache = self._cache
        for i in ids:
            held = cache.get(i)
            if held is None:
                missing.append(i)
            else:
                out[i] = _copy_aggregate(held)
        if not missing:
            return out
        snapshots = self.snapshots.recorder if self.snapshots is not None else None
        streams = select_streams(self.recorder, missing, snapshots)
        decode = self._event_log().event
        out = {}
        for i, (snapshot, stored) in streams.items():
            # The library's project_aggregate asserts a runtime Protocol per event (slow on 3.11).
            aggregate = None if snapshot is None else self.mapper.to_domain_event(snapshot).mutate(None)
            for s in stored:
                aggregate = decode(s.originator_id, s.originator_version, s.topic, s.state).mutate(aggregate)
            if aggregate is not None:
                out[i] = aggregate
        self._remember(a for a in out.values() if isinstance(a, Executor))
        return out

    def execute(self, ops: list[Op]) -> list[bool]:
        """Runs many commands and saves all their events in **one** transaction.

        Returns, per op, whether it recorded anything. If the save conflicts
        (another writer touched one of the aggregates), every op is run again
        on its own, each with its own retries.
        """
        if not ops:
            return []
        try:
            return self._execute_once(ops)
        except IntegrityError:
            if len(ops) == 1:
                return self._retrying(lambda: self._execute_once(ops))
            log.info("conflict in a batch of %d; running its commands one by one", len(ops))
            return [self._retrying(lambda op=op: self._execute_once([op])[0]) for op in ops]

    def _execute_once(self, ops: list[Op]) -> list[bool]:
        aggregates = self.load_many(list(dict.fromkeys(op.stream_id for op in ops)))
        batch = Batch(self)
        results: list[bool] = []
        touched: dict[UUID, Any] = {}
        for op in ops:
            current = aggregates.get(op.stream_id)
            try:
                result = op.run(current, batch)
            except DomainError as e:
                log.debug("command ignored: %s", e)
                results.append(False)
                continue
            if result is None:
                results.append(False)
                continue
            aggregates[op.stream_id] = result
            touched[op.stream_id] = result
            results.append(True)
        if touched:
            self.save(*touched.values())
        return results

    # -------------------------------------------------------- applications
    def register_app(self, org: str, name: str, *, private_mode: bool | None = None) -> bool:
        """Register (PUT): idempotent. Returns True if anything was recorded."""
        check_org_name(org)
        check_app_name(name)

        def run() -> bool:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                app = Application(org=org, name=name, private_mode=bool(private_mode), timestamp=self.now())
            elif not app.register_again(private_mode=private_mode, at=self.now()):
                return False
            self.save(app)
            return True

        return self._retrying(run)

    def get_app(self, org: str, name: str) -> Application:
        app = self._maybe(app_stream_id(org, name))
        if app is None or app.deleted:
            raise UnknownApplication(org, name)
        return app

    def app_exists(self, org: str, name: str) -> bool:
        app = self._maybe(app_stream_id(org, name))
        return app is not None and not app.deleted

    def app_deleted(self, org: str, name: str) -> bool:
        """Whether the application was registered and has been deleted since
        (and not registered again): False for one never registered. One read of
        its stream, never cached, so a deletion by another writer is seen."""
        app = self._maybe(app_stream_id(org, name))
        return app is not None and bool(app.deleted)

    def app_settings(self, org: str, name: str) -> AppSettings:
        """Settings of a registered application; defaults for an unknown one."""
        app = self._maybe(app_stream_id(org, name))
        return app.settings if app is not None and not app.deleted else AppSettings()

    def update_app(self, org: str, name: str, patch: SettingsPatch) -> bool:
        def run() -> bool:
            app = self.get_app(org, name)
            if not app.change_settings(patch, at=self.now()):
                return False
            self.save(app)
            return True

        return self._retrying(run)

    def delete_app(self, org: str, name: str) -> None:
        def run() -> None:
            app = self.get_app(org, name)
            app.delete(at=self.now())
            self.save(app)

        self._retrying(run)

    def record_retention_dispatched(
        self,
        org: str,
        name: str,
        *,
        request_id: str,
        target_executor_id: str,
        gc_cutoff: datetime | None,
        gc_rows_threshold: int | None,
        timeout_cutoff: datetime | None,
    ) -> None:
        def run() -> None:
            app = self.get_app(org, name)
            app.record_retention_dispatched(
                request_id=request_id,
                target_executor_id=target_executor_id,
                gc_cutoff=gc_cutoff,
                gc_rows_threshold=gc_rows_threshold,
                timeout_cutoff=timeout_cutoff,
                at=self.now(),
            )
            self.save(app)

        self._retrying(run)

    def record_retention_answered(self, org: str, name: str, *, request_id: str, success: bool, error: str | None) -> None:
        def run() -> None:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                return
            app.record_retention_answered(request_id=sanitized(request_id, 200), success=success,
                                          error=sanitized(error), at=self.now())
            self.save(app)

        self._retrying(run)

    def record_violation(
        self, org: str, name: str, *, kind: str, detail: str, executor_id: str | None, peer: str | None, suppressed: int = 0
    ) -> bool:
        def run() -> bool:
            app = self._maybe(app_stream_id(org, name))
            if app is None:
                return False
            app.record_violation(kind=sanitized(kind, 100), detail=sanitized(detail, 500),
                                 executor_id=sanitized(executor_id, 200), peer=sanitized(peer, 200),
                                 suppressed=suppressed, at=self.now())
            self.save(app)
            return True

        return self._retrying(run)

    # ------------------------------------------------------------ executors
    # Each command exists as an Op factory (``op_*``, for batches) and as a
    # method that runs it alone. Conditional commands return False, rather
    # than raise, when the state has moved on.

    def op_connected(
        self, org: str, app: str, info: ExecutorInfo, *, connection_id: str, owner: str, at: datetime | None = None,
        token: str | None = None, peer: str | None = None,
    ) -> Op:
        """``at``: when the connection was seen (the hub may record it a little later).
        ``token``: the name of the token the connection was admitted with (None in
        development mode); ``peer``: the address it came from, host only. Both are
        recorded in the Connected event and its audit entry: who registered (or
        superseded) the executor.

        Raises :class:`InvalidSetting` for what the stores cannot hold (the last
        line behind the protocol layer's own limits; see :mod:`relay_es.domain.text`)."""
        check_org_name(org)
        check_app_name(app)
        check_id("executorId", info.executor_id)
        check_id("applicationVersion", info.application_version, empty=True)
        check_text("hostname", info.hostname)
        check_text("language", info.language)
        check_text("dbosVersion", info.dbos_version)
        check_id("connectionId", connection_id)
        check_id("owner", owner)
        check_id("token", token, optional=True)
        check_id("peer", peer, optional=True)

        def run(ex: Executor | None, batch: Batch) -> Executor:
            now = at or self.now()
            if ex is None:
                ex = Executor(org=org, app=app, executor_id=info.executor_id, timestamp=now)
            ex.connect(
                connection_id=connection_id,
                owner=owner,
                app_version=info.application_version,
                hostname=info.hostname,
                language=info.language,
                dbos_version=info.dbos_version,
                executor_metadata=info.executor_metadata,
                at=now,
                token=token,
                peer=peer,
            )
            return ex

        return Op(executor_stream_id(org, app, info.executor_id), run)

    def executor_connected(self, org: str, app: str, info: ExecutorInfo, *, connection_id: str, owner: str,
                           token: str | None = None, peer: str | None = None) -> bool:
        return self.execute([self.op_connected(org, app, info, connection_id=connection_id, owner=owner,
                                               token=token, peer=peer)])[0]

    def grace_for(self, org: str, app: str) -> timedelta:
        return self.app_settings(org, app).grace(self.default_grace)

    def op_disconnected(
        self,
        stream_id: UUID,
        *,
        connection_id: str,
        reason: str,
        grace_from: datetime | None = None,
        at: datetime | None = None,
    ) -> Op:
        """``at``: when the disconnect was seen (default: now). The deadline is
        ``grace_from + grace`` (``grace_from`` defaults to ``at``), never
        earlier than ``at``. A stale connection id is a no-op."""

        def run(ex: Executor | None, batch: Batch) -> Executor | None:
            if ex is None:
                return None
            now = at or self.now()
            deadline = max((grace_from or now) + batch.grace_for(ex.org, ex.app), now)
            ex.disconnect(connection_id=connection_id, reason=reason, deadline=deadline, at=now)
            return ex

        return Op(stream_id, run)

    def executor_disconnected(
        self, stream_id: UUID, *, connection_id: str, reason: str, grace_from: datetime | None = None
    ) -> bool:
        return self.execute([self.op_disconnected(stream_id, connection_id=connection_id, reason=reason,
                                                  grace_from=grace_from)])[0]

    @staticmethod
    def _op(stream_id: UUID, command: Callable[[Executor], Any]) -> Op:
        def run(ex: Executor | None, batch: Batch) -> Executor | None:
            if ex is None:
                return None
            command(ex)
            return ex

        return Op(stream_id, run)

    def op_declare_dead(self, stream_id: UUID, expected_deadline: datetime | None = None) -> Op:
        return self._op(stream_id, lambda ex: ex.declare_dead(now=self.now(), expected_deadline=expected_deadline))

    def declare_dead_if_due(self, stream_id: UUID, expected_deadline: datetime | None = None) -> bool:
        return self.execute([self.op_declare_dead(stream_id, expected_deadline)])[0]

    def op_dispatch(self, stream_id: UUID, *, request_id: str, target_executor_id: str) -> Op:
        check_id("requestId", request_id)
        check_id("targetExecutorId", target_executor_id)
        return self._op(stream_id, lambda ex: ex.dispatch_recovery(
            request_id=request_id, target_executor_id=target_executor_id, at=self.now()))

    def dispatch_recovery(self, stream_id: UUID, *, request_id: str, target_executor_id: str) -> bool:
        return self.execute([self.op_dispatch(stream_id, request_id=request_id,
                                              target_executor_id=target_executor_id)])[0]

    def op_fail(self, stream_id: UUID, *, request_id: str, reason: str) -> Op:
        reason = sanitized(reason)  # a target's own error text
        return self._op(stream_id, lambda ex: ex.fail_recovery(request_id=request_id, reason=reason, at=self.now()))

    def fail_recovery(self, stream_id: UUID, *, request_id: str, reason: str) -> bool:
        return self.execute([self.op_fail(stream_id, request_id=request_id, reason=reason)])[0]

    def op_confirm(self, stream_id: UUID, *, request_id: str, pending_found: bool | None) -> Op:
        """Confirms the outstanding request; a DEAD executor is deleted in the same save."""

        def command(ex: Executor) -> None:
            ex.confirm_recovery(request_id=request_id, pending_found=pending_found, at=self.now())
            if ex.status == "DEAD" and ex.recovery_phase == "confirmed":
                ex.delete(at=self.now())

        return self._op(stream_id, command)

    def confirm_recovery(self, stream_id: UUID, *, request_id: str, pending_found: bool | None) -> bool:
        return self.execute([self.op_confirm(stream_id, request_id=request_id, pending_found=pending_found)])[0]

    def op_defer(self, stream_id: UUID, *, reason: str) -> Op:
        reason = sanitized(reason)
        return self._op(stream_id, lambda ex: ex.defer_recovery(reason=reason, at=self.now()))

    def defer_recovery(self, stream_id: UUID, *, reason: str) -> bool:
        return self.execute([self.op_defer(stream_id, reason=reason)])[0]

    def withdraw_recovery(self, stream_id: UUID, *, reason: str) -> bool:
        return self.execute([self._op(stream_id, lambda ex: ex.withdraw_recovery(reason=reason, at=self.now()))])[0]

    def get_executor(self, org: str, app: str, executor_id: str) -> Executor:
        ex = self._maybe(executor_stream_id(org, app, executor_id))
        if ex is None:
            raise UnknownExecutor(org, app, executor_id)
        return ex

    def stream(self, stream_id: UUID) -> Iterator[Any]:
        """Every event of one aggregate, in order (deleted executors included)."""
        return iter(self.repository.event_store.get(stream_id))

    def record_refusal(self, org: str, *, app: str, peer: str, status: int, reason: str, suppressed: int = 0) -> None:
        """A refused executor handshake, for the org's audit log."""

        def run() -> None:
            gate = self._maybe(gate_stream_id(org))
            if gate is None:
                gate = Gate(org=org, timestamp=self.now())
            gate.refuse(app=sanitized(app, 200), peer=sanitized(peer, 200), status=status, reason=sanitized(reason, 500),
                        suppressed=suppressed, at=self.now())
            self.save(gate)

        self._retrying(run)

    def record_projection_skip(self, *, projection: str, notification_id: int, event: Any, reason: str,
                               event_type: str | None = None) -> bool:
        """A read model skipped ``event`` (notification ``notification_id``): recorded
        once, for the audit log (``projection.skipped``). Returns whether it was
        recorded now (False: recorded before, e.g. by an earlier run or a rebuild)."""
        sid = skip_stream_id(projection, notification_id)
        if self._maybe(sid) is not None:
            return False
        org, app = self._where(event)
        skip = ProjectionSkip(org=org, app=app, projection=projection, notification_id=notification_id,
                              stream_id=str(event.originator_id),
                              event_type=sanitized(event_type or type(event).__qualname__, 300) or "",
                              reason=sanitized(reason, 500) or "",
                              timestamp=self.now())
        try:
            self.save(skip)
        except IntegrityError:  # recorded meanwhile by another runner
            return False
        return True

    def _where(self, event: Any) -> tuple[str, str | None]:
        """(org, app) of the stream an event belongs to, as far as it can be told."""
        try:
            aggregate = self.repository.get(event.originator_id)
        except Exception:
            aggregate = None
        org = getattr(aggregate, "org", None) or getattr(event, "org", None)
        app = getattr(aggregate, "app", None) if isinstance(aggregate, Executor) else (
            aggregate.name if isinstance(aggregate, Application) else None)
        org = org if isinstance(org, str) and len(org) <= 128 and "\x00" not in org else "-"
        app = app if isinstance(app, str) and len(app) <= 256 and "\x00" not in app else None
        return org, app

    # --------------------------------------------------------------- tokens
    def create_token(self, org: str, name: str, *, app_names: list[str] | None = None) -> str:
        """Makes a token and returns its secret: the only time it is ever seen.

        ``app_names``: the applications it is limited to, at least one; ``None`` (and
        only ``None``) makes an org-wide token. An empty list was read as "no limit":
        a caller that filtered every application out of its list got an org-wide key."""
        check_org_name(org)
        check_app_name(name)  # same URL-safe alphabet
        if app_names is not None:
            if not isinstance(app_names, (list, tuple)):  # a str would be read letter by letter
                raise InvalidSetting("appNames", f"must be a list of names, got {type(app_names).__name__}")
            if not app_names:
                raise InvalidSetting("appNames", "must name at least one application; omit it (None) for an "
                                                 "org-wide token")
            for a in app_names:
                check_app_name(a)
        secret = new_secret()

        def run() -> str:
            tok = self._maybe(token_stream_id(org, name))
            apps = None if app_names is None else sorted(set(app_names))
            if tok is None:
                tok = Token(org=org, name=name, secret_hash=hash_secret(secret), app_names=apps, timestamp=self.now())
            else:
                tok.reissue(secret_hash=hash_secret(secret), app_names=apps, at=self.now())
            self.save(tok)
            return secret

        return self._retrying(run)

    def revoke_token(self, org: str, name: str) -> None:
        def run() -> None:
            tok = self._maybe(token_stream_id(org, name))
            if tok is None:
                raise UnknownToken(org, name)
            tok.revoke(at=self.now())
            self.save(tok)

        self._retrying(run)
