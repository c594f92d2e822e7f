"""Helpers of the engine's command tests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from relay_es.engine.service import Relay


def kinds(relay: Relay, stream_id: uuid.UUID) -> list[str]:
    """The names of a stream's events, oldest first."""
    return [type(e).__name__ for e in relay.stream(stream_id)]


def stale_once(relay: Relay, monkeypatch: pytest.MonkeyPatch, stream_id: uuid.UUID, stale: Any) -> list[int]:
    """The next read of ``stream_id`` answers ``stale`` (what another writer had not yet changed), as if
    the read had happened just before that writer's save; every later read is the store's."""
    real = relay._maybe
    reads: list[int] = []

    def maybe(aggregate_id: uuid.UUID) -> Any:
        if aggregate_id == stream_id:
            reads.append(1)
            if len(reads) == 1:
                return stale
        return real(aggregate_id)

    monkeypatch.setattr(relay, "_maybe", maybe)
    return reads
