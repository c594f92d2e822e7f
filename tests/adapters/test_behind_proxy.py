"""Relay behind a real nginx terminating TLS, configured exactly as docs/behind-a-proxy.md says.

The nginx block is read from that document, so the configuration users copy is the one tested:
executors connect over ``wss://``, the REST API answers over ``https://``, the address Relay
records for a client is the client's (from ``X-Forwarded-For``), and no key reaches a log.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.fake_executor import FakeExecutor
from tests.server import RELAY, RelayServer, free_port
from tests.support import until

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def documented_nginx_block() -> str:
    text = (ROOT / "docs" / "behind-a-proxy.md").read_text()
    blocks = re.findall(r"```nginx\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, "docs/behind-a-proxy.md must hold exactly one nginx block"
    return blocks[0]


def self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60)
    return cert, key


class Nginx:
    def __init__(self, tmp: Path, relay_port: int) -> None:
        self.dir = tmp / "nginx"
        (self.dir / "logs").mkdir(parents=True)
        self.port = free_port()
        cert, key = self_signed(self.dir)
        self.cert = cert
        block = documented_nginx_block()
        for old, new in [("listen 443 ssl;", f"listen 127.0.0.1:{self.port} ssl;"),
                         ("server_name relay.example.com;", "server_name localhost;"),
                         ("/etc/ssl/relay/fullchain.pem", str(cert)),
                         ("/etc/ssl/relay/privkey.pem", str(key)),
                         ("http://127.0.0.1:8090", f"http://127.0.0.1:{relay_port}")]:
            assert old in block, f"the documented nginx block no longer holds {old!r}"
            block = block.replace(old, new)
        logs = self.dir / "logs"
        (self.dir / "nginx.conf").write_text(f"""
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {logs}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {logs}/access.log;
    client_body_temp_path {self.dir}/body;
    proxy_temp_path {self.dir}/proxy;
    fastcgi_temp_path {self.dir}/fastcgi;
    uwsgi_temp_path {self.dir}/uwsgi;
    scgi_temp_path {self.dir}/scgi;
{block}
}}
""")
        directives = "daemon off;" + (" user root;" if _is_root() else "")  # one -g: a second replaces the first
        self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-g", directives],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.ssl = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                httpx.get(f"{self.https}/healthz", verify=self.ssl, timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise TimeoutError("nginx did not start")

    @property
    def https(self) -> str:
        return f"https://localhost:{self.port}"

    @property
    def wss(self) -> str:
        return f"wss://localhost:{self.port}"

    def logs(self) -> str:
        return "".join(p.read_text() for p in sorted((self.dir / "logs").glob("*.log")))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


@pytest.fixture
def proxied(tmp_path: Path, store_url: str) -> Iterator[tuple[RelayServer, Nginx, str, str]]:
    def token(name: str, *apps: str) -> str:
        args = RELAY + ["admin", "create-token", name, "--org", "acme", "--database-url", store_url]
        for a in apps:
            args += ["--app", a]
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    admin, executor_key = token("admin"), token("orders-executors", "orders")
    relay = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    nginx = Nginx(tmp_path, relay.port)
    try:
        r = httpx.put(f"{nginx.https}/v2/orgs/acme/apps/orders", headers={"Authorization": f"Bearer {admin}"},
                      verify=nginx.ssl, timeout=10)
        assert r.status_code == 204, r.text
        yield relay, nginx, admin, executor_key
    finally:
        nginx.stop()
        relay.stop()


def _executors(nginx: Nginx, admin: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{nginx.https}/v2/orgs/acme/apps/orders/executors", headers={"Authorization": f"Bearer {admin}"},
                  verify=nginx.ssl, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def test_executors_and_the_api_work_over_tls_and_no_key_is_logged(proxied: tuple[RelayServer, Nginx, str, str]) -> None:
    relay, nginx, admin, key = proxied

    async def scenario() -> None:
        ex = FakeExecutor(nginx.wss, app="orders", key=key)
        ex.ws = await websockets.connect(f"{nginx.wss}/websocket/orders/{key}", ssl=nginx.ssl, ping_interval=None,
                                         max_size=None, open_timeout=10)
        ex._task = asyncio.ensure_future(ex._loop())
        await ex.wait_for("executor_info")
        rows = await until(lambda: [e for e in _executors(nginx, admin) if e["executorId"] == ex.executor_id],
                           what="the executor listed through the proxy")
        assert rows[0]["status"] == "HEALTHY"
        await ex.close()
        await until(lambda: [e for e in _executors(nginx, admin)
                             if e["executorId"] == ex.executor_id and e["status"] == "DISCONNECTED"],
                    what="the close seen through the proxy")

    asyncio.run(scenario())
    # Plain HTTP to the TLS port is refused by nginx, not passed on.
    assert httpx.get(f"http://localhost:{nginx.port}/healthz", timeout=5).status_code == 400
    for where, text in (("nginx", nginx.logs()), ("relay", relay.log())):
        assert key not in text and admin not in text, f"a secret reached the {where} log"


def test_the_address_relay_records_is_the_clients_not_the_proxys(proxied: tuple[RelayServer, Nginx, str, str]) -> None:
    relay, nginx, admin, key = proxied

    async def refused_from(source: str) -> int:
        # the orders key on billing: a refusal of acme's token, audited into acme (an unknown key is audited nowhere)
        try:
            await websockets.connect(f"{nginx.wss}/websocket/billing/{key}", ssl=nginx.ssl, open_timeout=10,
                                     local_addr=(source, 0), additional_headers={"X-Forwarded-For": "203.0.113.9"})
        except websockets.InvalidStatus as e:
            return e.response.status_code
        raise AssertionError("a key not covering billing was admitted")

    assert asyncio.run(refused_from("127.0.0.2")) == 403

    def refusals() -> list[dict[str, Any]]:
        r = httpx.get(f"{nginx.https}/v2/orgs/acme/executor-events", headers={"Authorization": f"Bearer {admin}"},
                      verify=nginx.ssl, timeout=10)
        assert r.status_code == 200, r.text
        return [a for a in r.json() if a["action"] == "auth.refused"]

    entries = asyncio.run(until(refusals, what="the refusal audited"))
    text = repr(entries)
    # nginx saw 127.0.0.2 and said so; the address the client claimed for itself was not believed,
    # and the proxy's own address is not what Relay recorded.
    assert "127.0.0.2" in text and "203.0.113.9" not in text, text


def test_no_key_reaches_an_nginx_log_while_relay_is_down(proxied: tuple[RelayServer, Nginx, str, str]) -> None:
    relay, nginx, _admin, key = proxied
    relay.stop()

    async def handshake() -> int:
        try:
            await websockets.connect(f"{nginx.wss}/websocket/orders/{key}", ssl=nginx.ssl, open_timeout=10)
        except websockets.InvalidStatus as e:
            return e.response.status_code
        raise AssertionError("a handshake was admitted with Relay stopped")

    # Each reconnect an executor makes while Relay restarts fails at nginx's connect() to Relay,
    # which nginx reports (at `error`) with the request line and the upstream URL, both holding the key.
    assert asyncio.run(handshake()) == 502
    assert key not in nginx.logs(), "a key reached an nginx log"


def test_the_largest_body_relay_takes_reaches_it_through_the_proxy(
        proxied: tuple[RelayServer, Nginx, str, str]) -> None:
    _relay, nginx, admin, _key = proxied
    # An import of the largest serialized workflow Relay takes: Relay reads and decodes it, and
    # with no executor connected answers with its own problem, not with nginx's 413 page.
    body = b'{"serializedWorkflow": "' + b"a" * (64 << 20) + b'"}'
    r = httpx.post(f"{nginx.https}/v2/orgs/acme/apps/orders/workflows/import", content=body,
                   headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
                   verify=nginx.ssl, timeout=60)
    assert r.headers["content-type"].startswith("application/problem+json"), r.text[:300]
    assert r.status_code == 503, r.text
