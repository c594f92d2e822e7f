"""Relay's event store: the ``eventsourcing`` Application that every command saves through.

One Application (``name = "Relay"``: tables ``relay_events``) holds every aggregate
type, so the notification log is a single total order that projections and the
process manager follow. This module is its plumbing, and nothing else:

* the environment Relay builds (and only it), the transcodings of Relay's types;
* snapshots every :data:`SNAPSHOT_EVERY` events, taken after a save through the
  public ``take_snapshot`` (failing to take one never fails the save);
* save listeners (``add_listener``) and observers (``save_observers``);
* a cache of executors as last saved, and :meth:`RelayStore.load_many`, which
  reads many streams in one query;
* conflicting saves retried (:meth:`RelayStore.retrying`);
* a record that rides on the next save of a block (:meth:`RelayStore.riding`): an operator's
  change and its action in one transaction.

What needs more than the library's public API (reading the log fast, many streams
in one query, copying an aggregate) is asked of the store's factory through the
:class:`StoreReads` port (``relay_es.adapters.library`` implements it); on a
factory without it (the in-memory store) :class:`LibraryReads` does the same
through the public API.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application as ESApplication
from eventsourcing.persistence import IntegrityError, PersistenceError, Transcoder, Transcoding
from eventsourcing.utils import Environment

from relay_es.aggregates.alert import AlertFirings
from relay_es.aggregates.application import Application, AppSettings
from relay_es.aggregates.executor import Executor, ExecutorStatus, OpaqueJSON
from relay_es.aggregates.gate import Gate
from relay_es.aggregates.members import OrgMembers
from relay_es.aggregates.roles import OrgRoles
from relay_es.domain.clock import Clock
from relay_es.domain.sealing import KeyStore, MemoryKeys
from relay_es.projections.shares import StreamShare
from relay_es.projections.unreadable import Unreadable

log = logging.getLogger(__name__)

T = TypeVar("T")

CACHE_MAX = 100_000  # executors held in memory (emptied when exceeded)
RETRY_WAIT = 0.001  # seconds: the first conflict's wait is random below twice this, doubling
RETRY_WAIT_MAX = 0.1
# Seconds of waits after which a command that keeps conflicting gives up (a 503 for a REST call): 32
# clients changing one application at once on Postgres had 3-5 of them give up after 8 attempts (about
# 0.2 s), and a member making keys in a loop made their own removal give up in 2 of 3 rounds.
RETRY_BUDGET = 2.0

# Streams that grow for ever: an org's Gate gets every refusal recorded, an Application its
# retention rounds and violations, an executor that reconnects for months two events a
# reconnect. Loading one replays the latest snapshot and at most this many events after it
# (ADR 16); most executor streams never reach one.
SNAPSHOT_EVERY = 100
SNAPSHOTTED: dict[type, int] = {Application: SNAPSHOT_EVERY, Gate: SNAPSHOT_EVERY, Executor: SNAPSHOT_EVERY,
                                AlertFirings: SNAPSHOT_EVERY, OrgRoles: SNAPSHOT_EVERY, OrgMembers: SNAPSHOT_EVERY}


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


class OpaqueJSONAsText(Transcoding):
    """An executor's own JSON, stored as one string (see :class:`OpaqueJSON`)."""

    type = OpaqueJSON
    name = "json_text"

    def encode(self, obj: OpaqueJSON) -> str:
        return obj.text

    def decode(self, data: str) -> OpaqueJSON:
        return OpaqueJSON.from_text(data)


