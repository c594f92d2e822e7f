"""A stored event that cannot be decoded (``relay_es/projections/unreadable.py``).

What it carries and how it reads in a log; then, on every store, that a reader
asking for them gets one in the event's place in the notification log (its
stream, version, topic and the decoding error), the events around it decoded
as usual, while a reader that did not ask gets the error. How the projection
runner skips and reports them is ``test_poison.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import StoredEvent

from relay_es.projections.unreadable import Unreadable
from tests.support import World, info

BAD_STATE = "relay_es.aggregates.executor:Executor.Registered"
GONE = "relay_es.gone:Thing.Happened"  # a class no longer in the code


def test_it_carries_where_it_was_and_why_it_cannot_be_read() -> None:
    sid, error = UUID(int=7), ValueError("Expecting value: line 1 column 1")
    u = Unreadable(sid, 3, GONE, error)
    assert (u.originator_id, u.originator_version, u.topic, u.error) == (sid, 3, GONE, error)
    assert repr(u) == (f"Unreadable('{GONE}' v3 of {sid}: ValueError('Expecting value: line 1 column 1'))")


def test_it_is_only_what_it_carries() -> None:
    """No attributes of a domain event (a reader cannot mistake it for one) and no others can be added."""
    u = Unreadable(uuid4(), 1, GONE, KeyError("x"))
    assert not hasattr(u, "__dict__")
    for name in ("timestamp", "originator_topic", "org", "app"):
        assert not hasattr(u, name)
    with pytest.raises(AttributeError):
        u.timestamp = None  # type: ignore[attr-defined]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def world(request: pytest.FixtureRequest, clock, tmp_path) -> Iterator[World]:
    """The in-memory store, and each real one."""
    url = {"memory": None, "sqlite": f"sqlite:///{tmp_path}/relay.db"}.get(request.param)
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    w = World(clock, url)
    yield w
    w.close()


def test_a_reader_that_asks_gets_it_in_the_event_s_place(world: World) -> None:
    before = len(world.relay.notifications(0, 1000))
    bad, gone = uuid4(), uuid4()
    world.relay.recorder.insert_events([StoredEvent(bad, 1, BAD_STATE, b"{not json"),
                                        StoredEvent(gone, 7, GONE, b"{}")])
    world.relay.executor_connected("local", "app", info("A"), connection_id="c1", owner=world.owner)

    log = world.relay.notifications(0, 1000, unreadable=True)
    assert len(log) == before + 4 and [nid for nid, _, _ in log] == sorted(nid for nid, _, _ in log)
    kinds = [type(e).__name__ for _, _, e in log[before:]]
    assert kinds == ["Unreadable", "Unreadable", "Registered", "Connected"]
    (_, sid1, u1), (_, sid2, u2) = log[before:before + 2]
    assert (sid1, u1.originator_id, u1.originator_version, u1.topic) == (str(bad), bad, 1, BAD_STATE)
    assert (sid2, u2.originator_id, u2.originator_version, u2.topic) == (str(gone), gone, 7, GONE)
    assert isinstance(u1.error, Exception) and isinstance(u2.error, Exception)
    assert "relay_es.gone" in str(u2.error)
    registered, connected = (e for _, _, e in log[before + 2:])  # the events after it, decoded as usual
    assert registered.executor_id == "A" and connected.originator_id == registered.originator_id

    with pytest.raises(Exception) as raised:  # a reader that did not ask gets the decoding error
        world.relay.notifications(0, 1000)
    assert type(raised.value) is type(u1.error)
    assert world.relay.notifications(0, before) == log[:before]  # up to it, the log reads as before
