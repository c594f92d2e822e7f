"""A store backed up while ``relay serve`` runs and restored, exactly as docs/operations.md says, on
both stores: the commands are read from that document and run in a shell.

A server in auth mode holds an application, an org-wide token, the executors' key, an alerting rule
with a signed webhook, HEALTHY executors and one DISCONNECTED, when the copy is taken. After the
copy, on the same server, an executor connects, one goes away, a token is revoked, another made, a
rule deleted and an application registered. The server stops, the copy is restored into a fresh
place, a new server starts on it. Invariant: what the copy held is as it was -- the application,
both tokens (the key still connects), the executors' histories, the rules and the webhook's sealing
key -- and the DISCONNECTED executor is declared DEAD at the deadline it had, its recovery sent to a
HEALTHY peer, its webhook posted and signed; what came after the copy is gone (the executor that
connected is registered anew, the one that went away is recorded ``relay_restarted``, the revoked
token works again, the new one and the new application are unknown, the deleted rule is back)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create_database, drop_database, postgres_admin_url
from tests.e2e.scene import FAST
from tests.fake_executor import FakeExecutor
from tests.fault.pg import _pgbin
from tests.server import TLS, RelayServer, admin_token
from tests.support import until
from tests.webhook_receiver import Receiver, verify

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
ORG, APP = "acme", "orders"
GRACE = 15  # the application's executorTimeoutSecs: the DISCONNECTED executor's deadline is this after its disconnect
SECRET = "a-webhook-secret-of-some-length"
ENV = {**FAST, "RELAY_ALERT_WEBHOOK_ALLOW": "127.0.0.0/8"}  # the receiver is on loopback
# The placeholders of the documented commands.
DOC_PYTHON = ".venv/bin/python"
DOC_SQLITE_COPY = "/var/backups/relay/relay.db"
DOC_DUMP = "/var/backups/relay/relay.dump"
DOC_STORE = "postgresql://relay@db.internal:5432/relay"
DOC_RESTORED = "postgresql://relay@db.internal:5432/relay_restored"


def documented(marker: str) -> str:
    """The one ``sh`` block of docs/operations.md that holds ``marker``."""
    text = (ROOT / "docs" / "operations.md").read_text()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if marker in b]
    assert len(blocks) == 1, f"docs/operations.md must hold exactly one sh block with {marker!r}"
    return blocks[0]


def shell(block: str, cwd: Path, subs: list[tuple[str, str]]) -> str:
    """Runs a documented block in bash, each placeholder replaced; its stdout."""
    for old, new in subs:
        assert old in block, f"the documented block no longer holds {old!r}"
        block = block.replace(old, new)
    env = {**os.environ, "PATH": f"{_pgbin()}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{block}\nexit {done.returncode}: {done.stderr}"
    return done.stdout


class Store:
    """The store under test and its documented backup and restore: SQLite at ``relay serve``'s default
    place (``./relay-data/relay.db`` in its directory), or the Postgres database ``url``."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.postgres = url.startswith("postgresql")
        self.url = url
        self.cwd = tmp_path / "relay"
        self.cwd.mkdir()
        self.copies = tmp_path / "backups"
        self.copies.mkdir()
        self.restored: str | None = None  # Postgres: the database restored into

    @property
    def absolute_url(self) -> str:
        return self.url if self.postgres else f"sqlite:///{self.cwd}/relay-data/relay.db"

    def serve_args(self) -> list[str]:
        if not self.postgres:
            return []  # the default store
        return ["--database-url", self.restored or self.url]

    def backup(self) -> None:
        if self.postgres:
            out = shell(documented("pg_dump "), self.cwd, [(DOC_DUMP, str(self.copies / "relay.dump")),
                                                            (DOC_STORE, self.url)])
            assert out.split() == ["2"], out  # the events' and the keys' data are in the dump
        else:
            out = shell(documented("store.backup(copy)"), self.cwd, [(DOC_PYTHON, sys.executable),
                                                                    (DOC_SQLITE_COPY, str(self.copies / "relay.db"))])
            assert out.split() == ["ok"], out  # integrity_check of the copy

    def restore(self) -> None:
        if self.postgres:
            name = f"relay_test_{uuid.uuid4().hex[:12]}"
            self.restored = create_database(postgres_admin_url(), name)
            shell(documented("pg_restore --dbname"), self.cwd, [(DOC_DUMP, str(self.copies / "relay.dump")),
                                                                 (DOC_RESTORED, self.restored)])
        else:
            shell(documented("mv relay-data"), self.cwd, [(DOC_SQLITE_COPY, str(self.copies / "relay.db"))])
            assert (self.cwd / "relay-data.replaced" / "relay.db").exists()

    def drop(self) -> None:
        if self.restored is not None:
            drop_database(postgres_admin_url(), self.restored.rpartition("/")[2])


