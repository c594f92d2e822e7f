"""Telling the store's failures from bugs and from bad data.

* :func:`is_store_error`: the store is unreachable or failing -- retry later --
  as opposed to a bug, which must be loud.
* :func:`is_data_error`: an error of a projection's batch that comes from one
  event's data (retrying fails forever: skip it) rather than from an outage.

The only module that knows the drivers' exception classes (psycopg, sqlite3).
psycopg is imported when a classifier first runs, not with this module: a
process on SQLite (``relay projections rebuild`` starts three) never loads the
Postgres driver, which costs about 80 ms of start-up per process.
"""

from __future__ import annotations

import sqlite3

from eventsourcing.persistence import PersistenceError


def is_store_error(e: BaseException) -> bool:
    """The store is unreachable or failing (retry later), as opposed to a bug."""
    import psycopg

    return isinstance(e, (PersistenceError, psycopg.Error, sqlite3.Error, OSError, TimeoutError))


def is_data_error(e: BaseException) -> bool:
    """Whether an error of a projection's batch comes from the data (one event
    the read model cannot hold or fold: retrying it fails forever) rather than
    from the store being away or busy (retry later).

    Data: Postgres' data exceptions (SQLSTATE class 22: a NUL byte in a text,
    a number out of range, ...), integrity violations (23) and program limits
    (54: an index row larger than a b-tree page) -- psycopg files the last
    under ``OperationalError``, so it is looked for first; SQLite's
    ``DataError``/``IntegrityError`` and the ``OverflowError`` of an integer
    wider than 64 bits; and what a pure reducer raises on an event it cannot
    fold (``ValueError``, ``TypeError``, ``KeyError``, ``AssertionError``,
    ``AttributeError``). Everything else -- a connection lost, a pool timeout,
    a locked or full SQLite file, a closed database -- is an outage.
    """
    import psycopg.errors

    if isinstance(e, psycopg.errors.ProgramLimitExceeded):
        return True
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError, sqlite3.OperationalError,
                      sqlite3.ProgrammingError, sqlite3.InterfaceError, OSError, TimeoutError)):
        return False
    return isinstance(e, (psycopg.DataError, psycopg.IntegrityError, sqlite3.DataError, sqlite3.IntegrityError,
                          OverflowError, ValueError, TypeError, KeyError, AssertionError, AttributeError,
                          UnicodeError))
