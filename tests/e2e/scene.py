"""A Relay server, a DBOS system database, and real dbos 3.2.0 executors:
the stage of the end-to-end and fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import postgres_admin_url
from tests.e2e import harness, ts_harness
from tests.server import TLS, RelayServer

APP = "e2e-app"
FAST = {
    "RELAY_PING_INTERVAL_SECS": "1",
    "RELAY_PING_WAIT_SECS": "2",
    "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS": "5",
    "RELAY_RESTART_SETTLE_SECS": "1",
}


class Scene:
    """One Relay, one DBOS system database, the (Python) executors started so far.

    In development mode by default (org ``local``); in auth mode every REST call carries ``token``
    and every executor connects with ``conductor_key``."""

    app = APP

    def __init__(self, server: RelayServer, admin_url: str, *, org: str = "local", token: str | None = None,
                 conductor_key: str = "dev-key") -> None:
        self.server = server
        self.admin_url = admin_url
        self.org = org
        self.token = token
        self.conductor_key = conductor_key
        self._prepare()
        self.sys_name, self.steps_name = harness.unique_name("sys"), harness.unique_name("steps")
        self.sys_db = harness.create_database(admin_url, self.sys_name)
        self.steps_db = harness.create_database(admin_url, self.steps_name)
        self.executors: list[harness.Executor] = []

    def _prepare(self) -> None:
        self.python = harness.ensure_dbos_venv(harness.REPO_ROOT)

    def _new_executor(self, name: str, version: str) -> harness.Executor:
        return harness.Executor(self.python, relay_url=self.server.ws, app_name=self.app, app_version=version,
                                system_database_url=self.sys_db, steps_db_url=self.steps_db, name=name,
                                conductor_key=self.conductor_key)

    def spawn(self, name: str, version: str = "v1") -> harness.Executor:
        """One at a time: it returns once Relay has the executor HEALTHY, so two
        first launches never race in the SDK's schema migration."""
        ex = self._new_executor(name, version)
        self.executors.append(ex)
        self.wait(lambda: self.executor(ex.executor_id) is not None and
                  self.executor(ex.executor_id)["status"] == "HEALTHY", f"{name} to be HEALTHY in Relay")
        return ex

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        if self.token is not None:
            kw["headers"] = {"Authorization": f"Bearer {self.token}", **kw.get("headers", {})}
        return httpx.request(method, self.server.http + path, timeout=10, verify=TLS, **kw)

    def executors_now(self) -> dict[str, dict[str, Any]]:
        r = self.api("GET", f"/v2/orgs/{self.org}/apps/{self.app}/executors")
        if r.status_code == 404:  # registered by its first executor, not yet in the read model
            return {}
        assert r.status_code == 200, r.text
        return {e["executorId"]: e for e in r.json()}

    def executor(self, executor_id: str) -> dict[str, Any] | None:
        return self.executors_now().get(executor_id)

    def events(self, executor_id: str) -> list[dict[str, Any]]:
        """The executor's entries of the lifecycle feed (``/executor-events``), in order."""
        r = self.api("GET", f"/v2/orgs/{self.org}/executor-events", params={"executorId": executor_id, "limit": 1000})
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, pred: Any, what: str, timeout: float = 60.0) -> Any:
        try:
            return harness.wait_until(pred, timeout=timeout, interval=0.1, message=what)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.debug()}") from None

    def set_grace(self, secs: int) -> None:
        assert self.api("PUT", f"/v2/orgs/{self.org}/apps/{self.app}").status_code == 204
        r = self.api("PATCH", f"/v2/orgs/{self.org}/apps/{self.app}", json={"executorTimeoutSecs": secs})
        assert r.status_code == 204, r.text
        assert self.api("GET", f"/v2/orgs/{self.org}/apps/{self.app}").json()["executorTimeoutSecs"] == secs

    def close(self) -> None:
        for ex in self.executors:
            ex.close()
        harness.drop_database(self.admin_url, self.sys_name)
        harness.drop_database(self.admin_url, self.steps_name)

    def debug(self) -> str:
        return "\n".join(ex.stderr_tail(30) for ex in self.executors) + "\n--- relay ---\n" + self.server.log()[-6000:]


def on_stage(s: Scene) -> Iterator[Scene]:
    """A fixture's body: yields ``s``; prints the executors' and Relay's logs when the test fails; then
    closes the scene and stops its Relay."""
    try:
        yield s
    except BaseException:
        print(s.debug())
        raise
    finally:
        s.close()
        s.server.stop()


@pytest.fixture
def scene(tmp_path, store_url) -> Iterator[Scene]:
    server = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    yield from on_stage(Scene(server, postgres_admin_url()))


class TsScene(Scene):
    """The same stage with TypeScript executors (``@dbos-inc/dbos-sdk@5.2.11`` on Node)."""

    app = "e2e-ts-app"

    def _prepare(self) -> None:
        self.app_dir = ts_harness.ensure_node_modules()

    def _new_executor(self, name: str, version: str) -> harness.Executor:
        return ts_harness.TsExecutor(relay_url=self.server.ws, app_name=self.app, app_version=version,
                                     system_database_url=self.sys_db, steps_db_url=self.steps_db, name=name,
                                     conductor_key=self.conductor_key, app_dir=self.app_dir)
