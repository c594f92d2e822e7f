"""The recovery conversation as the process manager sees it, and the choice of a target.

* :class:`RecoveryRequest` goes out through a :class:`Dispatcher` (the sockets);
  :class:`RecoveryOutcome` comes back into an :class:`Answers` inbox.
* :func:`rank_candidates` orders the executors that may recover a dead one; its ties are
  broken by :func:`tie_rank`, a keyed hash, so that no executor can win them by its name.

Pure: no clock, no I/O (the inbox's lock is the only shared state).
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from relay_es.projections.executors import ExecutorRow
from relay_es.protocol import retention


@dataclass(frozen=True)
class RecoveryRequest:
    """Ask ``target`` to recover the workflows of ``dead_executor_id``."""

    request_id: str
    org: str
    app: str
    dead_executor_id: str
    app_version: str | None
    target_executor_id: str
    target_connection_id: str | None
    target_owner: str | None
    # Monotonic time (the process manager's clock) after which nothing more is sent
    # for this attempt; its response timer records the failure at that instant.
    deadline: float | None = None


@dataclass(frozen=True)
class RecoveryOutcome:
    request_id: str
    ok: bool
    pending_found: bool | None = None
    reason: str | None = None


class Dispatcher(Protocol):
    """The process manager's window on the sockets (the hub, in production)."""

    def send_recovery(self, request: RecoveryRequest) -> None:
        """Hand the request to the target's connection; never block. The
        answer comes back through the process manager's :class:`Answers`."""

    def is_connected(self, org: str, app: str, executor_id: str) -> bool:
        """Is the executor connected right now, or is news of it not yet in the
        store (its Connected still on the way)? Such an executor is never declared dead."""

    def is_gone(self, org: str, app: str, executor_id: str) -> bool:
        """Has the executor no registered, open socket here (it dropped, whatever the log
        says yet)? Such an executor, if this process manager's owner holds it, is no recovery
        target."""

    def admissions(self) -> int:
        """How many executor sockets were admitted here since start (handshake accepted, registered
        or not yet), whatever the log says: the settle window's measure of a reconnect storm the
        store has not caught up with. Optional: a dispatcher without it leaves the window to the
        Connected events followed."""

    def expire(self, request_id: str) -> None:
        """The attempt's deadline has come and its failure is about to be
        recorded: send nothing more for it. Returns once that is certain.
        Optional: a dispatcher without it obeys :attr:`RecoveryRequest.deadline` alone."""

    def send_retention(self, org: str, app: str, plan: retention.RetentionPlan) -> None:
        """Send ``plan`` to one connected executor of the application (the newest), recording
        it; never block. Called only when the process manager has a ``retention_interval``."""

    def collect_metrics(self, org: str, app: str) -> None:
        """Collect the application's metrics that are due (``get_metrics`` to one of its
        executors, the answers stored); never block. Called only when the process manager has a
        ``metrics_interval``."""


class Answers:
    """The inbox of recovery answers: the dispatcher puts, the process manager drains.

    Thread-safe. ``put`` calls ``wake`` so that the process manager's owner runs a step."""

    def __init__(self, wake: Callable[[], None] = lambda: None) -> None:
        self._wake = wake
        self._items: deque[RecoveryOutcome] = deque()
        self._lock = threading.Lock()

    def put(self, outcome: RecoveryOutcome) -> None:
        with self._lock:
            self._items.append(outcome)
        self._wake()

    def take(self, limit: int) -> list[RecoveryOutcome]:
        """Up to ``limit`` answers, oldest first, removed from the inbox."""
        with self._lock:
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def put_back(self, outcomes: list[RecoveryOutcome]) -> None:
        """Returns answers taken but not recorded to the front of the inbox, in their order."""
        with self._lock:
            self._items.extendleft(reversed(outcomes))

    def __len__(self) -> int:
        return len(self._items)


def tie_rank(key: bytes, dead_stream_id: str, attempt: int, candidate_id: str) -> bytes:
    """Where a candidate stands among equals for one attempt at one dead executor:
    BLAKE2b keyed with ``key`` (a per-process secret) over (dead stream, attempt, candidate),
    so the order changes from attempt to attempt and cannot be chosen from outside."""
    data = f"{dead_stream_id}\x00{attempt}\x00".encode() + candidate_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, key=key, digest_size=16).digest()


def rank_candidates(dead: ExecutorRow, healthy: Iterable[ExecutorRow], *, tried: AbstractSet[str],
                    load: Callable[[ExecutorRow], int], tie_key: bytes) -> list[ExecutorRow]:
    """``healthy`` (HEALTHY, same org/app/version, on a live Relay) without the dead executor
    itself, best first: untried (``tried``: executor ids that failed it) first, then the least
    loaded (:func:`_standing`), then by :func:`tie_rank` -- not the executor id, so that no
    executor can name itself to win every tie (an executor called "0" was asked every time and
    could answer ``exist: false``, stranding the dead one's workflows)."""
    tie = _tie_break(dead, tie_key)
    found = [r for r in healthy if r.executor_id != dead.executor_id]
    return sorted(found, key=lambda r: (*_standing(r, tried, load), *tie(r)))


def best_candidate(dead: ExecutorRow, healthy: Iterable[ExecutorRow], *, tried: AbstractSet[str],
                   load: Callable[[ExecutorRow], int], tie_key: bytes) -> ExecutorRow | None:
    """The first of :func:`rank_candidates` (None if there is none), hashing only the
    candidates tied for first on their standing: a batch of deaths among many HEALTHY
    peers asks for one target per death, and a keyed hash per peer per death was most
    of deciding them."""
    best: list[ExecutorRow] = []
    best_key: tuple[bool, int] | None = None
    for r in healthy:
        if r.executor_id == dead.executor_id:
            continue
        key = _standing(r, tried, load)
        if best_key is None or key < best_key:
            best_key, best = key, [r]
        elif key == best_key:
            best.append(r)
    if len(best) < 2:
        return best[0] if best else None
    return min(best, key=_tie_break(dead, tie_key))


def _standing(r: ExecutorRow, tried: AbstractSet[str], load: Callable[[ExecutorRow], int]) -> tuple[bool, int]:
    """A candidate's standing, lower is better: whether it already failed this death, then its load."""
    return r.executor_id in tried, load(r)


def _tie_break(dead: ExecutorRow, tie_key: bytes) -> Callable[[ExecutorRow], tuple[bytes, str]]:
    """The order among candidates of equal standing, for this attempt at ``dead``."""
    attempt = dead.recovery_attempt
    return lambda r: (tie_rank(tie_key, dead.stream_id, attempt, r.executor_id), r.executor_id)
