"""Settings of ``relay serve``: flags, environment variables, defaults.

Each setting has a ``--flag`` and a ``RELAY_*`` variable; the flag wins.
Durations are parsed here, at the boundary, into ``timedelta``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from relay_es.errors import InvalidSetting
from relay_es.protocol.limits import ResourceLimits


@dataclass(frozen=True)
class TimingSetting:
    flag: str
    env: str
    default: float
    help: str


TIMINGS = {
    "ping_interval": TimingSetting("--ping-interval-secs", "RELAY_PING_INTERVAL_SECS", 20, "how often Relay pings each executor"),
    "ping_wait": TimingSetting("--ping-wait-secs", "RELAY_PING_WAIT_SECS", 25, "silence after which a socket is DISCONNECTED"),
    "default_executor_timeout": TimingSetting(
        "--default-executor-timeout-secs", "RELAY_DEFAULT_EXECUTOR_TIMEOUT_SECS", 60,
        "grace period of an application with no executorTimeoutSecs",
    ),
    "recovery_response_timeout": TimingSetting(
        "--recovery-response-timeout-secs", "RELAY_RECOVERY_RESPONSE_TIMEOUT_SECS", 30,
        "how long a recovery target has to answer",
    ),
    "retention_interval": TimingSetting(
        "--retention-interval-secs", "RELAY_RETENTION_INTERVAL_SECS", 300, "how often retention is sent"
    ),
    "restart_settle": TimingSetting(
        "--restart-settle-secs", "RELAY_RESTART_SETTLE_SECS", 5,
        "after a restart, how long executors get to reconnect before overdue deadlines are enforced",
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
}


def limit_default(key: str) -> int:
    return int(getattr(_DEFAULT_LIMITS, key))


def _count(name: str, raw: Any) -> int:
    try:
        v = int(str(raw).strip())
    except (TypeError, ValueError):
        raise InvalidSetting(name, f"must be a whole number, got {raw!r}") from None
    if not 1 <= v <= 10_000_000:
        raise InvalidSetting(name, f"must be 1 to 10000000, got {raw!r}")
    return v


def _duration(name: str, raw: Any) -> timedelta:
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise InvalidSetting(name, f"must be a number of seconds, got {raw!r}") from None
    if not (v > 0) or v > 7 * 24 * 3600:
        raise InvalidSetting(name, f"must be more than 0 and at most 604800 seconds, got {raw!r}")
    return timedelta(seconds=v)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8090
    database_url: str | None = None
    auth: bool = False
    insecure: bool = False
    ping_interval: timedelta = timedelta(seconds=20)
    ping_wait: timedelta = timedelta(seconds=25)
    default_executor_timeout: timedelta = timedelta(seconds=60)
    recovery_response_timeout: timedelta = timedelta(seconds=30)
    retention_interval: timedelta = timedelta(seconds=300)
    restart_settle: timedelta = timedelta(seconds=5)
    limits: ResourceLimits = ResourceLimits()
    instance: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")

    @classmethod
    def from_sources(cls, args: dict[str, Any], environ: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if environ is None else environ)

        def pick(key: str, env_name: str, default: Any) -> Any:
            v = args.get(key)
            if v is not None:
                return v
            return env.get(env_name, default)

        host = pick("host", "RELAY_HOST", "127.0.0.1")
        try:
            port = int(pick("port", "RELAY_PORT", 8090))
        except ValueError:
            raise InvalidSetting("port", "must be a whole number") from None
        if not 0 <= port <= 65535:
            raise InvalidSetting("port", f"must be 0-65535, got {port}")
        auth_raw = args.get("auth")
        if auth_raw is None and "RELAY_AUTH" in env:
            auth_raw = env["RELAY_AUTH"].strip().lower() in ("1", "true", "yes", "on")
        insecure = bool(args.get("insecure")) or env.get("RELAY_INSECURE", "").lower() in ("1", "true", "yes")
        auth = bool(auth_raw)  # development mode unless asked
        if not auth and not is_loopback(host) and not insecure:
            raise InvalidSetting(
                "host",
                f"{host} is not a loopback address: refusing to serve without --auth (pass --insecure to do it anyway)",
            )
        timings = {k: _duration(t.env, pick(k, t.env, t.default)) for k, t in TIMINGS.items()}
        if timings["ping_wait"] <= timings["ping_interval"]:
            raise InvalidSetting(
                "RELAY_PING_WAIT_SECS", "must be longer than RELAY_PING_INTERVAL_SECS (a pong needs time to come back)"
            )
        limits = ResourceLimits(**{k: _count(t.env, pick(k, t.env, limit_default(k))) for k, t in LIMITS.items()})
        return cls(
            host=host,
            limits=limits,
            port=port,
            database_url=pick("database_url", "RELAY_DATABASE_URL", None),
            auth=auth,
            insecure=insecure,
            **timings,
        )
