"""Settings of ``relay serve``: flags and RELAY_* variables (the flag wins), the resource limits (ADR 15),
strict booleans, trusted proxies."""

from __future__ import annotations

import pytest

from relay_es.composition.cli import main
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol.limits import ResourceLimits
from relay_es.composition.settings import LIMITS, Settings


def test_generous_defaults() -> None:
    s = Settings.from_sources({}, {})
    assert s.limits == ResourceLimits()
    assert s.limits.connections_per_key >= 5000 and s.limits.executors_per_app >= 5000  # bench storms: 5,000
    assert s.limits.handshakes_per_address >= 5000


def test_each_limit_has_a_flag_and_a_variable_and_the_flag_wins() -> None:
    for key, lim in LIMITS.items():
        s = Settings.from_sources({}, {lim.env: "7"})
        assert getattr(s.limits, key) == 7, key
        s = Settings.from_sources({key: 9}, {lim.env: "7"})
        assert getattr(s.limits, key) == 9, key
        assert lim.flag.startswith("--max-") and lim.env.startswith("RELAY_MAX_")


@pytest.mark.parametrize("raw", ["0", "-1", "x", "1.5", "100000000"])
def test_a_limit_must_be_a_sensible_whole_number(raw: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {"RELAY_MAX_CONNECTIONS_PER_KEY": raw})
    assert "RELAY_MAX_CONNECTIONS_PER_KEY" in str(e.value)


def test_the_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Settings] = {}

    def fake_serve(args):  # type: ignore[no-untyped-def]
        seen["s"] = Settings.from_sources(vars(args), {})
        return 0

    monkeypatch.setattr("relay_es.composition.cli.serve", fake_serve)
    assert main(["serve", "--max-connections-per-key", "11", "--max-executors-per-app", "12",
                 "--max-handshakes-per-address", "13", "--max-executors-per-key", "14",
                 "--max-connections-per-app", "15"]) == 0
    assert seen["s"].limits == ResourceLimits(connections_per_key=11, executors_per_app=12, handshakes_per_address=13,
                                              executors_per_key=14, connections_per_app=15)


@pytest.mark.parametrize("name", ["RELAY_AUTH", "RELAY_INSECURE"])
@pytest.mark.parametrize("raw,expected", [("1", True), ("TRUE", True), ("Yes", True), ("on", True),
                                          ("0", False), ("false", False), ("NO", False), ("Off", False)])
def test_a_boolean_variable_takes_the_usual_spellings(name: str, raw: str, expected: bool) -> None:
    s = Settings.from_sources({}, {name: raw})
    assert (s.auth if name == "RELAY_AUTH" else s.insecure) is expected


@pytest.mark.parametrize("name", ["RELAY_AUTH", "RELAY_INSECURE"])
@pytest.mark.parametrize("raw", ["enabled", "required", "y", "", "2", "true!"])
def test_any_other_boolean_is_refused_naming_the_variable(name: str, raw: str) -> None:
    """RELAY_AUTH=enabled silently meant development mode (any key accepted)."""
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {name: raw})
    assert name in str(e.value)


def test_trusted_proxies_are_addresses_or_networks() -> None:
    assert Settings.from_sources({}, {}).forwarded_allow_ips == ("127.0.0.1",)
    s = Settings.from_sources({}, {"RELAY_FORWARDED_ALLOW_IPS": " 10.0.0.0/8, 192.168.1.5,::1"})
    assert s.forwarded_allow_ips == ("10.0.0.0/8", "192.168.1.5", "::1")
    assert Settings.from_sources({"forwarded_allow_ips": "10.9.9.9"},
                                 {"RELAY_FORWARDED_ALLOW_IPS": "10.0.0.1"}).forwarded_allow_ips == ("10.9.9.9",)
    assert Settings.from_sources({}, {"RELAY_FORWARDED_ALLOW_IPS": ""}).forwarded_allow_ips == ()
    for bad in ("proxy.local", "*", "10.0.0.0/33"):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({}, {"RELAY_FORWARDED_ALLOW_IPS": bad})
        assert "RELAY_FORWARDED_ALLOW_IPS" in str(e.value)


def test_open_connections_stay_below_the_open_file_limit() -> None:
    from relay_es.composition.settings import FD_RESERVE, fd_limit

    s = Settings.from_sources({}, {})
    assert s.max_open_connections == max(64, fd_limit() - FD_RESERVE)
    assert Settings.from_sources({}, {"RELAY_MAX_OPEN_CONNECTIONS": "100"}).max_open_connections == 100
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({"max_open_connections": fd_limit()}, {})
    assert "RELAY_MAX_OPEN_CONNECTIONS" in str(e.value) and "ulimit" in str(e.value)


