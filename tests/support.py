"""Test doubles and the "world" that drives the engine without sockets or sleeps."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from relay_es.aggregates import SettingsPatch
from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
from relay_es.domain.clock import FakeClock
from relay_es.engine.journal import Journal
from relay_es.engine.process_manager import EXECUTOR_TOPICS, ProcessManager, RecoveryOutcome, RecoveryRequest, Timing, replay_bootstrap
from relay_es.projections import all_projections
from relay_es.projections.runner import ProjectionRunner
from relay_es.composition.runtime import view_bootstrap
from relay_es.engine.executor_commands import ExecutorInfo
from relay_es.engine.service import Relay

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}


def at_once(n: int, prepare: Callable[[], Any], act: Callable[[Any], None]) -> list[BaseException]:
    """``act(prepare())`` in ``n`` threads, every ``act`` started together once each ``prepare`` is
    done; returns what they raised (a ``prepare`` that fails breaks the start: the others raise too)."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run() -> None:
        try:
            prepared = prepare()
            start.wait(timeout=30)
            act(prepared)
        except BaseException as e:  # noqa: BLE001  # returned to the test
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@dataclass
class InMemoryDispatcher:
    """Records every request; the test answers them through the process manager."""

    sent: list[RecoveryRequest] = field(default_factory=list)
    connected: set[str] = field(default_factory=set)  # executors with a socket the store does not know of yet
    expired: list[str] = field(default_factory=list)  # request ids the process manager expired, in order
    gone: set[str] = field(default_factory=set)  # executors whose socket closed before the store heard of it
    on_send: Callable[[RecoveryRequest], None] | None = None  # e.g. a test's clock moving while a send takes time
    admitted: int = 0  # sockets admitted at the hub since start (the settle window's pace)

    def send_recovery(self, request: RecoveryRequest) -> None:
        self.sent.append(request)
        if self.on_send is not None:
            self.on_send(request)

    def expire(self, request_id: str) -> None:
        self.expired.append(request_id)

    def is_connected(self, org: str, app: str, executor_id: str) -> bool:
        return executor_id in self.connected

    def is_gone(self, org: str, app: str, executor_id: str) -> bool:
        return executor_id in self.gone

    def admissions(self) -> int:
        return self.admitted

    def let_in(self, *executor_ids: str) -> None:
        """The hub admitted and registered these executors; the store has not heard of it yet."""
        self.connected.update(executor_ids)
        self.admitted += len(executor_ids)

    def last(self) -> RecoveryRequest:
        return self.sent[-1]


def info(executor_id: str, version: str = "v1", **kw: Any) -> ExecutorInfo:
    return ExecutorInfo(executor_id=executor_id, application_version=version, hostname=kw.pop("hostname", "host"),
                        language="python", dbos_version="3.2.0", **kw)


