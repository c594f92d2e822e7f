"""The ``server`` fixture: a real ``relay serve`` with fast timers, on both stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.adapters.hub.support import FAST
from tests.server import RelayServer


@pytest.fixture
def server(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield s
    s.stop()
