"""Runs the read-model projections with exactly-once tracking, on either store.

The ``eventsourcing`` library offers subscriptions only on Postgres. Relay
follows the notification log itself, the same way on both stores: it pulls a
batch of notifications after the lowest tracked position, applies every
projection to them, and writes the rows **and** each projection's new position
in one transaction. A crash before the commit re-delivers the batch; a
position that moved under us (another runner) aborts the batch. So every event
is applied once.

One event a read model cannot hold (a NUL byte in a text column, an index
entry too large) must not stop it: a batch that fails for a data reason, as
opposed to the store being away, is isolated -- each projection alone, then
halves of the batch -- and the one offending event is skipped for the read
model it broke and reported (log, metric, a ``projection.skipped`` audit
entry); everything else is applied. See docs/adr/0016-poison-events-and-growing-streams.md.

Batching many events per transaction is what makes a rebuild fast: one
million events are a few thousand commits, not a million.

The runner holds no SQL: it reads the log through :class:`EventSource` (the
Relay application) and stores through :class:`ReadModelStore` (the read
models' database, :mod:`relay_es.adapters.readmodels`). It stays beside the
folds because its logic -- batching, exactly-once positions, isolating a
poison -- is what "a read model" means here, and it is tested with both stores.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from relay_es.aggregates.skip import ProjectionSkip
from relay_es.domain.text import escape_controls
from relay_es.projections.shares import StreamShare
from relay_es.projections.unreadable import Unreadable

log = logging.getLogger(__name__)

BATCH = 1000

# A read model tracked past the first events that begin the rows it keeps for ever (its ``kept_from``)
# yet holding none of their streams' rows was emptied by hand. PROBED of them are looked up (the first
# alone could be one the read model skipped as poison).
PROBED = 8


class Projection(Protocol):
    """A read model kept by the runner (pure: it never sees the store).

    ``missing`` names the batch's streams whose rows it does not hold, and
    ``loaded`` gives it those the table has; ``apply`` folds one event in
    memory; ``changes`` hands over what changed, to be written in the batch's
    transaction. What a projection holds between batches is a cache of
    committed rows: the runner calls ``forget`` when a batch fails or the
    tracked position moved without it, and ``committed`` after each commit
    (where a projection bounds its cache). ``kept_from``: the topic of the event that begins a row it
    keeps for ever, one per stream it folds (executor and application rows are never deleted, ADR 8),
    or None where rows go.
    """

    name: str
    event_types: tuple[type, ...]
    kept_from: str | None

    def forget(self) -> None: ...

    def missing(self, items: list[tuple[int, str, Any]]) -> list[str]: ...

    def loaded(self, asked: Sequence[str], found: dict[str, Any]) -> None: ...

    def apply(self, notification_id: int, sid: str, event: Any) -> None: ...

    def changes(self) -> Any: ...

    def committed(self) -> None: ...


class Table(Protocol):
    """One read model's tables. ``cur``: a cursor of the store's ``transaction()`` or ``read()``.
    ``version``: of their stored form; tables stored in another are rebuilt."""

    version: int

    def create(self, cur: Any, *, indexes: bool = True) -> None: ...

    def drop(self, cur: Any) -> None: ...

    def read(self, cur: Any, sids: Sequence[str]) -> dict[str, Any]: ...

    def write(self, cur: Any, changes: Any, *, bulk: bool = False) -> None: ...


class ReadModelStore(Protocol):
    """Where the read models live: their tables and their tracked positions."""

    dialect: str

    def transaction(self) -> Any: ...  # context manager yielding a cursor, committed on exit

    def schema(self) -> Any: ...  # transaction() for making tables: one process at a time

    def read(self) -> Any: ...  # context manager yielding a cursor for a consistent read

    def table(self, name: str) -> Table: ...

    def create_tracking(self, cur: Any, names: Iterable[str]) -> None: ...

    def positions(self, cur: Any) -> dict[str, int]: ...

    def outdated(self, cur: Any, versions: dict[str, int]) -> list[str]: ...

    def record_versions(self, cur: Any, versions: dict[str, int]) -> None: ...

    def lock_positions(self, cur: Any) -> dict[str, int]: ...

    def move(self, cur: Any, name: str, pos: int, last: int) -> bool: ...

    def reset_position(self, cur: Any, name: str) -> None: ...

    def is_data_error(self, e: BaseException) -> bool: ...


class EventSource(Protocol):
    """The notification log, and where a skipped event is recorded (the Relay application)."""

    def notifications(self, after: int, limit: int, topics: tuple[str, ...] = (), *,
                      unreadable: bool = False, share: StreamShare | None = None,
                      until: int | None = None) -> list[tuple[int, str, Any]]: ...

    def record_projection_skip(self, *, projection: str, notification_id: int, event: Any, reason: str,
                               event_type: str | None = None) -> bool: ...

    def head(self) -> int: ...  # the newest notification id in the log (0 while it is empty)


class _LazyRead:
    """A read cursor opened on first use: a batch whose rows are all cached reads nothing."""

    def __init__(self, db: ReadModelStore) -> None:
        self._db = db
        self._cm: Any = None
        self._cur: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._cur is None:
            self._cm = self._db.read()
            self._cur = self._cm.__enter__()
        return getattr(self._cur, name)

    def close(self) -> None:
        if self._cm is not None:
            self._cm.__exit__(None, None, None)


class OwnPositions:
    """A :class:`ReadModelStore` whose tracked positions are kept here, starting at 0, instead of
    in the store: one share of a rebuild (:meth:`ProjectionRunner.fill`), whose positions in the
    store are the rebuild's to move once every share is filled. A move made in a transaction
    takes effect when it commits; reads, tables and error kinds are the store's, and nothing else
    a fill does not need is passed through."""

    PASSED = frozenset({"read", "table", "is_data_error", "dialect"})

    def __init__(self, db: ReadModelStore, names: Iterable[str]) -> None:
        self._db = db
        self.at = dict.fromkeys(names, 0)
        self._moves: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in OwnPositions.PASSED:
            raise AttributeError(f"a share's fill does not use the store's {name}")
        return getattr(self._db, name)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        self._moves = {}
        done = False
        try:
            with self._db.transaction() as cur:
                yield cur
                done = True  # the body ran to its end; the commit is the store's transaction's exit
        finally:
            moves, self._moves = self._moves, {}
        if done:
            self.at.update(moves)  # reached only once the store's transaction has committed

    def positions(self, cur: Any) -> dict[str, int]:
        return dict(self.at)

    def lock_positions(self, cur: Any) -> dict[str, int]:
        return dict(self.at)

    def move(self, cur: Any, name: str, pos: int, last: int) -> bool:
        if self.at.get(name, 0) != pos:
            return False
        self._moves[name] = last
        return True


class PositionMoved(Exception):
    """Another runner advanced a projection while this one was working."""


@dataclass(frozen=True)
class Poison:
    """One event a read model skipped: it failed the projection's batch for a data reason, alone."""

    projection: str
    notification_id: int
    stream_id: str
    event_type: str
    reason: str
    recorded: bool  # its projection.skipped entry was recorded now (False: it was already)


