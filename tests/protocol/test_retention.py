"""The retention plan: cutoffs from Relay's clock, nothing when nothing is wanted, epoch ms on the wire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from relay_es.aggregates.application import AppSettings
from relay_es.domain.clock import FakeClock
from relay_es.protocol import messages as m
from relay_es.protocol.retention import RetentionPlan, plan


def test_no_plan_when_the_settings_want_no_retention() -> None:
    assert plan(AppSettings(), FakeClock().now()) is None
    assert plan(AppSettings(executor_timeout=timedelta(seconds=5), private_mode=True), FakeClock().now()) is None


def test_cutoffs_are_now_minus_the_thresholds_on_the_clock_given() -> None:
    clock = FakeClock()
    settings = AppSettings(gc_time_threshold=timedelta(hours=1), gc_rows_threshold=1000,
                           global_timeout=timedelta(minutes=10))
    p = plan(settings, clock.now())
    assert p == RetentionPlan(gc_cutoff=clock.now() - timedelta(hours=1), gc_rows_threshold=1000,
                              timeout_cutoff=clock.now() - timedelta(minutes=10))
    clock.advance(60)
    assert plan(settings, clock.now()).gc_cutoff == p.gc_cutoff + timedelta(seconds=60)  # moves with the clock


def test_each_threshold_alone_is_enough_and_the_others_stay_unset() -> None:
    now = FakeClock().now()
    assert plan(AppSettings(gc_rows_threshold=5), now) == RetentionPlan(None, 5, None)
    only_timeout = plan(AppSettings(global_timeout=timedelta(seconds=30)), now)
    assert only_timeout == RetentionPlan(None, None, now - timedelta(seconds=30))


def test_the_body_is_in_epoch_milliseconds_with_unset_fields_sent_as_null() -> None:
    cutoff = datetime(2026, 11, 30, 12, 0, 0, 123457, tzinfo=UTC)  # microseconds are truncated
    body = RetentionPlan(gc_cutoff=cutoff, gc_rows_threshold=None, timeout_cutoff=None).body()
    assert body.gc_cutoff_epoch_ms == int(cutoff.timestamp() * 1000) == 1796040000123
    assert body.timeout_cutoff_epoch_ms is None and body.gc_rows_threshold is None
    assert body.gc_batch_size is None  # the SDK's own default
    wire = msgspec.json.decode(msgspec.json.encode(m.RetentionRequest(request_id="r", body=body)))
    assert wire["body"] == {"gc_cutoff_epoch_ms": 1796040000123, "gc_rows_threshold": None,
                            "gc_batch_size": None, "timeout_cutoff_epoch_ms": None}
