"""The ``relay`` command.

``relay serve`` runs the server. ``relay projections rebuild`` drops the read
models and rebuilds them from the event stream. The other subcommands talk to
a running server over its REST API (see :mod:`relay_es.composition.client_cli`).

``relay serve`` exits with 0 when stopped with Ctrl-C (SIGTERM: it shuts down as
cleanly, then ends by that signal, as uvicorn raises it again: 143 in a shell, a
clean stop to systemd), 2 for a setting it refuses (or another instance serving
the store), 1 when it cannot start (the store cannot be opened, the address
cannot be bound) and 3 when it lost the store's lease (another instance took it,
or it went unconfirmed for 30 s). A store that cannot be opened is one line on
stderr, its URL without the password.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from relay_es.domain.errors import InvalidSetting
from relay_es.projections import NAMES
from relay_es.composition.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_TRUSTED_PROXIES,
    FD_RESERVE,
    LIMITS,
    PROJECTION_MODES,
    TIMINGS,
    Settings,
    database_url,
    limit_default,
    seconds_text,
)

log = logging.getLogger("relay")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# uvicorn's own timers, not settings (no flag, no variable; nothing else reads them):
FIRST_REQUEST_SECS = 10.0  # an opened connection must start its first request within this
KEEP_ALIVE_SECS = 5  # an idle keep-alive HTTP connection is closed after this
GRACEFUL_SHUTDOWN_SECS = 5  # on SIGTERM, open requests and sockets get this long before they are cut


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the Relay server")
    p.add_argument("--host", help=f"address to bind (RELAY_HOST, default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, help=f"port (RELAY_PORT, default {DEFAULT_PORT})")
    p.add_argument("--database-url", help="postgresql://... or sqlite:///path (RELAY_DATABASE_URL, default ./relay-data/relay.db)")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--auth", dest="auth", action="store_const", const=True, help="require tokens (RELAY_AUTH)")
    auth.add_argument("--no-auth", dest="auth", action="store_const", const=False, help="development mode")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow a non-loopback bind without --auth (RELAY_INSECURE)")
    p.add_argument("--forwarded-allow-ips",
                   help="reverse proxies whose X-Forwarded-For gives the client's address: comma-separated addresses "
                        f"or networks (RELAY_FORWARDED_ALLOW_IPS, default {','.join(DEFAULT_TRUSTED_PROXIES)}; "
                        "empty trusts none)")
    p.add_argument("--oidc-issuer", help="accept OIDC bearer JWTs from this issuer (its URL; needs --auth; "
                                         "RELAY_OIDC_ISSUER; docs/identity.md)")
    p.add_argument("--oidc-audience", help="the audience those tokens must name (RELAY_OIDC_AUDIENCE)")
    p.add_argument("--oidc-org", help="the org OIDC users belong to (RELAY_OIDC_ORG)")
    p.add_argument("--oidc-groups-claim", help="the claim listing a user's groups (RELAY_OIDC_GROUPS_CLAIM, "
                                               "default groups)")
    p.add_argument("--oidc-username-claim", help="the claim naming a user (RELAY_OIDC_USERNAME_CLAIM, default sub; "
                                                 "email is used only when email_verified)")
    p.add_argument("--oidc-group-roles", help="which group gets which role: group=role pairs, comma-separated, the "
                                              "first that matches wins (RELAY_OIDC_GROUP_ROLES)")
    p.add_argument("--alert-webhook-allow",
                   help="networks alert webhooks may reach besides public addresses: comma-separated addresses or "
                        "networks, e.g. 10.1.2.0/24 for an internal receiver (RELAY_ALERT_WEBHOOK_ALLOW, default none)")
    p.add_argument("--max-open-connections", type=int,
                   help="open sockets (HTTP and WebSocket) at once; more get 503 and are closed "
                        f"(RELAY_MAX_OPEN_CONNECTIONS, default: the open-file limit less {FD_RESERVE})")
    p.add_argument("--projections", choices=PROJECTION_MODES,
                   help="where the read models follow the log: process (a process of its own, using a second "
                        "core) or thread (in the server's process) (RELAY_PROJECTIONS, default process)")
    p.add_argument("--log-level", default=os.environ.get("RELAY_LOG_LEVEL", "INFO"),
                   help=f"{', '.join(LOG_LEVELS)} (RELAY_LOG_LEVEL, default INFO)")
    for key, t in TIMINGS.items():
        p.add_argument(t.flag, dest=key, type=float, help=f"{t.help} ({t.env}, default {seconds_text(t.default)})")
    for key, lim in LIMITS.items():
        p.add_argument(lim.flag, dest=key, type=int, help=f"{lim.help} ({lim.env}, default {limit_default(key)})")


def _add_projections(sub: Any) -> None:
    p = sub.add_parser("projections", help="read-model maintenance")
    psub = p.add_subparsers(dest="action", required=True)
    r = psub.add_parser("rebuild", help="drop the read models and rebuild them from the event stream")
    r.add_argument("--database-url", help="as for serve (RELAY_DATABASE_URL)")
    r.add_argument("--only", action="append", choices=list(NAMES), help="rebuild only this one")


def _add_admin(sub: Any) -> None:
    p = sub.add_parser("admin", help="work on the store directly (for the first token of an org)")
    asub = p.add_subparsers(dest="action", required=True)
    c = asub.add_parser("create-token", help="create a token without the API; the secret is printed once")
    c.add_argument("name")
    c.add_argument("--org", required=True)
    c.add_argument("--app", action="append", dest="apps", help="limit to this application (repeatable)")
    c.add_argument("--permission", action="append", dest="permissions",
                   help="a permission it carries (repeatable; default: every one org-wide, reading and connecting "
                        "executors when limited to applications)")
    c.add_argument("--database-url", help="as for serve (RELAY_DATABASE_URL)")


def admin(args: argparse.Namespace) -> int:
    from relay_es.adapters import logs
    from relay_es.adapters.clock import SystemClock
    from relay_es.adapters.stores import event_store_env, holds_event_log, parse_database_url
    from eventsourcing.utils import TopicError

    from relay_es.domain.errors import RelayError
    from relay_es.engine.service import Relay, check_token_arguments

    logs.configure("WARNING")
    permissions = getattr(args, "permissions", None)
    try:  # before the store is opened (or made): a refused token leaves nothing behind
        store = parse_database_url(database_url(args.database_url, os.environ))
        check_token_arguments(args.org, args.name, args.apps, permissions)
    except (RelayError, ValueError) as e:  # a usage error, as a setting serve refuses
        print(f"relay: {e}", file=sys.stderr)
        return 2
    try:
        # One plain connection first: a store that cannot be reached is the driver's reason (the event store's
        # pool says only that it got no connection in time). The first token may well come before the first
        # `relay serve`; a mistyped path or database name should not pass unseen.
        if not holds_event_log(store):
            print(f"relay: no Relay store at {store_name(store)} yet: making a new one", file=sys.stderr)
        relay = Relay(event_store_env(store), clock=SystemClock())
        try:
            secret = relay.create_token(args.org, args.name, app_names=args.apps, permissions=permissions)
        finally:
            relay.close()
    except RelayError as e:
        print(f"relay: {e}", file=sys.stderr)
        return 1
    except TopicError as e:
        print(f"relay: the store holds events this Relay cannot read (written by a newer one?): {e}", file=sys.stderr)
        return 1
    except store_errors() as e:
        print(f"relay: {store_failure(e, store.url)}", file=sys.stderr)
        return 1
    print(f"token {args.name} of org {args.org} created; this is the only time its secret is shown:", file=sys.stderr)
    print(secret)
    return 0


def store_name(store: Any) -> str:
    """The store of a :class:`~relay_es.adapters.stores.StoreConfig` in a message: its file, or its URL
    without the password."""
    from relay_es.adapters.stores import redact_url

    return store.sqlite_path if store.sqlite_path is not None else redact_url(store.url)


def store_errors() -> tuple[type[BaseException], ...]:
    """What opening or using a store raises when it cannot be reached or written (imported only
    when one is raised: the client's commands do not load the drivers)."""
    import sqlite3

    from eventsourcing.persistence import PersistenceError
    from psycopg import Error as PostgresError

    return (PersistenceError, PostgresError, sqlite3.Error, OSError)


def store_failure(e: BaseException, url: str | None) -> str:
    """One line for the store of ``url`` (accepted by ``parse_database_url``) that cannot be used: its
    URL without the password and the first line of what the driver said, the password (should the
    driver quote it) hidden there too. A SQLite store whose file system has no room left says so beside
    it: SQLite's own words for a -wal file it cannot make ("disk I/O error") point at the hardware."""
    from relay_es.adapters.stores import parse_database_url, postgres_params, redact_url

    store = parse_database_url(url)
    said = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if store.is_postgres:
        password = postgres_params(store.url)["password"]
        if password:
            said = said.replace(password, "***")
    elif store.sqlite_path is not None and not any(full in said for full in ("No space left", "disk is full")):
        folder = os.path.dirname(os.path.abspath(store.sqlite_path))
        if _full(folder):  # SQLite says "disk I/O error" when it cannot make its -wal and -shm files
            said += f"; no space left on the store's file system ({folder})"
    return f"cannot open the store {redact_url(store.url)}: {said}"


SQLITE_OPEN_BYTES = 64 * 1024  # more than SQLite writes to open a store in WAL mode: a -shm of 32 KiB, -wal frames


def _full(folder: str) -> bool:
    """The file system of ``folder`` has less room free than SQLite needs to open a store there (unknown:
    not full)."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < SQLITE_OPEN_BYTES
    except OSError:
        return False


def _raise_open_file_limit() -> None:
    """A server of its own: the soft open-file limit raised to the hard one (at most 2**20),
    as a Go server does. Every socket is a file; the connection cap stays below it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard if hard != resource.RLIM_INFINITY else 1 << 20, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from relay_es.adapters import logs
    from relay_es.protocol.limits import MAX_FRAME
    from relay_es.composition.asgi import RelayASGI
    from relay_es.adapters.lease import LeaseHeld
    from relay_es.adapters.uvicorn_ws import LISTEN_BACKLOG, http_protocol_class, protocol_class, split_ping_wait
    from relay_es.composition.runtime import Runtime

    if args.log_level.upper() not in LOG_LEVELS:
        print(f"relay: --log-level (RELAY_LOG_LEVEL) must be one of {', '.join(LOG_LEVELS)}, "
              f"got {args.log_level[:60]!r}", file=sys.stderr)
        return 2
    logs.configure(args.log_level.upper())
    _raise_open_file_limit()
    server: uvicorn.Server | None = None

    def lease_lost() -> None:
        # Another instance leads the store now: stop, without recording the sockets' closes.
        runtime.begin_shutdown()
        if server is not None:
            server.should_exit = True

    try:
        settings = Settings.from_sources(vars(args))
        runtime = Runtime(settings, manage_gc=True, on_lease_lost=lease_lost,
                          projection_process=settings.projections == "process")
    except (InvalidSetting, LeaseHeld, ValueError) as e:
        print(f"relay: {e}", file=sys.stderr)
        return 2
    except store_errors() as e:
        print(f"relay: {store_failure(e, settings.database_url)}", file=sys.stderr)
        return 1
    app = RelayASGI(runtime)
    ping = settings.ping_interval.total_seconds()
    ping_timeout, close_timeout = split_ping_wait(ping, settings.ping_wait.total_seconds())
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="auto",  # uvloop where installed (ADR 2): the event loop is most of a handshake's cost
        http=http_protocol_class(first_request_timeout=FIRST_REQUEST_SECS,
                                 request_timeout=settings.http_request_timeout.total_seconds(),
                                 max_connections=settings.max_open_connections,
                                 # a reply the client takes nothing of for as long is cut (ADR 2)
                                 send_timeout=settings.http_request_timeout.total_seconds()),
        # frames capped at 64 KiB until executor_info is answered; a closed socket's objects watched until freed
        ws=protocol_class(close_timeout, lost=runtime.collector.lost),
        ws_max_size=MAX_FRAME,
        ws_ping_interval=ping,
        ws_ping_timeout=ping_timeout,
        ws_per_message_deflate=True,
        proxy_headers=True,
        forwarded_allow_ips=list(settings.forwarded_allow_ips),  # never uvicorn's FORWARDED_ALLOW_IPS
        access_log=False,
        log_config=None,
        lifespan="on",
        timeout_keep_alive=KEEP_ALIVE_SECS,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECS,
        backlog=LISTEN_BACKLOG,
    )

    bind_error = _BindError()

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            try:
                await super().startup(sockets)
            except SystemExit:  # uvicorn's start-up failure, its code 3: Relay's code for a lost lease
                if self.lifespan.should_exit:
                    raise StartFailed("the application did not start (the error above says why)") from None
                raise StartFailed(f"cannot listen on {settings.host}:{settings.port}: "
                                  f"{bind_error.said or 'the error above says why'}") from None
            port = self.servers[0].sockets[0].getsockname()[1] if self.servers[0].sockets else settings.port
            log.info("relay serving on http://%s:%d (store: %s, auth: %s)",
                     f"[{settings.host}]" if ":" in settings.host else settings.host, port, runtime.store.kind,
                     "on" if settings.auth else "off (development mode, org 'local')")

        def handle_exit(self, sig: int, frame: Any) -> None:
            # Before uvicorn closes the sockets: a shutdown is not a disconnect.
            runtime.begin_shutdown()
            super().handle_exit(sig, frame)

    server = Server(config)
    if not settings.auth:
        log.warning("DEVELOPMENT MODE (no --auth, RELAY_AUTH unset or off): any key is accepted; org local. "
                    "Pass --auth or RELAY_AUTH=true to require tokens.")
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(bind_error)
    try:
        server.run()
    except StartFailed as e:
        print(f"relay: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: uvicorn shut down cleanly, then raised the SIGINT again
        pass
    finally:
        uvicorn_log.removeFilter(bind_error)
        if not runtime.started:
            runtime.close()
    if runtime.lease_lost:
        return 3
    return 0 if server.started else 1


class StartFailed(Exception):
    """``relay serve`` could not start serving (exit code 1)."""


class _BindError(logging.Filter):
    """Keeps what uvicorn logs when it cannot bind (it logs the ``OSError`` itself, then exits)."""

    said = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, OSError):  # "[Errno 98] error while attempting to bind on address ...: ..."
            e = record.msg
            self.said = os.strerror(e.errno) if e.errno and e.errno > 0 else str(e)  # "Address already in use"
        return True


