"""Postgres comes back under a running ``relay serve`` with other data than it led: restored from an
older copy of its data directory (a backup, a failover to a replica that lagged), or a new, empty
cluster on the same address. The leader lease was taken again and the server wrote on, over what its
executor cache held: streams with gaps (versions [1, 2, 8]) skipped as poison by every read model, and
on an empty cluster a retry for ever on tables that were gone, /healthz 200. Invariant: the server stops
(exit code 3), says why in one line, and writes nothing on the store it came back to."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from tests.e2e import harness
from tests.e2e.scene import FAST
from tests.fake_executor import FakeExecutor
from tests.fault.invariants import check_store
from tests.fault.pg import PgCluster, _as_postgres
from tests.server import TLS, RelayServer

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def pg() -> Iterator[PgCluster]:
    cluster = PgCluster()
    yield cluster
    cluster.destroy()


def head(url: str) -> int:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as c:
        return c.execute("SELECT max(notification_id) FROM relay_events").fetchone()[0] or 0


def listed(server: RelayServer, ids: list[str]) -> bool:
    r = httpx.get(server.http + "/v2/orgs/local/apps/app/executors", verify=TLS, timeout=10)
    rows = {e["executorId"]: e["status"] for e in r.json()} if r.status_code == 200 else {}
    return all(rows.get(i) == "HEALTHY" for i in ids)


async def connected(server: RelayServer, ids: list[str]) -> list[FakeExecutor]:
    executors = [await FakeExecutor(server.ws, executor_id=i).connect() for i in ids]
    await asyncio.to_thread(harness.wait_until, lambda: listed(server, ids), 20, 0.1, f"{ids} listed")
    return executors


def stopped_with_3(server: RelayServer, why: str) -> None:
    assert server.proc is not None
    try:
        assert server.proc.wait(30) == 3
    except BaseException:
        print(server.log()[-8000:])
        raise
    [line] = [line for line in server.log().splitlines() if "this instance stops serving" in line]
    assert " ERROR " in line and why in line, line
    assert "Traceback" not in server.log()


@pytest.mark.e2e
def test_a_server_whose_postgres_came_back_from_an_older_copy_stops_and_writes_nothing(tmp_path, pg) -> None:
    server = RelayServer(tmp_path, args=["--database-url", pg.url], env=FAST).start()
    backup = f"{pg.dir}/backup"
    try:
        async def main() -> None:
            first = await connected(server, [f"A{i}" for i in range(5)])
            await asyncio.to_thread(pg.stop)  # a backup of the data directory, Postgres stopped
            await asyncio.to_thread(_as_postgres, ["cp", "-a", f"{pg.dir}/data", backup])
            await asyncio.to_thread(pg.start)
            await asyncio.to_thread(harness.wait_until, lambda: "the lease is taken again" in server.log(), 20, 0.1,
                                    "the lease taken again on the same store")
            later = await connected(server, [f"B{i}" for i in range(5)])  # history the backup does not hold
            assert server.proc.poll() is None
            await asyncio.to_thread(pg.stop)  # the backup restored
            await asyncio.to_thread(_as_postgres, ["mv", f"{pg.dir}/data", f"{pg.dir}/newer"])
            await asyncio.to_thread(_as_postgres, ["mv", backup, f"{pg.dir}/data"])
            restored = None
            await asyncio.to_thread(pg.start)
            restored = await asyncio.to_thread(head, pg.url)
            await asyncio.to_thread(stopped_with_3, server, "restored from an older copy")
            assert await asyncio.to_thread(head, pg.url) == restored  # nothing written on it
            await asyncio.gather(*(e.close() for e in first + later), return_exceptions=True)

        asyncio.run(main())
        check_store(pg.url).assert_ok()  # the copy as it was: no stream with a gap
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", backup, f"{pg.dir}/newer"], check=False)


@pytest.mark.e2e
def test_a_server_whose_postgres_came_back_as_an_empty_cluster_stops(tmp_path, pg) -> None:
    server = RelayServer(tmp_path, args=["--database-url", pg.url], env=FAST).start()
    empty = PgCluster()
    try:
        async def main() -> None:
            executors = await connected(server, [f"E{i}" for i in range(3)])
            await asyncio.to_thread(empty.stop)
            await asyncio.to_thread(pg.stop)
            empty.port = pg.port  # a new cluster where the store was
            await asyncio.to_thread(empty.start)
            await asyncio.to_thread(stopped_with_3, server, "came back as another Postgres cluster")
            await asyncio.gather(*(e.close() for e in executors), return_exceptions=True)

        asyncio.run(main())
        with psycopg.connect(empty.url, autocommit=True) as c:  # nothing made there
            assert c.execute("SELECT to_regclass('relay_events')").fetchone()[0] is None
    finally:
        server.stop()
        empty.destroy()
