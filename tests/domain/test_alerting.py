"""Alerting rules and their ``ruleMetadata`` (``relay_es/domain/alerting.py``)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay_es.domain.alerting import (
    CONDUCTOR_TYPES,
    DEFAULT_MIN_INTERVAL,
    EVENT_TYPES,
    MAX_NAME_BYTES,
    MAX_SECS,
    MAX_URL,
    MAX_WEBHOOKS,
    POLLED,
    RELAY_TYPES,
    RULE_TYPES,
    SECRET_LENGTH,
    AlertingRule,
    Webhook,
    check_url,
    parse_metadata,
)
from relay_es.domain.errors import InvalidSetting

# type -> (defaults parse_metadata fills in, {integer parameter: (low, high)})
EXPECTED: dict[str, tuple[dict[str, Any], dict[str, tuple[int, int]]]] = {
    "WorkflowFailure": ({"workflowName": None, "threshold": 1, "windowSecs": 300},
                        {"threshold": (1, 1000), "windowSecs": (1, MAX_SECS)}),
    "SlowQueue": ({"queueName": None, "thresholdSecs": 300}, {"thresholdSecs": (1, MAX_SECS)}),
    "UnresponsiveApplication": ({"thresholdSecs": 60}, {"thresholdSecs": (1, MAX_SECS)}),
    "ExecutorDead": ({}, {}),
    "RecoveryDeferred": ({}, {}),
    "RecoveryFailed": ({"attempts": 3}, {"attempts": (1, 1000)}),
    "ExecutorFlapping": ({"disconnects": 5, "windowSecs": 300},
                         {"disconnects": (2, 1000), "windowSecs": (1, MAX_SECS)}),
}
BOUNDED = [(t, k, lo, hi) for t, (_, bounds) in EXPECTED.items() for k, (lo, hi) in bounds.items()]
NAMES = [("WorkflowFailure", "workflowName"), ("SlowQueue", "queueName")]
SECRET = "s" * SECRET_LENGTH[0]


def refused(rule_type: str, metadata: Any) -> InvalidSetting:
    with pytest.raises(InvalidSetting) as info:
        parse_metadata(rule_type, metadata)
    return info.value


def hooks(*webhooks: Any) -> dict[str, Any]:
    return {"webhooks": list(webhooks)}


def rule(**overrides: Any) -> AlertingRule:
    fields: dict[str, Any] = dict(id="r1", org="o", app="shop", receiving_app="shop", rule_type="ExecutorDead")
    fields.update(overrides)
    return AlertingRule(**fields)


# ------------------------------------------------------------------- the types


def test_the_types_are_conductors_three_then_relays_own() -> None:
    assert CONDUCTOR_TYPES == ("WorkflowFailure", "SlowQueue", "UnresponsiveApplication")
    assert RULE_TYPES == CONDUCTOR_TYPES + RELAY_TYPES
    assert set(EXPECTED) == set(RULE_TYPES)
    assert set(POLLED) <= set(CONDUCTOR_TYPES) and set(EVENT_TYPES) == set(RELAY_TYPES)


@pytest.mark.parametrize("rule_type", ["", "workflowfailure", "Nope", None])
def test_an_unknown_type_is_refused(rule_type: Any) -> None:
    err = refused(rule_type, {})
    assert err.field == "ruleType"
    assert all(t in err.message for t in RULE_TYPES)


# ------------------------------------------------------------------ defaults


@pytest.mark.parametrize("rule_type", RULE_TYPES)
@pytest.mark.parametrize("metadata", [None, {}])
def test_defaults_are_filled_in(rule_type: str, metadata: Any) -> None:
    params, webhooks = parse_metadata(rule_type, metadata)
    assert params == EXPECTED[rule_type][0]
    assert webhooks == ()


@pytest.mark.parametrize("rule_type", RULE_TYPES)
def test_an_explicit_null_is_the_default(rule_type: str) -> None:
    defaults = EXPECTED[rule_type][0]
    params, webhooks = parse_metadata(rule_type, {**{k: None for k in defaults}, "webhooks": None})
    assert params == defaults and webhooks == ()


def test_given_values_replace_the_defaults() -> None:
    params, _ = parse_metadata("WorkflowFailure", {"workflowName": "checkout", "threshold": 7, "windowSecs": 60.0})
    assert params == {"workflowName": "checkout", "threshold": 7, "windowSecs": 60}
    assert type(params["windowSecs"]) is int  # a whole float is kept as an int
    params, _ = parse_metadata("SlowQueue", {"queueName": "orders"})
    assert params == {"queueName": "orders", "thresholdSecs": 300}
    params, _ = parse_metadata("ExecutorFlapping", {"disconnects": 2})
    assert params == {"disconnects": 2, "windowSecs": 300}


@pytest.mark.parametrize("metadata", [[], "x", 5, True, [{"threshold": 1}]])
def test_metadata_must_be_an_object(metadata: Any) -> None:
    assert refused("WorkflowFailure", metadata).field == "ruleMetadata"


# -------------------------------------------------------------------- bounds


@pytest.mark.parametrize(("rule_type", "key", "low", "high"), BOUNDED)
def test_the_bounds_are_inclusive(rule_type: str, key: str, low: int, high: int) -> None:
    assert parse_metadata(rule_type, {key: low})[0][key] == low
    assert parse_metadata(rule_type, {key: high})[0][key] == high
    assert parse_metadata(rule_type, {key: float(high)})[0][key] == high


@pytest.mark.parametrize(("rule_type", "key", "low", "high"), BOUNDED)
def test_out_of_range_is_refused(rule_type: str, key: str, low: int, high: int) -> None:
    for value in (low - 1, high + 1, -1, 10**18):
        err = refused(rule_type, {key: value})
        assert err.field == f"ruleMetadata.{key}"
        assert err.message == f"must be a whole number from {low} to {high}"


@pytest.mark.parametrize(("rule_type", "key", "low", "high"), BOUNDED)
@pytest.mark.parametrize("value", [True, False, 1.5, 2.000001, math.nan, math.inf, -math.inf, "5", [5], {"v": 5}])
def test_anything_but_a_whole_number_is_refused(rule_type: str, key: str, low: int, high: int, value: Any) -> None:
    assert refused(rule_type, {key: value}).field == f"ruleMetadata.{key}"


@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_huge_integer_is_refused_not_an_overflow(value: int) -> None:
    assert refused("WorkflowFailure", {"threshold": value}).field == "ruleMetadata.threshold"


# -------------------------------------------------------------- unknown keys


def test_an_unknown_key_is_named_with_the_allowed_ones() -> None:
    err = refused("WorkflowFailure", {"threshhold": 3})
    assert err.field == "ruleMetadata"
    assert "'threshhold'" in err.message and "WorkflowFailure" in err.message
    assert "(allowed: workflowName, threshold, windowSecs, webhooks)" in err.message


def test_every_unknown_key_is_named_sorted() -> None:
    err = refused("ExecutorDead", {"zeta": 1, "alpha": 2, "webhooks": []})
    assert "'alpha', 'zeta'" in err.message
    assert "(allowed: webhooks)" in err.message


def test_a_key_of_another_type_is_unknown() -> None:
    err = refused("SlowQueue", {"workflowName": "w"})
    assert "'workflowName'" in err.message and "(allowed: queueName, thresholdSecs, webhooks)" in err.message


def test_an_unknown_key_is_cut_in_the_message() -> None:
    err = refused("ExecutorDead", {"k" * 10_000: 1})
    assert repr("k" * 64) in err.message and "k" * 65 not in err.message


# --------------------------------------------------------------------- names


@pytest.mark.parametrize(("rule_type", "key"), NAMES)
@pytest.mark.parametrize("value", ["", "a\x00b", "a\nb", "tab\there", "\x1b[31m", "\u202eevil", "zero\u200bwidth",
                                   "x" * (MAX_NAME_BYTES + 1), "é" * (MAX_NAME_BYTES // 2 + 1), 5, ["w"]])
def test_a_name_is_short_and_plain(rule_type: str, key: str, value: Any) -> None:
    err = refused(rule_type, {key: value})
    assert err.field == f"ruleMetadata.{key}"
    assert str(MAX_NAME_BYTES) in err.message


@pytest.mark.parametrize(("rule_type", "key"), NAMES)
def test_a_name_of_the_greatest_length_is_kept(rule_type: str, key: str) -> None:
    for name in ("x" * MAX_NAME_BYTES, "é" * (MAX_NAME_BYTES // 2), "a.b-c_d e"):
        assert parse_metadata(rule_type, {key: name})[0][key] == name


# ------------------------------------------------------------------ webhooks


@pytest.mark.parametrize("value", ["https://example.com", {"url": "https://example.com"}, 5, True])
def test_webhooks_must_be_a_list(value: Any) -> None:
    err = refused("ExecutorDead", {"webhooks": value})
    assert err.field == "ruleMetadata.webhooks"
    assert str(MAX_WEBHOOKS) in err.message


def test_at_most_max_webhooks() -> None:
    one = {"url": "https://example.com/hook"}
    _, webhooks = parse_metadata("ExecutorDead", hooks(*[one] * MAX_WEBHOOKS))
    assert len(webhooks) == MAX_WEBHOOKS
    assert refused("ExecutorDead", hooks(*[one] * (MAX_WEBHOOKS + 1))).field == "ruleMetadata.webhooks"


def test_an_empty_list_is_no_webhooks() -> None:
    assert parse_metadata("ExecutorDead", {"webhooks": []}) == ({}, ())


@pytest.mark.parametrize("webhook", [
    "https://example.com", None, ["https://example.com"],
    {"url": "https://example.com", "headers": {"X": "y"}},
    {"url": "https://example.com", "Secret": SECRET},
])
def test_a_webhook_is_an_object_of_its_three_keys(webhook: Any) -> None:
    err = refused("ExecutorDead", hooks({"url": "https://ok.example"}, webhook))
    assert err.field == "ruleMetadata.webhooks[1]"


def test_a_webhook_is_json_by_default_and_unsigned_without_a_secret() -> None:
    _, (w,) = parse_metadata("ExecutorDead", hooks({"url": "https://example.com/h"}))
    assert w == Webhook("https://example.com/h", "json", None)
    _, (w,) = parse_metadata("ExecutorDead", hooks({"url": "https://example.com/h", "format": None, "secret": None}))
    assert w == Webhook("https://example.com/h", "json", None)


def test_the_three_keys_are_kept() -> None:
    _, webhooks = parse_metadata("RecoveryFailed", hooks(
        {"url": "https://a.example/x", "format": "json", "secret": SECRET},
        {"url": "http://b.example:8080", "format": "slack"},
    ))
    assert webhooks == (Webhook("https://a.example/x", "json", SECRET), Webhook("http://b.example:8080", "slack", None))


@pytest.mark.parametrize("fmt", ["JSON", "xml", "", 1, ["json"]])
def test_an_unknown_format_is_refused(fmt: Any) -> None:
    err = refused("ExecutorDead", hooks({"url": "https://example.com", "format": fmt}))
    assert err.field == "ruleMetadata.webhooks[0].format"


def test_a_slack_webhook_takes_no_secret() -> None:
    err = refused("ExecutorDead", hooks({"url": "https://hooks.slack.com/services/T/B/X", "format": "slack",
                                         "secret": SECRET}))
    assert err.field == "ruleMetadata.webhooks[0].secret"
    assert "Slack" in err.message


def test_secret_length_bounds() -> None:
    low, high = SECRET_LENGTH
    for secret in ("a" * low, "b" * high, "p@ss w0rd!-" + "x" * low):
        _, (w,) = parse_metadata("ExecutorDead", hooks({"url": "https://example.com", "secret": secret}))
        assert w.secret == secret
    for secret in ("", "a" * (low - 1), "b" * (high + 1), "a\nb" + "x" * low, "\x00" * low, 12345678901234567, True):
        err = refused("ExecutorDead", hooks({"url": "https://example.com", "secret": secret}))
        assert err.field == "ruleMetadata.webhooks[0].secret"
        assert f"{low} to {high}" in err.message


@pytest.mark.parametrize("url", [
    "ftp://example.com/x", "file:///etc/passwd", "javascript:alert(1)", "mailto:a@example.com",
    "/relative/path", "example.com/hook", "//example.com/hook", "https://", "https:///path", "http:",
    "https://user:pass@example.com/hook", "https://user@example.com/", "https://:pass@example.com/",
    "https://exa mple.com/", "https://example.com/a b", " https://example.com", "https://example.com/\n",
    "https://example.com/\x00", "https://example.com/\t", "https://exam\u202eple.com/",
    "https://example.com:99999/", "https://example.com:port/", "https://example.com:-1/", "http://[::1/",
    "https://example.com/" + "a" * MAX_URL, "", None, 5, ["https://example.com"],
])
def test_a_bad_url_is_refused(url: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_url("where", url)
    assert info.value.field == "where"
    assert refused("ExecutorDead", hooks({"url": url})).field == "ruleMetadata.webhooks[0].url"


def test_a_webhook_needs_a_url() -> None:
    assert refused("ExecutorDead", hooks({"format": "json"})).field == "ruleMetadata.webhooks[0].url"


@pytest.mark.parametrize("url", [
    "https://example.com", "http://example.com/", "https://example.com:8443/a/b?c=d#e", "http://127.0.0.1:9000/x",
    "http://[::1]:8080/alerts", "HTTPS://EXAMPLE.COM/x", "https://hooks.slack.com/services/T0/B0/xyz",
])
def test_a_good_url_is_kept_as_given(url: str) -> None:
    assert check_url("where", url) == url


LONGEST_NAME = ".".join(["a" * 63] * 4)[:253]  # 253 bytes: the most DNS takes


@pytest.mark.parametrize("host", [
    "a..example.com", ".example.com", "example..", "...", ".", "a" * 64 + ".com", LONGEST_NAME + "a",
    "\u2026", "a\u2026b.com", "\uff41\uff42\uff43.com", "a\u00adb.com",
])
def test_a_host_no_resolver_takes_is_refused_without_echoing_the_url(host: str) -> None:
    """An empty label, one over 63 bytes, a name over 253, letters IDNA 2008 does not take: every attempt
    failed before any lookup, each with a traceback, retried ten times (a helper's unicode_hook.py)."""
    url = f"https://{host}/hook/T0-s3cret-path"
    with pytest.raises(InvalidSetting) as info:
        check_url("where", url)
    assert info.value.field == "where" and "63 bytes" in info.value.message
    assert "s3cret" not in info.value.message and host not in info.value.message
    assert refused("ExecutorDead", hooks({"url": url})).field == "ruleMetadata.webhooks[0].url"


@pytest.mark.parametrize("host", [
    "a" * 63 + ".com", LONGEST_NAME, LONGEST_NAME + ".", "example.com.", "fa\u00df.de", "xn--fa-hia.de",
    "[fe80::1%25eth0]", "[2001:db8::1]:8443", "192.0.2.1", "ex_ample.com",
])
def test_a_host_a_resolver_takes_is_kept(host: str) -> None:
    url = f"https://{host}/hook"
    assert check_url("where", url) == url


def test_a_url_of_the_greatest_length_is_kept() -> None:
    url = "https://example.com/" + "a" * (MAX_URL - len("https://example.com/"))
    assert len(url) == MAX_URL and check_url("where", url) == url
    with pytest.raises(InvalidSetting):
        check_url("where", url + "a")


# ------------------------------------------------------------------- check()


def test_check_returns_the_rule() -> None:
    r = rule(rule_type="SlowQueue", parameters={"queueName": None, "thresholdSecs": 300})
    assert r.check() is r
    assert r.min_interval_secs == DEFAULT_MIN_INTERVAL


@pytest.mark.parametrize("rule_type", ["Nope", "", "slowqueue"])
def test_check_refuses_an_unknown_type(rule_type: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        rule(rule_type=rule_type).check()
    assert info.value.field == "ruleType"


@pytest.mark.parametrize("secs", [0, 1, DEFAULT_MIN_INTERVAL, MAX_SECS])
def test_check_keeps_an_interval_in_bounds(secs: int) -> None:
    assert rule(min_interval_secs=secs).check().min_interval_secs == secs


@pytest.mark.parametrize("secs", [-1, MAX_SECS + 1, True, False, 1.0, 1.5, math.nan, "60", None])
def test_check_refuses_an_interval_out_of_bounds_or_not_whole(secs: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        rule(min_interval_secs=secs).check()
    assert info.value.field == "minIntervalSecs"
    assert str(MAX_SECS) in info.value.message


def test_an_unresponsive_application_cannot_receive_its_own_alert() -> None:
    with pytest.raises(InvalidSetting) as info:
        rule(rule_type="UnresponsiveApplication", receiving_app="shop").check()
    assert info.value.field == "receivingAppName"
    assert rule(rule_type="UnresponsiveApplication", receiving_app="pager").check().receiving_app == "pager"
    # any other type may alert the application it watches
    for t in set(RULE_TYPES) - {"UnresponsiveApplication"}:
        assert rule(rule_type=t, receiving_app="shop").check()


# ------------------------------------------------------- as_dict / from_dict


def full_rule() -> AlertingRule:
    params, webhooks = parse_metadata("WorkflowFailure", {
        "workflowName": "checkout", "threshold": 3,
        "webhooks": [{"url": "https://a.example/hook?token=abc", "secret": SECRET},
                     {"url": "https://hooks.slack.com/services/T/B/X", "format": "slack"}],
    })
    return AlertingRule(id="r1", org="o", app="shop", receiving_app="ops", rule_type="WorkflowFailure",
                        parameters=params, webhooks=webhooks, min_interval_secs=60)


def test_a_rule_round_trips_through_primitives() -> None:
    for r in (full_rule(), rule(), rule(rule_type="SlowQueue", parameters={"queueName": None, "thresholdSecs": 9})):
        d = r.as_dict()
        assert AlertingRule.from_dict(d) == r
        assert isinstance(d["webhooks"], list)
        assert all(type(w) is dict for w in d["webhooks"])


def test_as_dict_holds_only_primitives_and_copies() -> None:
    r = full_rule()
    d = r.as_dict()
    assert d == {
        "id": "r1", "org": "o", "app": "shop", "receiving_app": "ops", "rule_type": "WorkflowFailure",
        "parameters": {"workflowName": "checkout", "threshold": 3, "windowSecs": 300},
        "webhooks": [{"url": "https://a.example/hook?token=abc", "format": "json", "secret": SECRET},
                     {"url": "https://hooks.slack.com/services/T/B/X", "format": "slack", "secret": None}],
        "min_interval_secs": 60,
    }
    d["parameters"]["threshold"] = 99
    assert r.parameters["threshold"] == 3
    back = AlertingRule.from_dict(r.as_dict())
    back.parameters["threshold"] = 42
    assert r.parameters["threshold"] == 3


# ----------------------------------------------------------- public_metadata


def test_public_metadata_never_holds_a_secret() -> None:
    r = full_rule()
    public = r.public_metadata()
    assert SECRET not in repr(public)
    assert "token=abc" not in repr(public) and "services/T/B/X" not in repr(public)
    assert public == {
        "workflowName": "checkout", "threshold": 3, "windowSecs": 300,
        "webhooks": [{"url": "https://a.example/…", "format": "json", "signed": True},
                     {"url": "https://hooks.slack.com/…", "format": "slack", "signed": False}],
    }


def test_public_metadata_leaves_out_unset_names_and_absent_webhooks() -> None:
    params, webhooks = parse_metadata("SlowQueue", {})
    r = rule(rule_type="SlowQueue", parameters=params, webhooks=webhooks)
    assert r.public_metadata() == {"thresholdSecs": 300}
    assert rule().public_metadata() == {}


@pytest.mark.parametrize(("url", "shown"), [
    ("https://example.com", "https://example.com"),
    ("https://example.com/", "https://example.com"),
    ("https://example.com//", "https://example.com"),
    ("https://example.com:8443", "https://example.com:8443"),
    ("https://example.com/hook", "https://example.com/…"),
    ("https://example.com/a/b/c", "https://example.com/…"),
    ("https://example.com?key=secret", "https://example.com/…"),
    ("https://example.com/?key=secret", "https://example.com/…"),
    ("http://[::1]:8080/x", "http://[::1]:8080/…"),
    ("https://example.com#fragment", "https://example.com"),
])
def test_a_webhook_url_is_shown_as_scheme_and_host(url: str, shown: str) -> None:
    assert Webhook(check_url("u", url)).public() == {"url": shown, "format": "json", "signed": False}


def test_a_signed_webhook_shows_only_that_it_is_signed() -> None:
    public = Webhook("https://example.com/x", "json", SECRET).public()
    assert public == {"url": "https://example.com/…", "format": "json", "signed": True}
    assert SECRET not in repr(public)


# --------------------------------------------------------------- property


JSON_SCALARS = (st.none() | st.booleans() | st.integers()
                | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
NUMBERS = (st.integers(min_value=-5, max_value=MAX_SECS + 5) | st.integers(min_value=1, max_value=1000)
           | st.floats(min_value=-5, max_value=2000) | JSON)
GOOD_URLS = st.sampled_from(["https://example.com/h?k=v", "http://h:1/", "https://h", "http://[::1]:8080/x"])
URLS = GOOD_URLS | GOOD_URLS | st.sampled_from(["ftp://x", "https://u:p@h/", "http://h:99999/", "https://h/a b",
                                                "/rel"]) | st.text(max_size=30)
PLAIN = st.characters(codec="utf-8", exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp"))
SECRETS = st.text(PLAIN, min_size=SECRET_LENGTH[0], max_size=SECRET_LENGTH[0] + 4) | st.text(max_size=20) | JSON
WEBHOOK = st.fixed_dictionaries({"url": URLS}, optional={
    "format": st.sampled_from(["json", "json", "slack", "xml"]) | JSON, "secret": SECRETS})
EXTRA = st.dictionaries(st.sampled_from(["threshhold", "webhook", "workflowName", "attempts"]) | st.text(max_size=8),
                        JSON, max_size=1)


@st.composite
def metadata_of(draw: st.DrawFn, rule_type: str) -> Any:
    """Mostly an object of the type's keys (with values of every shape), now and then an unknown key
    or not an object at all."""
    known = EXPECTED[rule_type][0] if rule_type in EXPECTED else {}
    values = {k: (st.text(PLAIN, min_size=1, max_size=20) | st.text(max_size=MAX_NAME_BYTES + 2) | JSON)
              if k.endswith("Name") else NUMBERS for k in known}
    values["webhooks"] = st.lists(WEBHOOK, max_size=MAX_WEBHOOKS + 1) | st.lists(WEBHOOK, max_size=2) | JSON
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return draw(JSON)
    out = draw(st.fixed_dictionaries({}, optional=values))
    if shape == 1:
        out.update(draw(EXTRA))
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rule_type=st.sampled_from((*RULE_TYPES, "Nope", "")))
def test_any_json_metadata_parses_or_is_refused_as_invalid(data: st.DataObject, rule_type: str) -> None:
    metadata = data.draw(metadata_of(rule_type), label="metadata")
    try:
        params, webhooks = parse_metadata(rule_type, metadata)
    except InvalidSetting as e:
        assert e.field == "ruleType" or e.field.startswith("ruleMetadata")
        return
    # what is kept is what a rule holds: known keys, whole numbers in range, checked webhooks
    defaults, bounds = EXPECTED[rule_type]
    assert set(params) == set(defaults)
    for key, (low, high) in bounds.items():
        assert type(params[key]) is int and low <= params[key] <= high
    assert len(webhooks) <= MAX_WEBHOOKS
    for w in webhooks:
        assert check_url("u", w.url) == w.url and w.format in ("json", "slack")
        assert w.secret is None or (w.format == "json" and SECRET_LENGTH[0] <= len(w.secret) <= SECRET_LENGTH[1])
    r = AlertingRule(id="r", org="o", app="a", receiving_app="b", rule_type=rule_type, parameters=params,
                     webhooks=webhooks).check()
    assert AlertingRule.from_dict(r.as_dict()) == r
    # the answer does not depend on a secret's value (a secret equal to another field, such as the
    # workflow name, may still appear there: comparing text would fail on that coincidence)
    other = tuple(replace(w, secret=None if w.secret is None else "\x00" + w.secret) for w in webhooks)
    assert replace(r, webhooks=other).public_metadata() == r.public_metadata()
    assert all(set(h) == {"url", "format", "signed"} for h in r.public_metadata().get("webhooks", ()))


# ------------------------------------------------------------------ sealed


def sealed_rule() -> tuple[AlertingRule, bytes]:
    from relay_es.domain.sealing import new_key

    key = new_key()
    rule = AlertingRule(id="r1", org="acme", app="shop", receiving_app="shop", rule_type="ExecutorDead",
                        webhooks=(Webhook("https://hooks.example/a?token=T0KEN", "json", "s" * 16),
                                  Webhook("https://hooks.slack.example/services/XYZ", "slack", None)))
    return rule.sealed(key), key


def test_a_sealed_rule_answers_what_the_plain_one_did_and_opens_with_its_key() -> None:
    from relay_es.domain.alerting import SealedWebhook

    rule, key = sealed_rule()
    assert all(isinstance(w, SealedWebhook) for w in rule.webhooks)
    assert rule.public_metadata()["webhooks"] == [
        {"url": "https://hooks.example/…", "format": "json", "signed": True},
        {"url": "https://hooks.slack.example/…", "format": "slack", "signed": False}]
    assert rule.webhooks[0].opened(key, "r1", 0) == Webhook("https://hooks.example/a?token=T0KEN", "json", "s" * 16)
    assert rule.webhooks[1].opened(key, "r1", 1) == Webhook("https://hooks.slack.example/services/XYZ", "slack", None)
    assert "T0KEN" not in repr(rule) and "XYZ" not in repr(rule) and rule.webhooks[0].sealed not in repr(rule)
    assert rule.sealed(key) == rule  # sealed once


def test_a_sealed_rule_survives_its_primitives_and_they_hold_nothing_secret() -> None:
    rule, key = sealed_rule()
    d = rule.as_dict()
    assert AlertingRule.from_dict(d) == rule
    text = json.dumps(d)
    assert "T0KEN" not in text and "s" * 16 not in text and "XYZ" not in text


def test_a_sealed_webhook_opens_only_in_its_own_place() -> None:
    from relay_es.domain.sealing import Unsealable

    rule, key = sealed_rule()
    with pytest.raises(Unsealable):
        rule.webhooks[0].opened(key, "r2", 0)  # another rule's
    with pytest.raises(Unsealable):
        rule.webhooks[0].opened(key, "r1", 1)  # another place in the rule
    swapped = type(rule.webhooks[0])(rule.webhooks[0].shown, "slack", False, rule.webhooks[0].sealed)
    with pytest.raises(Unsealable):
        swapped.opened(key, "r1", 0)  # its format changed


def test_a_rule_kept_in_the_clear_reads_back_as_it_was() -> None:
    plain = AlertingRule(id="r1", org="acme", app="shop", receiving_app="shop", rule_type="ExecutorDead",
                         webhooks=(Webhook("https://hooks.example/a", "json", "s" * 16),))
    assert AlertingRule.from_dict(plain.as_dict()) == plain
