"""The events this process saved, handed to the process manager (``relay_es/engine/journal.py``):
taken by id, one after another; a gap named by the id after it; bounded."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from relay_es.engine.journal import Journal

FOLLOWED = "relay_es.aggregates.executor:Executor.Disconnected"
OTHER = "relay_es.aggregates.application:Application.Updated"
STREAM = uuid.uuid4()


@dataclass
class Notification:
    id: int
    topic: str


@dataclass
class Event:
    originator_id: uuid.UUID
    originator_version: int


@dataclass
class Recording:
    domain_event: Any
    notification: Notification


def saved(*ids: int, topic: str = FOLLOWED) -> list[Recording]:
    return [Recording(Event(STREAM, i), Notification(i, topic)) for i in ids]


def test_the_next_ids_are_taken_one_after_another_and_removed() -> None:
    j = Journal([FOLLOWED])
    j.saved(saved(1, 2, 3))
    taken, beyond = j.take(0, 2)
    assert [(nid, sid, e.originator_version) for nid, sid, e in taken] == [(1, str(STREAM), 1), (2, str(STREAM), 2)]
    assert beyond is None
    assert [nid for nid, _, _ in j.take(2, 10)[0]] == [3]
    assert j.take(3, 10) == ([], None) and len(j) == 0 and j.taken == 3


def test_a_topic_not_followed_is_held_as_its_id_so_that_it_makes_no_gap() -> None:
    j = Journal([FOLLOWED])
    j.saved(saved(1) + saved(2, topic=OTHER) + saved(3))
    assert [(nid, e is None) for nid, _, e in j.take(0, 10)[0]] == [(1, False), (2, True), (3, False)]


def test_a_gap_is_named_by_the_id_after_it_and_what_the_log_gave_is_forgotten() -> None:
    j = Journal([FOLLOWED])
    j.saved(saved(3, 4, 7))  # 1-2 another process's; 5-6 a save not handed over yet
    assert j.take(0, 10) == ([], 3)
    assert [nid for nid, _, _ in j.take(2, 10)[0]] == [3, 4]  # the log gave 1-2
    assert j.take(4, 10) == ([], 7)
    j.saved(saved(5, 6))  # handed over after the log gave them: forgotten, not taken again
    assert [nid for nid, _, _ in j.take(6, 10)[0]] == [7]
    assert j.take(7, 10) == ([], None) and len(j) == 0  # the next look finds them stale


def test_it_holds_at_most_its_capacity_and_counts_what_it_did_not_keep() -> None:
    j = Journal([FOLLOWED], capacity=3)
    j.saved(saved(1, 2, 3, 4, 5))
    assert len(j) == 3 and j.not_kept == 2
    assert [nid for nid, _, _ in j.take(0, 10)[0]] == [1, 2, 3]
    j.saved(saved(6))
    assert j.take(3, 10) == ([], 6)  # 4 and 5 come from the log