ALL = "all"  # the projection named by the skip of an event no read model can read


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return escape_controls(f"{type(e).__name__}: {text}")[:500]


class ProjectionRunner:
    def __init__(self, relay: EventSource, db: ReadModelStore, projections: Iterable[Projection], *,
                 batch_size: int = BATCH, schema: bool = True) -> None:
        self.relay = relay
        self.db = db
        self.projections = list(projections)
        self._tables = {p.name: db.table(p.name) for p in self.projections}
        self.batch_size = batch_size
        self._types = {p.name: frozenset(p.event_types) for p in self.projections}
        self._cached_at: dict[str, int] = {}  # projection -> position its cache is valid at
        self._bulk: set[str] = set()  # projections being rebuilt: their tables were created empty
        # Filling one share of the streams (a rebuild's process, :meth:`fill`): only its streams' events
        # are read, up to ``_until``, and ``db`` is an :class:`OwnPositions` over the store.
        self._share: StreamShare | None = None
        self._until: int | None = None
        self._lock = threading.RLock()  # one batch at a time in this process (and none during fill_elsewhere)
        self._progress = threading.Condition()
        # Called with each :class:`Poison` skipped (the runtime counts them on /metrics).
        self.on_poison: list[Callable[[Poison], None]] = []
        self.poisoned = 0
        # Each projection's position as this process last knew it (read at start, moved by
        # every batch committed here): the lag on /metrics, without a query per scrape.
        self.reached: dict[str, int] = {}
        if schema:
            self.create_schema()
            self.reached.update(self.positions())

    # ---------------------------------------------------------------- schema
    def create_schema(self) -> None:
        """Creates what is missing: tables, indexes (after a rebuild, all of them), positions.
        A read model whose tables are not as of its position is emptied (position 0), and catching
        up folds it again: stored in another version, a table of it dropped or emptied by hand, its
        position past the log's newest event. Each is logged with why. The checks cost a catalog
        query, the log's newest id, and for an executors or apps table a look at a few rows."""
        versions = {p.name: self._tables[p.name].version for p in self.projections}
        with self.db.schema() as cur:
            self.db.create_tracking(cur, [p.name for p in self.projections])
            stale = set(self.db.outdated(cur, versions))  # another version, a table missing: logged there
            for p in self.projections:  # what a table of its version lacks (a column added in place) before
                if p.name not in stale:  # _emptied reads its rows: a store from before 62ba79f would not start
                    self._tables[p.name].create(cur)
            at = self.db.positions(cur)  # before the log's head is read (see _past_the_log)
            stale |= self._past_the_log(at, stale)
            stale |= self._emptied(cur, at, stale)
            for p in self.projections:  # the others were completed above
                if p.name in stale:
                    table = self._tables[p.name]
                    table.drop(cur)
                    self.db.reset_position(cur, p.name)
                    table.create(cur)
            self.db.record_versions(cur, versions)
        if stale:
            self._cached_at.clear()
            for p in self.projections:
                p.forget()

    def _past_the_log(self, at: dict[str, int], stale: set[str]) -> set[str]:
        """Read models tracked (at ``at``) past the log's newest event (a position edited by hand, a log
        restored older than its read models), logged. ``at`` was read before the head is read here: a
        position another runner had moved it to was an event the log held, so is not past that head."""
        head = self.relay.head()
        out = {p.name for p in self.projections if p.name not in stale and at.get(p.name, 0) > head}
        for name in sorted(out):
            log.warning("read model %s is tracked at position %d, past the log's newest event %d (a position "
                        "edited by hand, or a log restored older than its read models?): rebuilding it",
                        name, at[name], head)
        return out

    def _emptied(self, cur: Any, at: dict[str, int], stale: set[str]) -> set[str]:
        """Read models with a ``kept_from`` tracked (at ``at``) past the first streams they began in the
        log yet holding none of their rows (a table emptied by hand), logged. One log read (of one
        topic, up to the position) and one read of a few rows each."""
        out = set()
        for p in self.projections:
            topic, pos = p.kept_from, at.get(p.name, 0)
            if topic is None or pos == 0 or p.name in stale:
                continue
            first = [(nid, sid) for nid, sid, e in self.relay.notifications(0, PROBED, (topic,), unreadable=True,
                                                                          until=pos)
                     if type(e) is not Unreadable]
            if first and not self._tables[p.name].read(cur, [sid for _, sid in first]):
                log.warning("read model %s is tracked at position %d but holds none of the %d streams begun at "
                            "notifications %d-%d (its table emptied by hand?): rebuilding it",
                            p.name, pos, len(first), first[0][0], first[-1][0])
                out.add(p.name)
        return out

    def positions(self) -> dict[str, int]:
        with self.db.read() as cur:
            return self.db.positions(cur)

    def position(self) -> int:
        """The position every projection has reached."""
        ps = self.positions()
        return min(ps.get(p.name, 0) for p in self.projections)

    # ------------------------------------------------------------ processing
    def run_batch(self) -> int:
        """Processes one batch. Returns how many notifications it consumed.

        Optimistic: rows are read and folded outside the write transaction,
        which then only checks that no projection's position moved meanwhile
        (rows change only together with their position) and writes. So the
        store's write lock is held for the writes alone.
        """
        with self._lock:
            start_positions = self.positions()
            start = min(start_positions.get(p.name, 0) for p in self.projections)
            events = self.relay.notifications(start, self.batch_size, unreadable=True, share=self._share,
                                              until=self._until)  # both None but in a share's fill
            if not events:
                return 0
            unreadable = [it for it in events if type(it[2]) is Unreadable]
            recorded = {  # no read model can fold these: recorded before any moves past them
                nid: self.relay.record_projection_skip(projection=ALL, notification_id=nid, event=event,
                                                       reason=_reason(event.error), event_type=event.topic)
                for nid, _, event in unreadable}
            try:
                self._process(self.projections, start_positions, events)
            except PositionMoved:
                raise
            except Exception as e:
                if not self.db.is_data_error(e):
                    raise  # the store is away: the same batch is tried again later
                log.warning("a batch of %d events (after %d) failed for a data reason (%s); isolating it",
                            len(events), start, _reason(e))
                for p in self.projections:
                    self._isolate(p, start_positions.get(p.name, 0), events)
            for nid, sid, event in unreadable:
                self._report(Poison(ALL, nid, sid, event.topic, _reason(event.error), recorded[nid]))
        with self._progress:
            self._progress.notify_all()
        return len(events)

    def _route(self, work: list[tuple[Projection, int, list[tuple[int, str, Any]]]],
               items: list[tuple[int, str, Any]]) -> None:
        """Each of ``items`` appended to the list of every projection in ``work`` that takes its
        type and has not passed it, in order. One pass when every position is the same and
        behind the first item (a batch read from there: always in a rebuild), rather than one
        pass per projection (5% of a rebuild's CPU)."""
        positions = {pos for _, pos, _ in work}
        if len(positions) == 1 and items[0][0] > positions.pop():
            routes: dict[type, list[list[tuple[int, str, Any]]]] = {}
            for it in items:
                t = type(it[2])
                to = routes.get(t)
                if to is None:
                    to = routes[t] = [mine for p, _, mine in work if t in self._types[p.name]]
                for mine in to:
                    mine.append(it)
            return
        for p, pos, mine in work:
            types = self._types[p.name]
            mine.extend(it for it in items if it[0] > pos and type(it[2]) in types)

    def _process(self, projections: list[Projection], positions: dict[str, int],
                 items: list[tuple[int, str, Any]]) -> None:
        """Applies ``items`` to ``projections`` and commits their rows with each one's
        position moved to the last item, in one transaction; or raises (caches forgotten)."""
        last = items[-1][0]
        try:
            work = []
            for p in projections:
                pos = positions.get(p.name, 0)
                if self._cached_at.get(p.name) != pos:
                    p.forget()  # its cache belongs to another position: read rows afresh
                work.append((p, pos, []))
            self._route(work, items)
            reader = _LazyRead(self.db)
            try:
                for p, _, mine in work:
                    if mine:
                        asked = p.missing(mine)
                        if asked:
                            p.loaded(asked, self._tables[p.name].read(reader, asked))
            finally:
                reader.close()
            for p, _, mine in work:
                apply = p.apply
                for nid, sid, event in mine:
                    apply(nid, sid, event)
            with self.db.transaction() as cur:
                self._check_positions(cur, work)
                for p, pos, mine in work:
                    if mine:
                        self._tables[p.name].write(cur, p.changes(), bulk=p.name in self._bulk)
                    self._move(cur, p.name, pos, max(pos, last))  # one ahead (a partial rebuild) stays
        except BaseException:
            self._cached_at.clear()
            for p in self.projections:
                p.forget()
            raise
        for p in projections:
            self._cached_at[p.name] = last
            self.reached[p.name] = max(self.reached.get(p.name, 0), last)
            p.committed()

    def _check_positions(self, cur: Any, work: list[tuple[Projection, int, Any]]) -> None:
        now_positions = self.db.lock_positions(cur)
        for p, pos, _ in work:
            if now_positions.get(p.name, 0) != pos:
                raise PositionMoved(p.name)

    def _move(self, cur: Any, name: str, pos: int, last: int) -> None:
        if not self.db.move(cur, name, pos, last):
            raise PositionMoved(name)

    def _isolate(self, p: Projection, pos: int, items: list[tuple[int, str, Any]]) -> int:
        """Applies ``items`` to ``p`` alone, halving what fails for a data reason down
        to the one event that fails alone, which is skipped. Returns ``p``'s new position.
        A poison costs about two transactions per halving: a dozen for a batch of 1000."""
        items = [it for it in items if it[0] > pos]
        if not items:
            return pos
        try:
            self._process([p], {p.name: pos}, items)
            return items[-1][0]
        except PositionMoved:
            raise
        except Exception as e:
            if not self.db.is_data_error(e):
                raise
            if len(items) == 1:
                self._skip(p, pos, items[0], e)
                return items[0][0]
        half = len(items) // 2
        pos = self._isolate(p, pos, items[:half])
        return self._isolate(p, pos, items[half:])

    def _skip(self, p: Projection, pos: int, item: tuple[int, str, Any], error: BaseException) -> None:
        """Records that ``p`` skips one event (before moving past it: a crash in between
        finds the record made and moves on), then moves ``p`` past it."""
        nid, sid, event = item
        reason = _reason(error)
        recorded = False
        if type(event) is not ProjectionSkip.Recorded:  # a record of a skip is never itself recorded: no loop
            recorded = self.relay.record_projection_skip(projection=p.name, notification_id=nid, event=event,
                                                         reason=reason)
        with self.db.transaction() as cur:
            self._check_positions(cur, [(p, pos, None)])
            self._move(cur, p.name, pos, nid)
        self._cached_at.pop(p.name, None)
        p.forget()
        self._report(Poison(p.name, nid, sid, type(event).__qualname__, reason, recorded))

    def reached_elsewhere(self, positions: dict[str, int]) -> None:
        """Positions another process committed (the server's read-model process, ADR 8): kept as
        reached (the lag on /metrics), and :meth:`wait_for` looks at the store again at once."""
        for name, pos in positions.items():
            if name in self._types:
                self.reached[name] = max(self.reached.get(name, 0), pos)
        with self._progress:
            self._progress.notify_all()

    def poisoned_elsewhere(self, poison: Poison) -> None:
        """An event another process's runner skipped (and logged): counted and observed here."""
        self.poisoned += 1
        self._observe_poison(poison)

    def _report(self, poison: Poison) -> None:
        self.poisoned += 1
        log.error("projection %s skipped event %d (%s of stream %s), which it cannot %s: %s%s",
                  poison.projection, poison.notification_id, poison.event_type, poison.stream_id,
                  "read" if poison.projection == ALL else "hold", poison.reason,
                  "" if poison.recorded else " (recorded before)")
        self._observe_poison(poison)

    def _observe_poison(self, poison: Poison) -> None:
        for fn in self.on_poison:
            try:
                fn(poison)
            except Exception:
                log.exception("poison observer failed")

    def catch_up(self, pause: Callable[[], None] | None = None, stop: Callable[[], bool] | None = None) -> int:
        """Processes batches until the log is exhausted. ``pause`` is called
        before each batch (the server lets the process manager's due work go
        first; see ``Runtime``); so is ``stop``, and True ends the catch-up
        (the server's read-model process follows the log now)."""
        total = 0
        while True:
            if pause is not None:
                pause()
            if stop is not None and stop():
                return total
            try:
                n = self.run_batch()
            except PositionMoved as e:
                log.info("projection %s advanced elsewhere; re-reading", e)
                continue
            if n == 0:
                return total
            total += n

    def wait_for(self, notification_id: int, timeout: float = 10.0) -> bool:
        """Blocks until every projection has processed ``notification_id``."""
        deadline = time.monotonic() + timeout
        while self.position() < notification_id:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._progress:
                self._progress.wait(min(remaining, 0.05))
        return True

    def rebuild(self, names: Iterable[str] | None = None, *, batch_size: int = 40_000) -> int:
        """Drops the named projections' tables (all by default), rebuilds them
        from the event stream, and returns how many notifications were read.

        The tables are created without their secondary indexes and filled in
        large batches (each still committed with its position, so a crash
        leaves a consistent, resumable state: the indexes are created by the
        next start's ``create_schema`` if the rebuild did not finish); the
        indexes are built once, at the end.
        """
        wanted = self.reset(names)
        try:
            return self.fill(wanted, batch_size=batch_size)
        finally:
            self.create_schema()  # the indexes

    def reset(self, names: Iterable[str] | None = None) -> set[str]:
        """Empties the named projections (all by default): their tables are
        created again without secondary indexes, their positions set to 0."""
        wanted = set(names) if names is not None else {p.name for p in self.projections}
        unknown = wanted - {p.name for p in self.projections}
        if unknown:
            raise ValueError(f"unknown projection(s): {', '.join(sorted(unknown))}")
        with self._lock:
            with self.db.schema() as cur:
                for p in self.projections:
                    if p.name in wanted:
                        table = self._tables[p.name]
                        table.drop(cur)
                        table.create(cur, indexes=False)
                        self.db.reset_position(cur, p.name)
            self._cached_at.clear()
            for p in self.projections:
                p.forget()
        return wanted

    def fill(self, wanted: set[str], *, batch_size: int = 40_000, share: StreamShare | None = None,
             until: int | None = None) -> int:
        """Catches up after :meth:`reset`, writing the emptied tables in bulk. Returns how many
        notifications were read.

        ``share``: only the events of the streams in it, up to notification ``until``, and the
        tracked positions are left where they are (at 0): one process of a rebuild, beside others
        filling the other shares of the same tables; the rebuild moves the positions once every
        share is filled (:meth:`filled`). Every read model folds each stream on its own, so the
        shares' rows are disjoint and together are the rows of one fill (ADR 11).
        """
        # Fewer, larger transactions: a share of a million events filled in 15.0-17.2 s in batches of
        # 40,000 against 17.4-18.3 s in batches of 10,000 (SQLite, bench section 5's store).
        if share is not None and wanted != {p.name for p in self.projections}:
            raise ValueError("a share is filled for every read model of its runner")  # the others would refold it
        usual, self.batch_size = self.batch_size, batch_size
        self._bulk = wanted
        if share is not None:
            self._share, self._until = share, until
            store, self.db = self.db, OwnPositions(self.db, wanted)
        # A rebuild allocates millions of short-lived objects and makes no cycles worth
        # chasing; the cyclic collector re-scanning every batch cost half of decoding.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self.catch_up()
        finally:
            self.batch_size = usual
            self._bulk = set()
            if share is not None:
                self._share = self._until = None
                self.db = store
                self._cached_at.clear()  # what a share's fold holds is not the whole table's
                for p in self.projections:
                    p.forget()
            if collecting:
                gc.enable()

    def fill_elsewhere(self, fill: Callable[[set[str], int], int], until: int) -> int:
        """The read models still at position 0 (a first start on an existing store, a table
        stored in an older version) emptied, filled by ``fill(names, until)`` -- other
        processes, each filling a share of the streams up to notification ``until`` -- and
        their positions moved there, while this runner's own batches wait. Returns what
        ``fill`` read; 0 when every read model has folded something (nothing is done)."""
        with self._lock:
            at = self.positions()
            behind = {p.name for p in self.projections if at.get(p.name, 0) == 0}
            if not behind:
                return 0
            self.reset(behind)
            try:
                read = fill(behind, until)
                self.filled(behind, until)
            finally:
                self.create_schema()  # the indexes
        return read

    def filled(self, wanted: set[str], until: int) -> None:
        """Moves the positions of ``wanted``, reset and then filled share by share up to
        notification ``until``, from 0 to ``until``, in one transaction."""
        with self._lock:
            with self.db.transaction() as cur:
                self._check_positions(cur, [(p, 0, None) for p in self.projections if p.name in wanted])
                for name in wanted:
                    self._move(cur, name, 0, until)
            for name in wanted:
                self.reached[name] = max(self.reached.get(name, 0), until)
        with self._progress:
            self._progress.notify_all()
