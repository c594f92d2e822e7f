"""Store errors told from bugs, on the drivers' own exception classes."""

from __future__ import annotations

import sqlite3

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
