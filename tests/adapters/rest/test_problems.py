"""Errors (``relay_es/adapters/rest/problems.py``) on a real ``relay serve``: every one a problem document."""

from __future__ import annotations

import logging

import pytest

from relay_es.adapters.hub.throttle import Throttle
from relay_es.adapters.rest import problems
from tests.adapters.rest.fakes import Calls
from tests.adapters.rest.test_app import client_for
from tests.rest_client import rest as call
from tests.server import RelayServer


def test_errors_are_problem_documents(server: RelayServer) -> None:
    for method, path, status in (("GET", "/v2/orgs/local/apps/nope", 404),
                                 ("PATCH", "/v2/orgs/local/apps/nope", 404),
                                 ("DELETE", "/v2/orgs/local/tokens/nope", 404),
                                 ("GET", "/v2/orgs/other/apps", 404),
                                 ("PUT", "/v2/orgs/local/apps/bad%20name", 422),
                                 ("GET", "/v2/orgs/local/apps/nope/executors/x/history", 404),
                                 ("GET", "/v2/orgs/local/apps/nope/executors?asOf=yesterday", 422),
                                 ("GET", "/v2/orgs/local/executor-events?limit=0", 422)):
        kw = {"json": {"executorTimeoutSecs": 5}} if method == "PATCH" else {}
        r = call(server, method, path, **kw)
        assert r.status_code == status, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json"), (method, path)
        assert r.json()["status"] == status and r.json()["detail"]


def _cut_connection_error() -> Exception:
    """What a query raises on a connection the store cut (a real Postgres ends the session under it)."""
    import psycopg

    from tests.conftest import postgres_admin_url

    admin = postgres_admin_url()
    conn = psycopg.connect(admin, autocommit=True)
    try:
        with psycopg.connect(admin, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        conn.execute("SELECT 1")
    except psycopg.Error as e:
        return e
    finally:
        conn.close()
    raise AssertionError("the cut connection answered")


def test_a_store_that_is_away_is_a_503_with_retry_after_and_one_warning_per_window(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An outage is not a bug: the caller is told to come back (503, ``Retry-After``), the log gets one line
    without a traceback, and a storm of such requests one line per window, with the count of the rest."""
    import sqlite3

    import psycopg_pool
    from eventsourcing.persistence import OperationalError

    now = [0.0]
    monkeypatch.setattr(problems, "store_warnings", Throttle(problems.STORE_WARNING_WINDOW, max_keys=1,
                                                              clock=lambda: now[0]))
    cut = _cut_connection_error()
    wrapped = OperationalError("terminating connection due to administrator command: a secret")
    wrapped.__cause__ = cut
    for fail in (cut, wrapped, psycopg_pool.PoolTimeout("couldn't get a connection after 30.00 sec: a secret"),
                 sqlite3.OperationalError("database is locked: a secret")):
        now[0] += problems.STORE_WARNING_WINDOW  # one warning each
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=problems.__name__), client_for(Calls(), fail) as client:
            r = client.delete("/v2/orgs/local/apps/orders")
        assert r.status_code == 503, (fail, r.text)
        assert r.headers["retry-after"] == problems.STORE_RETRY_AFTER
        assert r.headers["content-type"] == "application/problem+json" and r.json()["status"] == 503
        assert "secret" not in r.text
        [record] = caplog.records
        assert record.levelno == logging.WARNING and record.exc_info is None, record.getMessage()
        assert type(fail).__name__ in record.getMessage() and "\n" not in record.getMessage()

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=problems.__name__), client_for(Calls(), cut) as client:
        assert {client.delete("/v2/orgs/local/apps/orders").status_code for _ in range(30)} == {503}
        assert len(caplog.records) == 0  # within the window of the last warning
        now[0] += problems.STORE_WARNING_WINDOW
        assert client.delete("/v2/orgs/local/apps/orders").status_code == 503
    [record] = caplog.records
    assert "30 more since the last warning" in record.getMessage()


def test_a_store_error_that_comes_from_the_data_stays_a_500_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A retry would fail the same way: it is a bug to look at, not an outage."""
    import psycopg.errors
    from eventsourcing.persistence import DataError

    wrapped = DataError("value too long: a secret")
    wrapped.__cause__ = psycopg.errors.StringDataRightTruncation("value too long: a secret")
    for fail in (psycopg.errors.CharacterNotInRepertoire("invalid byte sequence: a secret"), wrapped):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=problems.__name__), client_for(Calls(), fail) as client:
            r = client.delete("/v2/orgs/local/apps/orders")
        assert r.status_code == 500 and "retry-after" not in r.headers and "secret" not in r.text
        [record] = caplog.records
        assert record.levelno == logging.ERROR and record.exc_info is not None
