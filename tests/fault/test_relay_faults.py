"""Faults of Relay's own world: Relay killed mid-grace, Postgres restarted
under load, the wall clock stepped. Each test states its invariant and ends
with the invariant checker."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx
import pytest

from tests.conftest import postgres_admin_url
from tests.e2e import harness
from tests.e2e.scene import FAST, Scene
from tests.fake_executor import FakeExecutor
from tests.fault.invariants import check_store
from tests.fault.pg import PgCluster
from tests.server import RelayServer, TLS
from tests.support import until

pytestmark = pytest.mark.timeout(240)


def at(entry: dict[str, Any]) -> float:
    return datetime.fromisoformat(entry["at"].replace("Z", "+00:00")).timestamp()


def deadline_of(entry: dict[str, Any]) -> float:
    """The deadline an ``executor.disconnected`` entry recorded."""
    return datetime.fromisoformat(entry["detail"]["deadline"].replace("Z", "+00:00")).timestamp()


def first(entries: list[dict[str, Any]], action: str) -> dict[str, Any]:
    return next(e for e in entries if e["action"] == action)


def restart(scene: Scene, tmp_path, store_url: str, env: dict[str, str], *, down_until: float = 0.0
            ) -> tuple[float, float]:
    """SIGKILLs Relay and starts a new one on the same store and port, no sooner than
    the wall time ``down_until``. Returns the wall times at which the new process was
    started and at which it answered /healthz: its process manager (and so its settle
    window) starts in between -- how long after the first depends on the machine's load."""
    port = scene.server.port
    scene.server.kill()
    time.sleep(max(0.0, down_until - time.time()))
    started = time.time()
    scene.server = RelayServer(tmp_path, port=port, args=["--database-url", store_url], env=env).start()
    return started, time.time()


@pytest.fixture
def scene(tmp_path, store_url) -> Iterator[Scene]:
    s = Scene(RelayServer(tmp_path, args=["--database-url", store_url], env={**FAST, "RELAY_RESTART_SETTLE_SECS": "3"})
              .start(), postgres_admin_url())
    try:
        yield s
    except BaseException:
        print(s.debug())
        raise
    finally:
        s.close()
        s.server.stop()


@pytest.mark.e2e
def test_relay_killed_mid_grace_honours_the_original_deadline(scene: Scene, tmp_path, store_url) -> None:
    """Invariant: a deadline armed before a crash fires at its original time
    after a restart that comes before it; executors that were HEALTHY
    reconnect and are never declared dead; the dead one is recovered once.

    The restarted Relay's settle window (1 s here) must end before the deadline
    for the deadline to be the one that counts; the 8 s grace leaves the restart
    (SIGKILL, 1 s down, the new process's start) over 5 s for that on a loaded
    machine. Whatever the load, the death is never early, and comes within 1 s
    of the deadline or of the settle window's end, whichever is later."""
    grace, settle = 8, 1
    scene.set_grace(grace)
    a, b = scene.spawn("A"), scene.spawn("B")
    ids = a.start_workflows(count=2, steps=6, step_secs=0.4)
    scene.wait(lambda: all(harness.step_run_counts(scene.steps_db).get((wf, 1), 0) for wf in ids), "workflows to start")
    a.kill()
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "DISCONNECTED", "A to be DISCONNECTED")
    _, ready = restart(scene, tmp_path, store_url, {**FAST, "RELAY_RESTART_SETTLE_SECS": str(settle)},
                       down_until=time.time() + 1.0)
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered after the restart", timeout=60)
    scene.wait(lambda: set(harness.workflow_statuses(scene.sys_db, ids).values()) == {"SUCCESS"}, "workflows", 60)
    entries = scene.events(a.executor_id)
    disconnected, dead_at = first(entries, "executor.disconnected"), at(first(entries, "executor.declared_dead"))
    deadline = deadline_of(disconnected)
    assert abs(deadline - (at(disconnected) + grace)) < 0.002  # armed by the Relay that was killed
    late = dead_at - deadline
    assert late >= 0, f"declared dead {-late:.3f}s before the original deadline"
    assert dead_at < max(deadline, ready + settle) + 1.0, \
        f"declared dead {late:.3f}s after the original deadline (the new Relay was ready {ready - deadline:.3f}s after it)"
    assert [e["action"] for e in entries].count("recovery.confirmed") == 1
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"
    assert "executor.declared_dead" not in [e["action"] for e in scene.events(b.executor_id)]
    scene.server.stop()
    check_store(store_url).assert_ok()


