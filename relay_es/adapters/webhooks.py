"""Alert webhooks: the request each format sends, its signature, and one POST.

``json``: the alert as a JSON object (:func:`payload`), ``Content-Type: application/json``, with
``X-Relay-Alert-Id`` (the same on every attempt: a receiver drops repeats by it),
``X-Relay-Delivery-Attempt`` and, when the webhook has a secret, ``X-Relay-Signature:
t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`` (:func:`signature`; a receiver
recomputes it over the raw body and refuses a stale ``t``). ``slack``: Slack's incoming-webhook
body, ``{"text": ...}``, with Slack's three characters escaped.

:func:`post` sends one attempt and says how it went: 2xx is delivered; 408, 429, 5xx and a
network failure or timeout (:data:`TIMEOUT` for the whole attempt, however slowly the receiver
answers) are worth retrying; any other status is final. Redirects are not followed and the
receiver's body is never read. The host is looked up in a :class:`Resolver`'s threads; an attempt
whose lookup outlives it returns only once the lookup has (its thread is not free before).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from relay_es import __version__
from relay_es.adapters.deadline import LookUp, look_up
from relay_es.domain.alerting import Webhook
from relay_es.domain.units import rfc3339
from relay_es.engine.alerting import Delivery

TIMEOUT = 10.0  # seconds, one attempt
UNSENDABLE = "not sent: the webhook's URL is not one this client can send to"


@dataclass(frozen=True)
class Posted:
    ok: bool
    retry: bool
    detail: str


def payload(d: Delivery) -> dict[str, Any]:
    return {"alertId": d.alert_id, "ruleId": d.rule_id, "ruleType": d.rule_type, "org": d.org, "app": d.app,
            "receivingApp": d.receiving_app, "message": d.message, "metadata": d.metadata,
            "firedAt": rfc3339(d.fired_at), "attempt": d.attempt}


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def request_for(d: Delivery, hook: Webhook, *, now: float | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt of ``d`` to ``hook``."""
    headers = {"Content-Type": "application/json", "User-Agent": f"relay/{__version__}",
               "X-Relay-Alert-Id": d.alert_id, "X-Relay-Delivery-Attempt": str(d.attempt)}
    if hook.format == "slack":
        text = f"*{d.rule_type}* on `{d.org}/{d.app}`: {d.message}"
        return json.dumps({"text": _slack_escape(text)}).encode(), headers
    body = json.dumps(payload(d), separators=(",", ":")).encode()
    if hook.secret is not None:
        headers["X-Relay-Signature"] = signature(hook.secret, int(time.time() if now is None else now), body)
    return body, headers


@dataclass(frozen=True)
class Egress:
    """Where webhooks may go: addresses on the public internet, and the networks an operator
    allows besides (``RELAY_ALERT_WEBHOOK_ALLOW``: e.g. an internal receiver). Anything else
    (loopback, private, link-local such as a cloud's metadata address) is refused, so whoever may
    make rules cannot point Relay at what only Relay can reach."""

    allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Egress:
        """``text``: networks or addresses, comma-separated (:class:`ValueError` for a bad one)."""
        return cls(tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip()))

    def permits(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in net for net in self.allowed):
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            if ip in _NAT64_LOCAL:  # RFC 8215: where the IPv4 address sits depends on the local prefix
                return False
            if ip in _COMPATIBLE and int(ip) > 1:  # deprecated (RFC 4291); a host may still take it for IPv4
                return False
            # An IPv6 address that carries an IPv4 one (mapped, translated, 6to4, NAT64) reaches that IPv4
            # address (through a gateway): the IPv4 address's rule is its rule (64:ff9b::a9fe:a9fe is a
            # cloud's metadata address via NAT64; ::ffff:10.1.2.3 is 10.1.2.3, refused unless allowed).
            inner = ip.ipv4_mapped or ip.sixtofour or (
                ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 or ip in _TRANSLATED else None)
            if inner is not None:
                return self.permits(str(inner))
        # Python 3.11's is_global takes these for public: multicast, IPv6 site-local (deprecated, RFC 3879),
        # IPv6 documentation (RFC 9637) and SRv6 SIDs (RFC 9602).
        return ip.is_global and not any(ip in net for net in _NOT_PUBLIC)


_NOT_PUBLIC = tuple(ipaddress.ip_network(n) for n in ("224.0.0.0/4", "ff00::/8", "fec0::/10", "3fff::/20", "5f00::/16"))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 address in the last 32 bits
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765's IPv4-translated addresses (SIIT)
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # IPv4-compatible addresses; :: and ::1 are in it too


