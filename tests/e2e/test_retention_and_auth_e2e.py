"""End to end: retention and global timeout, and auth mode, with a real ``relay serve`` and a
real Python (``dbos==3.2.0``) executor, whose system database (``tests/e2e/sysdb.py``) says what
the SDK did. Each on one store: retention on Postgres, auth (the wire) on SQLite."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import postgres_admin_url
from tests.e2e.scene import FAST, Scene, on_stage
from tests.e2e.sysdb import SystemDb
from tests.server import TLS, RelayServer, admin_token

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def feed(scene: Scene, action: str) -> list[dict[str, Any]]:
    """The app's entries of the lifecycle feed with ``action``, in order."""
    r = scene.api("GET", f"/v2/orgs/{scene.org}/executor-events", params={"app": scene.app, "limit": 1000})
    assert r.status_code == 200, r.text
    return [e for e in r.json() if e["action"] == action]


@pytest.fixture
def retention_scene(tmp_path, postgres_url) -> Iterator[Scene]:
    """A Relay (Postgres store) sending retention plans every second, with the app registered."""
    server = RelayServer(tmp_path, args=["--database-url", postgres_url],
                         env=FAST | {"RELAY_RETENTION_INTERVAL_SECS": "1"}).start()
    s = Scene(server, postgres_admin_url())
    try:
        assert s.api("PUT", f"/v2/orgs/local/apps/{s.app}").status_code == 204
    except BaseException:
        s.close()
        server.stop()
        raise
    yield from on_stage(s)


def test_retention_deletes_old_rows_and_global_timeout_cancels_old_workflows(retention_scene: Scene) -> None:
    """gcRowsThreshold: the SDK keeps the newest finished workflows and deletes the rest;
    globalTimeoutMs: it cancels the workflows running for longer, not the younger ones."""
    scene = retention_scene
    db = SystemDb(scene.sys_db)
    a = scene.spawn("A")
    [old] = a.start_workflows(count=1, steps=1, step_secs=120)  # PENDING throughout
    done = []
    for _ in range(4):  # one after the other: four distinct completion times
        [wf] = a.start_workflows(count=1, steps=1, step_secs=0)
        scene.wait(lambda: db.status(wf) == "SUCCESS", "a short workflow to end")
        done.append(wf)
    assert feed(scene, "retention.dispatched") == []  # no setting asks for retention yet

    def patch(**settings: Any) -> None:
        r = scene.api("PATCH", f"/v2/orgs/local/apps/{scene.app}", json=settings)
        assert r.status_code == 204, r.text

    patch(gcRowsThreshold=2)
    want = {done[0]: None, done[1]: None, done[2]: "SUCCESS", done[3]: "SUCCESS"}
    scene.wait(lambda: db.statuses(done) == want, "the two oldest finished workflows to be deleted", timeout=30)
    assert db.status(old) == "PENDING"  # never a running workflow
    rounds = feed(scene, "retention.dispatched")
    assert {r["detail"]["targetExecutorId"] for r in rounds} == {a.executor_id}
    assert {r["detail"]["gcRowsThreshold"] for r in rounds} == {2}
    assert all(r["detail"]["timeoutCutoffEpochMs"] is None for r in rounds)
    # the executor answers once it has deleted them, and Relay records the answer after that: waited for
    answered = scene.wait(lambda: feed(scene, "retention.answered"), "the retention round's answer to be recorded",
                          timeout=30)
    assert all(r["detail"]["success"] for r in answered)

    # a younger workflow, at least 3 s after the old one: the timeout (6 s) takes the old one first
    scene.wait(lambda: time.time() * 1000 - db.workflow(old)["created_at"] >= 3000, "the old workflow to age")
    [young] = a.start_workflows(count=1, steps=1, step_secs=120)
    patch(globalTimeoutMs=6000)
    scene.wait(lambda: db.status(old) == "CANCELLED", "the old workflow to be cancelled", timeout=30)
    assert db.status(young) == "PENDING"
    assert {r["detail"]["targetExecutorId"] for r in feed(scene, "retention.dispatched")
            if r["detail"]["timeoutCutoffEpochMs"] is not None} == {a.executor_id}


@pytest.fixture
def auth_scene(tmp_path) -> Iterator[Scene]:
    """A Relay in auth mode (SQLite store), org ``acme``, its first token made by ``relay admin
    create-token``; the app registered and a token limited to it as the executors' conductor key."""
    store = f"sqlite:///{tmp_path}/relay.db"
    admin = admin_token(tmp_path, store, "acme", "admin")
    server = RelayServer(tmp_path, args=["--database-url", store, "--auth"], env=FAST).start()
    h = {"Authorization": f"Bearer {admin}"}

    def call(method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, server.http + path, headers=h, timeout=10, verify=TLS, **kw)

    try:
        deadline = time.monotonic() + 15  # the token made before the start is learnt from the read models
        while call("GET", "/v2/orgs/acme/apps").status_code != 200:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        assert call("PUT", f"/v2/orgs/acme/apps/{Scene.app}").status_code == 204
        made = call("POST", "/v2/orgs/acme/tokens/executors", json={"appNames": [Scene.app]})
        assert made.status_code == 201, made.text
    except BaseException:
        server.stop()
        raise
    yield from on_stage(Scene(server, postgres_admin_url(), org="acme", token=admin,
                              conductor_key=made.json()["token"]))


def test_revoked_conductor_key_disconnects_its_executor_for_good(auth_scene: Scene) -> None:
    """A token limited to the app, as the conductor key, registers the executor; revoking it
    closes the socket (4003) and the SDK's every reconnect is refused; the key is in no log line."""
    scene = auth_scene
    a = scene.spawn("A")
    [connected] = [e for e in scene.events(a.executor_id) if e["action"] == "executor.connected"]
    assert connected["detail"]["token"] == "executors"

    assert scene.api("DELETE", "/v2/orgs/acme/tokens/executors").status_code == 204
    scene.wait(lambda: scene.executor(a.executor_id)["status"] == "DISCONNECTED", "A to be disconnected", timeout=10)
    scene.wait(lambda: "received 4003" in a.stderr_text(), "the SDK to see close code 4003", timeout=10)
    # the SDK reconnects a second later, with the same key: refused, and refused again
    scene.wait(lambda: a.stderr_text().count("HTTP 401") >= 2, "two reconnects refused with 401", timeout=20)
    assert [e["action"] for e in scene.events(a.executor_id)] == ["executor.connected", "executor.disconnected"]
    assert scene.events(a.executor_id)[1]["detail"]["reason"] == "token_revoked"
    assert scene.executor(a.executor_id)["status"] == "DISCONNECTED"
    assert {(e["detail"]["status"], e["detail"]["reason"]) for e in feed(scene, "auth.refused")} == {
        (401, "unknown or revoked conductor key")}  # in the org's lifecycle feed
    log = scene.server.log()
    assert "refused executor handshake from 127.0.0.1:" in log and f"/websocket/{scene.app}/***" in log
    assert scene.conductor_key not in log