def test_request_deadline_and_outbox_cap_defaults() -> None:
    s = Settings.from_sources({}, {})
    assert s.http_request_timeout.total_seconds() == 30
    assert s.limits.queued_transitions == 100_000
    s = Settings.from_sources({}, {"RELAY_HTTP_REQUEST_TIMEOUT_SECS": "2", "RELAY_MAX_QUEUED_TRANSITIONS": "5"})
    assert s.http_request_timeout.total_seconds() == 2 and s.limits.queued_transitions == 5


def test_the_read_models_follow_the_log_in_a_process_of_their_own_unless_asked_otherwise() -> None:
    assert Settings.from_sources({}, {}).projections == "process"
    assert Settings.from_sources({}, {"RELAY_PROJECTIONS": " Thread "}).projections == "thread"
    assert Settings.from_sources({"projections": "process"}, {"RELAY_PROJECTIONS": "thread"}).projections == "process"
    for bad in ("processes", "", "1"):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({}, {"RELAY_PROJECTIONS": bad})
        assert "RELAY_PROJECTIONS" in str(e.value) and "process, thread" in str(e.value)


@pytest.mark.parametrize("flag,child", [([], True), (["--projections", "process"], True),
                                        (["--projections", "thread"], False)])
def test_serve_gives_the_runtime_its_read_model_process(monkeypatch: pytest.MonkeyPatch, flag: list[str],
                                                        child: bool) -> None:
    seen: dict[str, object] = {}
    monkeypatch.delenv("RELAY_PROJECTIONS", raising=False)

    def runtime(settings: Settings, **kw: object) -> None:
        seen.update(kw)
        raise ValueError("built: enough")

    monkeypatch.setattr("relay_es.composition.runtime.Runtime", runtime)
    assert main(["serve", *flag]) == 2
    assert seen["projection_process"] is child and seen["manage_gc"] is True


@pytest.mark.parametrize(("issuer", "org", "field"), [
    ("http://127.evil.example", "acme", "RELAY_OIDC_ISSUER"),  # a name, not a loopback address: plain http refused
    ("https://id.example.com", "Acme Corp", "RELAY_OIDC_ORG"),  # no path could name it: every call would be refused
])
def test_oidc_settings_that_could_never_work_safely_are_refused_at_start(issuer: str, org: str, field: str) -> None:
    with pytest.raises(InvalidSetting, match=field):
        Settings.from_sources({"auth": True, "oidc_issuer": issuer, "oidc_audience": "relay", "oidc_org": org}, {})
    Settings.from_sources({"auth": True, "oidc_issuer": "https://id.example.com", "oidc_audience": "relay",
                           "oidc_org": "acme"}, {})  # the same, right


@pytest.mark.parametrize("raw", ["1e-7", "0.0000004", "0", "-1", "nan", "inf"])
def test_a_duration_that_would_round_to_nothing_is_refused_naming_the_least(raw: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {"RELAY_CALL_TIMEOUT_SECS": raw})  # a timing with no floor of its own
    assert "RELAY_CALL_TIMEOUT_SECS" in str(e.value) and "at least 1e-06" in str(e.value)
    assert Settings.from_sources({}, {"RELAY_CALL_TIMEOUT_SECS": "1e-6"}).call_timeout.total_seconds() == 1e-6


@pytest.mark.parametrize("raw", ["0.001", "0.999", "1e-6"])
def test_a_retention_interval_under_a_second_is_refused_at_start(
        raw: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each retention round records events of every executor of the application: 0.001 s made 235 rounds
    in 5 s to one executor (a SQLite store of 4.5 MB in seconds)."""
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {"RELAY_RETENTION_INTERVAL_SECS": raw})
    assert "RELAY_RETENTION_INTERVAL_SECS" in str(e.value) and "at least 1 " in str(e.value)
    monkeypatch.setenv("RELAY_RETENTION_INTERVAL_SECS", raw)
    assert main(["serve"]) == 2  # one line, before anything is opened
    assert "RELAY_RETENTION_INTERVAL_SECS" in capsys.readouterr().err
    assert Settings.from_sources({}, {"RELAY_RETENTION_INTERVAL_SECS": "1"}).retention_interval.total_seconds() == 1


@pytest.mark.parametrize("host", ["not..a..host", ".relay.example", "a" * 64 + ".example", ("a" * 63 + ".") * 4 + "io",
                                  "relay example", "relay\x00.example", "\udc80"])
def test_a_host_the_resolver_could_never_be_asked_for_is_refused_before_anything_opens(host: str) -> None:
    """It crashed ``relay serve`` with three tracebacks when the server bound (the store opened by then)."""
    for args, env in (({"host": host}, {}), ({}, {"RELAY_HOST": host})):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({"auth": True, **args}, env)
        assert str(e.value).startswith("host: ")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "fe80::1%eth0", "relay.example.com", "relay.example.com.",
                                  "bücher.example", "a" * 63 + ".example", "", ("a" * 62 + ".") * 4 + "a"])
def test_an_address_or_a_name_is_a_host(host: str) -> None:
    assert Settings.from_sources({"auth": True, "host": host}, {}).host == host  # "": every interface