@pytest.fixture
def store(store_url, tmp_path) -> Iterator[Store]:
    s = Store(store_url, tmp_path)
    yield s
    s.drop()


class Api:
    def __init__(self, server: RelayServer, token: str) -> None:
        self.server = server
        self.token = token

    def call(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.request(method, self.server.http + f"/v2/orgs/{ORG}" + path, headers=headers, timeout=30,
                             verify=TLS, **kw)

    def ok(self, method: str, path: str, status: int, **kw: Any) -> Any:
        r = self.call(method, path, **kw)
        assert r.status_code == status, f"{method} {path}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def rows(self) -> dict[str, dict[str, Any]]:
        return {e["executorId"]: e for e in self.ok("GET", f"/apps/{APP}/executors", 200)}

    def history(self, executor_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/apps/{APP}/executors/{executor_id}/history", 200)

    def feed(self, executor_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", "/executor-events", 200, params={"executorId": executor_id, "limit": 1000})


def status_is(api: Api, executor_id: str, status: str) -> bool:
    return api.rows().get(executor_id, {}).get("status") == status


def wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def deadline_in(history: list[dict[str, Any]]) -> str:
    [disconnected] = [e for e in history if e["type"] == "Disconnected"]
    return disconnected["data"]["deadline"]


def made(api: Api, hook: Receiver) -> tuple[str, str, str, str]:
    """The application, the executors' key, a token, two rules (one with a signed webhook): the key, the
    token and the rules' ids."""
    api.ok("PUT", f"/apps/{APP}", 204)
    api.ok("PATCH", f"/apps/{APP}", 204, json={"executorTimeoutSecs": GRACE})
    key = api.ok("POST", "/tokens/orders-executors", 201, json={"appNames": [APP]})["token"]
    revoked_later = api.ok("POST", "/tokens/revoked-later", 201)["token"]
    dead = api.ok("POST", f"/apps/{APP}/alerting-rules", 201, json={
        "ruleType": "ExecutorDead", "minIntervalSecs": 0,
        "ruleMetadata": {"webhooks": [{"url": hook.url + "/relay", "secret": SECRET}]}})["id"]
    flapping = api.ok("POST", f"/apps/{APP}/alerting-rules", 201, json={"ruleType": "ExecutorFlapping",
                                                                            "ruleMetadata": {}})["id"]
    return key, revoked_later, dead, flapping


@pytest.mark.e2e
def test_a_store_backed_up_while_serving_and_restored_as_documented_is_as_it_was(store: Store) -> None:
    token = admin_token(store.cwd, store.absolute_url, ORG, "ops")
    server = RelayServer(store.cwd, args=[*store.serve_args(), "--auth"], env=ENV).start()
    api = Api(server, token)
    with Receiver() as hook:
        try:
            asyncio.run(scenario(store, api, hook))
        except BaseException:
            print(api.server.log()[-8000:])
            raise
        finally:
            api.server.stop()


async def scenario(store: Store, api: Api, hook: Receiver) -> None:
    key, revoked_later, dead_rule, flapping_rule = await asyncio.to_thread(made, api, hook)

    def fake(executor_id: str) -> FakeExecutor:
        return FakeExecutor(api.server.ws, app=APP, key=key, executor_id=executor_id,
                            answers={"alert": lambda req: {"success": True}})

    healthy, gone, disconnected = fake("healthy"), fake("gone-after-backup"), fake("disconnected")
    for ex in (healthy, gone, disconnected):
        await ex.connect()
    await until(lambda: all(status_is(api, i, "HEALTHY") for i in ("healthy", "gone-after-backup", "disconnected")),
                20, what="three executors HEALTHY")
    await disconnected.close()
    await until(lambda: status_is(api, "disconnected", "DISCONNECTED"), 20, what="disconnected DISCONNECTED")
    app_before = await asyncio.to_thread(api.ok, "GET", f"/apps/{APP}", 200)
    before = {i: await asyncio.to_thread(api.history, i) for i in ("healthy", "gone-after-backup", "disconnected")}
    deadline = deadline_in(before["disconnected"])

    await asyncio.to_thread(store.backup)  # the server running
    assert api.server.proc is not None and api.server.proc.poll() is None

    # After the copy, on the same server: none of this is in the copy.
    later = await fake("connected-after-backup").connect()
    gone.abort()
    await until(lambda: status_is(api, "connected-after-backup", "HEALTHY")
                and status_is(api, "gone-after-backup", "DISCONNECTED"), 20, what="the changes after the backup")
    await asyncio.to_thread(api.ok, "DELETE", "/tokens/revoked-later", 204)
    made_later = (await asyncio.to_thread(api.ok, "POST", "/tokens/made-later", 201))["token"]
    await asyncio.to_thread(api.ok, "DELETE", f"/apps/{APP}/alerting-rules/{flapping_rule}", 204)
    await asyncio.to_thread(api.ok, "PUT", "/apps/made-later", 204)

    await asyncio.to_thread(api.server.stop)
    await asyncio.gather(healthy.close(), later.close(), return_exceptions=True)
    await asyncio.to_thread(store.restore)
    started = time.time()
    api.server = RelayServer(store.cwd, args=[*store.serve_args(), "--auth"], env=ENV)  # stopped by the test
    await asyncio.to_thread(api.server.start)

    # The copy does not know the executor that connected after it; registered anew when it reconnects.
    assert api.call("GET", f"/apps/{APP}/executors/connected-after-backup/history").status_code == 404
    healthy, later = fake("healthy"), fake("connected-after-backup")
    await healthy.connect()
    await later.connect()
    await until(lambda: status_is(api, "healthy", "HEALTHY") and status_is(api, "connected-after-backup", "HEALTHY"),
                20, what="the executors back")
    assert [e["type"] for e in await asyncio.to_thread(api.history, "connected-after-backup")] == ["Registered",
                                                                                                  "Connected"]

    # The application, the tokens and the rules as the copy held them.
    app_after = await asyncio.to_thread(api.ok, "GET", f"/apps/{APP}", 200)
    assert {k: app_after[k] for k in ("id", "name", "executorTimeoutSecs")} == \
        {k: app_before[k] for k in ("id", "name", "executorTimeoutSecs")}
    assert api.call("GET", "/apps", revoked_later).status_code == 200  # revoked after the copy: live in it
    assert api.call("GET", "/apps", made_later).status_code == 401  # made after the copy: unknown
    assert api.call("GET", "/apps/made-later").status_code == 404
    rules = await asyncio.to_thread(api.ok, "GET", f"/apps/{APP}/alerting-rules", 200)
    assert sorted(r["id"] for r in rules) == sorted([dead_rule, flapping_rule])

    # The disconnected executor: the deadline it had, declared DEAD at it, recovered by a HEALTHY peer,
    # the rule's webhook posted (its sealing key restored) and signed.
    history = await asyncio.to_thread(api.history, "disconnected")
    assert history[:len(before["disconnected"])] == before["disconnected"]
    assert deadline_in(history) == deadline
    await until(lambda: [r for ex in (healthy, later) for r in ex.requests
                         if r.get("type") == "recovery" and r["executor_ids"] == ["disconnected"]],
                GRACE + 60, what="the disconnected executor's recovery sent to a HEALTHY peer")
    [declared] = [e for e in await asyncio.to_thread(api.feed, "disconnected") if e["action"] == "executor.declared_dead"]
    assert wall(declared["at"]) >= wall(deadline)
    posted = await until(lambda: [r for r in hook.requests if json.loads(r["body"])["metadata"].get("executorId")
                                  == "disconnected"], 30, what="the ExecutorDead webhook posted")
    assert verify(SECRET, posted[0]) and json.loads(posted[0]["body"])["ruleId"] == dead_rule
    assert "sealing key" not in api.server.log()

    # The executor HEALTHY in the copy that went away since: recorded relay_restarted, a full grace from the restart.
    entry = await until(lambda: [e for e in api.feed("gone-after-backup") if e["action"] == "executor.disconnected"],
                        30, what="gone-after-backup recorded DISCONNECTED")
    assert entry[-1]["detail"]["reason"] == "relay_restarted"
    assert wall(entry[-1]["detail"]["deadline"]) >= started + GRACE
    assert (await asyncio.to_thread(api.history, "gone-after-backup"))[:len(before["gone-after-backup"])] == \
        before["gone-after-backup"]

    # The executor that stayed: its history as it was, then its reconnect; never declared dead.
    now = await asyncio.to_thread(api.history, "healthy")
    assert now[:len(before["healthy"])] == before["healthy"]
    assert [e["type"] for e in now[len(before["healthy"]):]] == ["Connected"]
    await asyncio.gather(healthy.close(), later.close(), return_exceptions=True)
