"""What a request needs of its executor's SDK release (``relay_es/adapters/rest/releases.py``),
applied by ``calling.ask`` to every request: the table, and on a real ``relay serve`` with fake
executors over real WebSockets.

A helper's hunt with real SDKs (dbos 3.2.0 and 2.15.0, @dbos-inc/dbos-sdk 5.2.11): dbos 2.15.0
drops a search filter it does not know and answers 200 with every workflow -- ``hasParent``,
``wasForkedFrom``, ``completedBefore``, ``dequeuedAfter``, ``scheduleName``, ``attributes`` each
listed all six of its workflows, so a search used to pick the workflows of a bulk cancel would
have cancelled them all. Its ``executor_info`` names ``"language": "python"`` and ``"dbos_version":
"2.15.0"``; the fakes here answer as it did. And in an application of one 3.2.0 and one 2.15.0
executor, ``getWorkflowAggregates`` answered 6 times 200 and 4 times 501 (2.15.0: "Unknown message
type"), as the round-robin went. An aggregate without a group was a 500 from both SDKs ("At least
one group_by flag must be set to True").
"""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import UNSET

from relay_es.adapters.hub.calls import Needs
from relay_es.adapters.rest import releases
from relay_es.protocol import catalogue as c
from tests.adapters.rest import test_queues
from tests.adapters.rest.test_queues import L, conforms, executors, sent
from tests.adapters.rest.test_workflows import workflow
from tests.conftest import WIRE_ONLY
from tests.rest_client import rest as call
from tests.server import RelayServer

relay = test_queues.relay  # the fixture: a relay serve whose calls time out within a second

NEW = ("python", "3.2.0")
OLD = ("python", "2.15.0")  # the hunter's: names its release, reads no filter newer than 2.15
ROUNDS = 6  # requests of each kind: round-robin alone would send half of them to the old executor

# The hunter's six searches that dbos 2.15.0 answered with every workflow, and the filter each names.
IGNORED = [({"hasParent": True}, "hasParent", "Python dbos 2.18"),
           ({"wasForkedFrom": True}, "wasForkedFrom", "Python dbos 2.16"),
           ({"completedBefore": "2000-01-01T00:00:00Z"}, "completedBefore", "Python dbos 2.23"),
           ({"dequeuedAfter": "2100-01-01T00:00:00Z"}, "dequeuedAfter", "Python dbos 2.23"),
           ({"scheduleName": ["nope"]}, "scheduleName", "Python dbos 2.25"),
           ({"attributes": {"team": "red"}}, "attributes", "Python dbos 2.25")]
ALL = [workflow(f"wf-{i}", "python") for i in range(5)] + [
    workflow("wf-child", "python", ParentWorkflowID="wf-0")]


def every_workflow(req: dict[str, Any]) -> dict[str, Any]:
    """dbos 2.15.0's answer to any of :data:`IGNORED`: every workflow, the filter dropped."""
    return {"output": ALL}


def filtering(req: dict[str, Any]) -> dict[str, Any]:
    """dbos 3.2.0's answer: what the search asked (a child for ``has_parent``; none for the others here)."""
    body = req["body"]
    if body.get("has_parent") is True:
        return {"output": [w for w in ALL if w["ParentWorkflowID"] is not None]}
    if any(body.get(k) is not None for k in ("was_forked_from", "completed_before", "dequeued_after",
                                               "schedule_name", "attributes")):
        return {"output": []}
    return {"output": ALL}


AGGREGATE = {"output": [{"group": {"status": "SUCCESS"}, "count": 6, "min_created_at": None,
                         "max_queue_wait_ms": None, "max_total_latency_ms": None}]}


# --- the table ---------------------------------------------------------------------------------


def search(**body: Any) -> c.ListWorkflowsRequest:
    return c.ListWorkflowsRequest(request_id="", body=c.ListWorkflowsBody(load_input=False, load_output=False, **body))


def aggregates(**body: Any) -> c.GetWorkflowAggregatesRequest:
    return c.GetWorkflowAggregatesRequest(request_id="", body=c.WorkflowAggregatesBody(group_by_status=True, **body))


