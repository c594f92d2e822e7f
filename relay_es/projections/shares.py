"""A share of the event streams: the unit a rebuild hands to each of its processes.

Every read model folds each stream on its own (a row per executor, application,
token or action; the audit log's entry for an event needs only its own stream's
first event), so the streams can be split between processes and each process can
fold every read model over its own streams. A :class:`StreamShare` is a range of
stream ids, read as 128-bit numbers: ``of(i, n)`` is the ``i``-th of ``n`` equal
ranges. Stream ids are UUIDs (random, or uuid5 of a name), so equal ranges hold
about equal numbers of streams. The store filters by the range in its query
(``relay_es.adapters.library.EventLog``): a process decodes its own streams' events only.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

_SPACE = 1 << 128


@dataclass(frozen=True)
class StreamShare:
    """The streams whose id, as a number, is in ``[lo, hi)``."""

    lo: int
    hi: int

    @classmethod
    def of(cls, index: int, count: int) -> StreamShare:
        """The ``index``-th (from 0) of ``count`` equal shares; together they hold every stream once."""
        if not 0 <= index < count:
            raise ValueError(f"share {index} of {count}")
        return cls(index * _SPACE // count, (index + 1) * _SPACE // count)

    def __contains__(self, stream_id: UUID) -> bool:
        return self.lo <= stream_id.int < self.hi

    @property
    def bounds(self) -> tuple[UUID | None, UUID | None]:
        """The first id in the share and the first after it; ``None`` where the share
        reaches the end of the id space (no bound to test)."""
        return (UUID(int=self.lo) if self.lo > 0 else None,
                UUID(int=self.hi) if self.hi < _SPACE else None)
