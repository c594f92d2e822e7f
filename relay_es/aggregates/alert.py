"""The AlertFirings aggregate: one alerting rule's alerts, and every attempt to deliver them.

One stream per rule (made at its first alert). :meth:`AlertFirings.fire` is conditional: an
alert is recorded only when the rule's ``minIntervalSecs`` has passed since its last one, so
the interval holds through a restart and between two writers (the stream's version is the
lock). The interval is measured between the alerts' wall times, either way: a wall clock set
back by more than the interval does not silence the rule. Each delivery attempt, on each
channel (the receiving application's executors, ``app``; a webhook, ``webhook:<i>``), is an
event with its outcome; ``final`` marks the last one of a channel (delivered, refused for good,
or out of attempts).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from eventsourcing.domain import Aggregate, event

NAMESPACE = uuid.UUID("5d0f3b8e-2c61-4f0a-9b7e-8a4c1d6e2f93")
MAX_DETAIL = 500


def firings_stream_id(org: str, app: str, rule_id: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"alert/{org}/{app}/{rule_id}")


class AlertFirings(Aggregate):
    @staticmethod
    def create_id(org: str, app: str, rule_id: str) -> uuid.UUID:
        return firings_stream_id(org, app, rule_id)

    @event("Opened")
    def __init__(self, org: str, app: str, rule_id: str, timestamp: datetime) -> None:
        self.org = org
        self.app = app
        self.rule_id = rule_id
        self.last_fired_at: datetime | None = None
        self.fired = 0

    def fire(self, *, alert_id: str, rule_type: str, receiving_app: str, message: str, metadata: dict[str, str],
             channels: list[str], cause: str | None, min_interval: timedelta, at: datetime) -> bool:
        """Records an alert, unless the last one is less than ``min_interval`` away from ``at``,
        either side. Returns whether it was recorded. A last alert "later" than ``at`` by less than
        the interval is a concurrent one (another writer, its clock a little ahead or its command
        a little later); by the interval or more, the wall clock went back since: it does not
        silence the rule until the clock catches up."""
        if self.last_fired_at is not None and abs(at - self.last_fired_at) < min_interval:
            return False
        self._fired(alert_id=alert_id, rule_type=rule_type, receiving_app=receiving_app, message=message,
                    metadata=dict(metadata), channels=list(channels), cause=cause, timestamp=at)
        return True

    @event("Fired")
    def _fired(self, alert_id: str, rule_type: str, receiving_app: str, message: str, metadata: dict[str, str],
               channels: list[str], cause: str | None, timestamp: datetime) -> None:
        self.last_fired_at = timestamp
        self.fired += 1

    def record_delivery(self, *, alert_id: str, channel: str, attempt: int, ok: bool, detail: str | None,
                        final: bool, at: datetime) -> None:
        self._delivery_attempted(alert_id=alert_id, channel=channel, attempt=attempt, ok=ok,
                                 detail=None if detail is None else detail[:MAX_DETAIL], final=final, timestamp=at)

    @event("DeliveryAttempted")
    def _delivery_attempted(self, alert_id: str, channel: str, attempt: int, ok: bool, detail: str | None,
                            final: bool, timestamp: datetime) -> None:
        pass