class World:
    """One Relay on one store, a fake clock, and a process manager with an
    in-memory dispatcher. ``store_url=None`` is the in-memory (POPO) store;
    otherwise a real SQLite or Postgres store with the read models running,
    and :meth:`restart` really closes and reopens everything."""

    def __init__(self, clock: FakeClock, store_url: str | None = None, *, owner: str = "relay-1",
                 timing: Timing | None = None, grace: float = 10.0) -> None:
        self.clock = clock
        self.store_url = store_url
        self.owner = owner
        self.timing = timing or Timing(settle=timedelta(seconds=5), settle_span=timedelta(seconds=5),
                                       response_timeout=timedelta(seconds=10),
                                       backoff_base=timedelta(seconds=1), backoff_max=timedelta(seconds=8))
        self.relay: Relay | None = None
        self.db = None
        self.runner: ProjectionRunner | None = None
        self.journal = Journal(EXECUTOR_TOPICS)
        self._open()
        self.relay.register_app("local", "app")
        self.relay.update_app("local", "app", SettingsPatch(executor_timeout=timedelta(seconds=grace)))
        self.dispatcher = InMemoryDispatcher()
        self.pm = self._new_pm()
        # Others stepped on the process manager's thread, as the runtime steps them (the alert
        # manager): each has step() and next_wakeup(); sync steps them after the PM, and advance
        # wakes at the earliest of all their timers.
        self.steppers: list[Any] = []

    def _open(self) -> None:
        if self.store_url is None:
            if self.relay is None:
                self.relay = Relay(POPO, clock=self.clock)
                self._hand_saves()
            return
        cfg = parse_database_url(self.store_url)
        self.relay = Relay(event_store_env(cfg), clock=self.clock)
        self._hand_saves()
        self.db = open_database(cfg)
        self.runner = ProjectionRunner(self.relay, self.db, all_projections())

    def _new_pm(self) -> ProcessManager:
        bootstrap = replay_bootstrap(self.relay) if self.runner is None else view_bootstrap(self.db, self.runner)
        self.journal = Journal(EXECUTOR_TOPICS)  # a new process's: empty
        pm = ProcessManager(self.relay, self.clock, self.dispatcher, owner=self.owner, timing=self.timing,
                            bootstrap=bootstrap, journal=self.journal)
        pm.start()
        return pm

    def _hand_saves(self) -> None:
        """This process's saves go to the process manager's journal, as the runtime's do."""
        self.relay.add_recordings_listener(lambda recordings: self.journal.saved(recordings))

    def restart(self, *, down_for: float = 0.0, owner: str = "relay-2") -> None:
        """Relay stops (its memory is gone), time passes, a new Relay starts."""
        self.close()
        self.clock.advance(down_for)
        self.owner = owner
        self._open()
        self.dispatcher = InMemoryDispatcher()
        self.pm = self._new_pm()
        self.sync()

    def close(self) -> None:
        if self.store_url is not None:
            self.db.close()
            self.relay.close()

    def sync(self) -> None:
        self._step_pm()
        if self.steppers:
            for stepper in self.steppers:
                stepper.step()
            self._step_pm()  # what they recorded, folded

    def _step_pm(self) -> None:
        self.pm.step()
        if self.runner is not None:
            self.runner.catch_up()

    def next_wakeup(self) -> float | None:
        return min((t for t in (self.pm.next_wakeup(), *(s.next_wakeup() for s in self.steppers)) if t is not None),
                   default=None)

    # -------------------------------------------------------------- actions
    def connect(self, executor_id: str, version: str = "v1", *, app: str = "app", org: str = "local",
                conn: str | None = None) -> Any:
        ex = self.relay.executor_connected(org, app, info(executor_id, version),
                                           connection_id=conn or f"{executor_id}@{self.clock.monotonic()}",
                                           owner=self.owner)
        self.sync()
        return ex

    def drop(self, executor_id: str, *, app: str = "app", org: str = "local", reason: str = "socket_closed") -> bool:
        ex = self.relay.get_executor(org, app, executor_id)
        ok = self.relay.executor_disconnected(ex.id, connection_id=ex.connection_id, reason=reason)
        self.sync()
        return ok

    def advance(self, seconds: float) -> None:
        """Moves time forward, letting the PM (and the steppers) act at each timer, as its driver would."""
        end = self.clock.monotonic() + seconds
        while True:
            nxt = self.next_wakeup()
            if nxt is None or nxt > end:
                break
            if nxt > self.clock.monotonic():
                self.clock.advance(nxt - self.clock.monotonic())
            self.sync()
        if end > self.clock.monotonic():
            self.clock.advance(end - self.clock.monotonic())
        self.sync()

    def answer(self, request: RecoveryRequest, ok: bool = True, pending_found: bool | None = True,
               reason: str | None = None) -> None:
        self.pm.recovery_answered(RecoveryOutcome(request.request_id, ok, pending_found, reason))
        self.sync()

    # -------------------------------------------------------------- reading
    def executor(self, executor_id: str, app: str = "app", org: str = "local") -> Any:
        return self.relay.get_executor(org, app, executor_id)

    def status(self, executor_id: str, app: str = "app", org: str = "local") -> str | None:
        st = self.executor(executor_id, app, org).status
        return st.value if st else None

    def history(self, executor_id: str, app: str = "app", org: str = "local") -> list[str]:
        ex = self.executor(executor_id, app, org)
        return [type(e).__name__ for e in self.relay.stream(ex.id)]


async def until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "") -> Any:
    """Polls a blocking predicate (in a thread) until it is truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(pred)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {what or pred}")
        await asyncio.sleep(interval)
