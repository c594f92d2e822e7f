"""The Gate aggregate: one per org, the record of refused executor handshakes.

The hub throttles what it records (one entry per address and application per
interval, with a count of what it left out), so a client retrying a bad key
once a second forever costs the store almost nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from eventsourcing.domain import Aggregate, event

NAMESPACE = uuid.UUID("d4e8b2c6-1a3f-4b7e-8c5d-9f0a2e6b4c13")


def gate_stream_id(org: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"gate/{org}")


class Gate(Aggregate):
    @staticmethod
    def create_id(org: str) -> uuid.UUID:
        return gate_stream_id(org)

    @event("Opened")
    def __init__(self, org: str, timestamp: datetime) -> None:
        self.org = org
        self.refusals = 0

    def refuse(self, *, app: str, peer: str, status: int, reason: str, suppressed: int, at: datetime) -> None:
        self._refused(app=app, peer=peer, status=status, reason=reason, suppressed=suppressed, timestamp=at)

    @event("Refused")
    def _refused(self, app: str, peer: str, status: int, reason: str, suppressed: int, timestamp: datetime) -> None:
        self.refusals += 1 + suppressed
