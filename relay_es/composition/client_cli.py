"""The ``relay`` subcommands that talk to a running server over its REST API.

Readable tables by default, ``--json`` for scripts; on error a one-line
message on stderr and a non-zero exit (1: the server refused, 2: usage or
connection).

Every string printed in a table, a key/value listing or an error comes from
executors, paths or the server and is escaped first (:func:`printable`): no
newline, carriage return, escape sequence or other control character reaches
the terminal. ``--json`` output is JSON, which escapes them itself.

Lists whose tables show Relay's own fields (an executor's ``deadline``, a
token's ``appNames``) ask for them with :data:`EXTENDED` (``?relay=extended``);
without it the server answers exactly Conductor's fields.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unicodedata
from typing import Any
from urllib.parse import quote

import httpx

from relay_es.composition.settings import DEFAULT_HOST, DEFAULT_PORT

DEFAULT_SERVER = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"  # where ``relay serve`` listens with no options
REQUEST_TIMEOUT_SECS = 30  # one REST call, connect to last byte; the server's own deadline is RELAY_HTTP_REQUEST_TIMEOUT_SECS
FOLLOW_INTERVAL_SECS = 1.0  # ``audit --follow``: how often to ask for new entries
EXTENDED = {"relay": "extended"}  # Conductor's fields and Relay's (executors' deadline, tokens' appNames)

COLUMNS = {
    "apps": ["name", "status", "language", "executorTimeoutSecs", "gcTimeThresholdMs", "gcRowsThreshold",
             "globalTimeoutMs", "privateMode"],
    "executors": ["executorId", "status", "appVersion", "hostname", "language", "dbosVersion", "updatedAt", "deadline"],
    "tokens": ["tokenName", "createdAt", "appNames"],
    "audit": ["seq", "at", "app", "executorId", "action", "detail"],
    "history": ["version", "at", "type", "data"],
}


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=os.environ.get("RELAY_SERVER", DEFAULT_SERVER),
                   help=f"Relay's URL (RELAY_SERVER, default {DEFAULT_SERVER})")
    p.add_argument("--token", default=os.environ.get("RELAY_TOKEN"), help="API token for auth mode (RELAY_TOKEN)")
    p.add_argument("--org", default=os.environ.get("RELAY_ORG", "local"), help="org (RELAY_ORG, default local)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_parsers(sub: Any) -> None:
    apps = sub.add_parser("apps", help="applications")
    asub = apps.add_subparsers(dest="action", required=True)
    add_common(asub.add_parser("list", help="list applications"))
    for name, helptext in (("register", "register (idempotent)"), ("show", "show one"), ("delete", "delete one")):
        p = asub.add_parser(name, help=helptext)
        p.add_argument("app")
        add_common(p)
        if name == "register":
            p.add_argument("--private-mode", choices=["true", "false"])
    up = asub.add_parser("update", help="change settings (units as in the API)")
    up.add_argument("app")
    up.add_argument("--executor-timeout-secs", type=_nullable_int, default=argparse.SUPPRESS, help="whole seconds, or 'null' to clear")
    up.add_argument("--gc-time-threshold-ms", type=_nullable_int, default=argparse.SUPPRESS, help="milliseconds, or 'null'")
    up.add_argument("--gc-rows-threshold", type=_nullable_int, default=argparse.SUPPRESS, help="rows, or 'null'")
    up.add_argument("--global-timeout-ms", type=_nullable_int, default=argparse.SUPPRESS, help="milliseconds, or 'null'")
    up.add_argument("--private-mode", choices=["true", "false"])
    add_common(up)

    tokens = sub.add_parser("tokens", help="API and executor tokens")
    tsub = tokens.add_subparsers(dest="action", required=True)
    add_common(tsub.add_parser("list", help="list live tokens"))
    c = tsub.add_parser("create", help="create a token; the secret is printed once")
    c.add_argument("name")
    c.add_argument("--app", action="append", dest="apps", help="limit to this application (repeatable)")
    add_common(c)
    r = tsub.add_parser("revoke", help="revoke a token (its executors are disconnected)")
    r.add_argument("name")
    add_common(r)

    ex = sub.add_parser("executors", help="executors")
    esub = ex.add_subparsers(dest="action", required=True)
    el = esub.add_parser("list", help="list an application's executors")
    el.add_argument("--app", required=True)
    el.add_argument("--as-of", help="RFC 3339 instant: the table as it stood then")
    add_common(el)

    au = sub.add_parser("audit", help="the audit log")
    au.add_argument("--app")
    au.add_argument("--executor")
    au.add_argument("--after", type=int)
    au.add_argument("--limit", type=int, default=100)
    au.add_argument("--follow", "-f", action="store_true", help="keep printing new entries")
    au.add_argument("--interval", type=float, default=FOLLOW_INTERVAL_SECS, help=argparse.SUPPRESS)
    add_common(au)

    hi = sub.add_parser("history", help="an executor's events, also after deletion")
    hi.add_argument("executor")
    hi.add_argument("--app", required=True)
    add_common(hi)


def _nullable_int(text: str) -> int | None:
    if text.lower() == "null":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'null', got {text!r}") from None


class Client:
    def __init__(self, args: argparse.Namespace) -> None:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        self.http = httpx.Client(base_url=args.server.rstrip("/"), headers=headers, timeout=REQUEST_TIMEOUT_SECS)
        self.org = args.org

    def call(self, method: str, path: str, **kw: Any) -> Any:
        return self._json(self._send(method, path, **kw))

    def pages(self, path: str, params: dict[str, Any]) -> list[Any]:
        """Every page of a list the server pages with ``Link: <next>; rel="next"``."""
        out: list[Any] = []
        r = self._send("GET", path, params=params)
        while True:
            out.extend(self._json(r) or [])
            nxt = r.links.get("next", {}).get("url")
            if not nxt:
                return out
            if not nxt.startswith("/") or nxt.startswith("//"):  # the token goes to this server only
                raise CliError(f"the server linked a next page elsewhere: {nxt[:200]!r}")
            r = self._send("GET", nxt)

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise CliError(f"cannot reach {self.http.base_url}: {e}", 2) from None

    @staticmethod
    def _json(r: httpx.Response) -> Any:
        if r.status_code >= 400:
            try:
                body = r.json()
                msg = body.get("detail") or body.get("title") or r.text
            except ValueError:
                msg = r.text.strip() or r.reason_phrase
            raise CliError(f"{r.status_code} {msg}")
        if r.status_code == 204 or not r.content:
            return None
        return r.json()


# Control characters (C0, DEL, C1), format characters (bidirectional overrides,
# zero-width ones) and the Unicode line and paragraph separators.
_UNSAFE = {"Cc", "Cf", "Zl", "Zp"}


def printable(text: str) -> str:
    """``text`` with every character that could move the cursor, clear the screen,
    start a new line or reorder what follows shown as a visible escape (``\\n``,
    ``\\x1b``, ``\\u202e``); a backslash is doubled so an escape cannot be faked."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in _UNSAFE:
            code = ord(ch)
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or
                       (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"))
        else:
            out.append(ch)
    return "".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)  # ASCII: escapes controls itself
    return printable(str(v))


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    widths = [min(w, 60) for w in widths]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    for row in cells:
        lines.append("  ".join((v if len(v) <= w else v[: w - 1] + "…").ljust(w) for v, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def emit(args: argparse.Namespace, data: Any, kind: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2))
    elif isinstance(data, list):
        print(table(data, COLUMNS[kind]) if data else f"(no {kind})")
    elif isinstance(data, dict):
        width = max(len(printable(k)) for k in data) if data else 0
        for k, v in data.items():
            print(f"{printable(k).ljust(width)}  {_cell(v)}")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except CliError as e:
        print(f"relay: {printable(str(e))}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


def seg(name: str) -> str:
    """One path segment: a name typed by the user, or an executor id, cannot reach another path."""
    return quote(name, safe="")


def _run(args: argparse.Namespace) -> int:
    c = Client(args)
    base = f"/v2/orgs/{seg(c.org)}"
    cmd, action = args.command, getattr(args, "action", None)
    if cmd == "apps":
        if action == "list":
            emit(args, c.call("GET", f"{base}/apps"), "apps")
        elif action == "register":
            body = {} if args.private_mode is None else {"privateMode": args.private_mode == "true"}
            c.call("PUT", f"{base}/apps/{seg(args.app)}", json=body)
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "apps")
        elif action == "show":
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "apps")
        elif action == "update":
            body: dict[str, Any] = {}
            for flag, key in (("executor_timeout_secs", "executorTimeoutSecs"),
                              ("gc_time_threshold_ms", "gcTimeThresholdMs"),
                              ("gc_rows_threshold", "gcRowsThreshold"), ("global_timeout_ms", "globalTimeoutMs")):
                if hasattr(args, flag):  # typed by the user ('null' included)
                    body[key] = getattr(args, flag)
            if args.private_mode is not None:
                body["privateMode"] = args.private_mode == "true"
            if not body:
                raise CliError("nothing to update: give at least one setting", 2)
            c.call("PATCH", f"{base}/apps/{seg(args.app)}", json=body)
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "apps")
        elif action == "delete":
            c.call("DELETE", f"{base}/apps/{seg(args.app)}")
            if not args.json:
                print(f"deleted {printable(args.app)}")
    elif cmd == "tokens":
        if action == "list":
            emit(args, c.call("GET", f"{base}/tokens", params=EXTENDED), "tokens")
        elif action == "create":
            body = {"appNames": args.apps} if args.apps else {}
            created = c.call("POST", f"{base}/tokens/{seg(args.name)}", json=body)
            if args.json:
                print(json.dumps(created, indent=2))
            else:
                print(f"token {printable(str(created['tokenName']))} created; this is the only time its secret is shown:")
                print(printable(str(created["token"])))
        elif action == "revoke":
            c.call("DELETE", f"{base}/tokens/{seg(args.name)}")
            if not args.json:
                print(f"revoked {printable(args.name)}")
    elif cmd == "executors":
        params = {**EXTENDED, **({"asOf": args.as_of} if args.as_of else {})}
        emit(args, c.pages(f"{base}/apps/{seg(args.app)}/executors", params), "executors")
    elif cmd == "history":
        events: list[Any] = []
        while True:  # pages of up to 1000 events, by version
            page = c.call("GET", f"{base}/apps/{seg(args.app)}/executors/{seg(args.executor)}/history",
                          params={"after": events[-1]["version"]} if events else {})
            events.extend(page)
            if len(page) < 1000:
                break
        emit(args, events, "history")
    elif cmd == "audit":
        return _audit(args, c, base)
    return 0


def _audit(args: argparse.Namespace, c: Client, base: str) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.app:
        params["app"] = args.app
    if args.executor:
        params["executorId"] = args.executor
    after = args.after
    first = True
    while True:
        if after is not None:
            params["after"] = after
        entries = c.call("GET", f"{base}/audit-logs", params=params)
        if entries or first:
            if args.json:
                for e in entries:
                    print(json.dumps(e), flush=True)
            elif entries:
                text = table(entries, COLUMNS["audit"])
                print(text if first else "\n".join(text.splitlines()[1:]), flush=True)
            elif not args.follow:
                print("(no audit entries)")
        if entries:
            after = entries[-1]["seq"]
            first = False
        if not args.follow:
            return 0
        if len(entries) < args.limit:
            time.sleep(args.interval)
