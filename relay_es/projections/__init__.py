"""Read models: pure folds over events (one module each), and the runner that stores them.

The one list of read models: the runner and ``relay projections rebuild`` take
their names from here. Their tables are stored by :mod:`relay_es.adapters.readmodels`.
"""

from relay_es.projections.actions import ActionsProjection
from relay_es.projections.apps import AppsProjection
from relay_es.projections.audit import AuditProjection
from relay_es.projections.executors import ExecutorsProjection

PROJECTIONS = (ExecutorsProjection, AuditProjection, AppsProjection, ActionsProjection)
NAMES = tuple(p.NAME for p in PROJECTIONS)


def all_projections() -> list:
    """A fresh instance of every read model (each holds a cache between batches)."""
    return [p() for p in PROJECTIONS]