@pytest.mark.e2e
def test_deadline_that_passed_while_relay_was_down_fires_after_the_settle_window(scene: Scene, tmp_path,
                                                                                store_url) -> None:
    """Invariant: an overdue deadline is enforced only after the settle window,
    and within a second of its end; HEALTHY executors are not declared dead."""
    scene.set_grace(2)
    a, b = scene.spawn("A"), scene.spawn("B")
    a.kill()
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "DISCONNECTED", "A to be DISCONNECTED")
    deadline = deadline_of(first(scene.events(a.executor_id), "executor.disconnected"))
    # the deadline passes while Relay is down
    started, ready = restart(scene, tmp_path, store_url, {**FAST, "RELAY_RESTART_SETTLE_SECS": "3"},
                             down_until=deadline + 0.5)
    scene.wait(lambda: scene.executor(a.executor_id) is None, "A to be recovered", timeout=30)
    dead_at = at(first(scene.events(a.executor_id), "executor.declared_dead"))
    # the settle window starts between the process's start and its first answer to /healthz
    assert started + 3 <= dead_at < ready + 3 + 2.0, (dead_at - started, ready - started)
    assert scene.executor(b.executor_id)["status"] == "HEALTHY"
    assert "executor.declared_dead" not in [e["action"] for e in scene.events(b.executor_id)]
    scene.server.stop()
    check_store(store_url).assert_ok()


class Flapper:
    """A fake executor that drops and reconnects (same id) every 0.5-1.5 s until a
    deadline, counting its connections; it ends connected (the last connection is
    kept), so it is never rightly declared dead."""

    def __init__(self, url: str, executor_id: str) -> None:
        self.url, self.executor_id = url, executor_id
        self.connections = 0
        self.current: FakeExecutor | None = None

    async def run(self, until: float) -> None:
        while True:
            ex = FakeExecutor(self.url, executor_id=self.executor_id)
            try:
                await ex.connect()
            except Exception:
                if ex.ws is not None:  # open but never asked executor_info: not a session; never one later either
                    ex.abort()
                await asyncio.sleep(0.5)
                continue
            self.connections += 1
            self.current = ex
            await asyncio.sleep(random.uniform(0.5, 1.5))
            if time.monotonic() >= until:
                return  # stays connected: a drop now would be a real death, grace and all
            ex.abort()
            await asyncio.sleep(random.uniform(0.2, 0.6))


