"""Test doubles and helpers shared by the suite."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from relay_es.clock import FakeClock
from relay_es.process_manager import ProcessManager, RecoveryOutcome, RecoveryRequest, Timing, replay_bootstrap
from relay_es.service import ExecutorInfo, Relay

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}


@dataclass
class InMemoryDispatcher:
    """Records every request; the test answers them through the process manager."""

    sent: list[RecoveryRequest] = field(default_factory=list)

    def send_recovery(self, request: RecoveryRequest) -> None:
        self.sent.append(request)

    def last(self) -> RecoveryRequest:
        return self.sent[-1]


def info(executor_id: str, version: str = "v1", **kw: Any) -> ExecutorInfo:
    return ExecutorInfo(executor_id=executor_id, application_version=version, hostname=kw.pop("hostname", "host"),
                        language="python", dbos_version="3.2.0", **kw)


class World:
    """One Relay, one fake clock, one process manager: the unit of a PM test."""

    def __init__(self, relay: Relay, clock: FakeClock, *, owner: str = "relay-1", timing: Timing | None = None) -> None:
        self.relay = relay
        self.clock = clock
        self.owner = owner
        self.timing = timing or Timing(settle=timedelta(seconds=5), response_timeout=timedelta(seconds=10))
        self.dispatcher = InMemoryDispatcher()
        self.pm = self.new_pm()

    def new_pm(self, owner: str | None = None) -> ProcessManager:
        if owner is not None:
            self.owner = owner
        self.dispatcher = InMemoryDispatcher()
        self.pm = ProcessManager(self.relay, self.clock, self.dispatcher, owner=self.owner, timing=self.timing,
                                 bootstrap=replay_bootstrap(self.relay))
        self.pm.start()
        return self.pm

    def connect(self, executor_id: str, version: str = "v1", *, app: str = "app", org: str = "local", conn: str | None = None):
        ex = self.relay.executor_connected(org, app, info(executor_id, version),
                                           connection_id=conn or f"{executor_id}-conn-{self.clock.monotonic()}",
                                           owner=self.owner)
        self.pm.step()
        return ex

    def drop(self, executor_id: str, *, app: str = "app", org: str = "local", reason: str = "socket_closed") -> bool:
        ex = self.relay.get_executor(org, app, executor_id)
        ok = self.relay.executor_disconnected(ex.id, connection_id=ex.connection_id, reason=reason)
        self.pm.step()
        return ok

    def advance(self, seconds: float) -> None:
        """Moves time in small steps, letting the PM act at every step, as its driver would."""
        end = self.clock.monotonic() + seconds
        while True:
            nxt = self.pm.next_wakeup()
            if nxt is None or nxt > end:
                break
            if nxt > self.clock.monotonic():
                self.clock.advance(nxt - self.clock.monotonic())
            self.pm.step()
        if end > self.clock.monotonic():
            self.clock.advance(end - self.clock.monotonic())
        self.pm.step()

    def answer(self, request: RecoveryRequest, ok: bool = True, pending_found: bool | None = True, reason: str | None = None) -> None:
        self.pm.recovery_answered(RecoveryOutcome(request.request_id, ok, pending_found, reason))
        self.pm.step()

    def status(self, executor_id: str, app: str = "app", org: str = "local") -> str | None:
        ex = self.relay.get_executor(org, app, executor_id)
        return ex.status.value if ex.status else None

    def history(self, executor_id: str, app: str = "app", org: str = "local") -> list[str]:
        ex = self.relay.get_executor(org, app, executor_id)
        return [type(e).__name__ for e in self.relay.stream(ex.id)]