# request, what a client calls the field, its first Python release, its first TypeScript release:
# each read from the SDK's own code (releases.py says where)
FIELDS = [
    (search(has_parent=True), "hasParent", (2, 18), (4, 14)),
    (search(has_parent=False), "hasParent", (2, 18), (4, 14)),  # false filters too
    (search(was_forked_from=True), "wasForkedFrom", (2, 16), (4, 12)),
    (search(completed_before="2000-01-01T00:00:00+00:00"), "completedBefore", (2, 23), (4, 19)),
    (search(dequeued_after="2100-01-01T00:00:00+00:00"), "dequeuedAfter", (2, 23), (4, 19)),
    (search(schedule_name=["nope"]), "scheduleName", (2, 25), (4, 21)),
    (search(attributes={"team": "red"}), "attributes", (2, 25), (4, 21)),
    (search(queue_name="q"), "queueName", (2, 9), (4, 7)),
    (search(parent_workflow_id="p"), "parentWorkflowId", (2, 11), (4, 9)),
    (c.ListQueuedWorkflowsRequest(request_id="", body=c.ListWorkflowsBody(
        workflow_uuids=["a"], queues_only=True, load_input=False, load_output=False)), "workflowIds", (2, 9), (4, 7)),
    (aggregates(has_parent=True), "hasParent", (2, 26), (4, 23)),
    (aggregates(user=["alice"]), "user", (2, 26), (5, 0)),  # TypeScript 4.23-4.27 read authenticated_user
    (aggregates(time_bucket_size_ms=60000), "timeBucketSizeMs", (2, 22), (4, 19)),
    (aggregates(select_max_total_latency_ms=True), "selectMaxTotalLatencyMs", (2, 23), (4, 19)),
    (c.ListStepsRequest(request_id="", workflow_id="w", limit=10), "limit", (2, 18), (4, 14)),
    (c.CancelRequest(request_id="", workflow_id="w", cancel_children=True), "cancelChildren", (2, 24), (4, 20)),
    (c.ResumeRequest(request_id="", workflow_id="w", queue_name="q"), "queueName", (2, 15), (4, 11)),
    (c.ForkWorkflowRequest(request_id="", body=c.ForkWorkflowBody(workflow_id="w", start_step=0, queue_name="q")),
     "queueName", (2, 15), (4, 11)),
]


@pytest.mark.parametrize("request_, name, python, typescript", FIELDS)
def test_a_field_an_older_sdk_ignores_is_trusted_only_to_releases_known_to_read_it(
        request_: Any, name: str, python: tuple[int, int], typescript: tuple[int, int]) -> None:
    needs = releases.needs_of(request_)
    assert needs is not None
    for lang, (major, minor) in (("python", python), ("typescript", typescript)):
        assert needs.able(lang, f"{major}.{minor}.0") and needs.able(lang.capitalize(), f"{major}.{minor + 1}.3")
        assert not needs.able(lang, f"{major}.{minor - 1}.9") and not needs.able(lang, f"{major - 1}.99.0")
    # not known to read it: it would answer as if it were not given
    for lang, version in ((None, None), ("python", None), ("python", "unknown"), ("rust", "9.0.0"), (None, "9.0.0")):
        assert not needs.able(lang, version), (lang, version)
    # Go and Java, whose clients came after these fields, are trusted with them (releases.LATER_SDKS)
    for lang, version in (("go", "v0.1.0"), ("java", "0.5.0"), ("Go", None)):
        assert needs.able(lang, version), (lang, version)
    assert name in needs.lacking and f"{python[0]}.{python[1]}" in needs.lacking, needs.lacking


