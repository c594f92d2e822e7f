"""Alerting rules (Conductor's ``AlertingRule``), as Relay holds them.

A rule watches one application (``app``) for one condition (``rule_type``) and, when it holds,
fires at most once per ``min_interval_secs``; the alert goes to the executors of the
*receiving* application (the ``alert`` message: the SDK calls the application's alert handler;
not once that application is deleted, nor to one registered again under its name) and to the
rule's webhooks. Conductor's three types, and Relay's own for what only a control
plane sees:

=========================== ====================================================================
``WorkflowFailure``         at least ``threshold`` workflows (of ``workflowName``, or any) ended in
                            ``ERROR`` in the last ``windowSecs`` (asked of an executor every check)
``SlowQueue``               a workflow has been ``ENQUEUED`` (on ``queueName``, or any queue) for more
                            than ``thresholdSecs`` (asked of an executor every check)
``UnresponsiveApplication`` the application has had no HEALTHY executor for ``thresholdSecs``
``ExecutorDead``            an executor was declared dead
``RecoveryDeferred``        a dead executor's recovery waits: no HEALTHY executor of its version is
                            left that has not failed it (the specification's operator alert)
``RecoveryFailed``          a recovery attempt failed, the ``attempts``-th for that executor or a later
                            one (each fires again, at most once per ``min_interval_secs``), or one that
                            leaves no HEALTHY candidate untried
``ExecutorFlapping``        one executor disconnected ``disconnects`` times within ``windowSecs`` (as its
                            stream has them, also before a restart of Relay)
=========================== ====================================================================

``ruleMetadata`` holds the type's parameters (camelCase, each with a default; an unknown key is
refused, so a typo is never a rule that silently watches something else) and, for any type,
``webhooks``: up to :data:`MAX_WEBHOOKS` of ``{"url", "format": "json" | "slack", "secret"}``.
A ``json`` webhook with a secret is signed (``docs/alerting.md``); a secret is never answered
back (``"signed": true`` instead). A rule's webhooks are kept sealed (:class:`SealedWebhook`): the
URL and the secret under a key of the rule's own, which deleting the rule erases
(:mod:`relay_es.domain.sealing`, ADR 28; rules made before 2026-12-05 keep theirs in the clear).
:meth:`AlertingRule.check` is the one check of a new rule: the command calls it, never the replay
of a stored one (a rule tightened later cannot make an application's stream unreadable).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import idna

from relay_es.domain.errors import InvalidSetting
from relay_es.domain.sealing import seal, unseal
from relay_es.domain.text import has_controls

CONDUCTOR_TYPES = ("WorkflowFailure", "SlowQueue", "UnresponsiveApplication")
RELAY_TYPES = ("ExecutorDead", "RecoveryDeferred", "RecoveryFailed", "ExecutorFlapping")
RULE_TYPES = CONDUCTOR_TYPES + RELAY_TYPES
POLLED = ("WorkflowFailure", "SlowQueue")  # asked of an executor at every check
EVENT_TYPES = RELAY_TYPES  # fired by an executor event

MAX_RULES = 50  # per application
MAX_WEBHOOKS = 5  # per rule
MAX_URL = 2048
MAX_NAME_BYTES = 256  # workflow and queue names
SECRET_LENGTH = (16, 256)
DEFAULT_MIN_INTERVAL = 300
MAX_SECS = 30 * 86_400  # any duration a rule names, and its minIntervalSecs
FORMATS = ("json", "slack")

# type -> parameter -> (default, low, high); None: a name (optional string)
_PARAMETERS: dict[str, dict[str, tuple[Any, int, int] | None]] = {
    "WorkflowFailure": {"workflowName": None, "threshold": (1, 1, 1000), "windowSecs": (300, 1, MAX_SECS)},
    "SlowQueue": {"queueName": None, "thresholdSecs": (300, 1, MAX_SECS)},
    "UnresponsiveApplication": {"thresholdSecs": (60, 1, MAX_SECS)},
    "ExecutorDead": {},
    "RecoveryDeferred": {},
    "RecoveryFailed": {"attempts": (3, 1, 1000)},
    "ExecutorFlapping": {"disconnects": (5, 2, 1000), "windowSecs": (300, 1, MAX_SECS)},
}


@dataclass(frozen=True)
class Webhook:
    url: str = field(repr=False)  # a Slack webhook's URL is its credential: never in a repr
    format: str = "json"
    secret: str | None = field(default=None, repr=False)

    def public(self) -> dict[str, Any]:
        """As answered: the URL without its path and query (a Slack webhook's URL is its
        credential), the secret only as whether there is one."""
        parts = urlsplit(self.url)
        shown = f"{parts.scheme}://{parts.netloc}" + ("/…" if parts.path.strip("/") or parts.query else "")
        return {"url": shown, "format": self.format, "signed": self.secret is not None}

    def sealed_with(self, key: bytes, rule_id: str, index: int) -> SealedWebhook:
        """This webhook as a rule keeps it: URL and secret sealed under ``key``, for the ``index``-th
        webhook of rule ``rule_id`` alone."""
        shown = self.public()
        plain = json.dumps({"url": self.url, "secret": self.secret}).encode()
        return SealedWebhook(shown["url"], self.format, shown["signed"],
                             seal(key, plain, _place(rule_id, index, self.format)))


@dataclass(frozen=True)
class SealedWebhook:
    """A webhook as the rule's event and the aggregate hold it: what may be answered of it in the
    clear, the URL and the secret sealed (:meth:`Webhook.sealed_with`)."""

    shown: str  # the URL as answered: scheme and host, no path or query
    format: str
    signed: bool
    sealed: str = field(repr=False)

    def public(self) -> dict[str, Any]:
        return {"url": self.shown, "format": self.format, "signed": self.signed}

    def opened(self, key: bytes, rule_id: str, index: int) -> Webhook:
        """The webhook, with the rule's key; :class:`~relay_es.domain.sealing.Unsealable` when it does
        not open (another key, or moved from its rule or place)."""
        d = json.loads(unseal(key, self.sealed, _place(rule_id, index, self.format)))
        return Webhook(d["url"], self.format, d["secret"])


def _place(rule_id: str, index: int, format: str) -> bytes:
    """What a sealed webhook is bound to (its additional authenticated data)."""
    return f"relay alerting rule {rule_id} webhook {index} {format}".encode()


def key_scope(rule_id: str) -> str:
    """The scope of a rule's key in the key store."""
    return f"alerting-rule:{rule_id}"


