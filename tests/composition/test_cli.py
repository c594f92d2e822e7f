"""``relay serve`` as a user runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx

from tests.server import RELAY, RelayServer, TLS, free_port


def test_serve_with_no_options_in_an_empty_folder(tmp_path) -> None:
    port = free_port()  # not 8090, the default: anything else on the machine may hold it
    server = RelayServer(tmp_path, port=port)  # for its helpers; started by hand, with no options at all
    proc = subprocess.Popen(RELAY + ["serve"], cwd=tmp_path, env={**os.environ, "RELAY_PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.proc = proc
    try:
        server.wait_healthy()
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", verify=TLS, timeout=5)
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
                 "--max-executors-per-app", "--max-handshakes-per-address", "--max-queued-transitions",
                 "--http-request-timeout-secs", "--forwarded-allow-ips", "--max-open-connections"):
        assert flag in out
    assert sys.executable


def test_the_server_frees_closed_sockets_without_a_full_collection(tmp_path) -> None:
    """ADR 13: a closed socket leaves no reference cycle, so its objects are freed at once and the
    quiet after the drops runs no full collection (before, one ran here within 3.5 s of them -- the
    test that asserted it took 4.1-4.2 s with the server's start -- holding the GIL for seconds at
    20,000 sockets). The collector watches them: lost, and none alive."""
    from tests.fake_executor import FakeExecutor
    from tests.support import until

    server = RelayServer(tmp_path).start()

    def metric(name: str) -> float:
        for line in server.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise AssertionError(f"{name} is not exported")

    async def main() -> None:
        execs = [await FakeExecutor(server.ws).connect() for _ in range(3)]
        await until(lambda: metric("relay_open_connections") == 3, what="3 open")
        for e in execs:
            e.abort()
        await until(lambda: metric("relay_gc_sockets_lost_total") == 3 and metric("relay_open_connections") == 0,
                    what="3 sockets lost")
        await until(lambda: metric("relay_gc_lost_socket_objects_alive") == 0, what="their objects freed")
        # The quiet (2 s) and a tick of the collector (0.5 s) go by: before, a full collection ran here.
        await asyncio.sleep(3.5)
        assert metric("relay_gc_full_collection_seconds_count") == 0

    try:
        asyncio.run(main())
    finally:
        server.stop()


def test_a_misspelt_auth_variable_is_refused_and_development_mode_is_announced(tmp_path) -> None:
    import os

    env = {**os.environ, "RELAY_AUTH": "enabled"}
    r = subprocess.run(RELAY + ["serve", "--port", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                       env=env)
    assert r.returncode == 2
    assert "RELAY_AUTH" in r.stderr
    assert not (tmp_path / "relay-data").exists()
    server = RelayServer(tmp_path).start()
    try:
        line = next(x for x in server.log().splitlines() if "DEVELOPMENT MODE" in x)
        assert "WARNING" in line and "any key is accepted; org local" in line
    finally:
        server.stop()


def _trickle(port: int, limit: float) -> float:
    """A request whose body never ends: a byte every 0.1 s. How long until the server closed the socket."""
    import socket
    import time

    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    started = time.monotonic()
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        s.setblocking(False)
        while time.monotonic() - started < limit:
            try:
                if s.recv(65536) == b"":
                    return time.monotonic() - started
            except BlockingIOError:
                pass
            except ConnectionResetError:  # closed with our bytes unread: the kernel answers with a reset
                return time.monotonic() - started
            try:
                s.send(b"x")
            except OSError:
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")
    finally:
        s.close()


def test_a_request_whose_body_never_ends_is_cut_at_the_request_deadline(tmp_path) -> None:
    """Slow-body slowloris: the socket was kept past the first-request deadline and the keep-alive."""
    server = RelayServer(tmp_path, env={"RELAY_HTTP_REQUEST_TIMEOUT_SECS": "1"}).start()
    try:
        assert _trickle(server.port, limit=20) < 20  # closed (at about 1 s), not kept for ever
        assert "request not received whole within 1s" in server.log()
        assert server.get("/healthz").status_code == 200
    finally:
        server.stop()


def test_connections_over_the_cap_get_503_and_are_closed(tmp_path) -> None:
    import socket

    from tests.support import until

    server = RelayServer(tmp_path, args=["--max-open-connections", "3"]).start()
    held: list[socket.socket] = []
    try:
        held += [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(3)]
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        reply = b""
        while chunk := extra.recv(4096):
            reply += chunk
        extra.close()
        assert reply.startswith(b"HTTP/1.1 503"), reply
        assert "RELAY_MAX_OPEN_CONNECTIONS" in server.log()
        held.pop().close()
        asyncio.run(until(lambda: _status(server) == 200, what="a slot freed by a close"))
    finally:
        for s in held:
            s.close()
        server.stop()


def test_the_listening_socket_queues_as_many_connections_as_the_kernel_allows(tmp_path) -> None:
    """A fleet reconnecting at once must not overflow the accept queue (ADR 2): the listening
    socket's backlog, as ``ss`` reads it from the kernel, is Relay's, capped by the kernel's
    ``somaxconn`` (uvicorn's own default, 2,048, is below the kernel's default cap of 4,096)."""
    import pathlib

    import pytest

    from relay_es.adapters.uvicorn_ws import LISTEN_BACKLOG

    somaxconn = int(pathlib.Path("/proc/sys/net/core/somaxconn").read_text())
    if somaxconn <= 2048:
        pytest.skip(f"net.core.somaxconn is {somaxconn}: uvicorn's default backlog would be capped the same")
    server = RelayServer(tmp_path).start()
    try:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.split()
        assert out[0] == "LISTEN", out
        assert int(out[2]) == min(LISTEN_BACKLOG, somaxconn), out  # Send-Q of a listener: its backlog
    finally:
        server.stop()


def _status(server: RelayServer) -> int:
    try:
        return server.get("/healthz").status_code
    except httpx.HTTPError:
        return 0


def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy(tmp_path) -> None:
    """A client on 127.0.0.1 sending X-Forwarded-For: its refused handshake is audited with the
    header's address while 127.0.0.1 is a trusted proxy (the default), with its own otherwise."""
    import websockets

    from tests.support import until

    db = f"sqlite:///{tmp_path}/relay.db"

    def token(name: str, *apps: str) -> str:
        args = RELAY + ["admin", "create-token", name, "--org", "acme", "--database-url", db]
        for a in apps:
            args += ["--app", a]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    admin, orders_key = token("admin"), token("orders-executors", "orders")
    auth = {"Authorization": f"Bearer {admin}"}

    async def refused(server: RelayServer) -> None:
        with_header = {"X-Forwarded-For": "203.0.113.9"}
        try:  # the orders key on billing: a refusal of acme's token, audited into acme
            await websockets.connect(f"{server.ws}/websocket/billing/{orders_key}", open_timeout=10,
                                     additional_headers=with_header)
        except websockets.InvalidStatus as e:
            assert e.response.status_code == 403
        else:
            raise AssertionError("a key not covering billing was admitted")

    def peers(server: RelayServer) -> list[str]:
        r = httpx.get(f"{server.http}/v2/orgs/acme/executor-events", headers=auth, verify=TLS, timeout=10)
        assert r.status_code == 200, r.text
        return [a["detail"].get("peer") for a in r.json() if a["action"] == "auth.refused"]

    for args, expected in (([], "203.0.113.9"), (["--forwarded-allow-ips", "10.9.9.9"], "127.0.0.1")):
        server = RelayServer(tmp_path, args=["--database-url", db, "--auth", *args]).start()
        try:
            for app in ("orders", "billing"):
                assert httpx.put(f"{server.http}/v2/orgs/acme/apps/{app}", headers=auth, verify=TLS, timeout=10).status_code == 204
            before = len(peers(server))
            asyncio.run(refused(server))
            found = asyncio.run(until(lambda: peers(server)[before:] if len(peers(server)) > before else None,
                                      what="the refusal audited"))
            assert found == [expected], (args, found)
        finally:
            server.stop()


