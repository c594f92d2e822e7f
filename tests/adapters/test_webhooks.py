"""Alert webhooks (:mod:`relay_es.adapters.webhooks`): the request each format builds, its
signature as a receiver checks it, and :func:`post` against a real HTTP server on 127.0.0.1
that records the raw requests it gets (statuses, a redirect, a refused connection, a server
that never answers, one that answers with a body too big to read)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from relay_es import __version__
from relay_es.adapters import webhooks
from relay_es.adapters.webhooks import Posted, payload, post, request_for, signature
from relay_es.domain.alerting import Webhook, check_url
from relay_es.domain.errors import InvalidSetting
from relay_es.engine.alerting import Delivery

SECRET = "s3cret-of-sixteen-chars-or-more"
FIRED_AT = datetime(2026, 11, 30, 12, 0, 5, 123457, tzinfo=timezone.utc)
HUGE = 50_000_000  # bytes of the body /huge announces (and would stream, slowly)


def delivery(**kw) -> Delivery:
    base = Delivery(org="acme", app="shop", rule_id="rule-1", alert_id="alert-1", channel="webhook:0", attempt=2,
                    rule_type="WorkflowFailure", receiving_app="ops", message="3 workflow(s) of shop failed",
                    metadata={"failedWorkflows": "3", "workflowIds": "a,b,c"}, fired_at=FIRED_AT)
    return replace(base, **kw)


def verify(secret: str, header: str, body: bytes, *, now: float | None = None, tolerance: float = 300) -> bool:
    """What a receiver does: recompute the HMAC over ``<t>.<raw body>`` and refuse a stale ``t``."""
    m = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header)
    if m is None:
        return False
    t = int(m.group(1))
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    fresh = abs((time.time() if now is None else now) - t) <= tolerance
    return hmac.compare_digest(expected, m.group(2)) and fresh


# ------------------------------------------------------------------ a real receiver


@dataclass(frozen=True)
class Recorded:
    """One request as the receiver got it: request line, headers (names lower-cased), raw body."""

    method: str
    path: str
    requestline: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """An HTTP server on 127.0.0.1 (an ephemeral port), serving from a thread, that records every
    request and answers by path:

    * ``/status/<code>``: that status, empty body;
    * ``/redirect``: 302 to ``/target`` (which answers 200);
    * ``/hang``: never answers (until the receiver closes);
    * ``/huge``: 200 announcing a :data:`HUGE` body, streamed slowly in small chunks.
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _record(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                r = Recorded(self.command, self.path, self.requestline,
                             {k.lower(): v for k, v in self.headers.items()}, body)
                with receiver._lock:
                    receiver.requests.append(r)

            def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                if status not in (204, 304):
                    self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                self._record()
                path = self.path
                if path.startswith("/status/"):
                    self._answer(int(path.rsplit("/", 1)[1]))
                elif path == "/redirect":
                    self._answer(302, {"Location": f"http://127.0.0.1:{receiver.port}/target"})
                elif path == "/target":
                    self._answer(200)
                elif path == "/hang":
                    receiver.closing.wait(10)
                elif path == "/huge":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(HUGE))
                    self.end_headers()
                    chunk = b"x" * 65536
                    sent = 0
                    try:
                        while sent < HUGE and not receiver.closing.is_set():
                            self.wfile.write(chunk)
                            self.wfile.flush()
                            sent += len(chunk)
                            time.sleep(0.01)  # 50 MB would take minutes: only a reader of the body would wait
                    except OSError:  # the client hung up without reading it: expected
                        pass
                else:
                    self._answer(404)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="webhook-receiver", daemon=True)

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(2)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path]


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # dozens of attempts connect at once: none waits for a SYN retry


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.close()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nothing listens on: bound (so no one else takes it) but not listening, so a
    connection to it is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


LOOPBACK = webhooks.Egress.parse("127.0.0.0/8")  # the receivers here are on loopback: allowed as an operator would


async def _post(d: Delivery, hook: Webhook, egress: webhooks.Egress = LOOPBACK) -> Posted:
    resolver = webhooks.Resolver(1)
    try:
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:  # as AlertSender makes it
            return await post(client, d, hook, egress, resolver=resolver)
    finally:
        resolver.close()


def post_now(d: Delivery, hook: Webhook, egress: webhooks.Egress = LOOPBACK) -> tuple[Posted, float]:
    """Runs one :func:`post` on a fresh loop: its answer, and how long it took."""
    t0 = time.monotonic()
    got = asyncio.run(_post(d, hook, egress))
    return got, time.monotonic() - t0