@dataclass(frozen=True)
class AlertingRule:
    id: str
    org: str
    app: str
    receiving_app: str
    rule_type: str
    parameters: dict[str, Any] = field(default_factory=dict)  # the type's, defaults filled in
    webhooks: tuple[Webhook | SealedWebhook, ...] = ()
    min_interval_secs: int = DEFAULT_MIN_INTERVAL

    def public_metadata(self) -> dict[str, Any]:
        """``ruleMetadata`` as answered: the parameters, and the webhooks without their secrets."""
        out = {k: v for k, v in self.parameters.items() if v is not None}
        if self.webhooks:
            out["webhooks"] = [w.public() for w in self.webhooks]
        return out

    def check(self) -> AlertingRule:
        if self.rule_type not in RULE_TYPES:
            raise InvalidSetting("ruleType", f"must be one of {', '.join(RULE_TYPES)}")
        if (isinstance(self.min_interval_secs, bool) or not isinstance(self.min_interval_secs, int)
                or not 0 <= self.min_interval_secs <= MAX_SECS):
            raise InvalidSetting("minIntervalSecs", f"must be a whole number of seconds from 0 to {MAX_SECS}")
        if self.rule_type == "UnresponsiveApplication" and self.receiving_app == self.app:
            raise InvalidSetting("receivingAppName", "an unresponsive application cannot receive its own alert: "
                                                     "name another application")
        return self

    def sealed(self, key: bytes) -> AlertingRule:
        """This rule with every webhook sealed under ``key``, the rule's own."""
        return replace(self, webhooks=tuple(w.sealed_with(key, self.id, i) if isinstance(w, Webhook) else w
                                            for i, w in enumerate(self.webhooks)))

    def as_dict(self) -> dict[str, Any]:
        """Primitives, as the aggregate keeps it (snapshots hold only what the transcoder knows)."""
        return {"id": self.id, "org": self.org, "app": self.app, "receiving_app": self.receiving_app,
                "rule_type": self.rule_type, "parameters": dict(self.parameters),
                "webhooks": [_webhook_dict(w) for w in self.webhooks],
                "min_interval_secs": self.min_interval_secs}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlertingRule:
        return cls(id=d["id"], org=d["org"], app=d["app"], receiving_app=d["receiving_app"],
                   rule_type=d["rule_type"], parameters=dict(d["parameters"]),
                   webhooks=tuple(_webhook_of(w) for w in d["webhooks"]),
                   min_interval_secs=d["min_interval_secs"])


def _webhook_dict(w: Webhook | SealedWebhook) -> dict[str, Any]:
    if isinstance(w, SealedWebhook):
        return {"shown": w.shown, "format": w.format, "signed": w.signed, "sealed": w.sealed}
    return {"url": w.url, "format": w.format, "secret": w.secret}


