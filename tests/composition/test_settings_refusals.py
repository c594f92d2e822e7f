"""Settings given that could only be a mistake are refused at start, one line and exit 2, before
anything is opened: an empty database URL (it served a new, empty SQLite store under ./relay-data),
OIDC settings without the issuer (ignored, even ones that could never work), an alert retry past the
300 s its backoff stops at, a ping interval of a microsecond. ``relay admin create-token``'s usage
errors are exit 2 too, a bad token name called ``tokenName``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from relay_es.composition.cli import main
from relay_es.composition.settings import Settings
from relay_es.domain.errors import InvalidSetting
from tests.server import RELAY


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("relay: ") and len(captured.err.splitlines()) == 1, captured
    return captured.err


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """``relay serve`` stopped at the runtime (its settings kept): whether it got that far."""
    built: list[Settings] = []

    def runtime(settings: Settings, **kw: object) -> None:
        built.append(settings)
        raise ValueError("built: enough")

    monkeypatch.setattr("relay_es.composition.runtime.Runtime", runtime)
    for name in ("RELAY_DATABASE_URL", "RELAY_OIDC_ISSUER", "RELAY_OIDC_AUDIENCE", "RELAY_OIDC_ORG",
                 "RELAY_OIDC_GROUPS_CLAIM", "RELAY_OIDC_GROUP_ROLES", "RELAY_OIDC_USERNAME_CLAIM", "RELAY_AUTH"):
        monkeypatch.delenv(name, raising=False)
    return built


@pytest.mark.parametrize(("args", "env", "named"), [
    ({}, {"RELAY_DATABASE_URL": ""}, "RELAY_DATABASE_URL"),
    ({}, {"RELAY_DATABASE_URL": "  "}, "RELAY_DATABASE_URL"),
    ({"database_url": ""}, {}, "--database-url"),
    ({"database_url": ""}, {"RELAY_DATABASE_URL": "postgresql://relay@db/relay"}, "--database-url"),
])
def test_an_empty_database_url_given_is_refused(args: dict[str, str], env: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources(args, env)
    assert str(e.value).startswith(f"{named}: is empty")


def test_a_database_url_not_given_is_the_default_store_and_one_given_is_kept() -> None:
    assert Settings.from_sources({}, {}).database_url is None
    url = "postgresql://relay@db/relay"
    assert Settings.from_sources({}, {"RELAY_DATABASE_URL": url}).database_url == url
    assert Settings.from_sources({"database_url": "sqlite:///x.db"}, {"RELAY_DATABASE_URL": url}).database_url == \
        "sqlite:///x.db"


def test_serve_with_an_empty_database_url_opens_nothing(no_runtime, monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--database-url", ""]) == 2
    assert "--database-url: is empty" in one_line(capsys)
    monkeypatch.setenv("RELAY_DATABASE_URL", "")
    assert main(["serve"]) == 2
    assert "RELAY_DATABASE_URL: is empty" in one_line(capsys)
    assert no_runtime == [] and list(tmp_path.iterdir()) == []


def test_admin_and_rebuild_with_an_empty_database_url_make_no_store(monkeypatch, capsys, tmp_path: Path) -> None:
    """``admin create-token`` made a new store under ./relay-data and put the token there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RELAY_DATABASE_URL", raising=False)
    assert main(["admin", "create-token", "ci", "--org", "acme", "--database-url", ""]) == 2
    assert "--database-url: is empty" in one_line(capsys)
    monkeypatch.setenv("RELAY_DATABASE_URL", "")
    assert main(["admin", "create-token", "ci", "--org", "acme"]) == 2
    assert "RELAY_DATABASE_URL: is empty" in one_line(capsys)
    assert main(["projections", "rebuild"]) == 2
    assert "RELAY_DATABASE_URL: is empty" in one_line(capsys)
    monkeypatch.setenv("RELAY_DATABASE_URL", f"sqlite:///{tmp_path}/meant.db")
    assert main(["admin", "create-token", "ci", "--org", "acme", "--database-url", ""]) == 2  # not the variable's
    assert "--database-url: is empty" in one_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("given", "named"), [
    ({"oidc_audience": "relay", "oidc_org": "a/b", "oidc_group_roles": "garbage"},
     "RELAY_OIDC_AUDIENCE, RELAY_OIDC_ORG, RELAY_OIDC_GROUP_ROLES are"),
    ({"oidc_username_claim": "email"}, "RELAY_OIDC_USERNAME_CLAIM is"),
    ({"oidc_issuer": "", "oidc_groups_claim": "roles"}, "RELAY_OIDC_GROUPS_CLAIM is"),
])
def test_oidc_settings_without_the_issuer_are_refused_naming_them(given: dict[str, str], named: str) -> None:
    for args, env in ((given, {}), ({}, {f"RELAY_{k.upper()}": v for k, v in given.items()})):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({"auth": True, **args}, env)
        assert str(e.value).startswith("RELAY_OIDC_ISSUER: is not given, but ") and named in str(e.value)