# ------------------------------------------------------------------ payload, signature, request_for


def test_payload_is_the_alert_with_its_fields_in_camel_case():
    assert payload(delivery()) == {
        "alertId": "alert-1", "ruleId": "rule-1", "ruleType": "WorkflowFailure", "org": "acme", "app": "shop",
        "receivingApp": "ops", "message": "3 workflow(s) of shop failed",
        "metadata": {"failedWorkflows": "3", "workflowIds": "a,b,c"},
        "firedAt": "2026-11-30T12:00:05.123Z", "attempt": 2,
    }


def test_fired_at_in_another_zone_is_given_in_utc():
    from datetime import timedelta

    paris = timezone(timedelta(hours=1))
    assert payload(delivery(fired_at=FIRED_AT.astimezone(paris)))["firedAt"] == "2026-11-30T12:00:05.123Z"


def test_signature_is_hmac_sha256_of_timestamp_dot_body():
    body = b'{"a":1}'
    sig = signature("k" * 16, 1_700_000_000, body)
    expected = hmac.new(b"k" * 16, b"1700000000." + body, hashlib.sha256).hexdigest()
    assert sig == f"t=1700000000,v1={expected}"
    assert verify("k" * 16, sig, body, now=1_700_000_000)


def test_a_receiver_refuses_a_tampered_body_a_wrong_secret_or_a_stale_timestamp():
    body = b'{"a":1}'
    sig = signature(SECRET, 1_700_000_000, body)
    assert verify(SECRET, sig, body, now=1_700_000_010)
    assert not verify(SECRET, sig, b'{"a":2}', now=1_700_000_010)
    assert not verify(SECRET + "x", sig, body, now=1_700_000_010)
    assert not verify(SECRET, sig, body, now=1_700_000_000 + 3600)


def test_json_request_is_the_compact_payload_with_alert_id_attempt_and_signature():
    d = delivery()
    body, headers = request_for(d, Webhook("https://hooks.example/x", "json", SECRET), now=1_700_000_000.9)
    assert body == json.dumps(payload(d), separators=(",", ":")).encode()
    assert json.loads(body) == payload(d)
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == f"relay/{__version__}"
    assert headers["X-Relay-Alert-Id"] == "alert-1"
    assert headers["X-Relay-Delivery-Attempt"] == "2"
    assert headers["X-Relay-Signature"] == signature(SECRET, 1_700_000_000, body)  # whole seconds
    assert verify(SECRET, headers["X-Relay-Signature"], body, now=1_700_000_000)


def test_the_signature_is_timestamped_now_by_default():
    body, headers = request_for(delivery(), Webhook("https://hooks.example/x", "json", SECRET))
    t = int(re.match(r"t=(\d+),", headers["X-Relay-Signature"]).group(1))
    assert abs(t - time.time()) < 5
    assert verify(SECRET, headers["X-Relay-Signature"], body)


def test_every_attempt_carries_the_same_alert_id_and_its_own_attempt_number():
    hook = Webhook("https://hooks.example/x")
    for attempt in (1, 2, 6):
        _, headers = request_for(delivery(attempt=attempt), hook)
        assert headers["X-Relay-Alert-Id"] == "alert-1"
        assert headers["X-Relay-Delivery-Attempt"] == str(attempt)


def test_no_signature_without_a_secret():
    body, headers = request_for(delivery(), Webhook("https://hooks.example/x", "json", None), now=1_700_000_000)
    assert "X-Relay-Signature" not in headers
    assert json.loads(body) == payload(delivery())


def test_non_ascii_text_is_escaped_in_the_body_and_round_trips():
    d = delivery(message="échec ✗ \u2028 \"quoted\"", metadata={"k": "ü"})
    body, _ = request_for(d, Webhook("https://hooks.example/x", "json", SECRET), now=1_700_000_000)
    body.decode("ascii")  # json.dumps escapes: nothing outside ASCII goes on the wire
    assert json.loads(body)["message"] == d.message
    assert json.loads(body)["metadata"] == {"k": "ü"}


def test_slack_body_is_text_with_slacks_three_characters_escaped():
    d = delivery(message="a < b && c > d", app="sh<op>", org="a&b")
    body, headers = request_for(d, Webhook("https://hooks.slack.com/services/T/B/X", "slack"))
    assert json.loads(body) == {"text": "*WorkflowFailure* on `a&amp;b/sh&lt;op&gt;`: a &lt; b &amp;&amp; c &gt; d"}
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Relay-Alert-Id"] == "alert-1"
    assert headers["X-Relay-Delivery-Attempt"] == "2"
    assert "X-Relay-Signature" not in headers


