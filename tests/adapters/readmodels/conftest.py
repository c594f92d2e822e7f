"""A read models' database on both stores, with every read model's tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from relay_es.adapters.readmodels import TABLES
from relay_es.adapters.stores import open_database, parse_database_url
from relay_es.projections import NAMES


@pytest.fixture
def db(store_url: str) -> Iterator[Any]:
    database = open_database(parse_database_url(store_url))
    with database.transaction() as cur:
        database.create_tracking(cur, NAMES)
        for name in NAMES:
            TABLES[name].create(cur)
    yield database
    database.close()
