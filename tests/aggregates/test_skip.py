"""The ProjectionSkip aggregate: the record that a read model skipped one event (ADR 16)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from eventsourcing.utils import get_topic

from relay_es.aggregates.skip import ProjectionSkip, skip_stream_id
from tests.aggregates.support import replay_any

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def record(projection: str = "audit", notification_id: int = 7) -> ProjectionSkip:
    return ProjectionSkip(org="acme", app="orders", projection=projection, notification_id=notification_id,
                          stream_id="5c6e0a4e-0000-4000-8000-000000000001", event_type="Executor.Connected",
                          reason="a NUL byte in hostname", timestamp=T0)


def test_one_stream_per_read_model_and_notification() -> None:
    # So recording the same skip again (a rebuild meets the same event) finds the stream: idempotent.
    assert skip_stream_id("audit", 7) == skip_stream_id("audit", 7)
    assert len({skip_stream_id("audit", 7), skip_stream_id("audit", 8), skip_stream_id("executors", 7)}) == 3
    assert record().id == skip_stream_id("audit", 7)


def test_it_records_what_was_skipped_and_why() -> None:
    s = record()
    assert (s.org, s.app, s.projection, s.notification_id) == ("acme", "orders", "audit", 7)
    events: list[Any] = s.collect_events()
    assert len(events) == 1
    (e,) = events
    assert (e.stream_id, e.event_type, e.reason) == (
        "5c6e0a4e-0000-4000-8000-000000000001", "Executor.Connected", "a NUL byte in hostname")
    assert e.timestamp == T0
    assert vars(replay_any(events)) == vars(s)


def test_an_org_wide_skip_has_no_application() -> None:
    s = ProjectionSkip(org="acme", app=None, projection="apps", notification_id=1, stream_id="x",
                       event_type="Token.Created", reason="r", timestamp=T0)
    assert s.app is None


def test_the_event_topic_is_the_stored_one() -> None:
    assert get_topic(ProjectionSkip.Recorded) == "relay_es.aggregates.skip:ProjectionSkip.Recorded"
