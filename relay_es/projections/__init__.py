"""Read models: pure folds over events (one module each), and the runner that stores them.

The one list of read models: the runner and ``relay projections rebuild`` take
their names from here. Their tables are stored by :mod:`relay_es.adapters.readmodels`.

* :mod:`~relay_es.projections.executors` -- the executors table: one row per executor stream
  (also the table as of a past instant, and the process manager's view at start-up);
* :mod:`~relay_es.projections.audit` -- the lifecycle feed (read model ``audit``): one entry per
  recorded transition;
* :mod:`~relay_es.projections.apps` -- the applications and tokens tables;
* :mod:`~relay_es.projections.actions` -- the audit log: one row per operator action;
* :mod:`~relay_es.projections.runner` -- follows the notification log and writes every read
  model's rows and position in one transaction, skipping a poison event (ADR 16);
* :mod:`~relay_es.projections.storable` -- what a read model can hold, decided before the store
  sees it (``Unstorable``);
* :mod:`~relay_es.projections.unreadable` -- a stored event that cannot be decoded, in its place
  in the log;
* :mod:`~relay_es.projections.shares` -- a share of the event streams, the unit a rebuild hands
  to each of its processes.
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
