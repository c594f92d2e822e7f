"""The executors' get_metrics (relay_es.protocol.metrics): the request, and the answer bounded before it is kept."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import pytest

from relay_es.protocol.catalogue import (
    MAX_METRIC_ENTRIES,
    GetMetricsRequest,
    GetMetricsResponse,
    MetricOutput,
    decode_response_for,
)
from relay_es.protocol.messages import encode
from relay_es.protocol.metrics import (
    MAX_NAME,
    MAX_NAMES,
    MAX_TYPE,
    MAX_TYPES,
    MAX_VALUE,
    METRIC_CLASS,
    OTHER,
    Sample,
    iso,
    request,
    samples,
)


def m(metric_type: Any, metric_name: Any, value: Any) -> MetricOutput:
    # msgspec Structs do not validate on __init__: wrong types go through as an executor could send them
    return MetricOutput(metric_type=metric_type, metric_name=metric_name, value=value)


def answer(*metrics: MetricOutput) -> GetMetricsResponse:
    """The answer as the session decodes it: each entry's JSON, unread."""
    return GetMetricsResponse(type="get_metrics", request_id="r1",
                              metrics=[msgspec.Raw(msgspec.json.encode(x)) for x in metrics])


def kept(*metrics: MetricOutput) -> list[tuple[str, str, int]]:
    return [(s.metric_type, s.metric_name, s.value) for s in samples(answer(*metrics)).kept]


def test_the_request_asks_for_one_window_of_this_application() -> None:
    req = request("rid-1", 1_800_000_000, 1_800_000_300)
    assert isinstance(req, GetMetricsRequest)
    assert req.type == "get_metrics" and req.request_id == "rid-1"
    assert req.start_time == "2027-01-15T08:00:00+00:00"
    assert req.end_time == "2027-01-15T08:05:00+00:00"
    assert req.metric_class == METRIC_CLASS == "workflow_step_count"
    assert req.application_name is None
    assert datetime.fromisoformat(req.start_time).timestamp() == 1_800_000_000
    wire = msgspec.json.decode(encode(req))
    assert wire["start_time"].endswith("+00:00") and wire["end_time"].endswith("+00:00")
    assert wire["metric_class"] == "workflow_step_count" and wire["application_name"] is None


def test_iso_is_utc_with_an_offset() -> None:
    assert iso(0) == "1970-01-01T00:00:00+00:00"
    assert iso(86_399) == "1970-01-01T23:59:59+00:00"


def test_a_decoded_answer_is_kept_as_it_came() -> None:
    raw = {"type": "get_metrics", "request_id": "r1", "error_message": None, "metrics": [
        {"metric_type": "workflow_count", "metric_name": "checkout", "value": 7},
        {"metric_type": "step_count", "metric_name": "charge", "value": 12},
        {"metric_type": "workflow_count", "metric_name": "refund", "value": 0}]}
    got = samples(msgspec.json.decode(msgspec.json.encode(raw), type=GetMetricsResponse))
    assert got.dropped == 0 and got.folded == 0
    assert sorted(got.kept, key=lambda s: (s.metric_type, s.metric_name)) == [
        Sample("step_count", "charge", 12), Sample("workflow_count", "checkout", 7),
        Sample("workflow_count", "refund", 0)]


def test_an_entry_that_does_not_read_is_dropped_not_the_answer() -> None:
    good = '{"metric_type":"workflow_count","metric_name":"checkout","value":7}'
    bad = ['{"metric_type":"workflow_count","metric_name":null,"value":1}',  # a workflow with no name (TS)
           '{"metric_type":"workflow_count","value":1}',  # the name left out: as null
           '{"metric_type":"workflow_count","metric_name":"checkout","value":3.0}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":true}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":1e400}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":-1e400}',
           '{"metric_type":"workflow_count","metric_name":{"a":[1e400]},"value":1}',
           '{"metric_type":null,"metric_name":"checkout","value":1}', "null", "5", '"checkout"', "[[[]]]"]
    frame = ('{"type":"get_metrics","request_id":"r1","error_message":null,"metrics":[%s]}'
             % ",".join([bad[0], good, *bad[1:], good]))
    got = samples(decode_response_for("get_metrics", frame))
    assert got.kept == [Sample("workflow_count", "checkout", 14)]
    assert got.dropped == len(bad) and got.folded == 0


