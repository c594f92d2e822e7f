"""``relay serve`` as a user runs it."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx

from tests.server import RELAY, RelayServer


def test_serve_with_no_options_in_an_empty_folder(tmp_path) -> None:
    server = RelayServer(tmp_path, port=8090)  # for its helpers; started by hand, with no options at all
    proc = subprocess.Popen(RELAY + ["serve"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.proc = proc
    try:
        server.wait_healthy()
        r = httpx.get("http://127.0.0.1:8090/healthz", timeout=5)
        assert r.status_code == 200
        assert r.json()["store"] == "sqlite"
        assert (tmp_path / "relay-data" / "relay.db").exists()
        # a second instance on the same store refuses to start, with a clear message
        second = subprocess.run(RELAY + ["serve", "--port", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert second.returncode == 2
        assert "another Relay instance is serving" in second.stderr
    finally:
        server.stop()
    # uvicorn re-raises the SIGTERM it handled once shutdown is complete
    assert proc.returncode in (0, -15)


def test_non_loopback_bind_without_auth_is_refused(tmp_path) -> None:
    r = subprocess.run(RELAY + ["serve", "--host", "0.0.0.0"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "refusing to serve without --auth" in r.stderr
    assert not (tmp_path / "relay-data").exists()


def test_bad_settings_are_refused_with_the_setting_named(tmp_path) -> None:
    r = subprocess.run(RELAY + ["serve", "--ping-interval-secs", "30", "--ping-wait-secs", "25"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "RELAY_PING_WAIT_SECS" in r.stderr
    r = subprocess.run(RELAY + ["serve", "--database-url", "mysql://x"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "unsupported database URL" in r.stderr
    r = subprocess.run(RELAY + ["serve", "--max-connections-per-key", "0"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert "RELAY_MAX_CONNECTIONS_PER_KEY" in r.stderr


def test_help_lists_every_timing_flag() -> None:
    out = subprocess.run(RELAY + ["serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    for flag in ("--ping-interval-secs", "--ping-wait-secs", "--default-executor-timeout-secs",
                 "--recovery-response-timeout-secs", "--retention-interval-secs", "--restart-settle-secs",
                 "--database-url", "--auth", "--no-auth", "--insecure", "--host", "--port",
                 "--max-connections-per-key", "--max-connections-per-app", "--max-executors-per-key",
                 "--max-executors-per-app", "--max-handshakes-per-address"):
        assert flag in out
    assert sys.executable


def test_the_server_collects_a_closed_socket_s_garbage_once_it_is_quiet(tmp_path) -> None:
    """ADR 13: the server runs the full garbage collections itself, after sockets
    closed and nothing happened for a moment (here: three executors dropped)."""
    from tests.fake_executor import FakeExecutor
    from tests.support import until

    server = RelayServer(tmp_path).start()

    def full_collections() -> float:
        for line in server.get("/metrics").text.splitlines():
            if line.startswith("relay_gc_full_collection_seconds_count"):
                return float(line.split()[-1])
        raise AssertionError("relay_gc_full_collection_seconds is not exported")

    async def main() -> None:
        execs = [await FakeExecutor(server.ws).connect() for _ in range(3)]
        await until(lambda: server.get("/metrics").text.count("relay_open_connections 3.0"), what="3 open")
        assert full_collections() == 0  # sockets opened only: nothing to look for
        for e in execs:
            e.abort()
        assert await until(full_collections, timeout=15, what="a full collection after the drops")

    try:
        asyncio.run(main())
    finally:
        server.stop()
