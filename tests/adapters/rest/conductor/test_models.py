"""The Conductor API bodies (``relay_es/adapters/rest/conductor/models.py``) against the reference.

Field by field, each class has exactly the reference's properties, requires what it requires
and makes nullable what it makes nullable. Encoded instances (every value set, and every
nullable one null) validate against the component schema. Request bodies decode strictly and
encode back to the JSON they came from; unknown fields, nulls the reference does not allow,
wrong types and oversized input are refused with an error naming the field.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from relay_es.adapters.rest.conductor import models as m
from tests.conductor_schema import check_schema, document

NOW = "2026-11-30T12:10:58.645Z"


def schema(name: str) -> dict[str, Any]:
    return document()["components"]["schemas"][name]


def encoded(value: msgspec.Struct) -> Any:
    return json.loads(msgspec.json.encode(value))


def _nullable(t: msgspec.inspect.Type) -> bool:
    return isinstance(t, msgspec.inspect.UnionType) and any(isinstance(x, msgspec.inspect.NoneType) for x in t.types)


@pytest.mark.parametrize("name", sorted(m.SCHEMAS))
def test_fields_requiredness_and_nullability_are_the_references(name: str) -> None:
    ref = schema(name)
    assert ref["additionalProperties"] is False
    props = {k: v for k, v in ref["properties"].items() if k != "$schema"}
    fields = {f.encode_name: f for f in msgspec.inspect.type_info(m.SCHEMAS[name]).fields if f.encode_name != "$schema"}
    assert set(fields) == set(props)
    assert {n for n, f in fields.items() if f.required} == set(ref.get("required", []))
    for n, f in fields.items():
        types = props[n].get("type")
        nullable = isinstance(types, list) and "null" in types
        assert _nullable(f.type) == nullable, f"{name}.{n}: nullable should be {nullable}"
    if "$schema" in ref["properties"] and issubclass(m.SCHEMAS[name], m._Body):
        assert "$schema" in {f.encode_name for f in msgspec.inspect.type_info(m.SCHEMAS[name]).fields}


# --- responses -----------------------------------------------------------------

FULL: dict[str, msgspec.Struct] = {
    "Workflow": m.Workflow(
        workflow_id="w1", status="SUCCESS", workflow_name="probe", workflow_class="C", workflow_config="cfg",
        user="alice", assumed_role="admin", roles='["admin"]', input="[20]", output="42", error=None,
        created_at=NOW, updated_at=NOW, queue_name="q", app_version="v1", executor_id="e1", timeout_ms=1000,
        deadline=NOW, deduplication_id="d", priority=3, queue_partition_key="p", forked_from="w0",
        was_forked_from=True, parent_workflow_id="w-1", dequeued_at=NOW, delay_until=NOW, completed_at=NOW,
        attributes='{"k": 1}', schedule_name="s", application_name="app"),
    "Step": m.Step(step_id=1, step_name="add_one", output="21", error=None, child_workflow_id="c",
                   started_at=NOW, completed_at=NOW),
    "Event": m.Event(key="k", value="v"),
    "Notification": m.Notification(topic="t", message="hi", created_at=NOW, consumed=True),
    "StreamEntry": m.StreamEntry(key="k", values=["a", "b"]),
    "WorkflowAggregate": m.WorkflowAggregate(group={"status": "SUCCESS", "name": None}, count=2,
                                             min_created_at=NOW, max_queue_wait_ms=5, max_total_latency_ms=9),
    "StepAggregate": m.StepAggregate(group={"function_name": "f"}, count=1, max_duration_ms=4),
    "ForkWorkflowOutputBody": m.ForkWorkflowOutputBody(workflow_id="w2"),
    "BulkForkFromFailureOutputBody": m.BulkForkFromFailureOutputBody(workflow_ids=["a", "b"]),
    "ExportWorkflowOutputBody": m.ExportWorkflowOutputBody(serialized_workflow="H4sIAAAA"),
    "Queue": m.Queue(name="q", concurrency=4, worker_concurrency=1, rate_limit_max=10, rate_limit_period_secs=1.5,
                     priority_enabled=True, partition_queue=False, polling_interval_secs=1.0, application_name="app"),
    "Schedule": m.Schedule(schedule_id="s1", schedule_name="every-minute", workflow_name="tick", workflow_class=None,
                           cron_expression="* * * * *", status="ACTIVE", context="None", last_fired_at=NOW,
                           automatic_backfill=False, cron_timezone="UTC", application_name="app"),
    "BackfillOutputBody": m.BackfillOutputBody(workflow_ids=[]),
    "TriggerOutputBody": m.TriggerOutputBody(workflow_id="w3"),
    "ApplicationVersion": m.ApplicationVersion(version_id="v", version_name="1d6c", version_timestamp=NOW, created_at=NOW),
    "PolicyOutputBody": m.PolicyOutputBody(policy=m.AutoscalePolicy(queue="q", rollout=m.RolloutPolicy(
        max_old_application_versions=1, max_executors_for_old_application_versions=0))),
    "QueueAutoscale": m.QueueAutoscale(application_version="v2", is_latest=True, desired_executors=3, queue_depth=9,
                                       observed_at=1796040658569, queue_name="q"),
    "AlertingRule": m.AlertingRule(id="5b1e", app_id="a", receiving_app_id="b", rule_type="WorkflowFailure",
                                   rule_metadata={"threshold": 2, "windowSecs": 300}, min_interval_secs=300,
                                   last_fired_at="2026-11-30T12:00:05.123Z"),
    "RoleOutput": m.RoleOutput(name="operator", is_global=True, permissions=["application.read", "metric.read"]),
    "CreateRoleOutputBody": m.CreateRoleOutputBody(name="deployer", permissions=["application.write"]),
    "Organization": m.Organization(id="o", name="acme", created_at="2026-11-30T12:00:05.123Z", subscription_plan="team",
                                   max_database_instances=0, max_apps=2**31 - 1, max_vms=0,
                                   default_rds_instance_class_type="", max_team_members=2**31 - 1,
                                   max_conductor_apps=2**31 - 1, audit_log_retention_days=3650),
    "OrgMembers": m.OrgMembers(org_name="acme", users={"ann@example.com": m.RoleOutput(
        name="admin", is_global=True, permissions=["token.read"])}),
    "Member": m.Member(id="bob@example.com", org_id="o", email="bob@example.com", name="Bob", given_name="Bob",
                       family_name="B", company=""),
    "UserProfile": m.UserProfile(name="Ann", email="ann@example.com", org_name="acme", org_id="o",
                                 subscription_plan="team", created_at="2026-11-30T12:00:05.123Z",
                                 role=m.RoleOutput(name="viewer", is_global=True, permissions=[]), is_dbos_admin=False),
    "GenerateSecretOutputBody": m.GenerateSecretOutputBody(secret="relay_x"),
}


def test_every_response_model_has_an_example() -> None:
    assert set(FULL) == {n for n, cls in m.SCHEMAS.items() if issubclass(cls, m._Answer)}


@pytest.mark.parametrize("name", sorted(FULL))
def test_a_full_answer_validates(name: str) -> None:
    check_schema(name, encoded(FULL[name]))


@pytest.mark.parametrize("name", sorted(FULL))
def test_an_answer_with_every_nullable_field_null_validates_and_sends_them(name: str) -> None:
    value = FULL[name]
    nullable = [f.name for f in msgspec.inspect.type_info(type(value)).fields if _nullable(f.type)]
    out = encoded(msgspec.structs.replace(value, **dict.fromkeys(nullable, None)))
    check_schema(name, out)
    fields = {f.name: f.encode_name for f in msgspec.inspect.type_info(type(value)).fields}
    assert all(out[fields[n]] is None for n in nullable)  # sent as null, not omitted


def test_optional_aggregate_values_are_omitted_when_unknown() -> None:
    out = encoded(m.WorkflowAggregate(group={}))
    assert out == {"group": {}}
    check_schema("WorkflowAggregate", out)
    assert encoded(m.StepAggregate(group={"status": None})) == {"group": {"status": None}}


def test_a_schema_checker_refuses_a_wrong_answer() -> None:
    """The checks above can fail: an extra key, a null where none is allowed."""
    bad = encoded(FULL["Event"]) | {"extra": 1}
    with pytest.raises(AssertionError):
        check_schema("Event", bad)
    with pytest.raises(AssertionError):
        check_schema("Workflow", encoded(FULL["Workflow"]) | {"createdAt": None})


# --- requests ------------------------------------------------------------------

FULL_REQUESTS: dict[str, dict[str, Any]] = {
    "WorkflowSearchBody": {
        "workflowIds": ["a", "b"], "workflowName": ["wf"], "user": ["alice"], "status": ["SUCCESS", "ERROR"],
        "appVersion": ["v1"], "executorId": ["e1"], "queueName": ["q"], "forkedFrom": ["w0"],
        "parentWorkflowId": ["p"], "workflowIdPrefix": ["sched-"], "scheduleName": ["s"],
        "attributes": {"tenant": "t1", "n": 2}, "startTime": "2026-11-30T00:00:00Z",
        "endTime": "2026-11-30T23:59:59.999Z", "completedAfter": "2026-11-30T01:00:00+01:00",
        "completedBefore": "2026-12-01T00:00:00Z", "dequeuedAfter": "2026-11-29T00:00:00Z",
        "dequeuedBefore": "2026-12-02T00:00:00Z", "wasForkedFrom": False, "hasParent": True, "queuesOnly": False,
        "limit": 50, "offset": 100, "sortDesc": True, "loadInput": True, "loadOutput": False},
    "WorkflowAggregatesBody": {
        "groupByStatus": True, "groupByWorkflowName": True, "groupByQueueName": False, "groupByExecutorId": False,
        "groupByAppVersion": True, "groupByApplicationName": False, "selectCount": True, "selectMinCreatedAt": True,
        "selectMaxQueueWaitMs": False, "selectMaxTotalLatencyMs": True, "timeBucketSizeMs": 60000,
        "workflowIds": ["a"], "workflowName": ["wf"], "user": ["u"], "status": ["PENDING"], "appVersion": ["v"],
        "executorId": ["e"], "queueName": ["q"], "forkedFrom": ["f"], "parentWorkflowId": ["p"],
        "workflowIdPrefix": ["x"], "scheduleName": ["s"], "attributes": {"a": [1, 2]},
        "startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T01:00:00Z",
        "completedAfter": "2026-11-30T00:00:00Z", "completedBefore": "2026-11-30T01:00:00Z",
        "dequeuedAfter": "2026-11-30T00:00:00Z", "dequeuedBefore": "2026-11-30T01:00:00Z",
        "wasForkedFrom": True, "hasParent": False},
    "StepAggregatesBody": {
        "groupByFunctionName": True, "groupByStatus": True, "selectCount": True, "selectMaxDurationMs": True,
        "timeBucketSizeMs": 1000, "status": ["SUCCESS"], "stepName": ["add_one"], "workflowIdPrefix": ["w"],
        "completedAfter": "2026-11-30T00:00:00Z", "completedBefore": "2026-11-30T01:00:00Z"},
    "CancelWorkflowInputBody": {"cancelChildren": True},
    "ResumeWorkflowInputBody": {"queueName": "q"},
    "ForkWorkflowInputBody": {"startStep": 2, "newWorkflowId": "n", "appVersion": "v", "queueName": "q",
                              "queuePartitionKey": "k"},
    "BulkCancelInputBody": {"workflowIds": ["a", "b"], "cancelChildren": False},
    "BulkResumeInputBody": {"workflowIds": ["a"], "queueName": "q"},
    "BulkDeleteInputBody": {"workflowIds": ["a"], "deleteChildren": True},
    "BulkForkFromFailureBody": {"workflowIds": ["a"], "appVersion": "v", "queueName": "q", "queuePartitionKey": "k",
                                "fromStepName": "charge"},
    "ImportWorkflowInputBody": {"serializedWorkflow": "H4sIAAAAAAAA/6tWKkktLlGyUlAqS8wpTVWqBQBvzGcWEgAAAA=="},
    "BackfillInputBody": {"startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T01:00:00Z"},
    "PatchLatestVersionInputBody": {"versionName": "1d6ccc5e"},
    "AutoscalePolicy": {"queue": "orders_queue", "rollout": {"maxOldApplicationVersions": 1,
                                                             "maxExecutorsForOldApplicationVersions": 2}},
    "CreateAlertInputBody": {"ruleType": "SlowQueue", "ruleMetadata": {"queueName": "q", "thresholdSecs": 60},
                             "minIntervalSecs": 600, "receivingAppName": "ops"},
    "CreateRoleInputBody": {"name": "deployer", "permissions": ["application.read", "application.write"]},
    "UpdateOrgInputBody": {"newName": "acme_two", "auditLogRetentionDays": 30},
}

MINIMAL: dict[str, dict[str, Any]] = {
    "BulkCancelInputBody": {"workflowIds": ["a"]}, "BulkResumeInputBody": {"workflowIds": ["a"]},
    "BulkDeleteInputBody": {"workflowIds": ["a"]}, "BulkForkFromFailureBody": {"workflowIds": ["a"]},
    "ImportWorkflowInputBody": {"serializedWorkflow": ""},
    "BackfillInputBody": {"startTime": "2026-11-30T00:00:00Z", "endTime": "2026-11-30T00:00:00Z"},
    "PatchLatestVersionInputBody": {"versionName": "v"},
    "AutoscalePolicy": {"queue": "q"},
    "CreateAlertInputBody": {"ruleType": "WorkflowFailure", "ruleMetadata": {}},
    "CreateRoleInputBody": {"name": "nobody"},
    "UpdateOrgInputBody": {},
}


def test_every_request_model_has_an_example() -> None:
    assert set(FULL_REQUESTS) == {n for n, cls in m.SCHEMAS.items() if issubclass(cls, m._Body)}


@pytest.mark.parametrize("name", sorted(FULL_REQUESTS))
def test_a_full_request_body_is_valid_decodes_and_encodes_back_unchanged(name: str) -> None:
    for raw in (FULL_REQUESTS[name], MINIMAL.get(name, {})):
        check_schema(name, raw)  # the example itself is what the reference allows
        body = m.decode(json.dumps(raw), m.SCHEMAS[name])  # type: ignore[type-var]
        assert encoded(body) == raw


def test_every_property_of_the_reference_is_in_the_full_examples() -> None:
    for name, raw in FULL_REQUESTS.items():
        props = set(schema(name)["properties"]) - {"$schema"}
        if name == "BulkForkFromFailureBody":  # its starting points exclude each other
            props -= {"fromLastFailure", "fromLastStep", "fromStep"}
        assert props == set(raw), name


def test_the_schema_link_is_accepted_and_not_sent_on() -> None:
    body = m.decode(b'{"$schema": "https://x/schemas/CancelWorkflowInputBody.json", "cancelChildren": true}',
                    m.CancelWorkflowInputBody)
    assert body.cancel_children is True


def test_nullable_filter_lists_take_null() -> None:
    body = m.decode(b'{"status": null, "workflowIds": null}', m.WorkflowSearchBody)
    assert body.status is None and body.workflow_ids is None
    assert encoded(body) == {"status": None, "workflowIds": None}


def refusal(raw: bytes | str, cls: type[Any]) -> str:
    with pytest.raises(msgspec.ValidationError) as e:
        m.decode(raw, cls)
    return str(e.value)


@pytest.mark.parametrize("cls, raw, says", [
    (m.WorkflowSearchBody, b'{"statuses": ["SUCCESS"]}', "unknown field `statuses`"),
    (m.CancelWorkflowInputBody, b'{"cancelChildren": true, "deleteChildren": true}', "unknown field `deleteChildren`"),
    # null only where the reference has it
    (m.WorkflowSearchBody, b'{"startTime": null}', "$.startTime"),
    (m.WorkflowSearchBody, b'{"limit": null}', "$.limit"),
    (m.WorkflowSearchBody, b'{"sortDesc": null}', "$.sortDesc"),
    (m.StepAggregatesBody, b'{"status": null}', "$.status"),
    (m.ResumeWorkflowInputBody, b'{"queueName": null}', "$.queueName"),
    # no conversion between JSON types
    (m.WorkflowSearchBody, b'{"limit": "10"}', "Expected `int`, got `str` - at `$.limit`"),
    (m.WorkflowSearchBody, b'{"status": "SUCCESS"}', "Expected `array | null`, got `str` - at `$.status`"),
    (m.WorkflowSearchBody, b'{"status": [1]}', "Expected `str`, got `int` - at `$.status[0]`"),
    (m.WorkflowSearchBody, b'{"loadInput": "true"}', "$.loadInput"),
    (m.WorkflowSearchBody, b'{"attributes": []}', "$.attributes"),
    (m.ForkWorkflowInputBody, b'{"startStep": 1.0}', "$.startStep"),
    (m.BulkCancelInputBody, b'{}', "missing required field `workflowIds`"),
    (m.ImportWorkflowInputBody, b'{"serializedWorkflow": {"a": 1}}', "$.serializedWorkflow"),
    # bounds
    (m.WorkflowSearchBody, b'{"limit": -1}', "$.limit"),
    (m.WorkflowSearchBody, b'{"offset": -5}', "$.offset"),
    (m.WorkflowSearchBody, b'{"limit": 9223372036854775808}', "$.limit"),
    (m.ForkWorkflowInputBody, b'{"startStep": -1}', "$.startStep"),
    (m.ForkWorkflowInputBody, b'{"startStep": 2147483648}', "$.startStep"),
    (m.WorkflowAggregatesBody, b'{"timeBucketSizeMs": 0}', "$.timeBucketSizeMs"),
    (m.BulkDeleteInputBody, b'{"workflowIds": []}', "length >= 1"),
    (m.WorkflowSearchBody, b'{"startTime": "2026-11-30"}', "$.startTime"),
    (m.WorkflowSearchBody, b'{"startTime": "2026-11-30T00:00:00"}', "$.startTime"),  # no offset
    (m.WorkflowSearchBody, b'{"startTime": "yesterday"}', "$.startTime"),
    (m.BackfillInputBody, b'{"startTime": "2026-11-30T00:00:00Z"}', "missing required field `endTime`"),
    (m.BulkForkFromFailureBody, b'{"workflowIds": ["a"], "fromLastStep": true, "fromStep": 2}', "mutually exclusive"),
    (m.BulkForkFromFailureBody, b'{"workflowIds": ["a"], "fromLastFailure": true, "fromStepName": "x"}',
     "mutually exclusive"),
])
def test_bad_request_bodies_are_refused_naming_the_field(cls: type[Any], raw: bytes, says: str) -> None:
    assert says in refusal(raw, cls)


@pytest.mark.parametrize("cls, raw, where", [
    (m.BulkCancelInputBody, b'{"workflowIds": [""]}', "$.workflowIds[0]"),
    (m.BulkResumeInputBody, b'{"workflowIds": ["a", ""]}', "$.workflowIds[1]"),
    (m.BulkDeleteInputBody, b'{"workflowIds": [""]}', "$.workflowIds[0]"),
    (m.BulkForkFromFailureBody, b'{"workflowIds": [""]}', "$.workflowIds[0]"),
    (m.BulkForkFromFailureBody, b'{"workflowIds": ["a"], "fromStepName": ""}', "$.fromStepName"),
    (m.PatchLatestVersionInputBody, b'{"versionName": ""}', "$.versionName"),
])
def test_an_empty_required_id_or_name_is_refused_naming_the_field(cls: type[Any], raw: bytes, where: str) -> None:
    assert f"Expected `str` of length >= 1 - at `{where}`" in refusal(raw, cls)


OPTIONAL_NAMES = {"ResumeWorkflowInputBody": {"queueName"},
                  "ForkWorkflowInputBody": {"newWorkflowId", "appVersion", "queueName", "queuePartitionKey"},
                  "BulkResumeInputBody": {"queueName"},
                  "BulkForkFromFailureBody": {"appVersion", "queueName", "queuePartitionKey"}}


def test_an_empty_optional_id_or_name_is_not_given() -> None:
    """Left out, each has a meaning (the executor picks the id, the workflow keeps its version, its
    queue, no partition): sent as "" (a Go client's zero value), it means that, as if not sent."""
    for cls in m.SCHEMAS.values():
        if issubclass(cls, m._Body):
            fields = {f.name: f.encode_name for f in msgspec.inspect.type_info(cls).fields}
            assert {fields[n] for n in m.empty_is_unset(cls)} == OPTIONAL_NAMES.get(cls.__name__, set()), cls
    for name, keys in OPTIONAL_NAMES.items():
        raw = dict.fromkeys(keys, "") | MINIMAL.get(name, {})
        body = m.decode(json.dumps(raw), m.SCHEMAS[name])  # type: ignore[type-var]
        assert encoded(body) == MINIMAL.get(name, {}), name
    assert m.ForkWorkflowInputBody(new_workflow_id="").new_workflow_id is msgspec.UNSET  # made, not decoded, alike
    # a filter value may be empty: TypeScript records a workflow started by no user with user ""
    assert m.decode(b'{"user": [""], "workflowIds": [""]}', m.WorkflowSearchBody).user == [""]


def test_huge_lists_and_strings_are_refused_naming_the_field() -> None:
    too_many = json.dumps({"status": ["SUCCESS"] * (m.MAX_FILTER_VALUES + 1)})
    assert f"length <= {m.MAX_FILTER_VALUES} - at `$.status`" in refusal(too_many, m.WorkflowSearchBody)
    m.decode(json.dumps({"status": ["SUCCESS"] * m.MAX_FILTER_VALUES}), m.WorkflowSearchBody)  # the limit itself is fine

    ids = json.dumps({"workflowIds": [f"w{i}" for i in range(m.MAX_IDS + 1)]})
    assert f"length <= {m.MAX_IDS} - at `$.workflowIds`" in refusal(ids, m.BulkCancelInputBody)
    assert f"length <= {m.MAX_IDS} - at `$.workflowIds`" in refusal(ids, m.WorkflowSearchBody)

    long = "x" * (m.MAX_TEXT + 1)
    assert "at `$.workflowIds[1]`" in refusal(json.dumps({"workflowIds": ["a", long]}), m.BulkResumeInputBody)
    assert "at `$.queueName`" in refusal(json.dumps({"queueName": long}), m.ResumeWorkflowInputBody)
    assert "at `$.versionName`" in refusal(json.dumps({"versionName": long}), m.PatchLatestVersionInputBody)
    assert "at `$.startTime`" in refusal(json.dumps({"startTime": "2026-11-30T00:00:00" + "0" * 100 + "Z"}),
                                         m.WorkflowSearchBody)

    attrs = json.dumps({"attributes": {f"k{i}": i for i in range(m.MAX_ATTRIBUTES + 1)}})
    assert "at `$.attributes`" in refusal(attrs, m.WorkflowSearchBody)


def test_an_imported_workflow_is_bounded_by_its_own_limit() -> None:
    assert m.MAX_SERIALIZED_WORKFLOW >= 16 * 1024 * 1024  # multi-MiB exports fit
    big = m.decode(json.dumps({"serializedWorkflow": "A" * (1024 * 1024)}), m.ImportWorkflowInputBody)
    assert len(big.serialized_workflow) == 1024 * 1024
    (field,) = [f for f in msgspec.inspect.type_info(m.ImportWorkflowInputBody).fields if f.name == "serialized_workflow"]
    assert field.type.max_length == m.MAX_SERIALIZED_WORKFLOW  # refused past it, like every bound above


def test_not_json_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        m.decode(b'{"cancelChildren": tru', m.CancelWorkflowInputBody)


# --- the executor's text, and Relay's own printable names ------------------------------------------

# Not printable: NUL, C0, DEL, C1, a bidirectional override or isolate, zero-width, a line separator, a
# space but U+0020, private use, unassigned. Relay's own names in a body may hold none of them; the
# executor's application's IDs and names (in the path too: guard.valid_text) all but the NUL.
UNPRINTABLE = ["ok\x00id", "\x07", "a\tb", "a\nb", "esc\x1b[31m", "a\x7fb", "a\x85b", "\u202eevil", "a\u2066b",
               "a\u200bb", "line\u2028", "a\u00a0b", "a\ue000b", "a\U000e0041b", "a\u0378b"]
PRINTABLE = ["wf-1", "sched-nightly-2026-12-01T11:00:00+00:00", "orders/42", "a queue", "café", "工作流", "🚀",
             "'\"<>&%\\"]
# What no ID or name can be: it cannot be sent or stored (a NUL), or is past the bound of UTF-8 bytes.
UNSENDABLE = ["ok\x00id", "\x00", "x" * (m.MAX_TEXT_BYTES + 1), "\u00e9" * (m.MAX_TEXT_BYTES // 2) + "x"]
SENDABLE = PRINTABLE + [t for t in UNPRINTABLE if "\x00" not in t] + ["x" * m.MAX_TEXT_BYTES,
                                                                      "\u00e9" * (m.MAX_TEXT_BYTES // 2)]
# Strings of a body that name something of Relay's own: printable.
RELAYS_OWN = {("AutoscalePolicy", "queue"), ("CreateAlertInputBody", "receivingAppName"),
              ("CreateRoleInputBody", "name"), ("CreateRoleInputBody", "permissions")}


def text_positions(raw: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(field, where, body with that string replaced by a placeholder)`` for every string of
    ``raw`` and every string in one of its lists."""
    out = []
    for key, value in raw.items():
        if isinstance(value, str):
            out.append((key, f"$.{key}", {**raw, key: None}))
        elif isinstance(value, list) and value and isinstance(value[0], str):
            out.append((key, f"$.{key}[0]", {**raw, key: [None, *value[1:]]}))
    return out


def with_text(body: dict[str, Any], text: str) -> str:
    return json.dumps(body).replace("null", json.dumps(text), 1)


# A string of a request body that is not an ID, a name, a filter value or a version.
NOT_TEXT = {("ImportWorkflowInputBody", "serializedWorkflow")}  # a payload: opaque, never refused for its characters
# Strings of a closed set or a pattern of their own: refused for them, whatever the text.
CLOSED = {"startTime", "endTime", "completedAfter", "completedBefore", "dequeuedAfter", "dequeuedBefore",
          "ruleType", "newName"}


@pytest.mark.parametrize("name", sorted(FULL_REQUESTS))
def test_every_id_name_and_filter_of_a_body_is_the_executors_text_as_in_the_path(name: str) -> None:
    """The body's IDs are the path's: ``bulk-cancel`` with ``"ok\\u0000id"`` was sent on to the
    executor (whose Postgres cannot hold a NUL: a 500), where ``/workflows/ok%00id/cancel`` is refused;
    a tab, a no-break space or a joined emoji is an ID DBOS takes, passed on as it is."""
    cls = m.SCHEMAS[name]
    positions = [(k, w, b) for k, w, b in text_positions({k: v for k, v in FULL_REQUESTS[name].items()
                                                         if k != "$schema"})
                 if (name, k) not in NOT_TEXT]
    for key, where, body in positions:
        own = (name, key) in RELAYS_OWN
        fits = [] if key in CLOSED else PRINTABLE if own else SENDABLE
        for text in fits:
            if own and len(text) > 256:
                continue  # past the length of Relay's own name: refused for it
            m.decode(with_text(body, text), cls)  # type: ignore[type-var]
        for text in UNPRINTABLE if own or key in CLOSED else UNSENDABLE:
            message = refusal(with_text(body, text), cls)
            said = (f"at `{where}`" if key in CLOSED or len(text) > m.MAX_TEXT
                    else f"{m.NOT_PRINTABLE} - at `{where}`" if own else f"{m.text_fault(text)} - at `{where}`")
            assert message.endswith(said), (name, key, text[:20], message[:200])


def test_body_and_path_agree_on_what_text_is() -> None:
    from relay_es.adapters.rest.guard import valid_text
    for text in SENDABLE + UNSENDABLE + [chr(c) for c in range(0x3000)]:
        try:
            m.decode(json.dumps({"workflowIds": [text]}), m.BulkCancelInputBody)
            in_body = True
        except msgspec.ValidationError:
            in_body = False
        assert in_body == valid_text(text), repr(text)


def test_payloads_are_not_text_and_keep_every_character() -> None:
    hostile = "line one\nline two\x00\u202e"
    body = m.decode(json.dumps({"serializedWorkflow": hostile}), m.ImportWorkflowInputBody)
    assert body.serialized_workflow == hostile
    search = m.decode(json.dumps({"attributes": {"k\n": hostile}}), m.WorkflowSearchBody)
    assert search.attributes == {"k\n": hostile}
    rule = m.decode(json.dumps({"ruleType": "WorkflowFailure", "ruleMetadata": {"x": hostile}}),
                    m.CreateAlertInputBody)
    assert rule.rule_metadata == {"x": hostile}


def test_a_queue_or_an_application_named_outside_conductor_s_schemas_is_text_too() -> None:
    assert refusal(json.dumps({"queue": "q\x00"}), m.AutoscalePolicy) == f"{m.NOT_PRINTABLE} - at `$.queue`"
    assert refusal(json.dumps({"ruleType": "WorkflowFailure", "ruleMetadata": {}, "receivingAppName": "a\u202e"}),
                   m.CreateAlertInputBody) == f"{m.NOT_PRINTABLE} - at `$.receivingAppName`"