def test_a_host_that_is_no_name_is_refused_before_the_store_is_opened(tmp_path) -> None:
    r = subprocess.run(RELAY + ["serve", "--auth", "--host", "not..a..host"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr.startswith("relay: host: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "relay-data").exists()


def test_a_sqlite_store_that_cannot_be_opened_on_a_full_file_system_says_so(tmp_path, monkeypatch) -> None:
    """``relay serve`` on a full disk with an existing SQLite store said "disk I/O error" (SQLite's words
    for a -wal file it cannot make), pointing an operator at the hardware: the full file system is said
    beside it, and only when its folder has no room."""
    import shutil
    import sqlite3

    from relay_es.composition.cli import store_failure

    url = f"sqlite:///{tmp_path}/relay.db"
    room = [0]
    real = shutil.disk_usage

    def disk_usage(path: str) -> object:
        assert path == str(tmp_path)
        return real(path)._replace(free=room[0])

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    io = sqlite3.OperationalError("disk I/O error")
    assert store_failure(io, url) == (f"cannot open the store {url}: disk I/O error; no space left on the store's "
                                      f"file system ({tmp_path})")
    assert store_failure(OSError(28, "No space left on device"), url) == (
        f"cannot open the store {url}: [Errno 28] No space left on device")  # said already: not twice
    room[0] = 10 * 2**20
    assert store_failure(io, url) == f"cannot open the store {url}: disk I/O error"
