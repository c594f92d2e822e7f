"""A throwaway Postgres cluster that a test may stop and start at will."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.server import free_port


def _pgbin() -> str:
    env = os.environ.get("RELAY_TEST_PGBIN")
    if env:
        return env
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("no Postgres server binaries (run the suite with ./scripts/test)")
    return str(found[-1].parent)


def _as_postgres(cmd: list[str]) -> None:
    if os.geteuid() == 0:
        cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{c}'" for c in cmd)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


class PgCluster:
    def __init__(self) -> None:
        self.bin = _pgbin()
        self.dir = Path(tempfile.mkdtemp(prefix="relay-fault-pg."))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        _as_postgres([f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        # Below the ephemeral range (see free_port): the cluster is stopped and started
        # again on this port while clients keep opening connections.
        for attempt in range(5):
            self.port = free_port()
            try:
                self.start()
                return
            except subprocess.CalledProcessError:
                log = Path(f"{self.dir}/log")
                if attempt == 4 or "already in use" not in (log.read_text() if log.exists() else ""):
                    raise

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        _as_postgres([f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-w", "-o", opts, "start"])

    def stop(self, mode: str = "fast") -> None:
        _as_postgres([f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-m", mode, "-w", "stop"])

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