class StoreReads(Protocol):
    """What Relay asks of its store beyond the library's public API."""

    def notifications(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
                      unreadable: bool = False, skip: Callable[[str, int], bool] | None = None,
                      share: StreamShare | None = None, until: int | None = None
                      ) -> list[tuple[int, str, Any]]:
        """``(notification id, stream id, event)`` after ``after``; the event ``None``, not decoded,
        where ``skip(stream id, version)`` says the reader has it already. ``share``: only the
        events of its streams (``limit`` counts those); ``until``: none after this notification id."""

    def streams(self, ids: Sequence[UUID]) -> dict[UUID, tuple[Any, list[Any]]]:
        """``{id: (latest snapshot or None, stored events after it)}``."""

    def event(self, raw_id: Any, version: int, topic: str, state: bytes) -> Any:
        """One domain event from a stored row."""

    def copy(self, aggregate: Any) -> Any:
        """A copy a command can change, with no pending events of the original."""

    def is_store_error(self, e: BaseException) -> bool: ...

    def record(self, objs: Sequence[Any], **kwargs: Any) -> list[Any]:
        """What the library's ``Application.save(*objs, **kwargs)`` does; its recordings."""


def read_notifications(recorder: Any, mapper: Any, after: int, limit: int, topics: tuple[str, ...] = (), *,
                       unreadable: bool = False, skip: Callable[[str, int], bool] | None = None,
                       share: StreamShare | None = None, until: int | None = None,
                       stream: Callable[[Any], tuple[UUID, str]] | None = None) -> list[tuple[int, str, Any]]:
    """:meth:`StoreReads.notifications` through the library's recorder and mapper: pages of the
    log, a share's streams picked out here. ``stream(raw id)``: the stream's ``(UUID, str)`` (by
    default the recorder's ids are UUIDs already)."""
    out: list[tuple[int, str, Any]] = []
    while len(out) < limit:
        page = recorder.select_notifications(start=after, limit=limit, stop=until, topics=list(topics),
                                             inclusive_of_start=False)
        for n in page:
            oid, sid = stream(n.originator_id) if stream is not None else (n.originator_id, str(n.originator_id))
            if share is not None and oid not in share:
                continue
            if skip is not None and skip(sid, n.originator_version):
                out.append((n.id, sid, None))
                continue
            try:
                e = mapper.to_domain_event(n)
            except Exception as error:
                if not unreadable:
                    raise
                e = Unreadable(oid, n.originator_version, n.topic, error)
            out.append((n.id, sid, e))
        if len(page) < limit or share is None:
            break
        after = page[-1].id
    return out[:limit]


class LibraryReads:
    """:class:`StoreReads` through the library's public API (the in-memory store)."""

    def __init__(self, app: ESApplication[UUID]) -> None:
        self.app = app

    def notifications(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
                      unreadable: bool = False, skip: Callable[[str, int], bool] | None = None,
                      share: StreamShare | None = None, until: int | None = None
                      ) -> list[tuple[int, str, Any]]:
        return read_notifications(self.app.recorder, self.app.mapper, after, limit, topics, unreadable=unreadable,
                                  skip=skip, share=share, until=until)

    def streams(self, ids: Sequence[UUID]) -> dict[UUID, tuple[Any, list[Any]]]:
        snapshots = self.app.snapshots.recorder if self.app.snapshots is not None else None
        out = {}
        for i in ids:
            latest = list(snapshots.select_events(i, desc=True, limit=1)) if snapshots is not None else []
            after = latest[0].originator_version if latest else None
            out[i] = (latest[0] if latest else None, list(self.app.recorder.select_events(i, gt=after)))
        return out

    def event(self, raw_id: Any, version: int, topic: str, state: bytes) -> Any:
        from eventsourcing.persistence import StoredEvent

        return self.app.mapper.to_domain_event(StoredEvent(raw_id, version, topic, state))

    def copy(self, aggregate: Any) -> Any:
        return copy.deepcopy(aggregate)

    @staticmethod
    def is_store_error(e: BaseException) -> bool:
        return isinstance(e, (PersistenceError, OSError, TimeoutError))

    def record(self, objs: Sequence[Any], **kwargs: Any) -> list[Any]:
        return ESApplication.save(self.app, *objs, **kwargs)  # the library's own, not RelayStore's