# What an interrupted or broken rebuild leaves: rows of some streams, the positions not yet moved.
REBUILD_LEFT = ("the read models are partly rebuilt, their positions back at the start (with one process: where "
                "it had reached); run `relay projections rebuild` again")


def projections(args: argparse.Namespace) -> int:
    from relay_es.adapters import logs
    from relay_es.adapters.stores import holds_event_log, parse_database_url

    logs.configure("WARNING")
    try:
        store = parse_database_url(database_url(args.database_url, os.environ))
    except ValueError as e:  # InvalidSetting too
        print(f"relay: {e}", file=sys.stderr)
        return 2
    try:
        # Another application's database, an empty one or a mistyped path: a rebuild there would make Relay's
        # tables in it and say it rebuilt them from 0 events.
        if not holds_event_log(store):
            print(f"relay: no Relay store at {store_name(store)}: nothing to rebuild", file=sys.stderr)
            return 1
        return _rebuild(args, store)
    except store_errors() as e:
        print(f"relay: {store_failure(e, store.url)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the rebuild began: during it, _rebuild says what it left
        print("relay: interrupted before the rebuild began: the read models are as they were", file=sys.stderr)
        return 130


def _rebuild(args: argparse.Namespace, store: Any) -> int:
    from concurrent.futures.process import BrokenProcessPool

    from relay_es.adapters.lease import Lease, LeaseHeld
    from relay_es.adapters.readmodels.rebuild import rebuild_in_processes

    # The read models are the running server's to write: a rebuild beside it would drop its tables
    # under it and race its projection runner. Holding the lease also keeps a server, or another
    # rebuild, from starting; the lease does not record which of the two holds it.
    lease = Lease(store)
    try:
        lease.acquire()
    except LeaseHeld as e:
        print(f"relay: cannot rebuild while Relay is running on this store (`relay serve`, or another rebuild): {e}. "
              "Stop `relay serve` first, or let the other rebuild end.", file=sys.stderr)
        return 1
    try:
        n = rebuild_in_processes(store, args.only)
    except KeyboardInterrupt:  # Ctrl-C: the share processes, in the terminal's group, were interrupted too
        print(f"relay: rebuild interrupted: {REBUILD_LEFT}", file=sys.stderr)
        return 130
    except BrokenProcessPool:  # a share process killed by someone else (the OOM killer, a kill -9)
        print(f"relay: a rebuild process ended before its share was filled (killed?): {REBUILD_LEFT}", file=sys.stderr)
        return 1
    finally:
        lease.release()
    print(f"rebuilt {', '.join(args.only or NAMES)} from {n} events")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="relay", description="Relay: a self-hosted control plane for DBOS executors")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_projections(sub)
    _add_admin(sub)
    from relay_es.composition import client_cli

    client_cli.add_parsers(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "projections":
        return projections(args)
    if args.command == "admin":
        return admin(args)
    if args.command in client_cli.COMMANDS:
        return client_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
