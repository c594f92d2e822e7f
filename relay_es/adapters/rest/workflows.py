"""Workflows: list, search, get, steps, events, notifications, streams, aggregates (issue 13; being written)."""

from __future__ import annotations

from litestar import Controller

from relay_es.adapters.rest.paths import APP


class WorkflowsController(Controller):
    path = APP + "/workflows"
