"""Application versions: list and set latest (issue 13; being written)."""

from __future__ import annotations

from litestar import Controller

from relay_es.adapters.rest.paths import APP


class VersionsController(Controller):
    path = APP + "/versions"
