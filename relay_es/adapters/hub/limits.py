"""What each address, key and application holds on the hub, against ``ResourceLimits`` (ADR 15).

Handshakes in flight per address, open sockets per key and per application, executor ids
per key and per application. A check that fails raises :class:`Refused` (before the upgrade)
or returns why (an executor id refused at registration: 4005). Counters drop a key at zero
and executor ids are forgotten once deleted: keys are the client's choice in development
mode, so no table may keep every key ever used.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from relay_es.adapters.hub.admission import Refused
from relay_es.adapters.hub.connection import Connection
from relay_es.adapters.hub.outbox import Outbox
from relay_es.adapters.hub.registry import ExecutorKey, Registry
from relay_es.aggregates.executor import executor_stream_id
from relay_es.protocol.limits import ResourceLimits, printable

Counted = tuple[tuple[str, ...], tuple[str, str]]  # (key, (org, app)) a socket is counted against
# A key at its limit of executor ids has its ids pruned (those gone forgotten) at most this often: a prune
# walks every id of the key on the event loop (10,000: 49 ms), and a key holder could ask for one a refusal.
PRUNE_EVERY = 5.0


class Roster(Protocol):
    """Which executors exist (the process manager, which follows the log): thread-safe reads. An
    executor of a deleted application is not listed (its row stays, for a registration again)."""

    def listed(self, org: str, app: str) -> int: ...

    def is_listed(self, stream_id: str) -> bool: ...


def _release(counter: Counter[Any], key: Any) -> None:
    """One less; a key at zero is dropped (keys are the client's choice)."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


def key_id(org: str, token: str | None, key: str) -> tuple[str, ...]:
    """What a key is counted as: its token in auth mode; in development mode a
    digest of the key (any key is accepted there, and none is kept in memory)."""
    if token is not None:
        return ("token", org, token)
    return ("key", org, hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32])