@pytest.mark.parametrize("request_", [
    search(status=["ERROR"], workflow_name="w", workflow_uuids=["a"], authenticated_user="u", start_time="t",
           end_time="t", application_version="v1", limit=10, offset=5, sort_desc=True),  # every SDK reads these
    search(limit=0, offset=0),  # none given
    c.ListWorkflowsRequest(request_id="", body=c.ListWorkflowsBody(load_input=True, load_output=True)),  # loading
    c.ListQueuedWorkflowsRequest(request_id="", body=c.ListWorkflowsBody(
        queue_name="q", status="ENQUEUED", queues_only=True, load_input=False, load_output=False)),
    c.GetWorkflowRequest(request_id="", workflow_id="w", load_input=False, load_output=False),
    c.ListStepsRequest(request_id="", workflow_id="w"),
    c.CancelRequest(request_id="", workflow_id="w", workflow_ids=["w", "w"]),  # a bulk of one
    c.ResumeRequest(request_id="", workflow_id="w"),
    c.ListQueuedWorkflowsRequest(request_id="", body=c.ListWorkflowsBody(load_input=False, load_output=False)),
])
def test_a_request_every_sdk_reads_whole_needs_nothing(request_: Any) -> None:
    assert releases.needs_of(request_) is None


def test_a_message_an_sdk_predates_passes_over_only_a_release_known_too_old() -> None:
    needs = releases.needs_of(aggregates())
    assert needs is not None and "get_workflow_aggregates" in needs.lacking
    assert "Python dbos 2.16" in needs.lacking and "@dbos-inc/dbos-sdk 4.12" in needs.lacking
    assert not needs.able("python", "2.15.0") and needs.able("python", "2.16.0")
    assert not needs.able("typescript", "4.11.11") and needs.able("typescript", "4.12.9")
    for lang, version in ((None, None), ("python", "unknown"), ("go", "v0.1.0"), ("java", "0.5.0")):
        assert needs.able(lang, version), (lang, version)  # asked: it answers for itself
    # a filter too: an executor not known to read it is not asked, whatever it answers to the message
    filtered = releases.needs_of(aggregates(has_parent=True))
    assert filtered is not None
    assert not filtered.able(None, None) and not filtered.able("python", "2.25.0") and filtered.able("python", "2.26.0")
    assert "get_workflow_aggregates" in filtered.lacking and "hasParent" in filtered.lacking


def test_the_first_releases_of_the_messages_read_from_the_sdks() -> None:
    first = releases.MESSAGES
    assert first["list_queues"] == first["get_queue"] == {"python": (2, 20), "typescript": (4, 17)}
    assert first["get_workflow_aggregates"] == first["fork_from_failure"] == {"python": (2, 16), "typescript": (4, 12)}
    assert first["get_step_aggregates"] == {"python": (2, 23), "typescript": (4, 19)}
    assert {first[t]["python"] for t in ("get_workflow_events", "get_workflow_notifications",
                                         "get_workflow_streams")} == {(2, 15)}
    assert {first[t]["python"] for t in ("list_schedules", "backfill_schedule")} == {(2, 13)}
    assert first["list_application_versions"]["python"] == (2, 14)
    assert "get_workflow" not in first and "list_workflows" not in first  # every release answers them


BULK = Needs(releases.bulk_capable, releases.BULK_LACKING)  # a route's own need of the bulk form


def test_a_bulk_and_its_route_s_bulk_need_are_one_need_said_once() -> None:
    bulk = c.CancelRequest(request_id="", workflow_id="a", workflow_ids=["a", "b"], cancel_children=True)
    needs = releases.both(BULK, releases.needs_of(bulk))
    assert needs is not None
    assert needs.lacking.count("predates bulk actions") == 1 and "cancelChildren" in needs.lacking
    assert needs.able("python", "2.24.0") and not needs.able("python", "2.23.0")
    assert releases.both(None, None) is None and releases.both(BULK, None) is BULK


# --- on the wire -------------------------------------------------------------------------------


@WIRE_ONLY
def test_a_search_by_a_filter_an_old_sdk_ignores_goes_only_to_one_that_reads_it(relay: RelayServer) -> None:
    W = L + "/apps/shop/workflows"
    with executors(relay, {"app": "shop", "sdk": NEW, "answers": {"list_workflows": filtering}},
                   {"app": "shop", "sdk": OLD, "answers": {"list_workflows": every_workflow}}) as (new, old):
        for _ in range(ROUNDS):
            got = conforms("searchWorkflows", call(relay, "POST", W + "/search", json={"hasParent": True}), 200)
            assert [w["workflowId"] for w in got] == ["wf-child"]
            for body, _, _ in IGNORED[1:]:
                assert conforms("searchWorkflows", call(relay, "POST", W + "/search", json=body), 200) == []
        assert sent(old, "list_workflows") == []
        # a search every release reads goes to either, as before
        for _ in range(4):
            conforms("searchWorkflows", call(relay, "POST", W + "/search", json={"status": ["SUCCESS"]}), 200)
            conforms("listWorkflows", call(relay, "GET", W, params={"status": "SUCCESS", "limit": 5}), 200)
        assert sent(old, "list_workflows") and len(sent(new, "list_workflows")) >= ROUNDS * len(IGNORED)


