"""The application service's executor cache: fast when it is right, harmless when it is stale."""

from __future__ import annotations

from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.aggregates.executor import executor_stream_id
from relay_es.service import Relay
from tests.support import info


def two_writers(clock, store_url: str) -> tuple[Relay, Relay]:
    env = event_store_env(parse_database_url(store_url))
    return Relay(env, clock=clock), Relay(env, clock=clock)


def test_commands_run_on_the_cached_executor_without_reading_the_store(clock, store_url) -> None:
    relay, _ = two_writers(clock, store_url)
    assert relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
    sid = executor_stream_id("local", "app", "A")
    reads = []
    original = relay._event_log().event
    relay._event_log().event = lambda *a: reads.append(a) or original(*a)
    assert relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert reads == []  # served from the cache
    assert [type(e).__name__ for e in relay.stream(sid)] == ["Registered", "Connected", "Disconnected"]


def test_a_stale_cached_executor_costs_a_retry_not_a_wrong_transition(clock, store_url) -> None:
    mine, other = two_writers(clock, store_url)
    assert mine.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
    sid = executor_stream_id("local", "app", "A")
    # Another writer moves the executor on: mine still holds version 2 in its cache.
    clock.advance(1)
    assert other.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert other.executor_connected("local", "app", info("A"), connection_id="c2", owner="relay-2")
    # A command on the stale copy is refused by the store's version check, then run on what the store holds:
    # c1 is not the current connection any more, so nothing is recorded (on the stale copy it would have been).
    assert not mine.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
    assert mine.executor_disconnected(sid, connection_id="c2", reason="socket_closed")
    assert [type(e).__name__ for e in mine.stream(sid)] == [
        "Registered", "Connected", "Disconnected", "Connected", "Disconnected"]
    assert mine.get_executor("local", "app", "A").status == "DISCONNECTED"
