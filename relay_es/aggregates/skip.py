"""The ProjectionSkip aggregate: a read model skipped one event it could not hold.

One stream per (read model, notification id), so recording it is idempotent:
a rebuild that meets the same event again finds the record and adds nothing,
and the audit log rebuilt from the events is identical row for row (ADR 16).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from eventsourcing.domain import Aggregate, event

NAMESPACE = uuid.UUID("5e2c9a7b-0d4f-4c3e-9b1a-8f6d2e4c7a31")


def skip_stream_id(projection: str, notification_id: int) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"skip/{projection}/{notification_id}")


class ProjectionSkip(Aggregate):
    @staticmethod
    def create_id(projection: str, notification_id: int) -> uuid.UUID:
        return skip_stream_id(projection, notification_id)

    @event("Recorded")
    def __init__(
        self,
        org: str,
        app: str | None,
        projection: str,
        notification_id: int,
        stream_id: str,
        event_type: str,
        reason: str,
        timestamp: datetime,
    ) -> None:
        self.org = org
        self.app = app
        self.projection = projection
        self.notification_id = notification_id
