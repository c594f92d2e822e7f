"""Which executor a call goes to. Pure: the hub describes its connections as
:class:`Candidate` values and :func:`choose` picks one.

Rules, in order:

1. Only candidates that can take a call are considered: the hub lists the registered, open
   connections of the application on this instance (HEALTHY executors connected here). None:
   :class:`~relay_es.engine.calls.NoHealthyExecutor`.
2. Where the operation cares about versions (``prefer_latest``: resume, fork), only executors
   of the *latest* application version among the candidates are considered:

   * ``latest_version``, when given and some candidate runs it -- the version a user made
     latest (Conductor's ``setLatestAppVersion``; the executors' own registry, section 5.20 of
     the protocol reference, gives it the newest ``version_timestamp``);
   * otherwise the **newest registered version**: the version whose earliest-registered
     candidate registered last (``first_seen``; a candidate not yet recorded counts as just
     registered). An executor of an old version that reconnects, or one started late by an
     autoscaler, does not make its version newer: a version is as old as its oldest running
     executor. Ties go to the greater version string, so the choice is stable.

   Without ``prefer_latest`` every candidate is considered.
3. Among those, the candidates with the fewest calls in flight (a Python executor answers one
   message at a time), and among equals the ``turn``-th in the order of their ids: a caller
   that passes a counter spreads its calls over equally good executors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from relay_es.engine.calls import NoHealthyExecutor


@dataclass(frozen=True)
class Candidate:
    id: str
    """The connection's id: what the hub calls."""
    executor_id: str
    version: str | None
    """The executor's ``application_version``."""
    first_seen: float | None = None
    """When Relay first registered this executor (any clock, the same for every candidate);
    None: not yet recorded, counted as newest."""
    in_flight: int = 0
    """Calls sent to it and not yet answered."""


def latest(candidates: Sequence[Candidate], latest_version: str | None = None) -> str | None:
    """The latest application version among ``candidates`` (rule 2 above)."""
    versions = {c.version for c in candidates}
    if latest_version is not None and latest_version in versions:
        return latest_version
    since: dict[str | None, float] = {}
    for c in candidates:
        t = math.inf if c.first_seen is None else c.first_seen
        since[c.version] = min(since.get(c.version, math.inf), t)
    if not since:
        return None
    return max(since, key=lambda v: (since[v], v or ""))


def choose(org: str, app: str, candidates: Sequence[Candidate], *, turn: int = 0, prefer_latest: bool = False,
           latest_version: str | None = None) -> Candidate:
    """The candidate a call of ``org``/``app`` goes to; raises
    :class:`~relay_es.engine.calls.NoHealthyExecutor` when there is none."""
    pool = list(candidates)
    if not pool:
        raise NoHealthyExecutor(org, app)
    if prefer_latest:
        version = latest(pool, latest_version)
        pool = [c for c in pool if c.version == version]
    fewest = min(c.in_flight for c in pool)
    ties = sorted((c for c in pool if c.in_flight == fewest), key=lambda c: c.id)
    return ties[turn % len(ties)]