def test_oidc_settings_left_empty_without_the_issuer_are_none_given() -> None:
    """A template's empty variables: OIDC off, as when they are unset."""
    env = {f"RELAY_OIDC_{k}": "" for k in ("ISSUER", "AUDIENCE", "ORG", "GROUPS_CLAIM", "GROUP_ROLES",
                                            "USERNAME_CLAIM")}
    assert Settings.from_sources({"auth": True}, env).oidc_issuer is None


@pytest.mark.parametrize("claim", ["oidc_groups_claim", "oidc_username_claim"])
def test_an_empty_claim_with_the_issuer_is_refused(claim: str) -> None:
    oidc = {"auth": True, "oidc_issuer": "https://id.example.com", "oidc_audience": "relay", "oidc_org": "acme"}
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({**oidc, claim: ""}, {})
    assert str(e.value).startswith(f"RELAY_{claim.upper()}: is empty")
    assert Settings.from_sources(oidc, {}).oidc_groups_claim == "groups"


def test_serve_with_oidc_settings_and_no_issuer_is_one_line_and_exit_2(no_runtime, capsys) -> None:
    assert main(["serve", "--auth", "--oidc-audience", "relay", "--oidc-org", "a/b", "--oidc-group-roles",
                 "garbage"]) == 2
    assert "RELAY_OIDC_ISSUER: is not given" in one_line(capsys)
    assert no_runtime == []


def test_an_alert_retry_past_the_backoff_s_cap_is_refused() -> None:
    """The backoff stops at 300 s: a setting of 600 waited 300 all the same."""
    assert Settings.from_sources({}, {"RELAY_ALERT_RETRY_SECS": "300"}).alert_retry.total_seconds() == 300
    for raw in ("300.5", "600", "86400"):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({}, {"RELAY_ALERT_RETRY_SECS": raw})
        assert str(e.value).startswith("RELAY_ALERT_RETRY_SECS: ") and "at most 300 seconds" in str(e.value)


def test_a_ping_interval_under_a_tenth_of_a_second_is_refused() -> None:
    """1 µs was taken: 23% of a core pinging one executor."""
    for raw in ("1e-6", "0.001", "0.099"):
        with pytest.raises(InvalidSetting) as e:
            Settings.from_sources({}, {"RELAY_PING_INTERVAL_SECS": raw})
        assert str(e.value).startswith("RELAY_PING_INTERVAL_SECS: must be at least 0.1 and at most 604800 seconds")
    assert Settings.from_sources({}, {"RELAY_PING_INTERVAL_SECS": "0.1"}).ping_interval.total_seconds() == 0.1


def test_help_shows_each_default_and_bound_as_a_number_a_person_reads() -> None:
    out = subprocess.run(RELAY + ["serve", "--help"], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "400"}).stdout
    assert "RELAY_METRICS_RETENTION_SECS, default 1209600)" in out and "e+" not in out
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {"RELAY_METRICS_RETENTION_SECS": "1e12"})
    assert "at most 315360000 seconds" in str(e.value)


def test_admin_s_usage_errors_are_exit_2_naming_the_token_s_name(capsys, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/relay.db"
    assert main(["admin", "create-token", "bad name", "--org", "acme", "--database-url", url]) == 2
    err = one_line(capsys)
    assert err.startswith("relay: tokenName: must be") and "appName" not in err
    assert main(["admin", "create-token", "ci", "--org", "bad org", "--database-url", url]) == 2
    assert one_line(capsys).startswith("relay: orgName: ")
    assert main(["admin", "create-token", "ci", "--org", "acme", "--app=-x", "--database-url", url]) == 2
    assert one_line(capsys).startswith("relay: appName: ")
    assert main(["admin", "create-token", "ci", "--org", "acme", "--permission", "everything",
                 "--database-url", url]) == 2
    assert one_line(capsys).startswith("relay: permissions")
    assert main(["admin", "create-token", "ci", "--org", "acme", "--database-url", "mysql://x"]) == 2
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []  # nothing made
