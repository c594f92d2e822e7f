"""Fixtures of the engine's command tests (roles, members, alerts): their logic runs on the
in-memory store (``relay``); the stores themselves are met by the two-writer and restart tests
(``two_relays``, ``store_env``), on SQLite and Postgres. ``test_store.py`` has its own ``relay``,
on all three."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay_es.adapters.stores import event_store_env, parse_database_url
from relay_es.engine.service import Relay
from tests.support import POPO


@pytest.fixture
def relay(clock) -> Iterator[Relay]:
    """One Relay on the in-memory store."""
    r = Relay(POPO, clock=clock)
    yield r
    r.close()


@pytest.fixture
def store_env(store_url: str) -> dict[str, str]:
    """One real store (a SQLite file, a Postgres database), for more than one Relay."""
    return event_store_env(parse_database_url(store_url))


@pytest.fixture
def two_relays(store_env: dict[str, str], clock) -> Iterator[tuple[Relay, Relay]]:
    """Two Relays on one real store: two writers, or one after the other's restart."""
    mine, other = Relay(store_env, clock=clock), Relay(store_env, clock=clock)
    yield mine, other
    mine.close()
    other.close()