@WIRE_ONLY
def test_executors_none_of_which_reads_a_filter_are_a_501_naming_it_and_nothing_is_sent(relay: RelayServer) -> None:
    W = L + "/apps/old/workflows"
    with executors(relay, {"app": "old", "sdk": OLD, "answers": {"list_workflows": every_workflow}},
                   {"app": "old", "sdk": None, "answers": {"list_workflows": every_workflow}}) as (a, b):
        for body, name, first in IGNORED:
            got = conforms("searchWorkflows", call(relay, "POST", W + "/search", json=body), 501)
            assert got["title"] == "not supported by the executor", got
            assert name in got["detail"] and first in got["detail"] and "2.15.0" in got["detail"], got
        assert sent(a, "list_workflows") == [] and sent(b, "list_workflows") == []
        assert len(conforms("searchWorkflows", call(relay, "POST", W + "/search", json={"status": ["SUCCESS"]}),
                            200)) == len(ALL)


@WIRE_ONLY
def test_aggregates_in_a_mixed_fleet_go_to_the_release_that_has_them(relay: RelayServer) -> None:
    with executors(relay, {"app": "mix", "sdk": NEW, "answers": {"get_workflow_aggregates": lambda req: AGGREGATE}},
                   {"app": "mix", "sdk": OLD}) as (new, old):
        for _ in range(ROUNDS):
            got = conforms("getWorkflowAggregates", call(relay, "POST", L + "/apps/mix/workflows/aggregates",
                                                         json={"groupByStatus": True}), 200)
            assert got == [{"group": {"status": "SUCCESS"}, "count": 6}]
        assert sent(old, "get_workflow_aggregates") == [] and len(sent(new, "get_workflow_aggregates")) == ROUNDS


@WIRE_ONLY
def test_an_aggregate_without_a_group_is_a_422_and_nothing_is_sent(relay: RelayServer) -> None:
    A = L + "/apps/shop"
    with executors(relay, {"app": "shop", "answers": {"get_workflow_aggregates": lambda req: AGGREGATE,
                                                      "get_step_aggregates": lambda req: {"output": []}}}) as (ex,):
        for op, path, body in (("getWorkflowAggregates", "/workflows/aggregates", None),
                               ("getWorkflowAggregates", "/workflows/aggregates", {}),
                               ("getWorkflowAggregates", "/workflows/aggregates", {"selectCount": True}),
                               ("getWorkflowAggregates", "/workflows/aggregates",
                                {"hasParent": False, "groupByStatus": False}),
                               ("getStepAggregates", "/steps/aggregates", {"selectMaxDurationMs": True}),
                               ("getStepAggregates", "/steps/aggregates", None)):
            got = conforms(op, call(relay, "POST", A + path, json=body), 422)
            assert "group" in got["detail"] and "timeBucketSizeMs" in got["detail"], got
        assert sent(ex, "get_workflow_aggregates") == [] and sent(ex, "get_step_aggregates") == []
        # a time bucket is a group in both SDKs
        conforms("getWorkflowAggregates", call(relay, "POST", A + "/workflows/aggregates",
                                               json={"timeBucketSizeMs": 60000}), 200)
        conforms("getStepAggregates", call(relay, "POST", A + "/steps/aggregates",
                                           json={"groupByFunctionName": True}), 200)
        assert len(sent(ex, "get_workflow_aggregates")) == 1 and len(sent(ex, "get_step_aggregates")) == 1


def test_unset_is_not_given() -> None:
    assert not releases.given(UNSET) and not releases.either(UNSET) and releases.either(False)