def test_slack_escapes_an_ampersand_once():
    """``&`` first: ``<`` becomes ``&lt;``, not ``&amp;lt;``."""
    body, _ = request_for(delivery(message="<&>"), Webhook("https://hooks.slack.com/x", "slack"))
    assert json.loads(body)["text"].endswith(": &lt;&amp;&gt;")


def test_slack_is_never_signed_even_with_a_secret():
    _, headers = request_for(delivery(), Webhook("https://hooks.slack.com/x", "slack", SECRET))
    assert "X-Relay-Signature" not in headers


# ------------------------------------------------------------------ post, against a real server


@pytest.mark.parametrize("status", [200, 201, 202, 204])
def test_2xx_is_delivered(receiver, status):
    d = delivery()
    got, took = post_now(d, Webhook(receiver.url(f"/status/{status}"), "json", SECRET))
    assert got == Posted(True, False, f"HTTP {status}")
    assert took < 2
    [r] = receiver.requests
    assert r.method == "POST" and r.path == f"/status/{status}"
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-relay-alert-id"] == "alert-1"
    assert r.headers["x-relay-delivery-attempt"] == "2"
    assert r.headers["user-agent"] == f"relay/{__version__}"
    assert json.loads(r.body) == payload(d)
    assert verify(SECRET, r.headers["x-relay-signature"], r.body)  # over the raw body as received
    assert not verify("another-secret-entirely", r.headers["x-relay-signature"], r.body)


def test_the_request_is_unsigned_without_a_secret(receiver):
    got, _ = post_now(delivery(), Webhook(receiver.url("/status/200")))
    assert got.ok
    [r] = receiver.requests
    assert "x-relay-signature" not in r.headers


def test_slack_webhook_gets_the_slack_body(receiver):
    got, _ = post_now(delivery(message="x < y"), Webhook(receiver.url("/status/200"), "slack"))
    assert got.ok
    [r] = receiver.requests
    assert json.loads(r.body) == {"text": "*WorkflowFailure* on `acme/shop`: x &lt; y"}


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 429])
def test_5xx_408_and_429_are_worth_retrying(receiver, status):
    got, took = post_now(delivery(), Webhook(receiver.url(f"/status/{status}"), "json", SECRET))
    assert got == Posted(False, True, f"HTTP {status}")
    assert took < 2
    assert len(receiver.requests) == 1  # one attempt: the retry is the manager's, not post's


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 413, 422])
def test_other_statuses_are_final(receiver, status):
    got, _ = post_now(delivery(), Webhook(receiver.url(f"/status/{status}"), "json", SECRET))
    assert got == Posted(False, False, f"HTTP {status}")
    assert len(receiver.requests) == 1


def test_a_redirect_is_not_followed_and_is_a_final_failure(receiver):
    got, _ = post_now(delivery(), Webhook(receiver.url("/redirect"), "json", SECRET))
    assert got == Posted(False, False, "HTTP 302")
    assert [r.path for r in receiver.requests] == ["/redirect"]
    assert receiver.to("/target") == []


def test_a_refused_connection_is_worth_retrying(closed_port):
    got, took = post_now(delivery(), Webhook(f"http://127.0.0.1:{closed_port}/hook", "json", SECRET))
    assert got == Posted(False, True, "connection failed")  # coarse: the lifecycle feed is no port scanner
    assert took < 2


def test_a_server_that_never_answers_times_out_and_is_worth_retrying(receiver, monkeypatch):
    monkeypatch.setattr(webhooks, "TIMEOUT", 0.3)
    got, took = post_now(delivery(), Webhook(receiver.url("/hang"), "json", SECRET))
    assert got == Posted(False, True, "no answer within 0.3s")
    assert 0.25 <= took < 1.5
    [r] = receiver.requests  # the request went out whole: only the answer never came
    assert verify(SECRET, r.headers["x-relay-signature"], r.body)


