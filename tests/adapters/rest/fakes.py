"""A :class:`RestContext` of fakes, for building the REST API without a runtime."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from relay_es.adapters.metrics import Metrics
from relay_es.adapters.rest import RestContext


class Calls:
    """Records the calls the REST API makes to the context's callbacks."""

    def __init__(self) -> None:
        self.made: list[tuple[Any, ...]] = []

    def __call__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.made.append((name, *args))

        return record


class ActionRecords:
    """What a fake relay offers the routes that put operator actions on record: each record
    kept in ``records`` as ``(kind, operation or outcome)``."""

    @property
    def records(self) -> list[tuple[str, Any]]:
        return self.__dict__.setdefault("_records", [])

    def record_action_requested(self, org: str, app: str | None, **kw: Any) -> str:
        self.records.append(("requested", kw["operation"]))
        return f"action-{len(self.records)}"

    def record_action_completed(self, action_id: str, **kw: Any) -> bool:
        self.records.append(("completed", str(kw["outcome"])))
        return True

    def record_action_refused(self, org: str, app: str | None, **kw: Any) -> str:
        self.records.append(("refused", kw["operation"]))
        return f"action-{len(self.records)}"

    @contextmanager
    def recording_change(self, org: str, app: str | None, **kw: Any) -> Iterator[str]:
        """The real one writes both in the change's transaction; here, both in order."""
        self.records.append(("requested", kw["operation"]))
        try:
            yield f"action-{len(self.records)}"
        except BaseException:
            self.records.append(("completed", "failed"))
            raise
        self.records.append(("completed", "succeeded"))


def fake_context(**given: Any) -> RestContext:
    """Development mode on 127.0.0.1, no store (``relay`` and ``db`` None), no hub (``calls`` None),
    fresh metrics; ``given`` overrides."""

    async def on_shutdown() -> None:
        pass

    fields: dict[str, Any] = dict(
        relay=None, db=None, credentials=None, read_your_writes=lambda: None, app_deleted=lambda org, app: None,
        token_revoked=lambda org, token: None, urgent=lambda: False, metrics=Metrics(), faults=lambda: [], auth=False,
        host="127.0.0.1", instance="test-instance", store_kind="sqlite", default_executor_timeout=timedelta(seconds=60),
        on_startup=lambda: None, on_shutdown=on_shutdown, calls=None,
    )
    fields.update(given)
    return RestContext(**fields)
