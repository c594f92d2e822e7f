"""Telling the store's failures from bugs and from bad data.

* :func:`is_store_error`: the store is unreachable or failing -- retry later --
  as opposed to a bug, which must be loud.
* :func:`is_data_error`: an error of a projection's batch that comes from one
  event's data (retrying fails forever: skip it) rather than from an outage.
* :class:`OutageLog`: how a part that retries through an outage says so, in a
  line a minute rather than a line a retry.

The only module that knows the drivers' exception classes (psycopg, sqlite3).
psycopg is imported when a classifier first runs, not with this module: a
process on SQLite (``relay projections rebuild`` starts three) never loads the
Postgres driver, which costs about 80 ms of start-up per process.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable

from eventsourcing.persistence import PersistenceError

from relay_es.domain.text import first_line

STORE_ERROR_LOG_SECS = 60.0  # a part failing on the store says so at most this often (a store away fails every try)


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


class OutageLog:
    """What a part that retries on a store away logs: the first failure at once (WARNING, the
    error's first line), then at most one line every :data:`STORE_ERROR_LOG_SECS` with how many
    failures went unsaid since, and one INFO line when it works again. A store away fails every
    retry until it is back (every half second, or every second): a line each said nothing new.
    ``then``: what becomes of what failed, said after each failure's line."""

    def __init__(self, logger: logging.Logger, name: str, *, every: float = STORE_ERROR_LOG_SECS,
                 monotonic: Callable[[], float] = time.monotonic, then: str = "retrying") -> None:
        self.logger = logger
        self.name = name
        self.then = then
        self.every = every
        self.monotonic = monotonic
        self._told: float | None = None  # when a failure was last logged, in this run of them
        self._untold = 0  # failures since, not logged

    def failed(self, doing: str, e: BaseException) -> None:
        """``doing`` failed on the store with ``e``: logged unless a line was logged lately."""
        now = self.monotonic()
        if self._told is not None and now - self._told < self.every:
            self._untold += 1
            return
        more = f" ({self._untold} more failures since the last line)" if self._untold else ""
        self.logger.warning("%s %s on the store (%s: %s); %s%s", self.name, doing, type(e).__name__,
                            first_line(e), self.then, more)
        self._told, self._untold = now, 0

    def store_failed(self, doing: str, e: BaseException) -> bool:
        """If ``e`` is the store's (:func:`is_store_error`, not from the data: :func:`is_data_error`), it
        is told as :meth:`failed` says, and True; anything else is a bug, the caller's to log with its
        traceback: False, nothing told."""
        if not is_store_error(e) or is_data_error(e):
            return False
        self.failed(doing, e)
        return True

    def worked(self, done: str = "works on the store again") -> None:
        """It went through: a run of failures, if any, is over, and said to be."""
        if self._told is not None:
            self.logger.info("%s %s (%d failures since the last line)", self.name, done, self._untold)
            self._told, self._untold = None, 0
