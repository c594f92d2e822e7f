"""End-to-end harness for real DBOS TypeScript executors (``@dbos-inc/dbos-sdk`` 5.2.11).

The TypeScript twin of ``harness.Executor``: :class:`TsExecutor` runs ``tests/e2e/ts_app/app.js``
with Node instead of ``dbos_app.py`` with the dbos venv's python. The app speaks the same
stdin/stdout JSON-lines contract and writes the same ``step_runs`` rows, so every other method
(``start_workflows``, ``kill``, ``stop``/``cont``, ``exit``, ``close``, ``stderr_tail`` ...) and the
database helpers of ``harness`` are reused unchanged.

``ensure_node_modules()`` installs the app's pinned dependencies (``npm ci`` from the committed
``package-lock.json``) on first use and whenever the lock file changed; it is safe to call from
several processes at once and prints nothing on success.

Typical use::

    app_dir = ensure_node_modules()
    with TsExecutor(relay_url=url, app_name="my-app", app_version="v1",
                    system_database_url=sys_db, steps_db_url=steps_db) as a:
        ids = a.start_workflows(count=3, steps=4, step_secs=0.5)
        a.kill()

As with the Python SDK, start executors that share a brand-new system database one at a time
(each constructor returns only once its executor reported ``launched``): the TypeScript SDK's
schema migration can deadlock (Postgres 40P01) when two first launches race
(conductor-protocol.md §13).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Mapping

try:  # works both as tests.e2e.ts_harness and as a top-level module next to the test files
    from . import harness
except ImportError:
    import harness  # type: ignore[no-redef]

TS_APP_DIR = harness.E2E_DIR / "ts_app"
TS_APP = TS_APP_DIR / "app.js"
SDK_PACKAGE = "@dbos-inc/dbos-sdk"
SDK_VERSION = "5.2.11"

_MARKER = ".relay-npm-ci.json"  # inside node_modules, so `npm ci` (which wipes it) invalidates it


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH: the TypeScript e2e tests need Node >= 20 and npm")
    return node


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: the TypeScript e2e tests need Node >= 20 and npm")
    return npm


def _wanted_marker(app_dir: Path) -> dict[str, str]:
    lock = (app_dir / "package-lock.json").read_bytes()
    manifest = (app_dir / "package.json").read_bytes()
    node_version = subprocess.run([_node(), "--version"], capture_output=True, text=True,
                                  timeout=30).stdout.strip()
    return {"package-lock.json": hashlib.sha256(lock).hexdigest(),
            "package.json": hashlib.sha256(manifest).hexdigest(),
            "node": node_version}


def _is_ready(app_dir: Path, wanted: dict[str, str]) -> bool:
    modules = app_dir / "node_modules"
    try:
        if json.loads((modules / _MARKER).read_text()) != wanted:
            return False
        installed = json.loads((modules / SDK_PACKAGE / "package.json").read_text())
    except (OSError, ValueError):
        return False
    return installed.get("version") == SDK_VERSION


def ensure_node_modules(app_dir: Path | None = None) -> Path:
    """Makes sure ``ts_app/node_modules`` matches the committed lock file; returns the app folder.

    Runs ``npm ci --no-audit --no-fund`` when node_modules is missing or stale (the lock file,
    package.json or the Node version changed since the last install). An exclusive ``fcntl`` lock
    serialises concurrent callers. Raises ``RuntimeError`` carrying npm's output on failure.
    """
    app_dir = Path(app_dir).resolve() if app_dir is not None else TS_APP_DIR
    lock_dir = harness.REPO_ROOT / ".tmp"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "ts_app-npm-ci.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            wanted = _wanted_marker(app_dir)
            if not _is_ready(app_dir, wanted):
                cmd = [_npm(), "ci", "--no-audit", "--no-fund", "--loglevel=error"]
                proc = subprocess.run(cmd, cwd=app_dir, capture_output=True, text=True, timeout=600,
                                      env={**os.environ, "npm_config_update_notifier": "false"})
                if proc.returncode != 0:
                    raise RuntimeError(f"`{' '.join(cmd)}` in {app_dir} failed with exit code "
                                       f"{proc.returncode}:\n{proc.stdout}{proc.stderr}")
                (app_dir / "node_modules" / _MARKER).write_text(json.dumps(wanted))
                if not _is_ready(app_dir, wanted):
                    raise RuntimeError(f"`npm ci` in {app_dir} did not install {SDK_PACKAGE}@{SDK_VERSION}")
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return app_dir


class TsExecutor(harness.Executor):
    """One ``ts_app/app.js`` process (a real TypeScript DBOS executor).

    Same interface as :class:`harness.Executor`; only the process it starts differs. The
    constructor starts it and waits for its ``launched`` line. Call :func:`ensure_node_modules`
    first (the constructor does not install anything).
    """

    def __init__(
        self,
        *,
        relay_url: str,
        app_name: str,
        app_version: str,
        system_database_url: str,
        steps_db_url: str,
        conductor_key: str = "dev-key",
        executor_metadata: Mapping[str, Any] | None = None,
        extra_env: Mapping[str, str] | None = None,
        name: str | None = None,
        launch_timeout: float = 60.0,
        wait_launched: bool = True,
        node: str | os.PathLike[str] | None = None,
        app_dir: Path | None = None,
    ) -> None:
        app_dir = Path(app_dir).resolve() if app_dir is not None else TS_APP_DIR
        super().__init__(
            None,  # no Python: the program is Node's
            relay_url=relay_url, app_name=app_name, app_version=app_version,
            system_database_url=system_database_url, steps_db_url=steps_db_url,
            conductor_key=conductor_key, executor_metadata=executor_metadata, extra_env=extra_env,
            name=name or f"ts-executor-{uuid.uuid4().hex[:6]}", launch_timeout=launch_timeout,
            wait_launched=wait_launched,
            command=[str(node or _node()), str(app_dir / TS_APP.name)], cwd=app_dir,
            # nothing from the outer environment may change the SDK's identity
            drop_env=("NODE_OPTIONS", "DBOS__CLOUD", "DBOS__VMID", "DBOS__APPVERSION"),
        )

    def __repr__(self) -> str:
        return f"TsExecutor({self.name}, pid={self.proc.pid}, id={self._launched and self._launched.get('executor_id')})"


if __name__ == "__main__":  # python tests/e2e/ts_harness.py  -> installs, prints the app folder
    print(ensure_node_modules())
