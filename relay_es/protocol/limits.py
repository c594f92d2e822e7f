"""What Relay accepts from an executor: the bounds, and one validator. Pure.

Everything an executor sends is hostile until it passes here. What passes is
recorded in the event store and from there reaches every read model, so the
rules are those of the strictest store: Postgres ``text`` and ``jsonb`` refuse
U+0000, and a btree index entry must stay well under ~2,700 bytes (the
executors and audit indexes hold ``(org, app, executor_id)``).

Bounds (bytes of UTF-8; ADR 15 has the reasoning):

========================= ====== ==========================================
``executor_id``           256    DBOS sends a UUID (36) or ``DBOS__VMID``
``application_version``   256    an MD5 (32), a checksum, or the user's string
``hostname``              253    a DNS name's limit
``language``              32     ``python``, ``typescript``, ``go``, ``java``
``dbos_version``          64     a version with pre-release and build parts
``executor_metadata``     16 KiB as compact JSON; an object or null, nested
                                 at most 32 deep, no U+0000 in any key or string
========================= ====== ==========================================

The five identifiers must not hold control characters (category Cc, which
includes U+0000), format characters (Cf: bidi overrides, zero-width marks),
line or paragraph separators (Zl, Zp) or surrogates (Cs). ``executor_id``
must not be empty; the others may be missing (older SDKs omit them).

Frame caps, per message, until an executor is registered: its first message
(the ``executor_info`` reply: a few hundred bytes, the cap leaves room for the
metadata and JSON escapes) at most :data:`MAX_HANDSHAKE_FRAME`; messages that
follow it before Relay has registered the executor (a client that does not
wait) at most :data:`MAX_PENDING_FRAME`. So an unregistered client cannot make
Relay buffer more than about a MiB. After registration the cap is
:data:`MAX_FRAME`: ``list_workflows`` and ``export_workflow`` replies carry
workflow inputs and outputs.

The other way, an executor takes at most :data:`SDK_MAX_MESSAGE` in one message
from Relay: the TypeScript SDK's WebSocket (ws 8, its default ``maxPayload`` of
100 MiB; past it the SDK closes its connection, 1009). The Python SDK's takes
any size (dbos 3.2.0 connects with websockets' ``max_size=None``). What Relay
sends that carries a client's text (an ``import_workflow`` request) is capped
below it, its frame included (``workflow_actions.IMPORT_BODY``).
"""

from __future__ import annotations

import unicodedata

import msgspec
from dataclasses import dataclass
from typing import Any

MAX_HANDSHAKE_FRAME = 64 * 1024
MAX_PENDING_FRAME = 1024 * 1024
MAX_FRAME = 128 * 1024 * 1024
SDK_MAX_MESSAGE = 100 * 1024 * 1024  # what every SDK takes in one message from Relay (the TypeScript SDK's)

IDENTIFIER_BYTES: dict[str, int] = {
    "executor_id": 256,
    "application_version": 256,
    "hostname": 253,
    "language": 32,
    "dbos_version": 64,
}
MAX_METADATA_BYTES = 16 * 1024
MAX_METADATA_DEPTH = 32
MAX_DETAIL = 300  # characters of executor-derived text in a violation's detail

_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