def test_an_answer_listing_more_entries_than_are_held_is_refused_whole() -> None:
    """Unread entries cost some 56 bytes however short: a frame of a hundred million "0," is not held."""
    frame = '{"type":"get_metrics","request_id":"r1","metrics":[%s]}'
    assert len(decode_response_for("get_metrics", frame % ",".join(["0"] * MAX_METRIC_ENTRIES)).metrics or []) \
        == MAX_METRIC_ENTRIES
    with pytest.raises(msgspec.ValidationError, match="length"):
        decode_response_for("get_metrics", frame % ",".join(["0"] * (MAX_METRIC_ENTRIES + 1)))


def test_no_metrics_is_nothing() -> None:
    for got in (samples(GetMetricsResponse(type="get_metrics", request_id="r", metrics=None)), samples(answer())):
        assert got.kept == [] and got.dropped == 0 and got.folded == 0


def test_largest_first_within_each_type() -> None:
    assert kept(m("workflow_count", "b", 1), m("workflow_count", "a", 5), m("workflow_count", "c", 5)) == [
        ("workflow_count", "a", 5), ("workflow_count", "c", 5), ("workflow_count", "b", 1)]


def test_a_newer_sdk_type_is_kept_if_well_formed() -> None:
    assert kept(m("queue_depth_2", "q", 3)) == [("queue_depth_2", "q", 3)]
    assert kept(m("a" * MAX_TYPE, "n", 1)) == [("a" * MAX_TYPE, "n", 1)]


def test_bad_types_are_dropped_and_counted() -> None:
    bad = ["", "Workflow_count", "WORKFLOW", "workflow-count", "workflow count", "1count", "_count",
           "a" * (MAX_TYPE + 1), "count\n", None, 3, b"step_count"]
    got = samples(answer(m("step_count", "ok", 1), *[m(t, "x", 1) for t in bad]))
    assert got.kept == [Sample("step_count", "ok", 1)]
    assert got.dropped == len(bad)


def test_bad_values_are_dropped_and_counted() -> None:
    bad = [-1, -(2**63), True, False, 2**63, 2**64, 1.0, 2.5, "3", None]
    got = samples(answer(*[m("step_count", f"s{i}", v) for i, v in enumerate(bad)],
                         m("step_count", "zero", 0), m("step_count", "max", MAX_VALUE)))
    assert got.kept == [Sample("step_count", "max", MAX_VALUE), Sample("step_count", "zero", 0)]
    assert got.dropped == len(bad)


def test_a_name_that_is_not_text_is_dropped() -> None:
    got = samples(answer(m("step_count", None, 1), m("step_count", 42, 1), m("step_count", "ok", 1)))
    assert got.kept == [Sample("step_count", "ok", 1)] and got.dropped == 2


def test_names_are_escaped_and_cut_to_max_name() -> None:
    got = kept(m("step_count", "a\x00b\nc\u200bd\u2028e", 1))
    assert got == [("step_count", "a\\u0000b\\u000ac\\u200bd\\u2028e", 1)]
    assert got[0][1].isprintable()
    assert kept(m("step_count", "ünïcødé ✓", 1)) == [("step_count", "ünïcødé ✓", 1)]
    assert kept(m("step_count", "", 2)) == [("step_count", "", 2)]
    exact = "n" * MAX_NAME
    assert kept(m("step_count", exact, 1)) == [("step_count", exact, 1)]
    for long in ("n" * (MAX_NAME + 1), "n" * (10 * MAX_NAME), "\x01" * MAX_NAME):
        [(_, name, _)] = kept(m("step_count", long, 1))
        assert name.isprintable()
        assert len(name) <= MAX_NAME, (len(name), name[-8:])  # "a name is at most MAX_NAME characters"


def test_repeated_pairs_are_added_up() -> None:
    got = samples(answer(m("workflow_count", "w", 2), m("step_count", "w", 10), m("workflow_count", "w", 3),
                         m("workflow_count", "w", -1)))
    assert sorted(got.kept, key=lambda s: s.metric_type) == [Sample("step_count", "w", 10),
                                                              Sample("workflow_count", "w", 5)]
    assert got.dropped == 1 and got.folded == 0
    # names that escape to the same text are one name
    assert kept(m("step_count", "a\x00", 1), m("step_count", "a\\u0000", 2)) == [("step_count", "a\\u0000", 3)]
    # a sum never goes beyond the largest value a store keeps
    assert kept(m("step_count", "big", MAX_VALUE), m("step_count", "big", MAX_VALUE)) == [
        ("step_count", "big", MAX_VALUE)]


