"""A separate virtualenv holding the real DBOS Python SDK for end-to-end tests.

The executors that the e2e tests start are real ``dbos==3.2.0`` processes. They must not share the
project's own virtualenv (dbos pulls in SQLAlchemy and friends, and its version pins would fight
the project's), so they run from their own venv, by default ``<repo>/.tmp/dbos-venv``.

``ensure_dbos_venv(root)`` creates that venv on first use and reuses it afterwards. It is safe to
call from several processes at once (an exclusive ``fcntl`` lock serialises the creation) and
prints nothing on success; on failure it raises ``RuntimeError`` carrying pip's output.

Stdlib only: importable from pytest and from plain scripts alike.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

DBOS_VERSION = "3.2.0"

# Everything dbos 3.2.0 installs, pinned, so that the venv is the same on every machine.
# websockets 17.4 is the version the protocol notes (§2.2, §13) were verified against; SQLAlchemy
# stays on the 2.0 line that dbos 3.2.0 was released against (it requires >=2.0.43).
REQUIREMENTS: tuple[str, ...] = (
    f"dbos=={DBOS_VERSION}",
    "psycopg[binary]==3.3.9",
    "psycopg-binary==3.3.9",
    "websockets==17.4",
    "SQLAlchemy[asyncio]==2.0.44",
    "greenlet==3.2.4",
    "python-dateutil==2.9.0.post0",
    "six==1.17.0",
    "PyYAML==6.0.2",
    "click==8.1.8",
    "typing_extensions==4.15.0",
)

# Environment variable that overrides the venv location (e.g. to share one across work trees).
VENV_ENV_VAR = "RELAY_DBOS_VENV"
_MARKER = "relay-dbos-venv.json"


def default_venv_dir(root: Path) -> Path:
    override = os.environ.get(VENV_ENV_VAR)
    if override:
        return Path(override).resolve()
    return Path(root).resolve() / ".tmp" / "dbos-venv"


def _python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _wanted_marker() -> dict:
    return {"requirements": list(REQUIREMENTS),
            "python": f"{sys.version_info.major}.{sys.version_info.minor}"}


def _is_ready(venv: Path) -> bool:
    python = _python_of(venv)
    marker = venv / _MARKER
    if not python.exists() or not marker.exists():
        return False
    try:
        if json.loads(marker.read_text()) != _wanted_marker():
            return False
    except (OSError, ValueError):
        return False
    # Cheap sanity check that the interpreter still runs and dbos is the pinned version
    # (the marker could outlive a half-deleted venv).
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
        capture_output=True, text=True, timeout=60,
    )
    return probe.returncode == 0 and probe.stdout.strip() == DBOS_VERSION


def _run(cmd: list[str], log: list[str], timeout: float) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    log.append(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        raise RuntimeError(f"command failed with exit code {proc.returncode}:\n" + "\n".join(log))


def _create(venv: Path) -> None:
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    base_python = getattr(sys, "_base_executable", None) or sys.executable
    _run([base_python, "-m", "venv", str(venv)], log, timeout=300)
    _run([str(_python_of(venv)), "-m", "pip", "install", "--quiet", *REQUIREMENTS], log, timeout=900)
    (venv / _MARKER).write_text(json.dumps(_wanted_marker()))


def ensure_dbos_venv(root: Path, venv_dir: Path | None = None) -> Path:
    """Returns the python executable of a venv that has dbos 3.2.0 (creating the venv if needed).

    ``root`` is the repository root; the venv lives in ``root/.tmp/dbos-venv`` unless ``venv_dir``
    or the ``RELAY_DBOS_VENV`` environment variable says otherwise.
    """
    venv = Path(venv_dir).resolve() if venv_dir is not None else default_venv_dir(root)
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / (venv.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if not _is_ready(venv):
                _create(venv)
                if not _is_ready(venv):
                    raise RuntimeError(f"created {venv} but it does not report dbos {DBOS_VERSION}")
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return _python_of(venv)


if __name__ == "__main__":  # python tests/e2e/dbos_venv.py  -> prints the venv's python
    print(ensure_dbos_venv(Path(__file__).resolve().parents[2]))