class OutOfBounds(ValueError):
    """An executor's value Relay will not record. ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _forbidden_char(s: str) -> str | None:
    if s.isprintable():  # fast path: False for every character of Cc, Cf, Cs, Zl and Zp
        return None
    for ch in s:
        if unicodedata.category(ch) in _FORBIDDEN_CATEGORIES:
            return ch
    return None


def check_identifier(field: str, value: Any, *, required: bool = False) -> None:
    """Raises :class:`OutOfBounds` unless ``value`` is an acceptable identifier
    (or None/missing, for one that is not ``required``)."""
    if value is None:
        if required:
            raise OutOfBounds(field, "missing")
        return
    if not isinstance(value, str):
        raise OutOfBounds(field, f"must be a string, got {type(value).__name__}")
    if required and not value:
        raise OutOfBounds(field, "empty")
    limit = IDENTIFIER_BYTES[field]
    # A str of n characters is at most 4n bytes of UTF-8: skip the encoding when it cannot be over.
    if len(value) * 4 > limit and len(value.encode("utf-8", "surrogatepass")) > limit:
        raise OutOfBounds(field, f"longer than {limit} bytes")
    ch = _forbidden_char(value)
    if ch is not None:
        raise OutOfBounds(field, f"holds the control or format character U+{ord(ch):04X}")


def check_metadata(value: Any) -> None:
    """``executor_metadata``: null, or a JSON object within the byte cap and
    depth, with no U+0000 (nor a surrogate) in any key or string."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise OutOfBounds("executor_metadata", f"must be an object or null, got {type(value).__name__}")
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise OutOfBounds("executor_metadata", f"nested deeper than {MAX_METADATA_DEPTH}")
        if isinstance(v, dict):
            size += 2 + max(0, len(v) - 1)  # braces, commas
            for k, x in v.items():
                size += _string_size(k) + 1  # the colon
                stack.append((x, depth + 1))
        elif isinstance(v, list):
            size += 2 + max(0, len(v) - 1)
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str):
            size += _string_size(v)
        elif isinstance(v, bool) or v is None:
            size += 5
        elif isinstance(v, (int, float)):
            size += len(repr(v))
        else:  # what JSON decoding cannot produce
            raise OutOfBounds("executor_metadata", f"holds a {type(v).__name__}")
        if size > MAX_METADATA_BYTES:
            raise OutOfBounds("executor_metadata", f"larger than {MAX_METADATA_BYTES} bytes as JSON")


def _string_size(s: str) -> int:
    """Its size as a JSON string, quotes and escapes included (a control character is six bytes:
    counted as one, 10,000 of them made 60 KB of metadata pass a 16 KiB cap)."""
    if "\x00" in s:
        raise OutOfBounds("executor_metadata", "holds U+0000 in a key or string (no store keeps it)")
    try:
        return len(msgspec.json.encode(s))
    except UnicodeEncodeError:
        raise OutOfBounds("executor_metadata", "holds a lone surrogate") from None


def check_executor_info(info: Any) -> None:
    """The one validator of an ``executor_info`` reply (a decoded
    :class:`~relay_es.protocol.messages.ExecutorInfoResponse`). Raises
    :class:`OutOfBounds` naming the first field Relay refuses."""
    check_identifier("executor_id", info.executor_id, required=True)
    check_identifier("application_version", info.application_version)
    check_identifier("hostname", info.hostname)
    check_identifier("language", info.language)
    check_identifier("dbos_version", info.dbos_version)
    check_metadata(info.executor_metadata)


def printable(text: Any, limit: int = MAX_DETAIL) -> str:
    """Executor-derived text fit for an audit detail or a log line: control and
    format characters escaped (so nothing reaches a store, a terminal or a log
    as-is), then cut to ``limit`` characters."""
    s = text if isinstance(text, str) else str(text)
    s = s[: limit * 2]  # escaping at most multiplies by 10; cut first so this stays cheap
    if _forbidden_char(s) is not None:
        s = "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _FORBIDDEN_CATEGORIES else c for c in s)
    return s if len(s) <= limit else s[:limit] + "..."


@dataclass(frozen=True)
class ResourceLimits:
    """What one key, one application and one address may hold at once
    (``relay serve`` flags and ``RELAY_*`` variables; ADR 15).

    * ``connections_per_key`` / ``connections_per_app``: open sockets,
      handshakes included; more are refused before the upgrade (HTTP 429).
    * ``executors_per_key`` / ``executors_per_app``: distinct executor ids
      that exist (HEALTHY, DISCONNECTED or DEAD, not yet deleted); a new id
      beyond it is closed with 4005 at registration and nothing is recorded.
    * ``handshakes_per_address``: sockets from one address that have not
      answered ``executor_info`` yet; more are refused with HTTP 429. Behind a
      reverse proxy that ``--forwarded-allow-ips`` trusts, an executor's address
      is the one the proxy forwards; behind any other, every executor has the
      proxy's address and shares this cap.
    * ``queued_transitions``: executor transitions waiting in the hub's outbox
      for the store (while it is away); above it new handshakes are refused
      with HTTP 503 instead of queueing more. Closes are still queued (a
      disconnect is never lost), so the queue may pass it by what is connected.
    """

    connections_per_key: int = 10_000
    connections_per_app: int = 10_000
    executors_per_key: int = 10_000
    executors_per_app: int = 10_000
    handshakes_per_address: int = 8_192
    queued_transitions: int = 100_000