def test_a_listener_that_never_accepts_times_out(monkeypatch):
    """A socket that listens but is never served: the TCP handshake completes (the kernel's
    backlog), nothing ever answers."""
    monkeypatch.setattr(webhooks, "TIMEOUT", 0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        got, took = post_now(delivery(), Webhook(f"http://127.0.0.1:{s.getsockname()[1]}/hook"))
    assert got == Posted(False, True, "no answer within 0.3s")
    assert took < 1.5


def test_a_huge_answer_is_not_read(receiver):
    """200 with a 50 MB body streamed slowly: the status is enough, post returns at once
    (within the default timeout, which stays at 10 s here)."""
    got, took = post_now(delivery(), Webhook(receiver.url("/huge"), "json", SECRET))
    assert got == Posted(True, False, "HTTP 200")
    assert took < 1.5
    assert [r.path for r in receiver.requests] == ["/huge"]


def test_a_receiver_trickling_its_answer_is_cut_off_at_the_timeout(monkeypatch):
    """AlertSender promises an answer "within a bounded time". A receiver that sends its status
    line and headers one byte at a time, each within the timeout, must not hold the attempt (and
    with it the alert's channel, in flight) past :data:`TIMEOUT`."""
    monkeypatch.setattr(webhooks, "TIMEOUT", 0.3)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(2)
    answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10 + b"\r\nContent-Length: 0\r\n\r\n"

    def trickle() -> None:  # ~1.2 s in all, a byte every 0.1 s (hangs up after 12 bytes)
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            for b in answer[:12]:
                try:
                    conn.send(bytes([b]))
                except OSError:
                    return
                time.sleep(0.1)

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        got, took = post_now(delivery(), Webhook(f"http://127.0.0.1:{srv.getsockname()[1]}/hook"))
    finally:
        t.join(3)
        srv.close()
    assert not got.ok and got.retry
    assert took < 0.8


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/x", "http://localhost:9/x", "http://[::1]:9/x",
                                 "http://169.254.169.254/latest/meta-data", "http://10.1.2.3/x", "http://192.168.0.1/x",
                                 "http://0.0.0.0:9/x", "http://[::7f00:1]:9/x", "http://[::ffff:0:7f00:1]:9/x"])
def test_an_address_that_is_not_public_is_refused_unless_allowed(url: str) -> None:
    """Whoever may make rules cannot point Relay at what only Relay can reach (the metadata
    address, loopback, private networks): refused for good, nothing sent, unless the operator allows
    the network."""
    got, took = post_now(delivery(), Webhook(url), webhooks.Egress())
    assert got.ok is False and got.retry is False and "RELAY_ALERT_WEBHOOK_ALLOW" in got.detail
    assert took < 2


def test_an_allowed_network_is_reached_with_the_urls_host_header(receiver) -> None:
    port = receiver.url("/").split(":")[2].split("/")[0]
    got, _ = post_now(delivery(), Webhook(f"http://localhost:{port}/status/200"), webhooks.Egress.parse("127.0.0.1/32"))
    assert got == Posted(True, False, "HTTP 200")
    [r] = receiver.requests
    assert r.headers["host"] == f"localhost:{port}"  # sent to the address checked, named as the URL names it


def test_egress_parses_networks_and_addresses() -> None:
    e = webhooks.Egress.parse(" 10.0.0.0/8, 192.168.1.5 ,fd00::/8,")
    assert e.permits("10.9.9.9") and e.permits("192.168.1.5") and e.permits("fd00::1")
    assert not e.permits("192.168.1.6") and not e.permits("127.0.0.1")
    assert webhooks.Egress().permits("8.8.8.8") and not webhooks.Egress().permits("100.64.0.1")  # CGNAT: not global
    with pytest.raises(ValueError):
        webhooks.Egress.parse("nonsense")


def test_egress_refuses_a_private_ipv4_address_carried_in_an_ipv6_one() -> None:
    """Mapped, 6to4 and NAT64 addresses reach their IPv4 address through a gateway: where NAT64 runs,
    64:ff9b::a9fe:a9fe is the cloud's metadata address (a helper's review, 2026-12-06)."""
    e = webhooks.Egress()
    for private in ("64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "2002:a9fe:a9fe::1", "2002:7f00:1::1",
                    "::ffff:10.0.0.1", "64:ff9b:1::808:808"):
        assert not e.permits(private), private
    for public in ("64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111"):
        assert e.permits(public), public
    assert webhooks.Egress.parse("64:ff9b::/96").permits("64:ff9b::a00:1")  # an operator may allow it


