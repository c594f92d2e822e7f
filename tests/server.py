"""Runs ``relay serve`` as a real process for tests."""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

RELAY = [sys.executable, "-m", "relay_es"]
# One TLS context for every request the tests make: httpx builds one per client otherwise
# (``httpx.get`` makes a client per call), loading the CA bundle each time -- 44 ms of CPU
# per request here, taken from the server under test on a two-core machine.
TLS = ssl.create_default_context()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = f.read().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port nobody listens on now, taken from below the kernel's ephemeral range.

    A port the kernel hands out (``bind(0)``) is one it may hand out again to any
    outgoing connection -- to Postgres, to a test's WebSocket client -- between
    the moment it is picked and the moment a server binds it, or while a server
    that is restarted on it is down. Below the ephemeral range only another
    explicit bind can take it."""
    lo, _ = _ephemeral_range()
    low = 20000 if lo > 21000 else 10000
    for _ in range(1000):
        port = random.randrange(low, lo)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
                raise
            return port
    raise RuntimeError(f"no free port in {low}-{lo - 1}")


class RelayServer:
    def __init__(self, cwd: Path, *, port: int | None = None, args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.cwd = cwd
        self._own_port = port is None  # picked here: may be picked again if someone bound it first
        self.port = port or free_port()
        self.args = args or []
        self.env = env or {}
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = cwd / f"relay-{self.port}.log"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True) -> "RelayServer":
        for attempt in range(5):
            self._spawn()
            if not wait:
                return self
            try:
                self.wait_healthy()
                return self
            except RuntimeError:
                # a port picked here and bound by someone else meanwhile: pick another
                if not (self._own_port and attempt < 4 and "address already in use" in self.log().lower()):
                    raise
                self.port = free_port()
                self.log_path = self.cwd / f"relay-{self.port}.log"
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        env = {**os.environ, **self.env}
        args = ["serve", *self.args]
        if "--port" not in self.args:
            args += ["--port", str(self.port)]
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(RELAY + args, cwd=self.cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     text=True)

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"relay serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.http + "/healthz", timeout=1, verify=TLS).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"relay serve did not become healthy:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(self.http + path, timeout=10, verify=TLS, **kw)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode if self.proc else None


def admin_token(cwd: Any, store_url: str, org: str, name: str, *apps: str) -> str:
    """A token made the way the README says (``relay admin create-token``); its secret.

    The command's own ``main`` runs in this process (about 20 ms instead of a
    second for an interpreter and its imports); ``tests/composition/test_cli.py``
    runs the command as a process."""
    import contextlib
    import io

    from relay_es.composition.cli import main

    args = ["admin", "create-token", name, "--org", org, "--database-url", store_url]
    for a in apps:
        args += ["--app", a]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, err.getvalue()
    return out.getvalue().strip()


def children_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (of any of its threads: Relay starts its read-model process
    from a worker thread)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            continue
    return out