class Quotas:
    def __init__(self, limits: ResourceLimits, *, roster: Roster, registry: Registry, outbox: Outbox,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.roster = roster
        self.registry = registry
        self.outbox = outbox
        self._handshaking: Counter[str] = Counter()  # address -> sockets not yet registered
        self._by_key: Counter[tuple[str, ...]] = Counter()  # key -> open sockets
        self._by_app: Counter[tuple[str, str]] = Counter()  # (org, app) -> open sockets
        self._key_ids: dict[tuple[str, ...], dict[ExecutorKey, None]] = {}  # key -> executor ids it registered
        self._pruned_at: dict[tuple[str, ...], float] = {}  # key at its limit -> when its ids were last pruned
        # (org, app) -> new executor ids admitted here that the roster may not list yet (their Connected on its
        # way): counted against the application's limit with those it lists, or a burst of new ids got past it
        self._admitted: dict[tuple[str, str], dict[ExecutorKey, None]] = {}

    # ------------------------------------------------------------ handshakes
    def handshake_begins(self, host: str) -> None:
        self._handshaking[host] += 1

    def handshake_ends(self, host: str) -> None:
        """The socket registered, or went away before it did."""
        _release(self._handshaking, host)

    def check_queue(self) -> None:
        if self.outbox.queued >= self.limits.queued_transitions:  # the store is away: queue no more
            raise Refused(503, "Service Unavailable",
                          f"{self.outbox.queued} executor transitions wait for the store "
                          "(RELAY_MAX_QUEUED_TRANSITIONS); try again later", audit=False)

    def check_handshakes(self, host: str) -> None:
        if self._handshaking[host] > self.limits.handshakes_per_address:
            raise Refused(429, "Too many handshakes",
                          f"more than {self.limits.handshakes_per_address} handshakes in flight from this "
                          "address (RELAY_MAX_HANDSHAKES_PER_ADDRESS)", audit=False)

    # --------------------------------------------------------------- sockets
    def take_socket(self, key: tuple[str, ...], org: str, app: str) -> Counted:
        """Counts one more open socket of the key and of the application, or refuses it (429).
        No await between the checks and the count: concurrent handshakes see it."""
        if self._by_key[key] >= self.limits.connections_per_key:
            raise Refused(429, "Too many connections",
                          f"this key has {self.limits.connections_per_key} open connections "
                          "(RELAY_MAX_CONNECTIONS_PER_KEY)", org=org)
        if self._by_app[(org, app)] >= self.limits.connections_per_app:
            raise Refused(429, "Too many connections",
                          f"application {app!r} has {self.limits.connections_per_app} open connections "
                          "(RELAY_MAX_CONNECTIONS_PER_APP)", org=org)
        self._by_key[key] += 1
        self._by_app[(org, app)] += 1
        return key, (org, app)

    def release_socket(self, counted: Counted) -> None:
        _release(self._by_key, counted[0])
        _release(self._by_app, counted[1])

    # ---------------------------------------------------------- executor ids
    def over_limit(self, conn: Connection, executor_id: str) -> str | None:
        """Why a new executor id may not register on this connection, or None.
        An id that already exists (a reconnect, a takeover) is never refused."""
        key = (conn.org, conn.app, executor_id)
        if self.registry.executor(key) is not None:
            return None
        known = self.roster.is_listed(str(executor_stream_id(*key)))
        ids = self._key_ids.setdefault(conn.key_id, {})
        if key not in ids and not known and len(ids) >= self.limits.executors_per_key:
            now = self.clock()
            if now - self._pruned_at.get(conn.key_id, -PRUNE_EVERY) >= PRUNE_EVERY:
                self._pruned_at[conn.key_id] = now
                self._prune_key_ids(ids)
            if len(ids) >= self.limits.executors_per_key:
                return (f"this key already has {len(ids)} executor ids (RELAY_MAX_EXECUTORS_PER_KEY); "
                        f"executor {printable(executor_id, 80)!r} refused")
        app = (conn.org, conn.app)
        admitted = self._admitted.setdefault(app, {})
        if not known and key not in admitted:
            if self.roster.listed(*app) + len(admitted) >= self.limits.executors_per_app:
                self._prune_admitted(admitted)  # those listed by now are counted once
            if self.roster.listed(*app) + len(admitted) >= self.limits.executors_per_app:
                if not admitted:
                    del self._admitted[app]
                return (f"application {conn.app!r} already has {self.limits.executors_per_app} executors "
                        f"(RELAY_MAX_EXECUTORS_PER_APP); executor {printable(executor_id, 80)!r} refused")
            admitted[key] = None
        elif not admitted:
            del self._admitted[app]
        ids[key] = None
        return None

    def _prune_admitted(self, admitted: dict[ExecutorKey, None]) -> None:
        """Forgets the admitted ids the roster lists now (counted there), and those gone before it did."""
        for key in list(admitted):
            if self.roster.is_listed(str(executor_stream_id(*key))) or (
                    self.registry.executor(key) is None and not self.outbox.holds(key)):
                del admitted[key]

    def sweep_keys(self) -> int:
        """Forgets the executor ids remembered per key that are gone, and the keys with none
        left. Returns how many keys are still remembered."""
        for kid, ids in list(self._key_ids.items()):
            self._prune_key_ids(ids)
            if not ids:
                del self._key_ids[kid]
                self._pruned_at.pop(kid, None)
        for app, admitted in list(self._admitted.items()):
            self._prune_admitted(admitted)
            if not admitted:
                del self._admitted[app]
        return len(self._key_ids)

    def _prune_key_ids(self, ids: dict[ExecutorKey, None]) -> None:
        """Forgets the executor ids that are gone: not connected here, deleted, of a deleted application
        (or never recorded)."""
        for key in list(ids):
            if self.registry.executor(key) is not None or self.outbox.holds(key):
                continue
            if not self.roster.is_listed(str(executor_stream_id(*key))):
                del ids[key]
