"""Settings of ``relay serve``: flags, environment variables, defaults.

Each setting has a ``--flag`` and a ``RELAY_*`` variable; the flag wins.
Durations are parsed here, at the boundary, into ``timedelta``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from relay_es.domain import defaults
from relay_es.domain.errors import InvalidSetting
from relay_es.protocol.limits import ResourceLimits


DEFAULT_HOST = "127.0.0.1"  # loopback: serving beyond it needs --auth or --insecure
DEFAULT_PORT = 8090
DEFAULT_TRUSTED_PROXIES = ("127.0.0.1",)  # a reverse proxy on the same machine
PROJECTION_MODES = ("process", "thread")  # where relay serve's read models follow the log (ADR 8)


@dataclass(frozen=True)
class TimingSetting:
    flag: str
    env: str
    default_value: timedelta  # from relay_es.domain.defaults
    help: str
    most: float = 0.0  # the largest value accepted, seconds (0: MAX_DURATION_SECS)
    least: float = 0.0  # the smallest value accepted, seconds (0: MIN_DURATION_SECS)

    @property
    def default(self) -> float:
        """The default in seconds, as the flag and the variable take it."""
        return self.default_value.total_seconds()


TIMINGS = {
    # At least a tenth of a second: every ping of every executor wakes the loop (1 µs took 23% of a core
    # for one executor), and no network answers a pong much sooner.
    "ping_interval": TimingSetting("--ping-interval-secs", "RELAY_PING_INTERVAL_SECS", defaults.PING_INTERVAL,
                                   "how often Relay pings each executor, at least 0.1 s", least=0.1),
    "ping_wait": TimingSetting("--ping-wait-secs", "RELAY_PING_WAIT_SECS", defaults.PING_WAIT, "silence after which a socket is DISCONNECTED"),
    "default_executor_timeout": TimingSetting(
        "--default-executor-timeout-secs", "RELAY_DEFAULT_EXECUTOR_TIMEOUT_SECS", defaults.EXECUTOR_TIMEOUT,
        "grace period of an application with no executorTimeoutSecs",
    ),
    "recovery_response_timeout": TimingSetting(
        "--recovery-response-timeout-secs", "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS", defaults.RECOVERY_RESPONSE_TIMEOUT,
        "how long a recovery target has to answer",
    ),
    "retention_interval": TimingSetting(
        "--retention-interval-secs", "RELAY_RETENTION_INTERVAL_SECS", defaults.RETENTION_INTERVAL,
        "how often retention is sent, at least 1 s (a round records events of every executor)", least=1.0,
    ),
    "metrics_interval": TimingSetting(
        "--metrics-interval-secs", "RELAY_METRICS_INTERVAL_SECS", defaults.METRICS_INTERVAL,
        "how often the executors' metrics are collected, whole seconds: the length of one metrics bucket",
    ),
    "metrics_retention": TimingSetting(
        "--metrics-retention-secs", "RELAY_METRICS_RETENTION_SECS", defaults.METRICS_RETENTION,
        "how long the collected metrics are kept", most=3650 * 86400.0,
    ),
    "alert_check_interval": TimingSetting(
        "--alert-check-secs", "RELAY_ALERT_CHECK_SECS", defaults.ALERT_CHECK_INTERVAL,
        "how often each WorkflowFailure, SlowQueue and UnresponsiveApplication alerting rule is checked",
    ),
    "alert_retry": TimingSetting(
        "--alert-retry-secs", "RELAY_ALERT_RETRY_SECS", defaults.ALERT_RETRY,
        "the wait before an alert's second delivery attempt, at most 300 s (the backoff's cap); doubled for "
        "each next one, up to 300 s", most=300.0,
    ),
    "restart_settle": TimingSetting(
        "--restart-settle-secs", "RELAY_RESTART_SETTLE_SECS", defaults.RESTART_SETTLE,
        "after a restart, how long executors get to reconnect before overdue deadlines are enforced",
    ),
    "call_timeout": TimingSetting(
        "--call-timeout-secs", "RELAY_CALL_TIMEOUT_SECS", defaults.CALL_TIMEOUT,
        "how long an executor has to answer an operation of the API (list, cancel, fork...) before it is a 504",
    ),
    "http_request_timeout": TimingSetting(
        "--http-request-timeout-secs", "RELAY_HTTP_REQUEST_TIMEOUT_SECS", defaults.HTTP_REQUEST_TIMEOUT,
        "time a client has to send a whole HTTP request (headers and body) once it started it, and the longest "
        "a reply may wait unread by it",
    ),
}


@dataclass(frozen=True)
class LimitSetting:
    flag: str
    env: str
    help: str


_DEFAULT_LIMITS = ResourceLimits()

# Resource limits (ADR 15): one per field of ResourceLimits, a whole number >= 1.
LIMITS = {
    "connections_per_key": LimitSetting(
        "--max-connections-per-key", "RELAY_MAX_CONNECTIONS_PER_KEY", "open executor sockets one key may hold"),
    "connections_per_app": LimitSetting(
        "--max-connections-per-app", "RELAY_MAX_CONNECTIONS_PER_APP", "open executor sockets of one application"),
    "executors_per_key": LimitSetting(
        "--max-executors-per-key", "RELAY_MAX_EXECUTORS_PER_KEY",
        "distinct executor ids (not yet deleted) one key may register"),
    "executors_per_app": LimitSetting(
        "--max-executors-per-app", "RELAY_MAX_EXECUTORS_PER_APP",
        "distinct executor ids (not yet deleted) of one application"),
    "handshakes_per_address": LimitSetting(
        "--max-handshakes-per-address", "RELAY_MAX_HANDSHAKES_PER_ADDRESS",
        "sockets from one address that have not answered executor_info yet"),
    "queued_transitions": LimitSetting(
        "--max-queued-transitions", "RELAY_MAX_QUEUED_TRANSITIONS",
        "executor transitions waiting for the store (while it is away); above it handshakes get 503"),
}

# Descriptors kept for the store's connections, the log, the lease's lock file and
# the thread pool's files: open sockets are capped below the open-file limit by this many.
FD_RESERVE = 128


def fd_limit() -> int:
    """The process's open-file limit (``ulimit -n``, the soft one)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def default_max_connections(limit: int | None = None) -> int:
    """Open sockets Relay accepts at once, by default: all the open-file limit allows,
    less :data:`FD_RESERVE` (a socket over the file limit fails accept() and everything
    that opens a file after it: the store's connections, the log)."""
    return max(64, (fd_limit() if limit is None else limit) - FD_RESERVE)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _boolean(name: str, raw: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``, any case; anything else is refused
    (``RELAY_AUTH=enabled`` silently meaning development mode was a hole)."""
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidSetting(name, f"must be one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)} (any case), got {raw[:40]!r}")


def _trusted_proxies(name: str, raw: Any) -> tuple[str, ...]:
    """Comma-separated addresses or networks (``10.0.0.0/8``); empty trusts no one."""
    out = []
    for part in str(raw).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(str(ipaddress.ip_network(part, strict=False)) if "/" in part else str(ipaddress.ip_address(part)))
        except ValueError:
            raise InvalidSetting(name, f"must be comma-separated IP addresses or networks, got {part[:60]!r}") from None
    return tuple(out)


def limit_default(key: str) -> int:
    return int(getattr(_DEFAULT_LIMITS, key))


MAX_COUNT = 10_000_000  # the largest limit a setting takes
MAX_DURATION_SECS = 7 * 24 * 3600  # the longest duration a setting takes: a week
MIN_DURATION_SECS = 1e-6  # the shortest: a microsecond, timedelta's resolution (less would round to 0)


def _count(name: str, raw: Any) -> int:
    try:
        v = int(str(raw).strip())
    except (TypeError, ValueError):
        raise InvalidSetting(name, f"must be a whole number, got {raw!r}") from None
    if not 1 <= v <= MAX_COUNT:
        raise InvalidSetting(name, f"must be 1 to {MAX_COUNT}, got {raw!r}")
    return v


def seconds_text(secs: float) -> str:
    """A number of seconds as a person reads it: ``1209600``, ``0.1``, ``1e-06``; never ``1.2096e+06``."""
    return f"{secs:g}" if secs < 1e-4 else format(secs, "f").rstrip("0").rstrip(".")


def _duration(name: str, raw: Any, most: float = 0.0, least: float = 0.0) -> timedelta:
    most = most or MAX_DURATION_SECS
    least = least or MIN_DURATION_SECS
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise InvalidSetting(name, f"must be a number of seconds, got {raw!r}") from None
    if not least <= v <= most:  # NaN too
        raise InvalidSetting(name, f"must be at least {seconds_text(least)} and at most {seconds_text(most)} "
                                   f"seconds, got {raw!r}")
    return timedelta(seconds=v)


DATABASE_URL_ENV = "RELAY_DATABASE_URL"


def database_url(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """``--database-url``, else ``RELAY_DATABASE_URL``; None when neither is given (the default store,
    ./relay-data/relay.db). One given empty is refused: it read as not given, so a deployment whose
    variable came out empty (meant: its Postgres) served a new, empty SQLite store, and an empty flag
    hid the variable."""
    if flag is not None:
        given, name = flag, "--database-url"
    elif DATABASE_URL_ENV in environ:
        given, name = environ[DATABASE_URL_ENV], DATABASE_URL_ENV
    else:
        return None
    if not given.strip():
        raise InvalidSetting(name, "is empty: give postgresql://user:pass@host:port/db or sqlite:///path, or leave "
                                   "it unset for the default store (./relay-data/relay.db)")
    return given


# OIDC's settings besides the issuer: each does something only with it (docs/identity.md).
OIDC_WITH_ISSUER = ("oidc_audience", "oidc_org", "oidc_groups_claim", "oidc_group_roles", "oidc_username_claim")


MAX_HOST_NAME = 253  # characters of a DNS name, its trailing dot aside (RFC 1035)


def _host(raw: Any) -> str:
    """``--host``: an IP address, or a name the resolver can be asked for (printable, no spaces, each
    dot-separated label 1-63 characters once IDNA-encoded, 253 in all), checked before anything is
    opened; the empty name binds every interface. A name Python cannot encode for the resolver
    (``not..a..host``) would otherwise fail only when the server binds, with tracebacks and after the
    store was opened; one it can but that resolves to nothing is refused then, as a host not here."""
    host = str(raw)
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    shown = repr(host[:100]) + ("..." if len(host) > 100 else "")
    if not host.isprintable() or any(c.isspace() for c in host):
        raise InvalidSetting("host", f"must be an IP address or a host name, got {shown}")
    try:
        encoded = host.encode("idna")
    except UnicodeError:
        raise InvalidSetting("host", f"must be an IP address or a host name (dot-separated labels of 1-63 "
                                     f"characters), got {shown}") from None
    if len(encoded.removesuffix(b".")) > MAX_HOST_NAME:
        raise InvalidSetting("host", f"a host name has at most {MAX_HOST_NAME} characters, got {shown}")
    return host


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    database_url: str | None = None
    auth: bool = False
    insecure: bool = False
    ping_interval: timedelta = defaults.PING_INTERVAL
    ping_wait: timedelta = defaults.PING_WAIT
    default_executor_timeout: timedelta = defaults.EXECUTOR_TIMEOUT
    recovery_response_timeout: timedelta = defaults.RECOVERY_RESPONSE_TIMEOUT
    retention_interval: timedelta = defaults.RETENTION_INTERVAL
    metrics_interval: timedelta = defaults.METRICS_INTERVAL
    metrics_retention: timedelta = defaults.METRICS_RETENTION
    alert_check_interval: timedelta = defaults.ALERT_CHECK_INTERVAL
    alert_retry: timedelta = defaults.ALERT_RETRY
    restart_settle: timedelta = defaults.RESTART_SETTLE
    http_request_timeout: timedelta = defaults.HTTP_REQUEST_TIMEOUT
    call_timeout: timedelta = defaults.CALL_TIMEOUT
    limits: ResourceLimits = ResourceLimits()
    # Proxies whose X-Forwarded-For is believed (the client's address); docs/behind-a-proxy.md.
    forwarded_allow_ips: tuple[str, ...] = DEFAULT_TRUSTED_PROXIES
    # Networks alert webhooks may reach besides public addresses (docs/alerting.md); none by default.
    alert_webhook_allow: tuple[str, ...] = ()
    # OIDC sign-in (docs/identity.md): the issuer, the audience, the org its users belong to, the claim
    # holding their groups, and which group gets which role; None: tokens only.
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_org: str | None = None
    oidc_groups_claim: str = "groups"
    oidc_group_roles: str = ""
    oidc_username_claim: str = "sub"
    # Open sockets (HTTP and WebSocket) at once; over it a new connection gets 503 and is closed.
    max_open_connections: int = field(default_factory=default_max_connections)
    # Where relay serve's read models follow the log: "process" (a child process) or "thread".
    projections: str = "process"
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")

    @classmethod
    def from_sources(cls, args: dict[str, Any], environ: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if environ is None else environ)

        def pick(key: str, env_name: str, default: Any) -> Any:
            v = args.get(key)
            if v is not None:
                return v
            return env.get(env_name, default)

        host = _host(pick("host", "RELAY_HOST", DEFAULT_HOST))
        try:
            port = int(pick("port", "RELAY_PORT", DEFAULT_PORT))
        except ValueError:
            raise InvalidSetting("port", "must be a whole number") from None
        if not 0 <= port <= 65535:
            raise InvalidSetting("port", f"must be 0-65535, got {port}")
        auth_raw = args.get("auth")
        if auth_raw is None and "RELAY_AUTH" in env:
            auth_raw = _boolean("RELAY_AUTH", env["RELAY_AUTH"])
        insecure_env = _boolean("RELAY_INSECURE", env["RELAY_INSECURE"]) if "RELAY_INSECURE" in env else False
        insecure = bool(args.get("insecure")) or insecure_env
        auth = bool(auth_raw)  # development mode unless asked
        if not auth and not is_loopback(host) and not insecure:
            raise InvalidSetting(
                "host",
                f"{host} is not a loopback address: refusing to serve without --auth (pass --insecure to do it anyway)",
            )
        timings = {k: _duration(t.env, pick(k, t.env, t.default), t.most, t.least) for k, t in TIMINGS.items()}
        if timings["ping_wait"] <= timings["ping_interval"]:
            raise InvalidSetting(
                "RELAY_PING_WAIT_SECS", "must be longer than RELAY_PING_INTERVAL_SECS (a pong needs time to come back)"
            )
        interval = timings["metrics_interval"].total_seconds()
        if not interval.is_integer() or interval > 86400:
            raise InvalidSetting("RELAY_METRICS_INTERVAL_SECS",
                                 f"must be a whole number of seconds from 1 to 86400, got {interval:g}")
        if timings["metrics_retention"] < timings["metrics_interval"]:
            raise InvalidSetting("RELAY_METRICS_RETENTION_SECS", "must be at least RELAY_METRICS_INTERVAL_SECS")
        limits = ResourceLimits(**{k: _count(t.env, pick(k, t.env, limit_default(k))) for k, t in LIMITS.items()})
        proxies = _trusted_proxies("RELAY_FORWARDED_ALLOW_IPS", pick("forwarded_allow_ips", "RELAY_FORWARDED_ALLOW_IPS",
                                                                     ",".join(DEFAULT_TRUSTED_PROXIES)))
        webhook_allow = _trusted_proxies("RELAY_ALERT_WEBHOOK_ALLOW",
                                         pick("alert_webhook_allow", "RELAY_ALERT_WEBHOOK_ALLOW", ""))
        oidc = {k: pick(k, f"RELAY_{k.upper()}", None) for k in ("oidc_issuer", "oidc_audience", "oidc_org",
                                                                  "oidc_groups_claim", "oidc_group_roles",
                                                                  "oidc_username_claim")}
        if not oidc["oidc_issuer"]:
            # Without the issuer they were ignored, even ones that could never work (--oidc-org a/b):
            # a misspelt or forgotten issuer left OIDC off with nothing said.
            stray = [f"RELAY_{k.upper()}" for k in OIDC_WITH_ISSUER if oidc[k]]
            if stray:
                raise InvalidSetting("RELAY_OIDC_ISSUER", f"is not given, but {', '.join(stray)} "
                                                          f"{'is' if len(stray) == 1 else 'are'}: they do nothing "
                                                          "without it (--oidc-issuer); give it or leave them unset")
        else:
            if not auth:
                raise InvalidSetting("RELAY_OIDC_ISSUER", "OIDC sign-in needs auth mode (--auth)")
            from relay_es.adapters.oidc import secure_url
            if not secure_url(str(oidc["oidc_issuer"]), loopback_http=True):
                raise InvalidSetting("RELAY_OIDC_ISSUER", "must be the issuer's https URL (http only on loopback: "
                                                          "anyone on the path could swap its keys)")
            for key in ("oidc_audience", "oidc_org"):
                if not oidc[key]:
                    raise InvalidSetting(f"RELAY_{key.upper()}", "is needed with RELAY_OIDC_ISSUER")
            for key in ("oidc_groups_claim", "oidc_username_claim"):
                if oidc[key] is not None and not str(oidc[key]).strip():  # given empty: it names no claim
                    raise InvalidSetting(f"RELAY_{key.upper()}", "is empty: name a claim of the tokens, or leave "
                                                                 "it unset for its default")
            from relay_es.aggregates.application import ORG_NAME
            if not ORG_NAME.fullmatch(str(oidc["oidc_org"])):  # else every /v2/orgs/{org}/... path refuses it
                raise InvalidSetting("RELAY_OIDC_ORG", "must be an org name: letters, digits and ._~- (at most 128, "
                                                       "starting with a letter or digit)")
            try:
                from relay_es.adapters.oidc import parse_group_roles
                parse_group_roles(str(oidc["oidc_group_roles"] or ""))
            except ValueError as e:
                raise InvalidSetting("RELAY_OIDC_GROUP_ROLES", f"must be group=role pairs, comma-separated: {e}") from None
        files = fd_limit()
        raw_cap = pick("max_open_connections", "RELAY_MAX_OPEN_CONNECTIONS", None)
        cap = default_max_connections(files) if raw_cap is None else _count("RELAY_MAX_OPEN_CONNECTIONS", raw_cap)
        if raw_cap is not None and cap > files - FD_RESERVE:
            raise InvalidSetting("RELAY_MAX_OPEN_CONNECTIONS",
                                 f"{cap} would pass the open-file limit (ulimit -n = {files}, less {FD_RESERVE} kept "
                                 "for the store and the log): raise the limit or lower the setting")
        projections = str(pick("projections", "RELAY_PROJECTIONS", "process")).strip().lower()
        if projections not in PROJECTION_MODES:
            raise InvalidSetting("RELAY_PROJECTIONS", f"must be one of {', '.join(PROJECTION_MODES)}, got {projections!r}")
        return cls(
            projections=projections,
            forwarded_allow_ips=proxies,
            alert_webhook_allow=webhook_allow,
            oidc_issuer=oidc["oidc_issuer"] or None,
            oidc_audience=oidc["oidc_audience"] or None,
            oidc_org=oidc["oidc_org"] or None,
            oidc_groups_claim=oidc["oidc_groups_claim"] or "groups",
            oidc_group_roles=oidc["oidc_group_roles"] or "",
            oidc_username_claim=oidc["oidc_username_claim"] or "sub",
            max_open_connections=cap,
            host=host,
            limits=limits,
            port=port,
            database_url=database_url(args.get("database_url"), env),
            auth=auth,
            insecure=insecure,
            **timings,
        )
