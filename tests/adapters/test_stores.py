"""Store configuration as an unlucky operator meets it (issue 11)."""

from __future__ import annotations

import stat

import pytest

from relay_es.adapters.stores import event_store_env, open_database, parse_database_url, redact_url


@pytest.mark.parametrize("url, shown", [
    ("postgresql://relay:s3cret@db:5432/relay", "postgresql://relay:***@db:5432/relay"),
    ("postgresql://relay:p@ss@w0rd@db/relay", "postgresql://relay:***@db/relay"),  # '@' in the password
    ("postgresql://relay:a/b?c@db/relay", "postgresql://relay:***@db/relay"),
    ("postgres://relay@db/relay", "postgres://relay@db/relay"),  # no password: nothing to hide
    ("postgresql://db/relay?user=x", "postgresql://db/relay?user=x"),
    ("mysql://root:hunter2@h/x", "mysql://root:***@h/x"),
    ("sqlite:///relay-data/relay.db", "sqlite:///relay-data/relay.db"),
])
def test_passwords_are_redacted_whole(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_an_unsupported_url_is_refused_without_its_password() -> None:
    with pytest.raises(ValueError) as e:
        parse_database_url("mysql://root:hun@ter2@h/x")
    assert "hun" not in str(e.value) and "ter2" not in str(e.value)


def test_the_store_directory_relay_creates_is_private(tmp_path) -> None:
    cfg = parse_database_url(f"sqlite:///{tmp_path}/new/relay.db")
    event_store_env(cfg)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    cfg2 = parse_database_url(f"sqlite:///{tmp_path}/other/relay.db")
    open_database(cfg2).close()
    assert stat.S_IMODE((tmp_path / "other").stat().st_mode) == 0o700
    (tmp_path / "mine").mkdir(mode=0o755)  # one the operator made is left alone
    event_store_env(parse_database_url(f"sqlite:///{tmp_path}/mine/relay.db"))
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o755
