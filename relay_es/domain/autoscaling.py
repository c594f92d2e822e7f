"""An application's autoscaling policy (Conductor's ``AutoscalePolicy``), as Relay holds it.

``queue``: the queue whose backlog drives the recommendation; ``rollout``: how the application's
older versions are treated (None: every version is sized to its own backlog).
:meth:`AutoscalingPolicy.check` is the one check of a new policy (a queue name is an identifier
without control characters, the counts whole numbers from 0 to :data:`MAX_COUNT`): the command
calls it, never the replay of a stored one, so a rule tightened later cannot make an
application's stream unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay_es.domain.errors import InvalidSetting
from relay_es.domain.text import check_id, has_controls

MAX_COUNT = 1_000_000  # old versions or executors a policy may name
MAX_QUEUE_BYTES = 256


@dataclass(frozen=True)
class Rollout:
    """``max_old_versions``: how many old versions are reported, newest registered first (None:
    0, only the latest). ``max_old_executors``: every old version's cap (None: uncapped)."""

    max_old_versions: int | None = None
    max_old_executors: int | None = None


@dataclass(frozen=True)
class AutoscalingPolicy:
    queue: str
    rollout: Rollout | None = None

    def check(self) -> AutoscalingPolicy:
        """This policy, or :class:`InvalidSetting` naming the field out of bounds."""
        check_id("queue", self.queue)
        if len(self.queue.encode("utf-8", "surrogatepass")) > MAX_QUEUE_BYTES or has_controls(self.queue):
            raise InvalidSetting("queue", f"must be a queue name: at most {MAX_QUEUE_BYTES} bytes, no control "
                                          "characters")
        if self.rollout is not None:
            for field, value in (("rollout.maxOldApplicationVersions", self.rollout.max_old_versions),
                                 ("rollout.maxExecutorsForOldApplicationVersions", self.rollout.max_old_executors)):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                          or not 0 <= value <= MAX_COUNT):
                    raise InvalidSetting(field, f"must be a whole number from 0 to {MAX_COUNT}")
        return self

    def as_dict(self) -> dict[str, object]:
        """Primitives, as the aggregate keeps it (a snapshot holds only what the transcoder knows)."""
        r = self.rollout
        return {"queue": self.queue, "rollout": None if r is None else
                {"max_old_versions": r.max_old_versions, "max_old_executors": r.max_old_executors}}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> AutoscalingPolicy:
        r = d["rollout"]
        return cls(str(d["queue"]), None if r is None else Rollout(r["max_old_versions"],  # type: ignore[index]
                                                                    r["max_old_executors"]))  # type: ignore[index]
