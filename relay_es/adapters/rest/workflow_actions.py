"""Workflow actions: cancel, resume, fork, delete, the bulk forms, export and import (issue 13; being written)."""

from __future__ import annotations

from litestar import Controller

from relay_es.adapters.rest.paths import APP


class WorkflowActionsController(Controller):
    path = APP + "/workflows"
