"""Autoscaling recommendations (Conductor's ``getAutoscale``), computed from what the
application's executors report (pure: no I/O, no clock).

For each version reported -- the latest, then up to the rollout's ``max_old_versions`` older ones,
newest registered first (all of them when the policy has no rollout) -- the backlog is its
ENQUEUED and PENDING workflows on the policy's queue (the latest's also counts those enqueued
without a version: DBOS runs them on the latest version's executors), and the executors it
needs are ``ceil(backlog / worker_concurrency)``, at least 1; an old version's is then capped by the
rollout's ``max_old_executors`` (which may be 0). A queue that is gone, partitioned or without a
worker concurrency is not usable: the versions are still reported, each needing 1, without a
queue name. Relay recommends; it never starts or stops an executor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relay_es.domain.autoscaling import AutoscalingPolicy

BACKLOG = ("ENQUEUED", "PENDING")  # the statuses a version's backlog counts
MAX_VERSIONS = 1000  # versions looked at, the most recently made latest first (an executor's list is its word)


@dataclass(frozen=True)
class Version:
    """A registered application version: its name, when it was registered and when it was last
    made the latest (epoch ms, as the executors' registry has them)."""

    name: str
    created_at: int
    timestamp: int


@dataclass(frozen=True)
class Queue:
    """What a recommendation needs of a queue (an executor's ``list_queues`` entry)."""

    name: str
    worker_concurrency: int | None
    partitioned: bool


@dataclass(frozen=True)
class Recommendation:
    version: str
    is_latest: bool
    desired: int
    backlog: int
    queue: str | None  # None: the policy's queue is not usable


def unusable(queue: Queue | None) -> str | None:
    """Why a queue cannot drive a policy, or None when it can."""
    if queue is None:
        return "is not registered by the application"
    if queue.partitioned:
        return "is partitioned"
    if queue.worker_concurrency is None or queue.worker_concurrency < 1:
        return "has no worker concurrency"
    return None


def reported(policy: AutoscalingPolicy, versions: Sequence[Version]) -> list[Version]:
    """The versions a recommendation covers: the latest (the highest timestamp) first, then the
    old ones the rollout lets in, newest registered first."""
    by_name: dict[str, Version] = {}
    for v in versions:  # a name listed twice counts once, as its latest entry
        if v.name not in by_name or (v.timestamp, v.created_at) > (by_name[v.name].timestamp, by_name[v.name].created_at):
            by_name[v.name] = v
    unique = sorted(by_name.values(), key=lambda v: (-v.timestamp, -v.created_at, v.name))[:MAX_VERSIONS]
    if not unique:
        return []
    latest = unique[0]
    old = sorted(unique[1:], key=lambda v: (-v.created_at, -v.timestamp, v.name))
    if policy.rollout is not None:
        old = old[:policy.rollout.max_old_versions or 0]
    return [latest, *old]


def recommend(policy: AutoscalingPolicy, versions: Sequence[Version], queue: Queue | None,
              backlog: Mapping[str | None, int]) -> list[Recommendation]:
    """One recommendation per version :func:`reported` covers; ``backlog``: ENQUEUED and PENDING
    workflows on the policy's queue by application version (None: enqueued without one)."""
    usable = unusable(queue) is None
    out = []
    for i, v in enumerate(reported(policy, versions)):
        depth = max(0, backlog.get(v.name, 0)) + (max(0, backlog.get(None, 0)) if i == 0 else 0)
        wc = queue.worker_concurrency if usable and queue is not None else None
        desired = max(1, -(-depth // wc)) if wc else 1
        if i > 0 and policy.rollout is not None and policy.rollout.max_old_executors is not None:
            desired = min(desired, policy.rollout.max_old_executors)
        out.append(Recommendation(v.name, i == 0, desired, depth, policy.queue if usable else None))
    return out
