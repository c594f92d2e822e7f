"""Store errors told from bugs, on the drivers' own exception classes."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys

import psycopg
import pytest
from eventsourcing.persistence import OperationalError as LibraryOperationalError

from relay_es.adapters.failures import OutageLog, is_store_error


@pytest.mark.parametrize("error, store", [
    (psycopg.OperationalError("connection refused"), True),
    (sqlite3.OperationalError("database is locked"), True),
    (LibraryOperationalError("pool timeout"), True),
    (TimeoutError(), True),
    (ConnectionResetError(), True),
    (AttributeError("'NoneType' object has no attribute 'x'"), False),
    (KeyError("a"), False),
    (ValueError("bad"), False),
])
def test_store_errors_are_told_from_bugs(error: BaseException, store: bool) -> None:
    assert is_store_error(error) is store


def test_a_process_on_sqlite_never_loads_the_postgres_driver() -> None:
    """Importing psycopg is ~80 ms a process; ``relay projections rebuild`` starts three
    (the quick replay benchmark lost a fifth of its rate when this module imported it eagerly)."""
    code = ("import sys, relay_es.composition.cli, relay_es.adapters.readmodels.rebuild; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_outage_is_told_as_it_starts_once_a_minute_and_as_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    said = OutageLog(logging.getLogger("relay.test.outage"), "the part", every=60.0, monotonic=lambda: now[0])
    away = OSError("connection refused\nsecond line")
    caplog.set_level(logging.INFO, logger="relay.test.outage")
    said.worked()  # nothing failed: nothing to say
    for _ in range(30):  # a retry every second for half a minute
        said.failed("failed writing", away)
        now[0] += 1.0
    now[0] += 30.0
    said.failed("failed writing", away)
    said.failed("failed writing", away)
    said.worked("writes again")
    said.worked("writes again")
    said.failed("failed writing", away)  # a new outage is told at once
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "the part failed writing on the store (OSError: connection refused); retrying"),
        ("WARNING", "the part failed writing on the store (OSError: connection refused); retrying "
                    "(29 more failures since the last line)"),
        ("INFO", "the part writes again (1 failures since the last line)"),
        ("WARNING", "the part failed writing on the store (OSError: connection refused); retrying"),
    ]