def _webhook_of(d: dict[str, Any]) -> Webhook | SealedWebhook:
    if "sealed" in d:
        return SealedWebhook(d["shown"], d["format"], d["signed"], d["sealed"])
    return Webhook(d["url"], d["format"], d["secret"])  # a rule made before webhooks were sealed


def parse_metadata(rule_type: str, metadata: Any) -> tuple[dict[str, Any], tuple[Webhook, ...]]:
    """``ruleMetadata`` of a new rule of ``rule_type``: its parameters (defaults filled in) and
    webhooks, or :class:`InvalidSetting` naming what is wrong."""
    if rule_type not in _PARAMETERS:
        raise InvalidSetting("ruleType", f"must be one of {', '.join(RULE_TYPES)}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise InvalidSetting("ruleMetadata", "must be an object")
    known = _PARAMETERS[rule_type]
    unknown = sorted(str(k)[:64] for k in metadata if k not in known and k != "webhooks")
    if unknown:
        allowed = ", ".join([*known, "webhooks"])
        raise InvalidSetting("ruleMetadata", f"unknown key(s) {', '.join(map(repr, unknown))} for {rule_type} "
                                             f"(allowed: {allowed})")
    params: dict[str, Any] = {}
    for key, spec in known.items():
        value = metadata.get(key)
        if spec is None:
            params[key] = None if value is None else _name(f"ruleMetadata.{key}", value)
            continue
        default, low, high = spec
        if value is None:
            params[key] = default
        elif isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and (not math.isfinite(value) or not value.is_integer())) \
                or not low <= value <= high:
            raise InvalidSetting(f"ruleMetadata.{key}", f"must be a whole number from {low} to {high}")
        else:
            params[key] = int(value)
    return params, _webhooks(metadata.get("webhooks"))


def _name(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES \
            or has_controls(value):
        raise InvalidSetting(where, f"must be a name: 1 to {MAX_NAME_BYTES} bytes, no control characters")
    return value


def _webhooks(value: Any) -> tuple[Webhook, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_WEBHOOKS:
        raise InvalidSetting("ruleMetadata.webhooks", f"must be a list of at most {MAX_WEBHOOKS} webhooks")
    out = []
    for i, w in enumerate(value):
        where = f"ruleMetadata.webhooks[{i}]"
        if not isinstance(w, dict) or set(w) - {"url", "format", "secret"}:
            raise InvalidSetting(where, 'must be an object of "url", "format" ("json" or "slack") and "secret"')
        hook = Webhook(check_url(f"{where}.url", w.get("url")), _format(where, w.get("format")),
                       _secret(where, w.get("secret")))
        if hook.format == "slack" and hook.secret is not None:
            raise InvalidSetting(f"{where}.secret", "a Slack incoming webhook is not signed: its URL is its secret")
        out.append(hook)
    return tuple(out)


def check_url(where: str, url: Any) -> str:
    """An absolute ``http``/``https`` URL with a host, at most :data:`MAX_URL` characters, no
    control characters, no credentials in it; a named host is one DNS can look up (:func:`_dns_name`)."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL or has_controls(url) or " " in url:
        raise InvalidSetting(where, f"must be an http(s) URL of at most {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # a bad port raises ValueError
    except ValueError:
        raise InvalidSetting(where, "must be an http(s) URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidSetting(where, "must be an absolute http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidSetting(where, "must not carry credentials (use the webhook's secret)")
    if "[" not in parts.netloc and not _dns_name(parts.hostname):  # an IPv6 address is in brackets
        raise InvalidSetting(where, "must name a host DNS can look up: labels of 1 to 63 bytes, 253 bytes in "
                                    "all, letters outside ASCII as IDNA 2008 allows them")
    return url


def _dns_name(host: str) -> bool:
    """Whether ``host``, as the request names it (letters outside ASCII in IDNA 2008, as httpx writes
    them), is a name a resolver takes: no empty label (but a final dot), none over 63 bytes, at most
    253 bytes. Else every attempt would fail before a lookup (Python's resolver refuses it)."""
    try:
        name = host.encode("ascii") if host.isascii() else idna.encode(host)
    except (idna.IDNAError, UnicodeError):
        return False
    name = name.removesuffix(b".")
    return len(name) <= 253 and all(1 <= len(label) <= 63 for label in name.split(b"."))


def _format(where: str, value: Any) -> str:
    if value is None:
        return "json"
    if value not in FORMATS:
        raise InvalidSetting(f"{where}.format", 'must be "json" or "slack"')
    return str(value)


def _secret(where: str, value: Any) -> str | None:
    if value is None:
        return None
    low, high = SECRET_LENGTH
    if not isinstance(value, str) or not low <= len(value) <= high or has_controls(value):
        raise InvalidSetting(f"{where}.secret", f"must be {low} to {high} printable characters")
    return value