def test_postgres_restarted_under_load(tmp_path) -> None:
    """Invariant: with Postgres going away three times for a few seconds, no
    transition is lost or doubled (every connection a client made is one
    Connected event), the read models converge to the fold of the streams,
    the executors' sockets stay up, /healthz keeps answering, and a death
    during an outage is still recovered once."""
    pg = PgCluster()
    server = RelayServer(tmp_path, args=["--database-url", pg.url],
                         env={**FAST, "RELAY_DEFAULT_EXECUTOR_TIMEOUT_SECS": "4"}).start()
    try:
        def settled() -> bool:
            r = httpx.get(server.http + "/v2/orgs/local/apps/app/executors", verify=TLS, timeout=10)
            rows = {e["executorId"]: e["status"] for e in r.json()} if r.status_code == 200 else {}
            return "VICTIM" not in rows and all(rows.get(f"S{i}") == "HEALTHY" for i in range(20))

        async def main() -> list[int]:
            stable = [await FakeExecutor(server.ws, executor_id=f"S{i}").connect() for i in range(20)]
            victim = await FakeExecutor(server.ws, executor_id="VICTIM").connect()
            flappers = [Flapper(server.ws, f"F{i}") for i in range(10)]
            stop_at = time.monotonic() + 20
            tasks = [asyncio.ensure_future(f.run(stop_at)) for f in flappers]
            health: list[int] = []
            for outage in range(3):
                await asyncio.sleep(2)
                await asyncio.to_thread(pg.stop)
                if outage == 1:
                    victim.abort()  # dies while the store is away
                for _ in range(6):
                    r = await asyncio.to_thread(httpx.get, server.http + "/healthz", timeout=5)
                    health.append(r.status_code)
                    await asyncio.sleep(0.5)
                await asyncio.to_thread(pg.start)
            await asyncio.gather(*tasks)
            assert all(s.ws.close_code is None for s in stable), "a healthy socket was dropped"
            # Wait with this loop still running: it is what answers the stable executors'
            # pings. (Waiting after it ended left them silent: Relay disconnected them all,
            # declared them dead, and the victim had nobody left to recover it.)
            await until(settled, timeout=60, interval=0.5, what="the victim to be recovered after the outages")
            assert all(s.ws.close_code is None for s in stable), "a healthy socket was dropped"
            # every flapper connection is exactly one Connected event: none lost, none doubled
            # (a connection's Connected may still be on its way through the outbox: wait for it)
            for f in flappers:
                try:
                    hist = await until(lambda: (h := history(f.executor_id)).count("Connected") >= f.connections
                                       and h, timeout=10, interval=0.2, what=f"{f.executor_id}'s connections")
                except AssertionError as e:
                    raise AssertionError(f"{f.executor_id}: a connection was lost ({f.connections} made)") from e
                assert hist.count("Connected") == f.connections, (f.executor_id, hist, f.connections)
                assert "DeclaredDead" not in hist
            await _close_all(stable + [f.current for f in flappers if f.current is not None])
            return health

        def history(executor_id: str) -> list[str]:
            r = httpx.get(f"{server.http}/v2/orgs/local/apps/app/executors/{executor_id}/history", verify=TLS, timeout=10)
            return [h["type"] for h in r.json()] if r.status_code == 200 else []

        health = asyncio.run(main())
        assert set(health) == {200}
        victim_hist = [h["type"] for h in httpx.get(
            f"{server.http}/v2/orgs/local/apps/app/executors/VICTIM/history", verify=TLS, timeout=10).json()]
        assert victim_hist.count("RecoveryConfirmed") == 1 and victim_hist[-1] == "Deleted"
        server.stop()
        # the read model converged to the fold of the streams
        _assert_read_model_converged(pg.url)
        check_store(pg.url).assert_ok()
        # the leader lease went with each outage's sessions and was taken again every time
        assert "the lease is taken again" in server.log()
    except BaseException:
        print(server.log()[-12000:])
        try:
            entries = httpx.get(server.http + "/v2/orgs/local/executor-events", params={"limit": 1000}, verify=TLS, timeout=10).json()
            print("\n".join(f"{e['at']} {e['executorId']} {e['action']} {e['detail']}" for e in entries
                            if e["action"] not in ("executor.connected", "executor.reconnected")))
        except Exception as e:  # the server may be the thing that failed
            print(f"no audit log: {e!r}")
        raise
    finally:
        server.stop()
        pg.destroy()


def _lease_session(url: str) -> int | None:
    """The backend pid holding Relay's advisory lock (a bigint key: high and low 32 bits)."""
    import psycopg

    from relay_es.adapters.lease import LOCK_KEY

    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s "
                        "AND objid = %s AND objsubid = 1", (LOCK_KEY >> 32, LOCK_KEY & 0xFFFFFFFF)).fetchone()
    return row[0] if row else None