class Rider:
    """What :meth:`RelayStore.riding` adds to the first save of its block: ``make(objs, noted)``, the
    aggregates to save with ``objs`` (built afresh for each attempt: a failed save has taken their
    events); ``rode``: a save with them succeeded; ``noted``: what the block's commands said they
    did (:meth:`RelayStore.note`), given to ``make`` to record (so that ``make`` need not hold the
    rider: no reference cycle)."""

    __slots__ = ("make", "rode", "noted")

    def __init__(self, make: Callable[[Sequence[Any], dict[str, Any]], Sequence[Any]]) -> None:
        self.make = make
        self.rode = False
        self.noted: dict[str, Any] = {}


# The rider of the block running in this context (a thread of the REST layer's: the block and its
# commands run in it), or None: every other save (the process manager's, the hub's command bus) pays
# one lookup.
_RIDER: ContextVar[Rider | None] = ContextVar("relay_rider", default=None)


class RelayStore(ESApplication[UUID]):
    name = "Relay"
    # Snapshots are taken by :meth:`save` (see SNAPSHOTTED), not by the library's own
    # interval check, so that failing to take one is a warning, never a failed save.
    is_snapshotting_enabled = True

    def __init__(self, env: Mapping[str, str] | None = None, *, clock: Clock) -> None:
        super().__init__(env=env)
        self.clock = clock
        make = getattr(self.factory, "relay_reads", None)
        self.reads: StoreReads = make(self) if make is not None else LibraryReads(self)
        # The keys of sealed values (webhooks' URLs and secrets), outside the log: a table of the store's
        # own database (relay_es.adapters.sealing), in memory beside an in-memory store.
        make_keys = getattr(self.factory, "relay_keys", None)
        self.keys: KeyStore = make_keys(self) if make_keys is not None else MemoryKeys()
        self._listeners: list[Callable[[int], None]] = []
        self._recordings_listeners: list[Callable[[list[Any]], None]] = []
        self._listeners_lock = threading.Lock()
        self.save_observers: list[Callable[[float, list[Any]], None]] = []
        self._cache: dict[UUID, Any] = {}
        self._cache_lock = threading.Lock()
        # What was evicted while a read was on its way (see _remember): every eviction is counted,
        # each stream forgotten keeps the count of its last, and a read remembers what it read only
        # for the streams not evicted since it began. Emptying the cache evicts them all (the floor).
        self._evictions = 0
        self._evicted: dict[UUID, int] = {}
        self._evicted_floor = 0

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
        built["IS_SNAPSHOTTING_ENABLED"] = "y"
        built.update(env or {})
        return Environment(name, built)

    def register_transcodings(self, transcoder: Transcoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(TimedeltaAsMicroseconds())
        transcoder.register(OpaqueJSONAsText())
        transcoder.register(AppSettingsAsDict())

    def is_store_error(self, e: BaseException) -> bool:
        """The store is unreachable or failing (retry later), as opposed to a bug."""
        return self.reads.is_store_error(e)

    def notifications(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
                      unreadable: bool = False, skip: Callable[[str, int], bool] | None = None,
                      share: StreamShare | None = None, until: int | None = None
                      ) -> list[tuple[int, str, Any]]:
        """``[(notification_id, stream_id, domain_event), ...]`` after ``after``, in
        order: what projections and the process manager follow (ADR 11). ``unreadable``:
        an event that cannot be decoded comes as :class:`Unreadable` rather than
        failing the read (ADR 16). ``skip(stream_id, version)``: true for an event the
        reader has already; it comes as ``None``, not decoded. ``share``: only the events of its
        streams (``limit`` counts those), as a rebuild's process reads them; ``until``: none after
        this notification id."""
        return self.reads.notifications(after, limit, topics, unreadable=unreadable, skip=skip, share=share,
                                        until=until)

    def head(self) -> int:
        """The newest notification id in the log (0 while it is empty). Every id up to it is
        committed or will never be (every store Relay uses commits ids in order: :mod:`relay_es.engine.journal`),
        so a follower that read the log up to it may move past it, whatever topics it read."""
        return self.recorder.max_notification_id() or 0

    def add_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(max_notification_id)`` is called after every save in this process."""
        with self._listeners_lock:
            self._listeners.append(fn)

    def add_recordings_listener(self, fn: Callable[[list[Any]], None]) -> None:
        """``fn(recordings)`` is called after every save in this process, before the listeners of
        :meth:`add_listener` (one of which may wake a reader that wants them): the library's
        recordings, each with its ``notification`` (as the log holds it) and ``domain_event``."""
        with self._listeners_lock:
            self._recordings_listeners.append(fn)

    def save(self, *objs: Any, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        return self._save(objs, kwargs, handed_over=False)

    def save_handed_over(self, *objs: Any) -> list[Any]:
        """:meth:`save` for aggregates that nothing else holds or will change once saved (the command
        bus's: copies :meth:`load_many` made of cached ones, ones it read from the store, whose copies
        it cached, and new ones): the cache keeps them as they are, not copies of them (a copy was a
        twentieth of a death's cost recorded alone)."""
        return self._save(objs, {}, handed_over=True)

    def _save(self, objs: Sequence[Any], kwargs: dict[str, Any], *, handed_over: bool) -> list[Any]:
        started = time.perf_counter()
        rider = _RIDER.get()
        if rider is not None and not rider.rode:
            objs = (*rider.make(objs, rider.noted), *objs)
        try:
            recordings = self.reads.record(objs, **kwargs)  # the library's save (beneath it: FastReads)
        except BaseException:
            # A conflict, or a failure whose outcome is unknown: the library commits, then raises what went
            # wrong after the insert (reading the ids back), and a lost connection may have committed too.
            # The cached copies may be behind the store: read again when next needed (ADR 12).
            self._forget(obj.id for obj in objs if isinstance(obj, Executor))
            raise
        if rider is not None:
            rider.rode = True
        self._take_due_snapshots(objs, recordings)
        # Cached before anyone is told: a listener wakes the process manager, whose command on a copy
        # older than what was just saved would refuse, record nothing, and so never be retried.
        self._remember((obj for obj in objs if isinstance(obj, Executor)), copied=not handed_over)
        # Observed before anyone is told too: what a listener wakes (the process manager's rows, which
        # /metrics counts executors from) must not be seen ahead of the transitions counted here.
        if self.save_observers:
            took = time.perf_counter() - started
            events = [r.domain_event for r in recordings]
            for fn in self.save_observers:
                try:
                    fn(took, events)
                except Exception:
                    log.exception("save observer failed")
        self._tell_listeners(recordings)
        return recordings

    def _take_due_snapshots(self, objs: Sequence[Any], recordings: list[Any]) -> None:
        """A snapshot of each aggregate whose saved version is a multiple of its interval.
        A snapshot is a saving, never a command's outcome: failing to take one (the store
        went away just after the events were recorded) must not make a recorded command
        look failed, and be run again; the next interval takes one."""
        if not SNAPSHOTTED:
            return
        every = math.gcd(*SNAPSHOTTED.values())  # a version due for any interval is a multiple of it
        due = [r.domain_event for r in recordings if not r.domain_event.originator_version % every]
        if not due:  # most saves (hashing the ids below is a part of a death's cost)
            return
        types = {obj.id: type(obj) for obj in objs if hasattr(obj, "id")}
        for e in due:
            interval = SNAPSHOTTED.get(types.get(e.originator_id))  # type: ignore[arg-type]
            if interval is None or e.originator_version % interval:
                continue
            try:
                self.take_snapshot(e.originator_id, version=e.originator_version)
            except Exception as error:
                log.warning("snapshot not taken (%s: %s); the next one will be", type(error).__name__, error)

    def _tell_listeners(self, recordings: list[Any]) -> None:
        if not recordings:
            return
        top = max(r.notification.id for r in recordings)
        with self._listeners_lock:
            listeners = list(self._listeners)
            given = list(self._recordings_listeners)
        for hand in given:
            try:
                hand(recordings)
            except Exception:  # a listener must never fail a save
                log.exception("recordings listener failed")
        for fn in listeners:
            try:
                fn(top)
            except Exception:  # a listener must never fail a save
                log.exception("notification listener failed")

    @contextmanager
    def riding(self, make: Callable[[Sequence[Any], dict[str, Any]], Sequence[Any]]) -> Iterator[Rider]:
        """Within the block, in this thread, the first save that succeeds also saves ``make(objs, noted)``
        (before ``objs``, in the same transaction); a save that fails (a conflict, the store away)
        takes nothing with it, and the next attempt calls ``make`` again. After the block,
        ``rider.rode`` says whether any save carried them. What a REST change does to Relay's own
        state and the operator's action that records it are written this way: both or neither
        (:meth:`~relay_es.engine.action_commands.ActionCommands.recording_change`). Blocks do not nest."""
        if _RIDER.get() is not None:
            raise RuntimeError("a block riding on a save within another")
        rider = Rider(make)
        token = _RIDER.set(rider)
        try:
            yield rider
        finally:
            _RIDER.reset(token)

    def note(self, **summary: Any) -> None:
        """What a command did, for the record of the block it runs in (:meth:`riding`), if any (a
        rule's id, how many tokens were revoked): said before its save, so that the record written
        with the save can hold it. Outside such a block, nothing."""
        rider = _RIDER.get()
        if rider is not None:
            rider.noted.update(summary)

    def retrying(self, fn: Callable[[], T]) -> T:
        """``fn()``, run again on a conflicting save (another writer got there first), after a random
        wait that doubles (:data:`RETRY_WAIT`, up to :data:`RETRY_WAIT_MAX`): run again at once, the
        threads that conflicted on a stream conflicted again (8 threads recording refusals on one org's
        stream: 32 of 160 gave up). The conflict is raised once the waits add up to :data:`RETRY_BUDGET`."""
        waited, attempt = 0.0, 0
        while True:
            attempt += 1
            try:
                return fn()
            except IntegrityError:
                if waited >= RETRY_BUDGET:
                    raise
                log.debug("conflicting save, retrying (attempt %d)", attempt)
                wait = random.uniform(0, min(RETRY_WAIT * 2 ** attempt, RETRY_WAIT_MAX))  # noqa: S311
                waited += wait
                time.sleep(wait)


    def _maybe(self, aggregate_id: UUID) -> Any | None:
        try:
            return self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None

    def now(self) -> datetime:
        return self.clock.now()

    def stream(self, stream_id: UUID) -> Iterator[Any]:
        """Every event of one aggregate, in order (deleted executors included)."""
        return iter(self.repository.event_store.get(stream_id))

    # ------------------------------------------------------- aggregate cache
    # Executors as last saved by this process, so a burst of commands (a storm of
    # disconnects, a thousand deaths) does not read every stream back. The store
    # stays the judge: a cached copy that is stale (another writer saved since)
    # fails its save on the version check, is forgotten, and the command is run
    # again on what the store holds. Commands work on copies, never on the cache.

    def _remember(self, aggregates: Iterable[Any], *, read_since: int | None = None, copied: bool = True) -> None:
        """Holds copies of ``aggregates`` (``copied`` false: the aggregates themselves, which nothing
        else holds) where the cache holds none as new. ``read_since``: they were
        read from the store, the reading begun at that eviction count (:attr:`_evictions`); one
        evicted since is not held. Without that, a read of version N that a save of N+1 and then a
        conflict's eviction overtook would put N back, and a command that refuses on what it finds
        (a disconnect of a connection no longer current) would save nothing to correct it. What a
        save recorded (``read_since`` None) is held whatever was evicted. A DELETED executor is not held
        (a copy held before is dropped, as an eviction): it is acted on no more, and held it kept the cache
        growing with every executor that ever was until the cache was emptied at :data:`CACHE_MAX`. One
        that registers again is read from its stream."""
        copy_of = self.reads.copy
        with self._cache_lock:
            cache = self._cache
            if len(cache) > CACHE_MAX:
                cache.clear()
                self._evict_all()
            if read_since is not None and read_since < self._evicted_floor:
                return  # the cache was emptied since the read began (just now, too)
            evicted = self._evicted
            for a in aggregates:
                if read_since is not None and evicted.get(a.id, -1) > read_since:
                    continue
                if a.status == ExecutorStatus.DELETED:  # dropped as an eviction: a read begun before is not held
                    cache.pop(a.id, None)
                    self._evictions += 1
                    evicted[a.id] = self._evictions
                    continue
                held = cache.get(a.id)
                if held is None or held.version < a.version:
                    cache[a.id] = copy_of(a) if copied else a
            if len(evicted) > CACHE_MAX:
                self._evict_all()  # bounded: the reads on their way then hold nothing

    def _evict_all(self) -> None:
        """Under the lock: the cache was emptied; no read begun before now is held."""
        self._evictions += 1
        self._evicted.clear()
        self._evicted_floor = self._evictions

    def forget_cached(self, ids: Iterable[UUID]) -> None:
        """This process's copies of these executors dropped: the next command on them reads the store.
        For a command that refused on what it found when the store may hold newer (a refusal records
        nothing, so no version check tells)."""
        self._forget(ids)

    def _forget(self, ids: Iterable[UUID]) -> None:
        with self._cache_lock:
            self._evictions += 1
            for i in ids:
                self._cache.pop(i, None)
                self._evicted[i] = self._evictions
            if len(self._evicted) > CACHE_MAX:
                self._evict_all()  # bounded: the reads on their way then hold nothing

    def load_many(self, ids: list[UUID]) -> dict[UUID, Any]:
        """Many aggregates: cached executors copied, the rest read in one query."""
        out: dict[UUID, Any] = {}
        missing = []
        cache = self._cache
        copy_of = self.reads.copy
        for i in ids:
            held = cache.get(i)
            if held is None:
                missing.append(i)
            else:
                out[i] = copy_of(held)
        if not missing:
            return out
        read_since = self._evictions  # before the read: an eviction from here on is after it began
        streams = self.reads.streams(missing)
        decode = self.reads.event
        for i, (snapshot, stored) in streams.items():
            # The library's project_aggregate asserts a runtime Protocol per event (slow on 3.11).
            aggregate = None if snapshot is None else self.mapper.to_domain_event(snapshot).mutate(None)
            for s in stored:
                aggregate = decode(s.originator_id, s.originator_version, s.topic, s.state).mutate(aggregate)
            if aggregate is not None:
                out[i] = aggregate
        self._remember((out[i] for i in missing if isinstance(out.get(i), Executor)), read_since=read_since)
        return out

    def warm(self, ids: Iterable[UUID], *, batch: int = 500, stop: Callable[[], bool] = lambda: False) -> int:
        """Reads into the cache the executors of ``ids`` it does not hold, ``batch`` streams a
        query (:meth:`load_many`), never filling it past :data:`CACHE_MAX` (which would empty it).
        ``stop()``, asked before each batch, ends it early. Returns how many it read.

        A server's start warms it with the executors the store holds, before their sockets come
        back: after a restart every one of them needs its stream read for its Connected (or its
        orphan's Disconnected, its death), and a storm of reconnects paid that read on top of the
        write (ADR 12). Nothing is decided on what it reads, and what was evicted while it read is
        not held (:meth:`_remember`)."""
        ids = list(ids)
        read = 0
        for k in range(0, len(ids), batch):
            room = CACHE_MAX - len(self._cache)
            if room <= 0 or stop():
                break
            chunk = [i for i in ids[k:k + batch] if i not in self._cache][:room]
            if chunk:
                read += sum(isinstance(a, Executor) for a in self.load_many(chunk).values())
        return read
