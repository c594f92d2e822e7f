"""``relay projections rebuild`` and ``relay admin`` on a database that holds no Relay store, or that
cannot be reached, and on a URL that would split a store across schemas."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid

import psycopg
import pytest

from relay_es.adapters.lease import Lease
from relay_es.adapters.stores import parse_database_url, redact_url
from tests.conftest import postgres_admin_url
from tests.server import RELAY


def _relay(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(RELAY + list(argv), env=env, capture_output=True, text=True, timeout=120)


def _last(r: subprocess.CompletedProcess[str], code: int) -> str:
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.stderr.splitlines()[-1]


def _tables(url: str) -> set[str]:
    config = parse_database_url(url)
    if config.is_postgres:
        with psycopg.connect(url) as conn:
            return {t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    with sqlite3.connect(config.sqlite_path) as conn:  # type: ignore[arg-type]
        return {t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _another_applications(url: str) -> None:
    config = parse_database_url(url)
    if config.is_postgres:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE customers (id int PRIMARY KEY)")
    else:
        with sqlite3.connect(config.sqlite_path) as conn:  # type: ignore[arg-type]
            conn.execute("CREATE TABLE customers (id int PRIMARY KEY)")


def _where(url: str) -> str:
    config = parse_database_url(url)
    return config.sqlite_path if config.sqlite_path is not None else redact_url(url)


def test_rebuild_refuses_a_database_holding_no_relay_store_and_makes_nothing_there(store_url: str) -> None:
    """It said "rebuilt ... from 0 events", exit 0, and made Relay's tables in another application's database."""
    _another_applications(store_url)
    last = _last(_relay("projections", "rebuild", "--database-url", store_url), 1)
    assert last == f"relay: no Relay store at {_where(store_url)}: nothing to rebuild"
    assert _tables(store_url) == {"customers"}
    config = parse_database_url(store_url)
    assert config.is_postgres or not os.path.exists(f"{config.sqlite_path}.lock")  # not even the lease's file


def test_admin_says_it_makes_a_new_store_on_either_kind(store_url: str) -> None:
    """On Postgres it made one silently, where SQLite said so."""
    _another_applications(store_url)
    r = _relay("admin", "create-token", "ci", "--org", "acme", "--database-url", store_url)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert f"relay: no Relay store at {_where(store_url)} yet: making a new one" in r.stderr
    r = _relay("admin", "create-token", "ci2", "--org", "acme", "--database-url", store_url)
    assert r.returncode == 0 and "making a new one" not in r.stderr, r.stderr
    r = _relay("projections", "rebuild", "--database-url", store_url)
    assert r.returncode == 0 and "from 2 events" in r.stdout, r.stderr


def test_admin_on_a_database_that_does_not_exist_says_libpqs_reason() -> None:
    """It said only "couldn't get a connection after 5.00 sec", after 6 s."""
    name = f"relay_test_missing_{uuid.uuid4().hex[:12]}"
    url = f"{postgres_admin_url().rpartition('/')[0]}/{name}"
    for argv in (["admin", "create-token", "ci", "--org", "acme"], ["projections", "rebuild"]):
        last = _last(_relay(*argv, "--database-url", url), 1)
        assert last.startswith(f"relay: cannot open the store {redact_url(url)}: "), last
        assert f'database "{name}" does not exist' in last, argv


@pytest.mark.parametrize("argv", [["serve", "--port", "0"], ["projections", "rebuild"],
                                  ["admin", "create-token", "ci", "--org", "acme"]])
def test_a_search_path_in_the_url_or_pgoptions_is_refused_before_anything_connects(argv: list[str]) -> None:
    """The events went to schema public, the read models to the search_path's: a token made for the store
    of search_path sb opened the store of search_path sa."""
    unreachable = "postgresql://postgres:hunter2@127.0.0.1:1/relay"  # nothing listens on port 1: exit 2, not 1
    last = _last(_relay(*argv, "--database-url", f"{unreachable}?options=-csearch_path%3Dsa"), 2)
    assert "its options set search_path, which Relay refuses" in last and "hunter2" not in last
    env = {**os.environ, "PGOPTIONS": "-c search_path=sa"}
    last = _last(_relay(*argv, "--database-url", unreachable, env=env), 2)
    assert last.startswith("relay: PGOPTIONS") and "search_path, which Relay refuses" in last


def test_a_rebuild_refused_for_a_held_lease_names_both_holders_it_may_be(store_url: str) -> None:
    """It said Relay was running and to stop `relay serve` when another rebuild held the lease: the lease
    does not record which holds it, so the message names both."""
    r = _relay("admin", "create-token", "ci", "--org", "acme", "--database-url", store_url)
    assert r.returncode == 0, r.stderr
    held = Lease(parse_database_url(store_url))
    held.acquire()  # what a running `relay serve`, or a rebuild, holds
    try:
        last = _last(_relay("projections", "rebuild", "--database-url", store_url), 1)
    finally:
        held.release()
    assert "(`relay serve`, or another rebuild)" in last and "let the other rebuild end" in last, last
    assert "serving or rebuilding" in last or "(`relay serve`, or a rebuild; its lease session" in last, last
