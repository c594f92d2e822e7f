"""A real HTTP receiver on loopback for alert webhooks: records every request (path, headers,
raw body) and answers the statuses it is given, in order (then 200)."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                              "body": body, "at": time.time()})
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                got = list(self.requests)
            if len(got) >= count:
                return got
            assert time.monotonic() < deadline, f"{len(got)} of {count} webhook requests within {timeout}s"
            time.sleep(0.05)


def verify(secret: str, request: dict[str, Any], *, tolerance: float = 300.0) -> bool:
    """What a receiver does with ``X-Relay-Signature`` (``docs/alerting.md``): recompute the HMAC
    over the raw body and check the timestamp is recent."""
    fields = dict(part.split("=", 1) for part in request["headers"]["x-relay-signature"].split(","))
    t = int(fields["t"])
    mac = hmac.new(secret.encode(), f"{t}.".encode() + request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, fields["v1"]) and abs(time.time() - t) <= tolerance
