"""The events this process saved, handed to a follower of the log in the same process.

The process manager follows the log (ADR 3): every executor event, whoever recorded it, in the
order of its notification id. Most of them were saved by this very process -- the hub's outbox
records a storm's ``Disconnected`` events, the process manager its own deaths -- and reading them
back meant a query and a decode per event for events that were in memory all along: a fifth of
the CPU of a Postgres drop storm (``docs/benchmarks.md``, section 2).

A :class:`Journal` is told every save of this process (:meth:`RelayStore.add_recordings_listener
<relay_es.engine.store.RelayStore.add_recordings_listener>`, after the transaction committed) and
holds each event by its notification id. The follower :meth:`takes <Journal.take>` the ids that
come next, one after another, and reads the log only where there is a gap: an event another
process wrote (another instance, ``relay admin``, the read models' process), an id no transaction
kept (a rolled-back insert on Postgres), or a save whose thread has not handed it over yet. The
log stays the truth; the journal is a cache of it by id, and what it cannot answer the log does.

Why a gap can be read up to the id after it and then passed: the stores commit notification ids
in order (SQLite has one writer; the Postgres recorder inserts under a table lock, as does
Relay's own, ``relay_es.adapters.library.ArrayInsertRecorder``), so once an id is committed and
handed here every smaller id is committed or will never be.

Bounded: at most ``capacity`` events are held; past that a save's events are not kept (the
follower reads them from the log, as a gap). Events of topics the follower does not fold are
held as their id alone, so that they do not make gaps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

CAPACITY = 20_000  # events held at most (about a storm of 20,000 drops, if the follower is that far behind)


class Journal:
    """Events saved by this process, by notification id, for one follower (thread-safe)."""

    def __init__(self, topics: Iterable[str], capacity: int = CAPACITY) -> None:
        self._topics = frozenset(topics)
        self.capacity = capacity
        self._held: dict[int, tuple[str, Any]] = {}  # id -> (stream id, event; None for another topic)
        self._lock = threading.Lock()
        self.taken = 0
        """Events the follower took from here (not read from the log): for tests and benchmarks."""
        self.not_kept = 0
        """Events not kept because the journal was full."""

    def __len__(self) -> int:
        return len(self._held)

    def saved(self, recordings: Iterable[Any]) -> None:
        """A save of this process committed: its recordings (the library's, each with the
        ``notification`` the log holds and its ``domain_event``). Called on the saving thread."""
        with self._lock:
            for r in recordings:
                if len(self._held) >= self.capacity:
                    self.not_kept += 1
                    continue
                n = r.notification
                event = r.domain_event if n.topic in self._topics else None
                self._held[n.id] = (str(event.originator_id) if event is not None else "", event)

    def take(self, after: int, limit: int) -> tuple[list[tuple[int, str, Any]], int | None]:
        """The events with ids ``after + 1``, ``after + 2``... held here, one after another (at most
        ``limit``), removed: ``(id, stream id, event)``, the event None for a topic not followed.
        When there are none, the smallest id held after ``after`` (a gap before it the log must
        fill), or None when nothing is held. Ids up to ``after`` are forgotten."""
        out: list[tuple[int, str, Any]] = []
        with self._lock:
            nid = after + 1
            while len(out) < limit:
                got = self._held.pop(nid, None)
                if got is None:
                    break
                out.append((nid, got[0], got[1]))
                nid += 1
            if out or not self._held:
                self.taken += len(out)
                return out, None
            for old in [i for i in self._held if i <= after]:  # read from the log already (a gap before them)
                del self._held[old]
            return [], min(self._held, default=None)
