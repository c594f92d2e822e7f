"""What the REST API is given: a frozen context whose few moving parts belong to it alone, its
defaults, and the handlers' ``ctx`` (the object itself, not a validated copy)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from litestar import Litestar, get
from litestar.di import Provide
from litestar.testing import TestClient

from relay_es.adapters.rest.context import Context, RestContext, Tally
from relay_es.domain.defaults import METRICS_RETENTION
from tests.adapters.rest.fakes import fake_context


def test_the_context_is_frozen_but_its_tally_moves() -> None:
    ctx = fake_context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.auth = True  # type: ignore[misc]
    ctx.apps_gone.value += 1
    ctx.apps_gone.value += 1
    assert ctx.apps_gone == Tally(2)


def test_two_contexts_share_no_memory() -> None:
    """What a process remembers of latest versions and deleted applications is its own context's:
    a default shared between instances would carry one context's memory into another."""
    a, b = fake_context(), fake_context()
    a.latest_versions[("acme", "orders")] = ("v2", 1.0)
    a.latest_changes[("acme", "orders")] = 1
    a.apps_gone.value = 3
    assert b.latest_versions == {} and b.latest_changes == {} and b.apps_gone.value == 0


def test_the_defaults() -> None:
    ctx = fake_context()
    assert ctx.executor_here("acme", "orders", "e1") is False  # no hub: no socket here
    assert ctx.readiness() is None  # ready
    assert ctx.call_timeout == timedelta(seconds=20)
    assert ctx.metrics_interval == 300
    assert ctx.metrics_retention == METRICS_RETENTION.total_seconds()
    assert ctx.series is None and ctx.oidc is None


def test_a_handler_is_given_the_context_itself() -> None:
    ctx = fake_context(instance="this-one")
    seen: list[Any] = []

    @get("/ctx")
    async def handler(ctx: Context) -> dict[str, str]:
        seen.append(ctx)
        return {"instance": ctx.instance}

    app = Litestar([handler], dependencies={"ctx": Provide(lambda: ctx, use_cache=True, sync_to_thread=False)})
    with TestClient(app) as c:
        assert c.get("/ctx").json() == {"instance": "this-one"}
    assert len(seen) == 1 and seen[0] is ctx and isinstance(seen[0], RestContext)
