"""REST writes refused while the store is away: each is a 503, and the log says so in one line per
window, for the refused requests and for the records of their actions alike -- no tracebacks (80
refused writes logged 9,202 lines, 320 tracebacks, from the audit log's record of each). A record that
fails on a bug keeps its traceback."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_es.adapters.hub.throttle import Throttle
from relay_es.adapters.rest import problems
from relay_es.composition.asgi import RelayASGI
from relay_es.composition.runtime import Runtime
from relay_es.composition.settings import Settings
from relay_es.engine import action_commands


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    rt = Runtime(Settings(database_url=f"sqlite:///{tmp_path}/relay.db", instance="test-instance"))
    yield rt
    rt.close()


def test_writes_refused_by_a_store_that_is_away_log_one_line_per_window_without_tracebacks(
        runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from litestar.testing import TestClient

    now = [0.0]
    monkeypatch.setattr(problems, "store_warnings", Throttle(problems.STORE_WARNING_WINDOW, max_keys=2,
                                                              clock=lambda: now[0]))
    runtime.relay.register_app("local", "orders")
    with sqlite3.connect(tmp_path / "relay.db") as db:  # every write fails on the store from now on
        db.execute("ALTER TABLE stored_events RENAME TO stored_events_away")
    client = TestClient(RelayASGI(runtime).http, base_url="http://127.0.0.1")
    caplog.set_level(logging.WARNING)
    for i in range(20):
        r = client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 6 + i})
        assert r.status_code == 503 and r.headers["retry-after"] == problems.STORE_RETRY_AFTER, r.text
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in caplog.records), caplog.text
    assert [r.getMessage() for r in caplog.records] == [
        "the store failed recording how updateApp ended (failed) (OperationalError: no such table: stored_events): "
        "it is not in the audit log",
        "the store failed a request (OperationalError: no such table: stored_events): 503, retry after 5 s",
    ]
    caplog.clear()
    now[0] += problems.STORE_WARNING_WINDOW
    assert client.patch("/v2/orgs/local/apps/orders", json={"executorTimeoutSecs": 60}).status_code == 503
    assert "19 more not recorded since the last warning" in caplog.records[0].getMessage()
    assert "19 more since the last warning" in caplog.records[1].getMessage()


def test_a_record_that_fails_on_a_bug_keeps_its_traceback(runtime: Runtime, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from relay_es.engine.action_commands import Actor

    def broken(*args: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(runtime.relay, "_save_action_ended", broken)
    with caplog.at_level(logging.WARNING, logger=action_commands.__name__), \
            runtime.relay.recording_change("local", None, request_id="r-1", operation="createApp",
                                           actor=Actor.development(), source=None, target_type="app"):
        pass  # a change that found nothing to do: its record is written after the block
    [record] = caplog.records
    assert record.exc_info is not None and "could not record how createApp ended" in record.getMessage()
