"""Store errors told from bugs, on the drivers' own exception classes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import psycopg
import pytest
from eventsourcing.persistence import OperationalError as LibraryOperationalError

from relay_es.adapters.failures import is_store_error


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
