"""The domain boundary refuses what the stores cannot hold (issue 11), whoever calls it."""

from __future__ import annotations

import pytest

from relay_es.aggregates.application import check_app_name, check_org_name
from relay_es.domain.text import MAX_ID_BYTES, check_id, escape_controls, sanitized
from relay_es.domain.clock import FakeClock
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.executor_commands import ExecutorInfo
from relay_es.engine.service import Relay
from tests.support import POPO


@pytest.mark.parametrize("name", ["orders\n", "orders\r\n", "\norders", "ord\x00ers", "orders ", ""])
def test_names_match_the_whole_string(name: str) -> None:
    with pytest.raises(InvalidSetting):
        check_app_name(name)
    with pytest.raises(InvalidSetting):
        check_org_name(name)


def test_good_names_pass() -> None:
    assert check_app_name("orders.v2_x~y-z") == "orders.v2_x~y-z"
    assert check_org_name("acme") == "acme"


@pytest.fixture
def relay() -> Relay:
    r = Relay(POPO, clock=FakeClock())
    r.register_app("local", "app")
    return r


def _count(relay: Relay) -> int:
    return len(relay.notifications(0, 10_000))


@pytest.mark.parametrize("field, value", [
    ("executor_id", "ex\x00"),
    ("executor_id", "x" * (MAX_ID_BYTES + 1)),
    ("executor_id", "é" * (MAX_ID_BYTES // 2 + 1)),  # counted in bytes, not characters
    ("executor_id", ""),
    ("application_version", "v\x001"),
    ("hostname", "evil\x00host"),
    ("language", "py\x00"),
    ("dbos_version", "3\x00"),
    ("hostname", "h" * 100_000),
])
def test_an_executor_the_stores_cannot_hold_is_refused_and_nothing_recorded(relay: Relay, field: str,
                                                                          value: str) -> None:
    fields = dict(executor_id="ex", application_version="v1", hostname="h", language="python", dbos_version="1")
    fields[field] = value
    before = _count(relay)
    with pytest.raises(InvalidSetting):
        relay.executor_connected("local", "app", ExecutorInfo(**fields), connection_id="c1", owner="relay-1")
    assert _count(relay) == before


@pytest.mark.parametrize("org, app", [("local\n", "app"), ("local", "app\n"), ("local", "a" * 300)])
def test_an_executor_of_a_bad_org_or_app_name_is_refused(relay: Relay, org: str, app: str) -> None:
    with pytest.raises(InvalidSetting):
        relay.executor_connected(org, app, ExecutorInfo("ex", "v1"), connection_id="c1", owner="relay-1")


def test_hostile_text_in_a_violation_or_refusal_is_kept_escaped_and_bounded(relay: Relay) -> None:
    relay.record_violation("local", "app", kind="bad\x00kind", detail="a\x00b\n\x1b[2J" * 1000,
                           executor_id="e\x00" * 5000, peer="1.2.3.4\r\n")
    relay.record_refusal("local", app="ap\x00p\n" * 1000, peer="p\x00", status=401, reason="r\x1b[31m")
    events = [e for _, _, e in relay.notifications(0, 100)]
    violated = [e for e in events if type(e).__name__ == "ProtocolViolated"][0]
    refused = [e for e in events if type(e).__name__ == "Refused"][0]
    for e in (violated, refused):
        for v in vars(e).values():
            if isinstance(v, str):
                assert "\x00" not in v and "\n" not in v and "\x1b" not in v and "\r" not in v
    assert violated.kind == "bad\\x00kind" and violated.peer == "1.2.3.4\\r\\n"
    assert len(violated.executor_id) <= 201 and len(violated.detail) <= 501  # cut after escaping
    assert len(refused.app) <= 201  # stays an index entry the audit log can hold
    assert refused.reason == "r\\x1b[31m"


def test_check_id_and_escape() -> None:
    assert check_id("x", "abc") == "abc"
    assert check_id("x", None, optional=True) is None
    assert escape_controls("a\nb\rc\x1b[2J\u2028\x7f") == "a\\nb\\rc\\x1b[2J\\u2028\\x7f"
    assert sanitized(None) is None
    assert sanitized("x" * 10, 4) == "xxxx…"
