"""Read models: pure reducers over events, and the runner that stores them."""

from relay_es.projections.apps import AppsProjection
from relay_es.projections.audit import AuditProjection
from relay_es.projections.executors import ExecutorsProjection


def all_projections() -> list:
    return [ExecutorsProjection(), AuditProjection(), AppsProjection()]
