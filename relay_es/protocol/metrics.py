"""The executors' ``get_metrics`` (protocol 5.15): the request for one window, and its
answer made fit to store.

An answer is the executor's word, so it is bounded before it is kept: each entry is read on
its own (the answer holds them unread, :class:`~relay_es.protocol.catalogue.GetMetricsResponse`),
as an object whose metric type is a short snake-case word (``workflow_count``, ``step_count``;
a newer SDK may add others), whose name is a string, at most :data:`MAX_NAME` characters with
control and format characters escaped, and whose value is a whole number in ``[0, 2**63)``.
An entry breaking these (a null or missing name, a value of ``3.0``, ``true`` or ``1e400``, an
entry that is not an object) is dropped (and counted), and so are the entries past the first
:data:`MAX_ENTRIES`, unread. Repeated ``(type, name)`` pairs are added up. At most
:data:`MAX_TYPES` types and :data:`MAX_NAMES` names per type are kept from one answer (2,000
rows a window at most); the smaller values beyond that are added up under the name
:data:`OTHER`, so the totals stay right.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from relay_es.protocol.catalogue import GetMetricsRequest, GetMetricsResponse, MetricOutput
from relay_es.protocol.limits import printable

METRIC_CLASS = "workflow_step_count"  # the only class the SDKs know
MAX_TYPE = 64
MAX_NAME = 512
MAX_TYPES = 4  # the SDKs report two
MAX_NAMES = 500
MAX_ENTRIES = 20_000  # entries of one answer looked at; the rest are refused unread
MAX_VALUE = 2**63 - 1
OTHER = "(other)"
_TYPE = re.compile(r"[a-z][a-z0-9_]*\Z")
_ENTRY = msgspec.json.Decoder(MetricOutput)


@dataclass(frozen=True)
class Sample:
    metric_type: str
    metric_name: str
    value: int


@dataclass(frozen=True)
class Samples:
    kept: list[Sample]
    dropped: int  # samples refused outright
    folded: int  # names added up under OTHER


def iso(epoch_seconds: int) -> str:
    """An instant on the wire, as the SDKs parse it (ISO 8601, UTC offset)."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat()


def request(request_id: str, start: int, end: int) -> GetMetricsRequest:
    """The request for the window ``[start, end)`` (epoch seconds), this application only."""
    return GetMetricsRequest(request_id=request_id, start_time=iso(start), end_time=iso(end),
                             metric_class=METRIC_CLASS)


def samples(answer: GetMetricsResponse) -> Samples:
    """The answer's samples fit to store: within each type, the largest first, then
    :data:`OTHER` when names were folded."""
    entries = answer.metrics or []
    dropped = max(0, len(entries) - MAX_ENTRIES)
    sums: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for raw in entries[:MAX_ENTRIES]:
        try:
            m = _ENTRY.decode(raw)
        except (msgspec.DecodeError, RecursionError):  # not an object with a string type and name, an int value
            dropped += 1
            continue
        t, name, value = m.metric_type, m.metric_name, m.value
        if (len(t) > MAX_TYPE or not _TYPE.match(t) or not 0 <= value <= MAX_VALUE
                or (t not in sums and len(sums) >= MAX_TYPES)):
            dropped += 1
            continue
        name = printable(name, MAX_NAME)
        if len(name) > MAX_NAME:  # cut short: it ends in "...", within MAX_NAME
            name = name[:MAX_NAME - 3] + "..."
        sums[t][name] = min(MAX_VALUE, sums[t][name] + value)
    kept: list[Sample] = []
    folded = 0
    for t, by_name in sums.items():
        ordered = sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0]))
        if len(ordered) > MAX_NAMES:
            top = [kv for kv in ordered if kv[0] != OTHER][:MAX_NAMES - 1]
            names = {n for n, _ in top}
            rest = [v for n, v in ordered if n not in names]
            folded += len(rest)
            ordered = [*top, (OTHER, min(MAX_VALUE, sum(rest)))]
        kept.extend(Sample(t, n, v) for n, v in ordered)
    return Samples(kept, dropped, folded)