class Resolver:
    """Webhook hosts looked up in threads of Relay's own, at most ``workers`` at once. Not the event
    loop's: uvloop's are libuv's pool of 4, shared with everything else, and a lookup runs on in its
    thread however soon its attempt stops waiting (a zone whose servers never answer): 4 of them and
    every other lookup queued behind them. With as many workers as posts run at once, each post
    keeping its slot until its lookup has returned, no lookup waits for a thread: a hung lookup holds
    its attempt's slot as a hung receiver does, but for as long as the resolver takes to give up (its
    own timeouts, times its attempts and search domains), not 10 s. ``look_up``: blocking, in a
    worker (tests replace it)."""

    def __init__(self, workers: int, look_up: LookUp = look_up) -> None:
        self.look_up = look_up
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="relay-webhook-dns")

    def start(self, host: str, port: int) -> asyncio.Future[list[str]]:
        """``host``'s addresses, to come (an address is its own, at once)."""
        loop = asyncio.get_running_loop()
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            return loop.run_in_executor(self._pool, self.look_up, host, port)
        found: asyncio.Future[list[str]] = loop.create_future()
        found.set_result([address])
        return found

    def close(self) -> None:
        """No lookup starts any more; those under way end when their resolver answers."""
        self._pool.shutdown(wait=False, cancel_futures=True)


async def post(client: httpx.AsyncClient, d: Delivery, hook: Webhook, egress: Egress = Egress(), *,
               resolver: Resolver) -> Posted:
    """One attempt. The host is resolved here and the request sent to an address :class:`Egress`
    permits (the ``Host`` header and TLS name stay the URL's), so a name that resolves elsewhere
    between a check and the connection cannot slip through. What it says of a failure is coarse
    (``HTTP 503``, ``no answer``, ``connection failed``): the lifecycle feed is no port scanner.
    Returns once the host's lookup has, even past :data:`TIMEOUT` (the attempt's outcome is
    decided by then)."""
    body, headers = request_for(d, hook)
    try:
        url = httpx.URL(hook.url)
        # The host as the request names it (IDNA 2008, as httpx writes the Host header), also for DNS and
        # TLS: Python's own codec (IDNA 2003) maps some names elsewhere (faß.de to fass.de).
        host = url.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError):  # a URL the rule's check let through and httpx cannot send
        return Posted(False, False, UNSENDABLE)
    port = url.port or (443 if url.scheme == "https" else 80)
    lookup = resolver.start(host, port)
    posted = await _attempt(client, url, host, lookup, body, headers, egress)
    if not lookup.done():  # the attempt's time ran out first: its slot is kept until the lookup's thread is free
        await asyncio.wait([lookup])
        if not lookup.cancelled():
            lookup.exception()  # taken (the outcome was decided without it), so asyncio does not log it as lost
    return posted


async def _attempt(client: httpx.AsyncClient, url: httpx.URL, host: str, lookup: asyncio.Future[list[str]],
                   body: bytes, headers: dict[str, str], egress: Egress) -> Posted:
    try:
        async with asyncio.timeout(TIMEOUT):  # the whole attempt: httpx's own timeout is per read
            try:
                addresses = await asyncio.shield(lookup)  # on time out, the lookup runs on: post awaits it
            except OSError:
                return Posted(False, True, "could not resolve the webhook's host")
            except ValueError:  # UnicodeError: a name no resolver takes (an empty label, one over 63 bytes)
                return Posted(False, False, UNSENDABLE)
            permitted = [a for a in addresses if egress.permits(a)]
            if not permitted:
                return Posted(False, False, "not sent: the webhook's address is not public and not in "
                                            "RELAY_ALERT_WEBHOOK_ALLOW")
            headers["Host"] = url.netloc.decode("ascii")
            target = url.copy_with(host=permitted[0])
            extensions = {"sni_hostname": host} if url.scheme == "https" else {}
            async with client.stream("POST", target, content=body, headers=headers, timeout=TIMEOUT,
                                     follow_redirects=False, extensions=extensions) as r:
                status = r.status_code
    except (TimeoutError, httpx.TimeoutException):
        return Posted(False, True, f"no answer within {TIMEOUT:g}s")
    except httpx.HTTPError:
        return Posted(False, True, "connection failed")
    if 200 <= status < 300:
        return Posted(True, False, f"HTTP {status}")
    return Posted(False, status in (408, 429) or status >= 500, f"HTTP {status}")
