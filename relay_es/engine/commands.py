"""The command bus: many commands, one transaction.

An :class:`Op` is one command on one aggregate. :func:`execute` loads every
aggregate the ops touch (one query for those not cached), runs the ops in
order, and saves all their events in **one** save. If the save conflicts
(another writer touched one of the aggregates), every op is run again on its
own, each with its own retries. :func:`single` turns an op factory into the
method that runs one op alone.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from relay_es.domain.errors import DomainError

if TYPE_CHECKING:
    from relay_es.engine.service import Relay

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Op:
    """One command on one aggregate, to be run in a batch.

    ``run(aggregate_or_None, batch)`` applies the domain command to the
    aggregate (creating it if it returns a new one) and returns the aggregate
    to save, or ``None`` when there is nothing to do. A domain refusal
    (``IllegalTransition``) makes the op a no-op. ``run`` keeps no reference to the aggregate it
    returns: once saved, it is cached as it is (``Relay.save_handed_over``), and a change made to it
    later would be a change to the cache.
    """

    stream_id: UUID
    run: Callable[[Any, "Batch"], Any]


class Batch:
    """What the ops of one batch share: application settings read once."""

    def __init__(self, relay: "Relay") -> None:
        self.relay = relay
        self._grace: dict[tuple[str, str], timedelta] = {}

    def grace_for(self, org: str, app: str) -> timedelta:
        key = (org, app)
        if key not in self._grace:
            self._grace[key] = self.relay.grace_for(org, app)
        return self._grace[key]


Recorded = list[tuple[int, str, Any]]  # (notification id, stream id, domain event) of what was saved


def execute(relay: "Relay", ops: list[Op], recorded: Recorded | None = None) -> list[bool]:
    """Runs ``ops`` and saves all their events in one transaction; per op, whether it recorded anything.
    ``recorded``: every event saved is appended to it, as the log will give it back (its notification id,
    its stream id), so that a caller following the log can fold what it recorded at once."""
    if not ops:
        return []
    try:
        return _execute_once(relay, ops, recorded)
    except IntegrityError:
        if len(ops) == 1:
            return relay.retrying(lambda: _execute_once(relay, ops, recorded))
        # Another writer saved one of these aggregates after they were loaded (the cache has forgotten
        # the batch's). Each half runs again on what the store holds, in order: a conflict costs a few
        # smaller transactions, not one per op (a batch of 19,500 orphans meeting the hub's reconnects
        # went one by one for minutes).
        half = len(ops) // 2
        log.info("conflict in a batch of %d; running it again in halves", len(ops))
        return execute(relay, ops[:half], recorded) + execute(relay, ops[half:], recorded)


def _execute_once(relay: "Relay", ops: list[Op], recorded: Recorded | None = None) -> list[bool]:
    aggregates = relay.load_many(list(dict.fromkeys(op.stream_id for op in ops)))
    batch = Batch(relay)
    results: list[bool] = []
    touched: dict[UUID, Any] = {}
    for op in ops:
        current = aggregates.get(op.stream_id)
        try:
            result = op.run(current, batch)
        except DomainError as e:
            log.debug("command ignored: %s", e)
            results.append(False)
            continue
        if result is None:
            results.append(False)
            continue
        aggregates[op.stream_id] = result
        touched[op.stream_id] = result
        results.append(True)
    if touched:
        recordings = relay.save_handed_over(*touched.values())  # the batch's alone (see Op): cached as they are
        if recorded is not None:
            recorded.extend((r.notification.id, str(r.domain_event.originator_id), r.domain_event)
                            for r in recordings)
    return results


def single(make_op: Callable[..., Op]) -> Callable[..., bool]:
    """The method that runs the op ``make_op`` makes, alone: True if it recorded anything.
    Same parameters as the op factory."""

    def run_one(self: Any, *args: Any, **kwargs: Any) -> bool:
        return self.execute([make_op(self, *args, **kwargs)])[0]

    run_one.__name__ = run_one.__qualname__ = f"{make_op.__name__}_alone"
    run_one.__signature__ = inspect.signature(make_op).replace(return_annotation=bool)  # type: ignore[attr-defined]
    run_one.__doc__ = f"Runs :meth:`{make_op.__name__}` alone; True if it recorded anything."
    return run_one
