"""The executor input validator (relay_es.protocol.limits): every bound, pure."""

from __future__ import annotations

from typing import Any

import pytest

from relay_es.protocol import limits
from relay_es.protocol.limits import IDENTIFIER_BYTES, MAX_METADATA_BYTES, OutOfBounds, check_executor_info, printable
from relay_es.protocol.messages import ExecutorInfoResponse


def info(**kw: Any) -> ExecutorInfoResponse:
    fields: dict[str, Any] = dict(type="executor_info", request_id="r", executor_id="365b48ef-ca98-472b-a11c-13190ad2706b",
                                  application_version="1d6ccc5e8501c9d77084185b3c54db01", hostname="vm",
                                  language="python", dbos_version="3.2.0", executor_metadata={"region": "local-test"})
    fields.update(kw)
    return ExecutorInfoResponse(**fields)


def refused(**kw: Any) -> OutOfBounds:
    with pytest.raises(OutOfBounds) as e:
        check_executor_info(info(**kw))
    return e.value


def test_what_the_sdks_send_passes() -> None:
    check_executor_info(info())
    # older SDKs omit language, dbos_version and metadata; Java's hostname may be "<unknown>"
    check_executor_info(info(language=None, dbos_version=None, executor_metadata=None, hostname="<unknown>"))
    check_executor_info(info(hostname="ünïcødé-host.example", application_version="v1.2.3-rc.1+build.7"))
    check_executor_info(info(executor_metadata={"a": [1, 2.5, True, None, {"b": "multi\nline \x07 text"}]}))


@pytest.mark.parametrize("field", sorted(IDENTIFIER_BYTES))
def test_each_identifier_is_bounded_in_bytes(field: str) -> None:
    limit = IDENTIFIER_BYTES[field]
    check_executor_info(info(**{field: "a" * limit}))
    e = refused(**{field: "a" * (limit + 1)})
    assert e.field == field and f"{limit} bytes" in e.reason
    # bytes, not characters: a 4-byte character counts 4
    e = refused(**{field: "\U0001F600" * (limit // 4 + 1)})
    assert e.field == field


def test_a_5_kb_executor_id_is_refused() -> None:
    assert refused(executor_id="x" * 5000).field == "executor_id"


@pytest.mark.parametrize("field", sorted(IDENTIFIER_BYTES))
@pytest.mark.parametrize("bad", ["\x00", "\n", "\r", "\x1b[31m", "\x7f", "\x85", "\u202e", "\u200b", "\u2028",
                                 "\u2029", "\ufeff"])
def test_identifiers_hold_no_control_or_format_character(field: str, bad: str) -> None:
    e = refused(**{field: f"host{bad}name"})
    assert e.field == field and "U+" in e.reason


def test_nul_in_hostname_is_refused() -> None:
    e = refused(hostname="web-1\x00")
    assert e.field == "hostname" and "U+0000" in e.reason


def test_executor_id_must_not_be_empty_and_identifiers_must_be_strings() -> None:
    assert refused(executor_id="").field == "executor_id"
    with pytest.raises(OutOfBounds):
        limits.check_identifier("hostname", 5)


def test_metadata_is_an_object_or_null() -> None:
    for bad in ([1, 2], "text", 5, True):
        assert refused(executor_metadata=bad).field == "executor_metadata"


def test_metadata_byte_cap() -> None:
    check_executor_info(info(executor_metadata={"k": "v" * (MAX_METADATA_BYTES - 100)}))
    e = refused(executor_metadata={"k": "v" * MAX_METADATA_BYTES})
    assert e.field == "executor_metadata" and "bytes" in e.reason
    # many small entries add up too (the cap is on the whole object, keys included)
    assert refused(executor_metadata={f"key-{i}": i for i in range(3000)}).field == "executor_metadata"
    assert refused(executor_metadata={"a": [[] for _ in range(MAX_METADATA_BYTES)]}).field == "executor_metadata"
    # as JSON writes it: a control character is six bytes (\u0001), a quote two
    assert refused(executor_metadata={"k": "\x01" * (MAX_METADATA_BYTES // 5)}).field == "executor_metadata"
    assert refused(executor_metadata={"k": '"' * (MAX_METADATA_BYTES // 2 + 10)}).field == "executor_metadata"
    check_executor_info(info(executor_metadata={"k": "é" * (MAX_METADATA_BYTES // 2 - 20)}))  # 2 bytes each


def test_metadata_holds_no_nul_anywhere() -> None:
    for bad in ({"a\x00": 1}, {"a": "b\x00"}, {"a": [{"b": ["c", "\x00"]}]}):
        e = refused(executor_metadata=bad)
        assert "U+0000" in e.reason, bad


def test_metadata_depth_is_bounded() -> None:
    deep: Any = {}
    for _ in range(limits.MAX_METADATA_DEPTH - 1):
        deep = {"d": deep}
    check_executor_info(info(executor_metadata=deep))
    assert "nested" in refused(executor_metadata={"d": deep}).reason
    nested_list: Any = []
    for _ in range(1000):
        nested_list = [nested_list]
    assert "nested" in refused(executor_metadata={"l": nested_list}).reason


def test_printable_escapes_and_bounds_what_reaches_an_audit_entry_or_a_log() -> None:
    assert printable("ok text") == "ok text"
    assert printable("a\x00b\nc\x1b[2J\u202e") == "a\\u0000b\\u000ac\\u001b[2J\\u202e"
    s = printable("x" * 10_000, 50)
    assert len(s) == 53 and s.endswith("...")
    assert "\x00" not in printable("\x00" * 10_000)
    assert printable(ValueError("bad\x00")) == "bad\\u0000"
