"""Retention and global timeout: what to send, computed from Relay's clock.

The process manager's retention timer computes one plan per application with a HEALTHY
executor, every retention interval, and hands it to the dispatcher.

``gc_cutoff = now - gcTimeThreshold``; ``timeout_cutoff = now - globalTimeout``;
the rows threshold passes through. Units become epoch milliseconds only when
the wire message is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from relay_es.aggregates.application import AppSettings
from relay_es.protocol.messages import RetentionBody
from relay_es.domain.units import to_epoch_ms


@dataclass(frozen=True)
class RetentionPlan:
    gc_cutoff: datetime | None
    gc_rows_threshold: int | None
    timeout_cutoff: datetime | None
    at: datetime | None = field(default=None, compare=False)  # the time it was cut from

    def body(self) -> RetentionBody:
        return RetentionBody(
            gc_cutoff_epoch_ms=None if self.gc_cutoff is None else to_epoch_ms(self.gc_cutoff),
            gc_rows_threshold=self.gc_rows_threshold,
            gc_batch_size=None,  # the SDK's own default
            timeout_cutoff_epoch_ms=None if self.timeout_cutoff is None else to_epoch_ms(self.timeout_cutoff),
        )


def plan(settings: AppSettings, now: datetime) -> RetentionPlan | None:
    """The plan for an application's ``settings`` at ``now``, or None when they want no retention."""
    if not settings.wants_retention:
        return None
    return RetentionPlan(
        gc_cutoff=None if settings.gc_time_threshold is None else now - settings.gc_time_threshold,
        gc_rows_threshold=settings.gc_rows_threshold,
        timeout_cutoff=None if settings.global_timeout is None else now - settings.global_timeout,
        at=now,
    )
