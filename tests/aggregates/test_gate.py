"""The Gate aggregate: an org's record of refused executor handshakes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from eventsourcing.utils import get_topic

from relay_es.aggregates.gate import Gate, gate_stream_id
from tests.aggregates.support import replay_any

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def test_one_stream_per_org() -> None:
    assert gate_stream_id("acme") == gate_stream_id("acme")
    assert gate_stream_id("acme") != gate_stream_id("other")
    g = Gate(org="acme", timestamp=T0)
    assert g.id == gate_stream_id("acme")
    assert (g.org, g.refusals) == ("acme", 0)


def test_a_refusal_counts_itself_and_those_left_out() -> None:
    g = Gate(org="acme", timestamp=T0)
    g.refuse(app="orders", peer="10.0.0.1", status=401, reason="unknown key", suppressed=0, at=T0)
    g.refuse(app="orders", peer="10.0.0.1", status=401, reason="unknown key", suppressed=41,
             at=T0 + timedelta(seconds=60))
    assert g.refusals == 1 + 42
    events: list[Any] = g.collect_events()
    assert [type(e).__name__ for e in events] == ["Opened", "Refused", "Refused"]
    last = events[-1]
    assert (last.app, last.peer, last.status, last.reason, last.suppressed) == (
        "orders", "10.0.0.1", 401, "unknown key", 41)
    assert last.timestamp == T0 + timedelta(seconds=60)
    assert vars(replay_any(events)) == vars(g)


def test_the_event_topics_are_the_stored_ones() -> None:
    # Persisted in every store: renaming or moving the class makes old streams unreadable.
    assert get_topic(Gate.Opened) == "relay_es.aggregates.gate:Gate.Opened"
    assert get_topic(Gate.Refused) == "relay_es.aggregates.gate:Gate.Refused"