def test_egress_judges_an_ipv6_address_carrying_an_ipv4_one_by_the_ipv4_addresss_rule() -> None:
    """::7f00:1 (IPv4-compatible, deprecated: ::/96) and ::ffff:0:7f00:1 (IPv4-translated) went through as
    public addresses (a helper's hunt); a host may still take them for 127.0.0.1. Compatible ones are
    refused whatever is allowed; mapped, translated, 6to4 and NAT64 ones follow their IPv4 address's rule,
    the operator's allowance included."""
    e = webhooks.Egress()
    for refused in ("::7f00:1", "::a9fe:a9fe", "::808:808", "::2", "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "::", "::1"):
        assert not e.permits(refused), refused
    assert e.permits("::ffff:0:808:808") and e.permits("::ffff:8.8.8.8")
    lo = webhooks.Egress.parse("127.0.0.1/32")
    for same in ("127.0.0.1", "::ffff:127.0.0.1", "::ffff:0:7f00:1", "2002:7f00:1::1", "64:ff9b::7f00:1"):
        assert lo.permits(same), same
    for other in ("::7f00:1", "::ffff:127.0.0.2", "2002:7f00:2::1", "::1"):
        assert not lo.permits(other), other


def test_a_unicode_host_is_resolved_and_named_as_the_request_names_it() -> None:
    """DNS, TLS and the Host header all name the host's IDNA 2008 form: Python's own codec (IDNA 2003)
    would have resolved faß.de as fass.de, another domain, and sent it the body and signature."""
    resolved: list[str] = []
    seen: list[httpx.Request] = []

    def resolve(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["93.184.215.14"]

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async def main() -> Posted:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await post(client, delivery(), Webhook("https://faß.de/hook", "json", SECRET),
                              resolver=webhooks.Resolver(1, resolve))

    got = asyncio.run(main())
    assert got.ok and resolved == ["xn--fa-hia.de"]
    (request,) = seen
    assert request.headers["Host"] == "xn--fa-hia.de" and request.extensions["sni_hostname"] == "xn--fa-hia.de"
    assert request.url.host == "93.184.215.14"


def test_a_url_this_client_cannot_send_to_is_a_final_failure_not_a_retried_one() -> None:
    """A host httpx refuses (a soft hyphen in it; the rule's check refuses it too now, but a rule made
    before may hold it): not tried ten times over half an hour with a traceback each time."""
    got, _ = post_now(delivery(), Webhook("http://a\u00adb.com/hook"))
    assert not got.ok and not got.retry and "not sent" in got.detail


@pytest.mark.parametrize("url", ["http://a..example.com/hook", "http://" + "a" * 64 + ".com/hook", "http://.../hook"])
def test_a_name_no_resolver_takes_is_a_final_failure_not_a_traceback(url: str) -> None:
    """An empty label or one over 63 bytes: Python's resolver refuses the name (UnicodeError, before
    any DNS query), which escaped post: a traceback logged at each of ten attempts (a helper's
    unicode_hook.py). The rule's check refuses such a URL now; a rule made before may hold one."""
    with pytest.raises(InvalidSetting):
        check_url("webhooks[0].url", url)
    got, _ = post_now(delivery(), Webhook(url))
    assert got == Posted(False, False, "not sent: the webhook's URL is not one this client can send to")


def test_an_attempt_whose_lookup_hangs_answers_once_the_lookup_has_returned(monkeypatch) -> None:
    """A lookup runs on in its thread after its attempt's time is up (nothing stops it): the attempt
    answers, freeing its slot, only once the thread has, so that hung lookups never hold more threads
    than there are slots."""
    monkeypatch.setattr(webhooks, "TIMEOUT", 0)  # the attempt's time is up at its first wait
    started, release = threading.Event(), threading.Event()

    def hang(host: str, port: int) -> list[str]:
        started.set()
        release.wait()
        return ["93.184.215.14"]

    async def main() -> Posted:
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204))) as client:
            attempt = asyncio.create_task(post(client, delivery(), Webhook("https://hung.example/x"),
                                               resolver=webhooks.Resolver(1, hang)))
            try:
                assert await asyncio.to_thread(started.wait, 5)
                for _ in range(50):  # the time-out (at once: call_soon) fires and is handled within a few turns
                    await asyncio.sleep(0)
                assert not attempt.done()
            finally:
                release.set()
            return await attempt

    assert asyncio.run(main()) == Posted(False, True, "no answer within 0s")


def test_a_lookup_that_fails_at_once_is_worth_retrying() -> None:
    def fail(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    async def main() -> Posted:
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204))) as client:
            return await post(client, delivery(), Webhook("https://gone.example/x"),
                              resolver=webhooks.Resolver(1, fail))

    assert asyncio.run(main()) == Posted(False, True, "could not resolve the webhook's host")


def test_egress_refuses_multicast_site_local_and_documentation_addresses() -> None:
    """Python 3.11's is_global takes them for public (a helper's egress_table.py)."""
    e = webhooks.Egress()
    for refused in ("224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1", "fec0::1", "3fff::1", "5f00::1",
                    "::ffff:224.0.0.1", "2002:e000:1::1", "64:ff9b::e000:1"):
        assert not e.permits(refused), refused
    assert webhooks.Egress.parse("ff0e::/16").permits("ff0e::1")  # an operator may allow it