def test_exactly_max_names_are_kept_as_they_are() -> None:
    got = samples(answer(*[m("workflow_count", f"w{i:04d}", i + 1) for i in range(MAX_NAMES)]))
    assert len(got.kept) == MAX_NAMES and got.folded == 0
    assert OTHER not in {s.metric_name for s in got.kept}


def test_beyond_max_names_the_smallest_are_added_up_under_other() -> None:
    n = MAX_NAMES + 25
    got = samples(answer(*[m("workflow_count", f"w{i:04d}", i + 1) for i in range(n)],
                         m("step_count", "s", 4)))
    wf = [s for s in got.kept if s.metric_type == "workflow_count"]
    assert len(wf) == MAX_NAMES
    named = {s.metric_name: s.value for s in wf if s.metric_name != OTHER}
    assert len(named) == MAX_NAMES - 1
    assert named == {f"w{i:04d}": i + 1 for i in range(n - (MAX_NAMES - 1), n)}  # the largest
    others = [s for s in wf if s.metric_name == OTHER]
    assert others == [Sample("workflow_count", OTHER, sum(range(1, n - (MAX_NAMES - 1) + 1)))]
    assert sum(s.value for s in wf) == sum(range(1, n + 1))  # the totals stay right
    assert got.folded == n - (MAX_NAMES - 1)
    assert [s for s in got.kept if s.metric_type == "step_count"] == [Sample("step_count", "s", 4)]
    assert got.dropped == 0


def test_an_executor_sending_other_itself_is_added_to_the_fold() -> None:
    n = MAX_NAMES + 5
    got = samples(answer(*[m("step_count", f"s{i:04d}", 10 + i) for i in range(n)],
                         m("step_count", OTHER, 10**6)))  # the largest value of all, yet never one of the names kept
    names = [s.metric_name for s in got.kept]
    assert len(names) == MAX_NAMES == len(set(names))
    assert names.count(OTHER) == 1
    assert {n_ for n_ in names if n_ != OTHER} == {f"s{i:04d}" for i in range(n - (MAX_NAMES - 1), n)}
    other = next(s.value for s in got.kept if s.metric_name == OTHER)
    assert other == 10**6 + sum(10 + i for i in range(n - (MAX_NAMES - 1)))
    assert sum(s.value for s in got.kept) == 10**6 + sum(10 + i for i in range(n))
    assert got.folded == (n + 1) - (MAX_NAMES - 1)  # the executor's own OTHER among the names folded


def test_other_sent_by_an_executor_within_the_limit_is_just_a_name() -> None:
    assert kept(m("step_count", OTHER, 3), m("step_count", "a", 1), m("step_count", OTHER, 2)) == [
        ("step_count", OTHER, 5), ("step_count", "a", 1)]


def test_the_fold_saturates_at_max_value() -> None:
    got = samples(answer(*[m("step_count", f"s{i:04d}", MAX_VALUE) for i in range(MAX_NAMES + 2)]))
    other = [s for s in got.kept if s.metric_name == OTHER]
    assert other == [Sample("step_count", OTHER, MAX_VALUE)] and got.folded == 3


def test_beyond_max_types_the_extra_types_are_dropped() -> None:
    types = [f"type_{i:02d}" for i in range(MAX_TYPES + 3)]
    got = samples(answer(*[m(t, "n", 1) for t in types], m("type_00", "n", 1), m(types[-1], "other", 1)))
    assert sorted({s.metric_type for s in got.kept}) == types[:MAX_TYPES]  # the first ones met
    assert Sample("type_00", "n", 2) in got.kept  # a type already kept still takes samples
    assert got.dropped == 3 + 1
    # a malformed sample does not take one of the places
    types = [f"type_{i:02d}" for i in range(MAX_TYPES + 8)]
    got = samples(answer(*[m(t, "n", -1) for t in types[:5]], *[m(t, "n", 1) for t in types[5:]]))
    assert sorted({s.metric_type for s in got.kept}) == types[5:5 + MAX_TYPES]
    assert got.dropped == 5 + 3
