"""An application's metrics, Conductor's ``listMetrics``: ``GET .../apps/{app}/metrics``.

``startTime`` and ``endTime`` (RFC 3339, both required) choose the buckets that start in
``[startTime, endTime)``. Each ``Metric`` is one bucket of one series: ``timeBucket`` its
start, ``granularity`` its length in seconds (``RELAY_METRICS_INTERVAL_SECS``, 300 by
default), ``value`` its count:

* ``workflow_count`` (workflows started, per workflow name) and ``step_count`` (steps
  completed, per step function) as the application's executors reported them
  (``get_metrics``, collected by ``adapters/hub/harvest.py`` into ``adapters/series.py``);
* ``recovery_count``, Relay's own: executors of the application whose recovery Relay
  confirmed, counted from the lifecycle feed (``recovery.confirmed``), named ``recovery``.

The executors' counts of windows that started before the retention
(``RELAY_METRICS_RETENTION_SECS``, back from now) are not answered, pruned yet or not.

Ordered by bucket, then type, then name. An answer holds at most :data:`MAX_POINTS`
metrics: a window holding more is answered in the narrowest wider buckets that fit (2, 4, 8...
periods, aligned on the epoch, each metric's ``granularity`` saying so; the width is chosen from
each window's size and, only where names change from window to window, one query counting the metrics
of every width), the counts added up: each wide bucket adds up
the periods of it that start in ``[startTime, endTime)``, recoveries as the executors' counts, so
the first may start before ``startTime`` and the last hold less than its width. ``appId`` is the
application's id, as ``getApp`` tells it; recoveries and the executors' counts count from its
registration (a deleted application's do not carry over to a new one of the same name).
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec
from litestar import Controller, get
from litestar.params import FromPath, QueryParameter

from relay_es.adapters.rest.applications import find_app
from relay_es.adapters.rest.context import Context, RestContext
from relay_es.adapters.rest.paths import APP
from relay_es.domain import units
from relay_es.domain.errors import InvalidSetting

MAX_POINTS = 50_000
US = 1_000_000
RECOVERY = ("recovery_count", "recovery")  # Relay's own series: (metricType, metricName)


class Metric(msgspec.Struct, rename="camel"):
    app_id: str
    metric_type: str
    metric_name: str
    granularity: int
    time_bucket: str
    value: int


def _instant(name: str, text: str) -> float:
    if len(text) > 64:
        raise InvalidSetting(name, "must be an RFC 3339 timestamp")
    return units.parse_rfc3339(name, text).timestamp()


class MetricsController(Controller):
    path = APP + "/metrics"

    @get("/", sync_to_thread=True, operation_id="listMetrics", summary="List metrics")
    def list_metrics(
        self, org: FromPath[str], app: FromPath[str], ctx: Context,
        start_time: Annotated[str, QueryParameter(name="startTime", required=True,
                                                  schema_extra={"format": "date-time"})],
        end_time: Annotated[str, QueryParameter(name="endTime", required=True,
                                                schema_extra={"format": "date-time"})],
    ) -> list[Metric]:
        start, end = _instant("startTime", start_time), _instant("endTime", end_time)
        if end <= start:
            raise InvalidSetting("endTime", "must be later than startTime")
        row = find_app(ctx.db, org, app)
        first, stop = math.ceil(start), math.ceil(end)  # whole seconds: a bucket starting in [start, end)
        period = ctx.metrics_interval
        since = max(first, math.ceil(row.created_at.timestamp()))
        # The executors' counts answered: within the retention (older ones are pruned), from the registration's
        # second on (none is collected before it: a deleted application's of that name are not this one's).
        kept = max(int(ctx.relay.clock.now().timestamp() - ctx.metrics_retention),
                   math.floor(row.created_at.timestamp()))
        out = _points(ctx, org, app, first, stop, since, kept, period, None)
        if len(out) > MAX_POINTS:  # too many: buckets 2, 4, 8... periods wide, the narrowest that fits
            out = _widened(ctx, org, app, first, stop, since, kept, period)
            if out is None:  # one bucket and still too many names
                raise InvalidSetting("endTime", f"the window holds more than {MAX_POINTS} series: ask a narrower one")
        out.sort()
        return [Metric(app_id=row.stream_id, metric_type=t, metric_name=name, granularity=g,
                       time_bucket=units.rfc3339(units.from_epoch_us(b * US)) or "", value=v)
                for b, t, name, g, v in out]


def _points(ctx: RestContext, org: str, app: str, first: int, stop: int, since: int, kept: int, period: int,
            width: int | None) -> list[tuple[int, str, str, int, int]]:
    """``(bucket, type, name, granularity, value)`` of the buckets starting in ``[first, stop)``
    (``width``: added up into buckets that wide), samples since ``kept``, recoveries since ``since``;
    at most one more than :data:`MAX_POINTS`."""
    found = ([] if ctx.series is None else
             ctx.series.query(org, app, max(first, kept), stop, limit=MAX_POINTS + 1, width=width))
    out = [(p.bucket, p.metric_type, p.metric_name, p.granularity, p.value) for p in found]
    w = width or period
    counts = ctx.db.recoveries(org=org, app=app, width_us=w * US, **_recovered(first, stop, since, period))
    out += [(b // US, *RECOVERY, w, n) for b, n in counts]
    return out[:MAX_POINTS + 1]


def _recovered(first: int, stop: int, since: int, period: int) -> dict[str, int]:
    """Where recoveries are counted: the periods starting in [first, stop), as the executors' counts are
    chosen, added up in wider buckets as theirs are (recoveries of a wider bucket's first periods were left
    out, its others counted past stop)."""
    lo, hi = -(-first // period) * period, -(-stop // period) * period
    return {"start_us": max(lo, since) * US, "end_us": hi * US}


def _widened(ctx: RestContext, org: str, app: str, first: int, stop: int, since: int, kept: int,
             period: int) -> list[tuple[int, str, str, int, int]] | None:
    """:func:`_points` in the narrowest of 2, 4, 8... periods (up to the first as wide as the window)
    whose buckets hold at most :data:`MAX_POINTS` metrics, or None. A bucket holds at least as many as
    its fullest window: the first width that allows is asked; only if it holds more (names that change
    from window to window), the metrics of each wider one are counted, in one query."""
    widths = [2 * period]
    while widths[-1] < stop - first:
        widths.append(2 * widths[-1])
    sizes = [] if ctx.series is None else ctx.series.sizes(org, app, max(first, kept), stop)
    recovered = [b for b, _ in ctx.db.recoveries(org=org, app=app, width_us=period * US,
                                                 **_recovered(first, stop, since, period))]

    def recoveries(width: int) -> int:
        return len({b // (width * US) for b in recovered})

    def least(width: int) -> int:
        fullest: dict[int, int] = {}
        for bucket, n in sizes:
            fullest[bucket // width] = max(fullest.get(bucket // width, 0), n)
        return sum(fullest.values()) + recoveries(width)

    widths = [w for w in widths if least(w) <= MAX_POINTS]
    if not widths:
        return None
    out = _points(ctx, org, app, first, stop, since, kept, period, widths[0])
    if len(out) <= MAX_POINTS:
        return out
    wider = widths[1:]
    counted = [0] * len(wider) if ctx.series is None else ctx.series.counts(org, app, max(first, kept), stop, wider)
    for width, n in zip(wider, counted):
        if n + recoveries(width) <= MAX_POINTS:
            return _points(ctx, org, app, first, stop, since, kept, period, width)
    return None
