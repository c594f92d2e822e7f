"""Read-model storage: each read model's tables (one module each), the tracking table,
and :class:`ReadModelStore`, the port the projection runner and the queries use.

The projections (``relay_es.projections``) fold events into rows in memory; the
modules here hold every SQL statement that creates, writes and reads those rows.

* :mod:`~relay_es.adapters.readmodels.executors` -- ``relay_executors``, one row per executor stream;
* :mod:`~relay_es.adapters.readmodels.audit` -- the lifecycle feed's tables, ``relay_audit`` and
  ``relay_audit_streams``;
* :mod:`~relay_es.adapters.readmodels.apps` -- ``relay_apps`` and ``relay_tokens``;
* :mod:`~relay_es.adapters.readmodels.actions` -- the audit log's table, ``relay_actions``;
* :mod:`~relay_es.adapters.readmodels.tracking` -- ``relay_tracking`` (each read model's position
  in the log) and ``relay_versions`` (the stored form of its tables);
* :mod:`~relay_es.adapters.readmodels.bulk` -- many rows written at once, the same on both stores;
* :mod:`~relay_es.adapters.readmodels.follower` -- the read models followed in a process of their
  own (``relay serve``, ADR 8);
* :mod:`~relay_es.adapters.readmodels.rebuild` -- ``relay projections rebuild``, and a server's
  start on read models far behind: filled from the event store, one process per share of the
  streams;
* :mod:`~relay_es.adapters.readmodels.children` -- what each of those processes does first: end
  with its parent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from relay_es.adapters.failures import is_data_error
from relay_es.adapters.readmodels import actions, apps, audit, executors, tracking
from relay_es.projections.actions import ActionRow
from relay_es.projections.apps import AppRow, TokenRow
from relay_es.projections.audit import AuditEntry
from relay_es.projections.executors import ExecutorRow

# Each read model's tables, by the projection's NAME (relay_es.projections.NAMES).
TABLES = {t.name: t for t in (executors.ExecutorsTable(), audit.AuditTable(), apps.AppsTable(),
                               actions.ActionsTable())}


class ReadModelStore:
    """What a :class:`~relay_es.adapters.stores.Database` offers the read models (a mixin:
    it uses only the database's ``read()`` and ``dialect``).

    The projection runner's storage (``relay_es.projections.runner.ReadModelStore``):
    tables by name, the tracking positions; and the queries the REST API and the
    engine read the tables with.
    """

    dialect: str

    # ------------------------------------------------------------- runner
    def table(self, name: str) -> Any:
        return TABLES[name]

    @staticmethod
    def is_data_error(e: BaseException) -> bool:
        return is_data_error(e)

    def create_tracking(self, cur: Any, names: Iterable[str]) -> None:
        if self.dialect == "sqlite":
            cur.execute("PRAGMA threads = 4")  # sorts for CREATE INDEX on helper threads
        tracking.create(cur, names)

    def positions(self, cur: Any) -> dict[str, int]:
        return tracking.positions(cur)

    def outdated(self, cur: Any, versions: dict[str, int]) -> list[str]:
        return tracking.outdated(cur, versions, {name: table.tables for name, table in TABLES.items()})

    def record_versions(self, cur: Any, versions: dict[str, int]) -> None:
        tracking.record_versions(cur, versions)

    def lock_positions(self, cur: Any) -> dict[str, int]:
        return tracking.lock_positions(cur)

    def move(self, cur: Any, name: str, pos: int, last: int) -> bool:
        return tracking.move(cur, name, pos, last)

    def reset_position(self, cur: Any, name: str) -> None:
        tracking.reset(cur, name)

    # ------------------------------------------------------------ queries
    def executor_rows(self, *, org: str | None = None, app: str | None = None) -> list[ExecutorRow]:
        return executors.all_rows(self, org=org, app=app)

    def executor_row(self, stream_id: UUID | str) -> ExecutorRow | None:
        return executors.get_row(self, stream_id)

    def list_apps(self, org: str, *, include_deleted: bool = False) -> list[AppRow]:
        return apps.list_apps(self, org, include_deleted=include_deleted)

    def list_tokens(self, org: str) -> list[TokenRow]:
        return apps.list_tokens(self, org)

    def token_by_hash(self, secret_hash: str) -> TokenRow | None:
        return apps.token_by_hash(self, secret_hash)

    def audit_entries(self, *, org: str, app: str | None = None, executor_id: str | None = None,
                      after: int | None = None, limit: int = 100, folded: bool = False,
                      tokens: bool = True) -> list[AuditEntry]:
        return audit.query(self, org=org, app=app, executor_id=executor_id, after=after, limit=limit, folded=folded,
                           tokens=tokens)

    def recoveries(self, *, org: str, app: str, start_us: int, end_us: int, width_us: int) -> list[tuple[int, int]]:
        return audit.recoveries(self, org=org, app=app, start_us=start_us, end_us=end_us, width_us=width_us)

    def action_rows(self, *, org: str, start: datetime | None = None, end: datetime | None = None,
                    operation: str | None = None, subject: str | None = None, target: str | None = None,
                    limit: int = 100, offset: int = 0) -> list[ActionRow]:
        return actions.query(self, org=org, start=start, end=end, operation=operation, subject=subject,
                             target=target, limit=limit, offset=offset)


__all__: Sequence[str] = ("TABLES", "ReadModelStore", "actions", "apps", "audit", "executors", "tracking")
