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

Ordered by bucket, then type, then name. An answer holds at most :data:`MAX_POINTS`
metrics: a window holding more is answered in wider buckets (2, 4, 8... periods, aligned on
the epoch, each metric's ``granularity`` saying so), the counts added up: each wide bucket adds up
the periods of it that start in ``[startTime, endTime)``, recoveries as the executors' counts, so
the first may start before ``startTime`` and the last hold less than its width. ``appId`` is the
application's id, as ``getApp`` tells it; recoveries count from its registration (a deleted
application's do not carry over to a new one of the same name).
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
        width = None
        while True:
            out = _points(ctx, org, app, first, stop, since, period, width)
            if len(out) <= MAX_POINTS:
                break
            if width is not None and width >= stop - first:  # one bucket and still too many names
                raise InvalidSetting("endTime", f"the window holds more than {MAX_POINTS} series: ask a narrower one")
            width = 2 * (width or period)  # too many: buckets twice as wide, until it fits
        out.sort()
        return [Metric(app_id=row.stream_id, metric_type=t, metric_name=name, granularity=g,
                       time_bucket=units.rfc3339(units.from_epoch_us(b * US)) or "", value=v)
                for b, t, name, g, v in out]


def _points(ctx: RestContext, org: str, app: str, first: int, stop: int, since: int, period: int,
            width: int | None) -> list[tuple[int, str, str, int, int]]:
    """``(bucket, type, name, granularity, value)`` of the buckets starting in ``[first, stop)``
    (``width``: added up into buckets that wide), recoveries since ``since``; at most one more
    than :data:`MAX_POINTS`."""
    found = [] if ctx.series is None else ctx.series.query(org, app, first, stop, limit=MAX_POINTS + 1, width=width)
    out = [(p.bucket, p.metric_type, p.metric_name, p.granularity, p.value) for p in found]
    w = width or period
    # the periods starting in [first, stop), as the executors' counts are chosen, added up in w-wide buckets
    # as theirs are (recoveries of a wider bucket's first periods were left out, its others counted past stop)
    lo, hi = -(-first // period) * period, -(-stop // period) * period
    counts = ctx.db.recoveries(org=org, app=app, start_us=max(lo, since) * US, end_us=hi * US, width_us=w * US)
    out += [(b // US, *RECOVERY, w, n) for b, n in counts]
    return out[:MAX_POINTS + 1]
