"""Fixtures: clocks, and stores on both backends.

Integration tests take the ``store_url`` fixture, which runs each test once on
SQLite (a file in the test's tmp dir) and once on Postgres (a fresh database
in the cluster ``scripts/test`` started). Without that cluster the Postgres
variants fail loudly: they are never skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from relay_es.domain.clock import FakeClock


def postgres_admin_url() -> str:
    url = os.environ.get("RELAY_TEST_POSTGRES_URL")
    if not url:
        pytest.fail("RELAY_TEST_POSTGRES_URL is not set: run the suite with ./scripts/test, which starts Postgres")
    return url


def create_database(admin_url: str, name: str, options: str = "") -> str:
    """``options``: the rest of the CREATE DATABASE statement (a collation, say)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" {options}')
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    admin = postgres_admin_url()
    name = f"relay_test_{uuid.uuid4().hex[:12]}"
    url = create_database(admin, name)
    yield url
    drop_database(admin, name)


def url_of(kind: str, request: pytest.FixtureRequest, tmp_path) -> str:
    """A store of this kind for one test: a SQLite file in its tmp dir, or a fresh Postgres database."""
    return f"sqlite:///{tmp_path}/relay.db" if kind == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    yield url_of(request.param, request, tmp_path)


WIRE_ONLY = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
"""For a scenario whose subject is the wire -- frames, sockets, keys, flapping -- and not the
store: it runs on SQLite only. The stores' contract tests, and every crash, restart, deadline
and recovery scenario, run on both."""