def test_an_instance_whose_lease_was_taken_by_another_stops(tmp_path, postgres_url: str) -> None:
    """Invariant: two instances never lead one store. The store session holding a
    running server's lease ends (as in a Postgres restart) and another instance
    takes the lease before the server can take it again: the server stops, with
    exit code 3 and a message saying why, instead of leading beside it."""
    import psycopg

    from relay_es.adapters.lease import Lease, LeaseHeld
    from relay_es.adapters.stores import parse_database_url

    server = RelayServer(tmp_path, args=["--database-url", postgres_url]).start()
    other = Lease(parse_database_url(postgres_url))
    try:
        for _ in range(20):  # the server re-checks every 2 s: if it wins the race, cut it again
            pid = harness.wait_until(lambda: _lease_session(postgres_url), timeout=10, interval=0.05,
                                     message="the server's lease session")
            with psycopg.connect(postgres_url, autocommit=True) as c:
                c.execute("SELECT pg_terminate_backend(%s)", (pid,))
            try:
                harness.wait_until(lambda: _lease_session(postgres_url) is None, timeout=5, interval=0.01,
                                   message="the session to end")
                other.acquire()
                break
            except (LeaseHeld, AssertionError, TimeoutError):
                continue
        else:
            raise AssertionError("could not take the lease from the running server")
        assert server.proc is not None
        assert server.proc.wait(30) == 3
        assert "another Relay instance took the lease meanwhile; this instance stops serving" in server.log()
    finally:
        other.release()
        server.stop()


async def _close_all(executors: list[FakeExecutor]) -> None:
    await asyncio.gather(*(e.close() for e in executors), return_exceptions=True)


def _assert_read_model_converged(url: str) -> None:
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
    from relay_es.projections.executors import all_rows, fold
    from relay_es.engine.service import Relay

    cfg = parse_database_url(url)
    relay = Relay(event_store_env(cfg), clock=SystemClock())
    db = open_database(cfg)
    try:
        rows = all_rows(db)
        assert rows
        for row in rows:
            assert fold(relay.stream(UUID(row.stream_id))) == row, row.executor_id
    finally:
        db.close()
        relay.close()


@pytest.mark.parametrize("step, dead_after", [(+600.0, 6.0), (-4.0, 10.0)])
def test_wall_clock_step_declares_nothing_early(tmp_path, store_url, step: float, dead_after: float) -> None:
    """Invariant: a wall-clock step of minutes forward during a grace period
    does not declare an executor dead early (timers wait on the monotonic
    clock); a step back delays the death until the wall clock reaches the
    recorded deadline."""
    offset = tmp_path / "wall-offset"
    offset.write_text("0")
    server = RelayServer(tmp_path, args=["--database-url", store_url],
                         env={**FAST, "RELAY_FAULT_WALL_OFFSET_FILE": str(offset)}).start()
    try:
        assert httpx.put(server.http + "/v2/orgs/local/apps/app", verify=TLS, timeout=10).status_code == 204
        assert httpx.patch(server.http + "/v2/orgs/local/apps/app", json={"executorTimeoutSecs": 6},
                           verify=TLS, timeout=10).status_code == 204

        def status() -> str | None:
            rows = httpx.get(server.http + "/v2/orgs/local/apps/app/executors", verify=TLS, timeout=10).json()
            return {e["executorId"]: e["status"] for e in rows}.get("A")

        def step_the_clock() -> None:  # in one rename: Relay never reads a half-written offset
            staged = tmp_path / "wall-offset.new"
            staged.write_text(str(step))
            staged.replace(offset)

        async def main() -> None:
            b = await FakeExecutor(server.ws, executor_id="B").connect()
            a = await FakeExecutor(server.ws, executor_id="A").connect()
            a.abort()
            await until(lambda: status() == "DISCONNECTED", what="A to be DISCONNECTED")
            await asyncio.sleep(1.0)  # well inside the 6 s grace
            step_the_clock()
            await until(lambda: status() != "DISCONNECTED", timeout=dead_after + 10, what="A to be declared dead")
            await b.close()

        asyncio.run(main())
        # Measured from the events' own times, not from when this test saw them: the
        # disconnect was stamped before the step, the death after it (by ``step``).
        r = httpx.get(server.http + "/v2/orgs/local/executor-events", params={"executorId": "A"}, verify=TLS, timeout=10)
        entries = r.json()
        took = at(first(entries, "executor.declared_dead")) - step - at(first(entries, "executor.disconnected"))
        assert dead_after - 0.002 <= took < dead_after + 1.0, f"declared dead {took:.3f}s after the disconnect"
        server.stop()
        check_store(store_url).assert_ok()
    finally:
        server.stop()
