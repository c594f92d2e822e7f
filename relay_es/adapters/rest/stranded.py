"""Stranded work, Relay's own: PENDING workflows whose executor is not alive, and their fixes (issue 13; being written)."""

from __future__ import annotations

from litestar import Controller

from relay_es.adapters.rest.paths import APP


class StrandedController(Controller):
    path = APP + "/stranded-workflows"
