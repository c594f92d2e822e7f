"""The ``relay`` subcommands that talk to a running server over its REST API.

Readable tables by default, ``--json`` for scripts; on error a one-line
message on stderr (a problem's field errors that its detail does not say, one
a line under it) and a non-zero exit (1: the server refused, redirected or
answered what the command cannot use; 2: usage or connection; 141: stdout's
reader went away, as ``relay events -f | head -1`` does, with nothing on stderr).
Only a 2xx is success: a redirect is not followed (the token goes to
``--server`` only, which holds no user name, password, query or fragment). A call
(connecting, sending, the reply's headers and body) must end within
:data:`REQUEST_TIMEOUT_SECS` of its start, its reply be JSON (no NaN or Infinity) of
at most :data:`MAX_REPLY_BYTES`; an error's text is cut to :data:`MAX_SHOWN` characters.
``events --follow`` outlives the server's restarts: once the feed has answered, a
connection refused or cut, a timeout, 502, 503 or 504 is asked again (every
:data:`RETRY_SECS`, doubling), told once on stderr.

Every string printed in a table, a key/value listing or an error comes from
executors, paths or the server and is escaped first (:func:`printable`): no
newline, carriage return, escape sequence or other control character reaches
the terminal. ``--json`` output is JSON, which escapes them itself.

Lists whose tables show Relay's own fields (an executor's ``deadline``, a
token's ``appNames``) ask for them with :data:`EXTENDED` (``?relay=extended``);
without it the server answers exactly Conductor's fields.

``workflows``, ``queues``, ``schedules`` and ``versions`` are Conductor's
operations of an application (the server asks one of its executors: 503 when
none is healthy, 504 when it does not answer); ``workflows stranded`` and
``workflows fix-stranded`` are Relay's stranded-work paths
(``/stranded-workflows``, ``/stranded-workflows/fix``). ``--json`` prints
the server's answer as it came; an action answered with no content prints
nothing with ``--json`` and one line without.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from relay_es.adapters.deadline import Deadline
from relay_es.composition.settings import DEFAULT_HOST, DEFAULT_PORT

DEFAULT_SERVER = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"  # where ``relay serve`` listens with no options
# One REST call ends within this of its start: connecting, sending, the reply's headers and its body, each
# step bounded by what is left of it (:class:`~relay_es.adapters.deadline.Deadline`); the server's own deadline is
# RELAY_HTTP_REQUEST_TIMEOUT_SECS.
REQUEST_TIMEOUT_SECS = 30
MAX_REPLY_BYTES = 64 << 20  # a reply's body, decoded (a larger one is refused); a paged list's pages together
MAX_PAGES = 1000  # pages of one paged list (Link: rel="next", an executor's history) read before giving up
MAX_PROBLEM_BYTES = 64 << 10  # what is read of an error's body: its text is cut to MAX_SHOWN anyway
MAX_SHOWN = 200  # characters shown of an error's text or of a reply that is not JSON
MAX_DETAILS = 20  # a problem's field errors shown, one a line
FOLLOW_INTERVAL_SECS = 1.0  # ``events --follow``: how often to ask for new entries
RETRY_SECS = (1.0, 30.0)  # ``events --follow``: the first wait before asking a server away again, and the longest
EVENTS_LIMIT = 100  # ``events`` with no --limit: one page, the oldest after --after
EXTENDED = {"relay": "extended"}  # Conductor's fields and Relay's (executors' deadline, tokens' appNames)

COLUMNS = {
    "apps": ["name", "status", "language", "executorTimeoutSecs", "gcTimeThresholdMs", "gcRowsThreshold",
             "globalTimeoutMs", "privateMode"],
    "executors": ["executorId", "status", "appVersion", "hostname", "language", "dbosVersion", "updatedAt", "deadline"],
    "tokens": ["tokenName", "createdAt", "appNames", "permissions"],
    "roles": ["name", "isGlobal", "permissions"],
    "events": ["seq", "at", "app", "executorId", "action", "detail"],
    # GET .../audit-logs: Conductor's AuditLogEntry, its subject, target and outcome flattened
    "audit": ["emitTime", "operation", "status", "outcome", "subject", "sourceIp", "target", "message"],
    "history": ["version", "at", "type", "data"],
    "metrics": ["timeBucket", "metricType", "metricName", "value", "granularity"],
    "metric totals": ["metricType", "metricName", "value"],
    "alerting rules": ["id", "ruleType", "receivingAppId", "minIntervalSecs", "lastFiredAt", "ruleMetadata"],
    "recommendations": ["applicationVersion", "isLatest", "desiredExecutors", "queueDepth", "queueName", "observedAt"],
    "workflows": ["workflowId", "status", "workflowName", "queueName", "executorId", "appVersion", "createdAt",
                  "updatedAt"],
    "steps": ["stepId", "stepName", "startedAt", "completedAt", "childWorkflowId", "error", "output"],
    "queues": ["name", "concurrency", "workerConcurrency", "rateLimitMax", "rateLimitPeriodSecs", "priorityEnabled",
               "partitionQueue", "pollingIntervalSecs"],
    "schedules": ["scheduleName", "workflowName", "cronExpression", "cronTimezone", "status", "lastFiredAt",
                  "automaticBackfill"],
    "versions": ["versionName", "versionTimestamp", "createdAt", "versionId"],
    # Relay's stranded work (GET .../stranded-workflows): its three lists, executors' relayState flattened
    "stranded workflows": ["workflowId", "name", "queueName", "executorId", "appVersion", "createdAt", "reason",
                           "fixes"],
    "blocked queues": ["queueName", "strandedWorkflows", "enqueued"],
    "executors not alive": ["executorId", "status", "appVersion", "reason", "recoveryPhase", "deadline",
                            "strandedWorkflows", "fixes"],
}
WORKFLOWS_LIMIT = 100  # ``workflows list`` with no --limit: one page of the newest
FIXES = ("resume", "cancel", "fork", "recover")  # ``fix-stranded --fix``: workflows' three, executors' one
SEARCH_LISTS = {  # ``workflows list``'s repeatable filters: WorkflowSearchBody's field -> (flag, help)
    "status": ("--status", "only this status (PENDING, ENQUEUED, SUCCESS, ERROR, CANCELLED, ...)"),
    "workflowName": ("--name", "only workflows of this function name"),
    "queueName": ("--queue", "only workflows of this queue"),
    "executorId": ("--executor", "only workflows of this executor"),
    "appVersion": ("--app-version", "only workflows of this application version"),
    "workflowIdPrefix": ("--id-prefix", "only workflow ids starting so"),
    "parentWorkflowId": ("--parent", "only children of this workflow"),
    "scheduleName": ("--schedule", "only workflows started by this schedule"),
}
COMMANDS = ("apps", "tokens", "executors", "events", "audit", "history", "workflows", "queues", "schedules",
            "versions", "metrics", "autoscaling", "alerts", "roles")
"""The subcommands :func:`add_parsers` adds and :func:`run` runs."""


class CliError(Exception):
    def __init__(self, message: str, code: int = 1, details: tuple[str, ...] = (), status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details  # printed one a line under the message
        self.status = status  # the server's HTTP status, when it refused


class Unavailable(CliError):
    """The server was not reached, did not answer in time, cut its answer or answered 502, 503 or 504:
    worth asking again later (``events --follow`` does)."""


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
    c.add_argument("--permission", action="append", dest="permissions",
                   help="a permission it carries (repeatable; at most yours; default: those of its scope)")
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

    ev = sub.add_parser("events", help="the executor lifecycle feed (every transition, oldest first)")
    ev.add_argument("--app")
    ev.add_argument("--executor")
    ev.add_argument("--after", type=int, help="only entries after this seq (a full page says where the next starts)")
    ev.add_argument("--limit", type=int, default=EVENTS_LIMIT,
                    help=f"at most this many, the oldest (default {EVENTS_LIMIT}; at most 1000)")
    ev.add_argument("--follow", "-f", action="store_true",
                    help="keep printing new entries (--json: one object a line); a server away is asked again")
    ev.add_argument("--interval", type=_seconds, default=FOLLOW_INTERVAL_SECS, help=argparse.SUPPRESS)
    add_common(ev)

    au = sub.add_parser("audit", help="the audit log: who did what through the API, newest first")
    au.add_argument("--operation", help="only this operation (an operationId, e.g. cancelWorkflow)")
    au.add_argument("--subject", help="only this caller (a token's name, a user's id)")
    au.add_argument("--target", help="only this target (an application, a workflow id, a token's name...)")
    au.add_argument("--since", help="RFC 3339: only actions at or after this instant")
    au.add_argument("--until", help="RFC 3339: only actions before this instant")
    au.add_argument("--limit", type=int, default=100)
    au.add_argument("--offset", type=int, default=0)
    add_common(au)

    me = sub.add_parser("metrics", help="an application's metrics: workflows started, steps completed and "
                                        "recoveries, per bucket")
    me.add_argument("app")
    me.add_argument("--since", help="RFC 3339: buckets starting at or after this instant (default: an hour ago)")
    me.add_argument("--until", help="RFC 3339: buckets starting before this instant (default: now)")
    me.add_argument("--total", action="store_true", help="one line per series: its sum over the window")
    add_common(me)

    hi = sub.add_parser("history", help="an executor's events, also after deletion")
    hi.add_argument("executor")
    hi.add_argument("--app", required=True)
    add_common(hi)

    _add_workflows(sub)
    _add_queues_schedules_versions(sub)


def _app_parser(sub: Any, name: str, helptext: str, *positionals: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=helptext)
    for positional in positionals:
        p.add_argument(positional)
    p.add_argument("--app", required=True, help="the application")
    add_common(p)
    return p


def _add_workflows(sub: Any) -> None:
    wf = sub.add_parser("workflows", help="an application's workflows (asks one of its executors)")
    wsub = wf.add_subparsers(dest="action", required=True)
    ls = _app_parser(wsub, "list", "list workflows, newest first (filters beyond one --status and one --name "
                                    "search: Conductor's searchWorkflows)")
    for flag, helptext in SEARCH_LISTS.values():
        ls.add_argument(flag, action="append", help=helptext + " (repeatable)")
    ls.add_argument("--since", help="created at or after this RFC 3339 instant")
    ls.add_argument("--until", help="created at or before this RFC 3339 instant")
    ls.add_argument("--queued-only", action="store_true", help="only workflows on a queue, not yet finished")
    ls.add_argument("--limit", type=_natural_int, default=WORKFLOWS_LIMIT,
                    help=f"at most this many (default {WORKFLOWS_LIMIT}; 0: every match)")
    ls.add_argument("--offset", type=_natural_int, help="skip this many")
    ls.add_argument("--oldest-first", action="store_true", help="oldest first (default: newest first)")
    ls.add_argument("--load-input", action="store_true", help="include each workflow's input")
    ls.add_argument("--load-output", action="store_true", help="include each workflow's output and error")
    _app_parser(wsub, "get", "show one workflow", "workflow_id")
    st = _app_parser(wsub, "steps", "a workflow's steps", "workflow_id")
    st.add_argument("--limit", type=_positive_int)
    st.add_argument("--offset", type=_natural_int)
    ca = _app_parser(wsub, "cancel", "cancel a workflow", "workflow_id")
    ca.add_argument("--cancel-children", action="store_true", help="cancel its child workflows too")
    rs = _app_parser(wsub, "resume", "resume a workflow (on its own application version)", "workflow_id")
    rs.add_argument("--queue", help="resume it on this queue")
    fk = _app_parser(wsub, "fork", "start a new workflow from a step of this one", "workflow_id")
    fk.add_argument("--start-step", type=_natural_int, help="the step to start from (default: the first)")
    fk.add_argument("--new-id", dest="new_workflow_id", help="the new workflow's id (default: chosen by the executor)")
    fk.add_argument("--app-version", help="run the fork on this application version")
    fk.add_argument("--queue", help="enqueue the fork on this queue")
    fk.add_argument("--partition-key", help="the queue partition key")
    de = _app_parser(wsub, "delete", "delete a workflow's records", "workflow_id")
    de.add_argument("--children", action="store_true", help="delete its child workflows too")
    sd = _app_parser(wsub, "stranded", "PENDING workflows whose executor is not alive, why, the fixes, the queues "
                                       "they block and the executors they wait on (Relay's)")
    sd.add_argument("--limit", type=_positive_int, help="PENDING workflows examined, oldest first (server default 100)")
    sd.add_argument("--offset", type=_natural_int, help="the page after: the offset the last one printed")
    sd.add_argument("--relay-only", action="store_true",
                    help="ask no executor: only the executors Relay knows are not alive (works with none connected)")
    fx = _app_parser(wsub, "fix-stranded", "resume, cancel or fork stranded workflows, or recover executors now "
                                           "(Relay's; audited)")
    fx.add_argument("ids", nargs="+", metavar="id", help="workflow ids; executor ids for --fix recover")
    fx.add_argument("--fix", required=True, choices=FIXES,
                    help="resume (on their version), cancel, fork (cancel, then fork from the last step on "
                         "--app-version or the latest), or recover the executors' PENDING workflows now")
    fx.add_argument("--app-version", help="fork: the version to fork onto (default: the latest)")
    fx.add_argument("--force", action="store_true", help="recover: also a DISCONNECTED executor (it may still run)")


def _add_queues_schedules_versions(sub: Any) -> None:
    qu = sub.add_parser("queues", help="an application's queues (asks one of its executors)")
    qsub = qu.add_subparsers(dest="action", required=True)
    _app_parser(qsub, "list", "list queues")
    _app_parser(qsub, "get", "show one queue", "queue")

    sc = sub.add_parser("schedules", help="an application's schedules (asks one of its executors)")
    ssub = sc.add_subparsers(dest="action", required=True)
    ls = _app_parser(ssub, "list", "list schedules")
    ls.add_argument("--status", help="only this status (ACTIVE, PAUSED)")
    ls.add_argument("--workflow-name", help="only schedules of this workflow")
    ls.add_argument("--prefix", help="only schedules whose name starts so")
    ls.add_argument("--load-context", action="store_true", help="include each schedule's context")
    _app_parser(ssub, "get", "show one schedule", "schedule")
    _app_parser(ssub, "pause", "pause a schedule", "schedule")
    _app_parser(ssub, "resume", "resume a paused schedule", "schedule")
    _app_parser(ssub, "trigger", "run a schedule's workflow now", "schedule")
    bf = _app_parser(ssub, "backfill", "run a schedule's missed firings between two instants", "schedule")
    bf.add_argument("--start", required=True, help="RFC 3339 instant, e.g. 2026-11-30T00:00:00Z")
    bf.add_argument("--end", required=True, help="RFC 3339 instant")

    ve = sub.add_parser("versions", help="an application's versions")
    vsub = ve.add_subparsers(dest="action", required=True)
    _app_parser(vsub, "list", "list application versions")
    _app_parser(vsub, "set-latest", "make this version the latest (Relay asks its executors first to resume and fork)", "version")

    au = sub.add_parser("autoscaling", help="an application's autoscaling policy and recommendation (docs/autoscaling.md)")
    asub = au.add_subparsers(dest="action", required=True)
    _app_parser(asub, "show", "executors each version needs now")
    _app_parser(asub, "policy", "the stored policy")
    st = _app_parser(asub, "set", "store a policy: the queue whose backlog drives it (checked by an executor)", "queue")
    st.add_argument("--max-old-versions", type=_natural_int, help="old versions reported, newest first (a rollout)")
    st.add_argument("--max-old-executors", type=_natural_int, help="cap of every old version (a rollout)")
    _app_parser(asub, "clear", "delete the policy")

    ro = sub.add_parser("roles", help="the org's roles: built-in and its own; served only by a server with OIDC "
                                      "configured (--oidc-issuer; docs/identity.md)")
    rsub = ro.add_subparsers(dest="action", required=True)
    add_common(rsub.add_parser("list", help="every role and its permissions"))
    rc = rsub.add_parser("create", help="make a role of the org")
    rc.add_argument("name")
    rc.add_argument("--permission", action="append", dest="permissions", default=[],
                    help="a permission it carries (repeatable)")
    add_common(rc)
    rd = rsub.add_parser("delete", help="delete one of the org's own roles")
    rd.add_argument("name")
    add_common(rd)

    al = sub.add_parser("alerts", help="an application's alerting rules (docs/alerting.md)")
    alsub = al.add_subparsers(dest="action", required=True)
    _app_parser(alsub, "list", "the rules, with when each last fired")
    mk = _app_parser(alsub, "create", "make a rule: WorkflowFailure, SlowQueue, UnresponsiveApplication, "
                                      "ExecutorDead, RecoveryDeferred, RecoveryFailed or ExecutorFlapping", "rule_type")
    mk.add_argument("--metadata", default="{}", help="the rule's ruleMetadata, a JSON object (its parameters and "
                                                     "webhooks; docs/alerting.md)")
    mk.add_argument("--min-interval", type=_natural_int, help="seconds between two alerts of the rule (default 300)")
    mk.add_argument("--to", dest="receiving_app", help="the application whose executors receive the alert "
                                                       "(default: the watched one)")
    _app_parser(alsub, "delete", "delete a rule", "rule_id")


def _positive_int(text: str) -> int:
    n = _natural_int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return n


def _natural_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return n


def _seconds(text: str) -> float:
    try:
        secs = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= secs < math.inf:
        raise argparse.ArgumentTypeError(f"expected a number of seconds of at least 0, got {text!r}")
    return secs


def _nullable_int(text: str) -> int | None:
    if text.lower() == "null":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'null', got {text!r}") from None


class Client:
    def __init__(self, args: argparse.Namespace) -> None:
        token = _token(args.token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        base = _base_url(args.server)
        self.deadline = Deadline(f"no whole reply within {REQUEST_TIMEOUT_SECS}s", monotonic=time.monotonic)
        self.http = httpx.Client(base_url=base, headers=headers, timeout=REQUEST_TIMEOUT_SECS)
        _bound_by(self.http, self.deadline)
        self.org = args.org

    def call(self, method: str, path: str, **kw: Any) -> Any:
        return self._json(self._send(self._request(method, path, **kw)))

    def pages(self, path: str, params: dict[str, Any]) -> list[Any]:
        """Every page of a list the server pages with ``Link: <next>; rel="next"``: at most
        :data:`MAX_PAGES` of them and :data:`MAX_REPLY_BYTES` together; a link to a page already read
        is refused (the pages would never end)."""
        out: list[Any] = []
        request = self._request("GET", path, params=params)
        read: set[httpx.URL] = set()
        size = 0
        while True:
            read.add(request.url)
            r = self._send(request)
            size += len(r.content)
            if size > MAX_REPLY_BYTES:
                raise CliError(f"the server's pages are larger than {MAX_REPLY_BYTES // (1 << 20)} MiB together")
            out.extend(_list(self._json(r), "pages"))
            nxt = r.links.get("next", {}).get("url")
            if not nxt:
                return out
            if not nxt.startswith("/") or nxt.startswith("//"):  # the token goes to this server only
                raise CliError(f"the server linked a next page elsewhere: {_clip(nxt)!r}")
            if len(read) >= MAX_PAGES:
                raise CliError(f"the server linked a next page after {MAX_PAGES} pages ({len(out)} rows); stopped")
            request = self._request("GET", nxt, linked=True)
            if request.url in read:
                raise CliError(f"the server linked a page already read as the next: {_clip(nxt)!r}")

    def _request(self, method: str, path: str, *, linked: bool = False, **kw: Any) -> httpx.Request:
        """The request for ``path``, under ``--server``'s own path. A path this command built (every
        one but a server's ``linked`` next page) is sent exactly as built or not at all: httpx would
        remove a dot segment (the request reaching the path above) or encode a character again."""
        try:
            request = self.http.build_request(method, path, **kw)
        except httpx.InvalidURL as e:
            raise CliError(f"cannot make a URL of {_clip(path)!r}: {e}", 2) from None
        if not linked:
            built = self.http.base_url.raw_path + path.lstrip("/").encode("utf-8", "surrogatepass")
            sent = request.url.raw_path.split(b"?", 1)[0]
            if sent != built:
                raise CliError(f"the path {_clip(path)!r} would be sent as {_clip(sent.decode('ascii', 'replace'))!r}"
                               ": not sent", 2)
        return request

    def _send(self, request: httpx.Request) -> httpx.Response:
        """The reply with its whole body, decoded, within :data:`REQUEST_TIMEOUT_SECS` of now (a redirect
        is not followed)."""
        self.deadline.start(REQUEST_TIMEOUT_SECS)
        try:
            r = self.http.send(request, stream=True)
            try:
                body = _read(r, self.deadline)
            finally:
                r.close()
        except httpx.LocalProtocolError:  # its text quotes the header it refused, which may be the token
            raise CliError("cannot send the request: a header or value of it cannot be sent over HTTP", 2) from None
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise Unavailable(f"the server did not send its whole reply within {REQUEST_TIMEOUT_SECS}s", 2) from None
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as e:
            raise Unavailable(f"cannot reach {self.http.base_url}: {e}", 2) from None
        except httpx.HTTPError as e:
            raise CliError(f"cannot reach {self.http.base_url}: {e}", 2) from None
        except UnicodeError as e:  # the host, as the resolver is asked for it (an empty label, one too long)
            raise CliError(f"cannot reach {self.http.base_url}: its host is not a valid name ({e})", 2) from None
        # the body as read: decoded already, so no Content-Encoding is applied to it again
        headers = [(k, v) for k, v in r.headers.raw if k.lower() != b"content-encoding"]
        return httpx.Response(r.status_code, headers=headers, content=body, request=request)

    @staticmethod
    def _json(r: httpx.Response) -> Any:
        if 300 <= r.status_code < 400:  # not followed: the token goes to --server only
            where = r.headers.get("Location")
            to = f" to {_clip(where)!r}" if where else ""
            raise CliError(f"{r.status_code} a redirect{to}, not followed (the token goes to --server only; "
                           "give it that URL if it is Relay)")
        if not r.is_success:
            details: list[str] = []
            try:
                body = _parse(r)
                msg = (body.get("detail") or body.get("title") or r.text) if isinstance(body, dict) else r.text
            except ValueError:
                msg = r.text.strip() or r.reason_phrase
            else:  # a problem's errors its detail does not already say (a 409's reasons, by id)
                errors = body.get("errors") if isinstance(body, dict) else None
                for e in errors if isinstance(errors, list) else []:
                    if isinstance(e, dict) and str(e.get("message", "")) not in str(msg):
                        details.append(_clip(f"{e.get('location', '')}: {e.get('message', '')}"))
            if len(details) > MAX_DETAILS:
                details[MAX_DETAILS:] = [f"(and {len(details) - MAX_DETAILS} more)"]
            msg = _clip(str(msg))
            if r.status_code == 503 and r.headers.get("Retry-After", "").isdigit():
                msg = f"{msg} (retry in {_clip(r.headers['Retry-After'])}s)"
            error = Unavailable if r.status_code in (502, 503, 504) else CliError
            raise error(f"{r.status_code} {msg}", details=tuple(details), status=r.status_code)
        if r.status_code == 204 or not r.content:
            return None
        try:
            return _parse(r)
        except _Refused as e:
            raise CliError(f"{r.status_code} from the server, but not JSON: {e}") from None
        except ValueError:
            raise CliError(f"{r.status_code} from the server, but not JSON: {_clip(r.text)}") from None


class _Refused(ValueError):
    """A reply Python's parser reads but that is not JSON to print: NaN, Infinity, too deep a nesting."""


def _parse(r: httpx.Response) -> Any:
    """``r``'s body as JSON; NaN and ±Infinity (not JSON: ``--json`` would print them as they came) and a
    nesting deeper than the parser recurses are :class:`_Refused`."""
    try:
        return r.json(parse_constant=_constant)
    except RecursionError:
        raise _Refused("it is nested too deeply") from None


def _constant(name: str) -> Any:
    raise _Refused(f"it holds {name}")


def _json_flag(flag: str, text: str) -> Any:
    """A flag's JSON, read as a reply is (:func:`_parse`): NaN, ±Infinity and a nesting deeper than the
    parser recurses are not JSON either; a usage error."""
    try:
        return json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise CliError(f"{flag} is not JSON: it is nested too deeply", 2) from None
    except ValueError as e:
        raise CliError(f"{flag} is not JSON: {e}", 2) from None


def _base_url(server: str) -> httpx.URL:
    """``--server`` as the URL every call is made under: no user name or password (the token is
    ``--token``'s, and httpx would send them instead; a text that holds them is never shown), no
    query or fragment (the paths would land in them), a host that can be a name."""
    if "@" in server.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]:
        raise CliError("--server holds a user name or password (give the token with --token); it is not shown "
                       "here", 2)
    try:
        url = httpx.URL(server.rstrip("/"))
        url.host  # noqa: B018  # decoded when read: an IDNA label that is not one raises then
    except (httpx.InvalidURL, UnicodeError) as e:
        raise CliError(f"--server {_clip(server)!r} is not a URL: {e}", 2) from None
    if url.userinfo:
        raise CliError("--server holds a user name or password (give the token with --token); it is not shown "
                       "here", 2)
    if url.query or url.fragment or "?" in server or "#" in server:
        raise CliError(f"--server {_clip(server)!r} has a query or fragment: give Relay's URL alone", 2)
    return url


def _bound_by(http: httpx.Client, deadline: Deadline) -> None:
    """Every connection ``http`` opens, to the server or to a proxy of the environment, on ``deadline``:
    httpx takes no network backend, the httpcore pool of each of its transports (``_pool``) does."""
    for transport in (http._transport, *http._mounts.values()):
        pool = getattr(transport, "_pool", None)
        if hasattr(pool, "_network_backend"):
            pool._network_backend = deadline


def _token(raw: str | None) -> str | None:
    """``--token`` (``RELAY_TOKEN``) without the whitespace around it (a file's last newline); one
    holding a character no header carries is refused, and never shown."""
    token = (raw or "").strip()
    if any(not "!" <= ch <= "~" for ch in token):  # visible ASCII only, as a Bearer token is
        raise CliError("the token (--token, RELAY_TOKEN) holds a character that cannot be sent in a header "
                       "(a space, a control character or non-ASCII); it is not shown here", 2)
    return token or None


def _read(r: httpx.Response, deadline: Deadline) -> bytes:
    """The body of ``r``, decoded, read as it arrives: past ``deadline`` or :data:`MAX_REPLY_BYTES` it
    is refused. Of an error only its first :data:`MAX_PROBLEM_BYTES` are read."""
    most = MAX_REPLY_BYTES if r.is_success else MAX_PROBLEM_BYTES
    body = bytearray()
    for chunk in r.iter_bytes():
        body += chunk
        if deadline.passed():  # decoding takes time too
            raise Unavailable(f"the server did not send its whole reply within {REQUEST_TIMEOUT_SECS}s", 2)
        if len(body) > most:
            if not r.is_success:
                return bytes(body[:most])
            raise CliError(f"the server's reply is larger than {MAX_REPLY_BYTES // (1 << 20)} MiB")
    return bytes(body)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


# Control characters (C0, DEL, C1), format characters (bidirectional overrides,
# zero-width ones), the Unicode line and paragraph separators, and lone surrogates
# (JSON's "\ud800": no encoding can write one).
_UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}


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


MAX_COLUMN = 60  # terminal columns of a table's column; a longer cell is cut, ending in "…"


def _columns(ch: str) -> int:
    """Terminal columns ``ch`` takes: a wide or full-width character (CJK) two, a combining mark none
    (it sits on the character before it), any other one. ``printable`` has escaped the rest."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    """Terminal columns ``text`` takes (:func:`_columns`): what tables pad by, not its length."""
    return sum(_columns(ch) for ch in text)


def _fit(text: str, columns: int) -> str:
    """``text`` in exactly ``columns`` terminal columns: padded with spaces, or cut and ended with "…"."""
    if width(text) > columns:
        kept, used = [], 0
        for ch in text:
            w = _columns(ch)
            if used + w > columns - 1:
                break
            kept.append(ch)
            used += w
        text = "".join(kept) + "…"
    return text + " " * (columns - width(text))


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [min(max([width(c)] + [width(row[i]) for row in cells]), MAX_COLUMN) for i, c in enumerate(columns)]
    lines = ["  ".join(_fit(c, w) for c, w in zip(columns, widths)).rstrip()]
    for row in cells:
        lines.append("  ".join(_fit(v, w) for v, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def emit(args: argparse.Namespace, data: Any, kind: str, columns: list[str] | None = None) -> None:
    """``data`` as JSON (``--json``, as it came), else a list of ``kind`` (a kind of :data:`COLUMNS`,
    or one given ``columns``) as a table of those columns, and one ``kind`` (any other) as a
    key/value listing; an answer of another shape is refused."""
    if args.json:
        print(json.dumps(data, indent=2))
        return
    columns = columns or COLUMNS.get(kind)
    if columns is not None:
        rows = _objects(_list(data, kind))
        print(table(rows, columns) if rows else f"(no {kind})")
    elif isinstance(data, dict):
        keys = max(width(printable(k)) for k in data) if data else 0
        for k, v in data.items():
            print(f"{printable(k)}{' ' * (keys - width(printable(k)))}  {_cell(v)}")
    else:
        raise CliError(f"the server's answer is not a {kind} (an object)")


def run(args: argparse.Namespace) -> int:
    try:
        code = _run(args)
        sys.stdout.flush()  # here, not at exit: a reader gone is the BrokenPipeError below
        return code
    except CliError as e:
        print(f"relay: {printable(str(e))}", file=sys.stderr)
        for line in e.details:
            print(f"  {printable(line)}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _drop_stdout()
        return 141  # as a shell reports a command that SIGPIPE ended


def _drop_stdout() -> None:
    """stdout's reader is gone (``relay events -f | head -1``): what is still buffered goes to
    /dev/null, so the flush at exit raises nothing (as Python's documentation of SIGPIPE does)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout that is no file (captured)
        pass


def seg(name: str) -> str:
    """One path segment: a name typed by the user, or an executor id, cannot reach another path.

    ``.`` and ``..`` are sent as ``%2E`` and ``%2E%2E`` (the server reads them back as the name):
    quoted as they are, httpx removes them as dot segments, and ``workflows delete .. --app victim``
    was ``DELETE .../apps/victim``, the application. An empty name would leave a path of another
    shape (``apps/``) and is refused. :meth:`Client._request` checks the path sent is the path built."""
    if not name:
        raise CliError("a name in the path is empty (an application, an org, an id...): give one", 2)
    if name in (".", ".."):
        return name.replace(".", "%2E")
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
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "app")
        elif action == "show":
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "app")
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
            emit(args, c.call("GET", f"{base}/apps/{seg(args.app)}"), "app")
        elif action == "delete":
            c.call("DELETE", f"{base}/apps/{seg(args.app)}")
            if not args.json:
                print(f"deleted {printable(args.app)}")
    elif cmd == "tokens":
        if action == "list":
            emit(args, c.call("GET", f"{base}/tokens", params=EXTENDED), "tokens")
        elif action == "create":
            body: dict[str, Any] = {"appNames": args.apps} if args.apps else {}
            if args.permissions:
                body["permissions"] = args.permissions
            created = c.call("POST", f"{base}/tokens/{seg(args.name)}", json=body)
            secret = _field(created, "token")
            if args.json:
                print(json.dumps(created, indent=2))
            else:  # the note on stderr, as admin create-token's: stdout is the secret alone
                print(f"token {_cell(_field(created, 'tokenName'))} created; this is the only time its secret is "
                      "shown:", file=sys.stderr)
                print(_cell(secret))
        elif action == "revoke":
            c.call("DELETE", f"{base}/tokens/{seg(args.name)}")
            if not args.json:
                print(f"revoked {printable(args.name)}")
    elif cmd == "executors":
        params = {**EXTENDED, **({"asOf": args.as_of} if args.as_of else {})}
        emit(args, c.pages(f"{base}/apps/{seg(args.app)}/executors", params), "executors")
    elif cmd == "history":
        emit(args, _history(c, f"{base}/apps/{seg(args.app)}/executors/{seg(args.executor)}/history"), "history")
    elif cmd == "events":
        return _events(args, c, base)
    elif cmd == "audit":
        _audit(args, c, base)
    elif cmd == "metrics":
        _metrics(args, c, f"{base}/apps/{seg(args.app)}")
    elif cmd == "workflows":
        _workflows(args, c, f"{base}/apps/{seg(args.app)}")
    elif cmd == "autoscaling":
        _autoscaling(args, c, f"{base}/apps/{seg(args.app)}")
    elif cmd == "alerts":
        _alerts(args, c, f"{base}/apps/{seg(args.app)}")
    elif cmd == "roles":
        _roles(args, c, base)
    elif cmd in ("queues", "schedules", "versions"):
        _queues_schedules_versions(args, c, f"{base}/apps/{seg(args.app)}")
    return 0


ROLES_NEED_OIDC = ("roles are served only when the server has OIDC configured (relay serve --oidc-issuer), "
                   "for its OIDC org (--oidc-org)")


def _roles(args: argparse.Namespace, c: Client, base: str) -> None:
    """``roles list|create|delete``. Roles are Conductor's OAuth-only operations: a server without OIDC
    answers them 404 (docs/identity.md), which is said plainly here. A 404 to ``delete`` is also an
    unknown role: it is said so only when listing the roles is a 404 too."""
    try:
        if args.action == "list":
            emit(args, c.call("GET", f"{base}/roles"), "roles")
        elif args.action == "create":
            emit(args, c.call("POST", f"{base}/roles", json={"name": args.name, "permissions": args.permissions}),
                 "role")
        else:
            c.call("DELETE", f"{base}/roles/{seg(args.name)}")
            _done(args, f"role {printable(args.name)} deleted")
    except CliError as e:
        if e.status != 404 or args.action == "delete" and _roles_served(c, base):
            raise
        raise CliError(f"{ROLES_NEED_OIDC}: the server answered {e}", details=e.details, status=404) from None


def _roles_served(c: Client, base: str) -> bool:
    """Whether the server lists the org's roles; True when it answers anything but a 404 (a refusal,
    an outage: the first answer stands)."""
    try:
        c.call("GET", f"{base}/roles")
    except CliError as e:
        return e.status != 404
    return True


def _history(c: Client, path: str) -> list[dict[str, Any]]:
    """An executor's events, every page (up to 1000 events each, by version; at most :data:`MAX_PAGES`)."""
    events: list[dict[str, Any]] = []
    after: int | None = None
    for _ in range(MAX_PAGES):
        page = _objects(_list(c.call("GET", path, params={} if after is None else {"after": after}), "events"))
        events.extend(page)
        if len(page) < 1000:
            return events
        after = _advance(page[-1], "version", after)
    raise CliError(f"the server's history goes on after {MAX_PAGES} pages ({len(events)} events); stopped")


def _advance(row: dict[str, Any], key: str, after: int | None) -> int:
    """``row[key]``, where the next page starts: a whole number past ``after``, the last one's
    (pages that do not move on would be asked for ever)."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CliError(f"the server's answer has an entry with no whole-number {key}")
    if after is not None and value <= after:
        raise CliError(f"the server's next entries do not move past {key} {after}")
    return value


def _done(args: argparse.Namespace, text: str) -> None:
    """An action's one line (nothing with ``--json``: the server answered no content)."""
    if not args.json:
        print(text)


def _workflows(args: argparse.Namespace, c: Client, app: str) -> None:
    action = args.action
    wid = getattr(args, "workflow_id", None)
    one = f"{app}/workflows/{seg(wid)}" if wid is not None else ""
    shown = printable(wid or "")
    if action == "list":
        method, path, kw = _list_workflows(args, f"{app}/workflows")
        rows = c.call(method, path, **kw)
        columns = (COLUMNS["workflows"] + (["input"] if args.load_input else [])
                   + (["output", "error"] if args.load_output else []))
        emit(args, rows, "workflows", columns)
        if not args.json and isinstance(rows, list) and args.limit and len(rows) == args.limit:
            print(f"({len(rows)} shown; --offset {(args.offset or 0) + len(rows)} for the next)", file=sys.stderr)
    elif action == "get":
        emit(args, c.call("GET", one), "workflow")
    elif action == "steps":
        params = {k: v for k, v in (("limit", args.limit), ("offset", args.offset)) if v is not None}
        emit(args, c.call("GET", f"{one}/steps", params=params), "steps")
    elif action == "cancel":
        c.call("POST", f"{one}/cancel", json={"cancelChildren": True} if args.cancel_children else {})
        _done(args, f"cancelled {shown}" + (" and its children" if args.cancel_children else ""))
    elif action == "resume":
        c.call("POST", f"{one}/resume", json={"queueName": args.queue} if args.queue is not None else {})
        _done(args, f"resumed {shown}")
    elif action == "fork":
        body: dict[str, Any] = {}
        for key, value in (("startStep", args.start_step), ("newWorkflowId", args.new_workflow_id),
                           ("appVersion", args.app_version), ("queueName", args.queue),
                           ("queuePartitionKey", args.partition_key)):
            if value is not None:
                body[key] = value
        forked = c.call("POST", f"{one}/fork", json=body)
        if args.json:
            print(json.dumps(forked, indent=2))
        else:
            print(f"forked {shown}: new workflow {_cell(_field(forked, 'workflowId'))}")
    elif action == "delete":
        c.call("DELETE", one, params={"deleteChildren": True} if args.children else {})
        _done(args, f"deleted {shown}" + (" and its children" if args.children else ""))
    elif action == "stranded":
        params = {k: v for k, v in (("limit", args.limit), ("offset", args.offset)) if v is not None}
        if args.relay_only:
            params["relayOnly"] = True
        _stranded(args, c.call("GET", f"{app}/stranded-workflows", params=params))
    elif action == "fix-stranded":
        _fix_stranded(args, c, f"{app}/stranded-workflows/fix")


def _list_workflows(args: argparse.Namespace, path: str) -> tuple[str, str, dict[str, Any]]:
    """The call ``workflows list`` makes: Conductor's listWorkflows (``GET``, its query) when its
    filters say it all (one status, one name), else searchWorkflows (``POST .../search``, the
    filters in its body)."""
    lists = {key: getattr(args, flag[2:].replace("-", "_")) for key, (flag, _) in SEARCH_LISTS.items()}
    lists = {key: values for key, values in lists.items() if values}
    common: dict[str, Any] = {"limit": args.limit, "sortDesc": not args.oldest_first}
    if args.offset is not None:
        common["offset"] = args.offset
    if args.load_input:
        common["loadInput"] = True
    if args.load_output:
        common["loadOutput"] = True
    searched = (set(lists) - {"status", "workflowName"} or any(len(v) > 1 for v in lists.values())
                or args.since or args.until or args.queued_only)
    if not searched:
        return "GET", path, {"params": {**{k: v[0] for k, v in lists.items()}, **common}}
    body = {**lists, **common}
    for key, value in (("startTime", args.since), ("endTime", args.until)):
        if value is not None:
            body[key] = value
    if args.queued_only:
        body["queuesOnly"] = True
    return "POST", f"{path}/search", {"json": body}


def _stranded(args: argparse.Namespace, answer: Any) -> None:
    """Relay's stranded work as three tables (workflows, the queues they block, the executors
    not alive) and where the next page starts; ``workflows`` and ``queues`` are null with
    ``--relay-only``."""
    if args.json:
        print(json.dumps(answer, indent=2))
        return
    if not isinstance(answer, dict) or not isinstance(answer.get("executors"), list):
        raise CliError("the server's stranded-workflows answer is not Relay's listing")
    workflows, queues, executors = answer.get("workflows"), answer.get("queues"), answer["executors"]
    if answer.get("relayOnly"):
        print("(relay only: no executor was asked, so no workflows or queues)")
    else:
        if not isinstance(workflows, list) or not isinstance(queues, list):
            raise CliError("the server's stranded-workflows answer has no workflows or queues")
        print(f"stranded workflows ({len(workflows)} of {_cell(answer.get('examined'))} PENDING examined):")
        emit(args, [{**w, "fixes": _fixes(w)} for w in _objects(workflows)], "stranded workflows")
        print(f"\nblocked queues ({len(queues)}):")
        emit(args, [{**q, "enqueued": f"{_cell(q.get('enqueued'))}+" if q.get("enqueuedCapped") else q.get("enqueued")}
                    for q in _objects(queues)], "blocked queues")
    print(f"\nexecutors not alive ({len(executors)}):")
    emit(args, [{**_state(e.get("relayState")), **e, "fixes": _fixes(e)} for e in _objects(executors)],
         "executors not alive")
    if answer.get("nextOffset") is not None:
        print(f"\nmore PENDING workflows: --offset {_cell(answer['nextOffset'])} for the next page")


def _list(answer: Any, kind: str) -> list[Any]:
    if not isinstance(answer, list):
        raise CliError(f"the server's answer is not a list of {kind}")
    return answer


def _objects(rows: list[Any]) -> list[dict[str, Any]]:
    if not all(isinstance(r, dict) for r in rows):
        raise CliError("the server answered a list whose items are not all objects")
    return rows


def _state(relay_state: Any) -> dict[str, Any]:
    """An executor's ``relayState`` as columns (null: Relay has no record of it)."""
    return relay_state if isinstance(relay_state, dict) else {"status": "(unknown to Relay)"}


def _fixes(row: dict[str, Any]) -> Any:
    fixes = row.get("fixes")
    return ",".join(map(str, fixes)) if isinstance(fixes, list) else fixes


def _fix_stranded(args: argparse.Namespace, c: Client, path: str) -> None:
    """``fix-stranded``: one call, its answer summed up (``--json``: as it came)."""
    if args.app_version is not None and args.fix != "fork":
        raise CliError("--app-version is fork's", 2)
    if args.force and args.fix != "recover":
        raise CliError("--force is recover's", 2)
    body: dict[str, Any] = {"fix": args.fix}
    if args.fix == "recover":
        body["executorIds"] = args.ids
        if args.force:
            body["force"] = True
    else:
        body["workflowIds"] = args.ids
        if args.app_version is not None:
            body["appVersion"] = args.app_version
    done = c.call("POST", path, json=body)
    if args.json:
        print(json.dumps(done, indent=2))
        return
    if args.fix == "recover":
        groups = _field(done, "recovered")
        for g in _objects(groups if isinstance(groups, list) else [groups]):
            ids = g.get("executorIds")
            print(f"recovering {', '.join(map(_cell, ids)) if isinstance(ids, list) else _cell(ids)} "
                  f"with an executor of version {_cell(g.get('appVersion'))}")
    elif args.fix == "fork":
        forked = _field(done, "forkedWorkflowIds")
        if not isinstance(forked, list):
            raise CliError("the server's forkedWorkflowIds is not a list")
        print(f"cancelled {len(args.ids)} workflow(s) and forked them from their last step; new workflows:")
        for wid in forked:
            print(_cell(wid))
    else:
        print(f"{'resumed' if args.fix == 'resume' else 'cancelled'} {len(args.ids)} workflow(s)")


def _field(answer: Any, key: str) -> Any:
    if not isinstance(answer, dict) or key not in answer:
        raise CliError(f"the server's answer has no {key}")
    return answer[key]


def _autoscaling(args: argparse.Namespace, c: Client, app: str) -> None:
    if args.action == "show":
        emit(args, c.call("GET", f"{app}/autoscale"), "recommendations")
    elif args.action == "policy":
        emit(args, c.call("GET", f"{app}/autoscaling-policy"), "policy")
    elif args.action == "set":
        body: dict[str, Any] = {"queue": args.queue}
        rollout = {k: v for k, v in (("maxOldApplicationVersions", args.max_old_versions),
                                     ("maxExecutorsForOldApplicationVersions", args.max_old_executors)) if v is not None}
        if rollout:
            body["rollout"] = rollout
        emit(args, c.call("PUT", f"{app}/autoscaling-policy", json=body), "policy")
    else:
        c.call("DELETE", f"{app}/autoscaling-policy")
        _done(args, f"autoscaling policy of {printable(args.app)} deleted")


def _alerts(args: argparse.Namespace, c: Client, app: str) -> None:
    if args.action == "list":
        emit(args, c.call("GET", f"{app}/alerting-rules"), "alerting rules")
    elif args.action == "create":
        metadata = _json_flag("--metadata", args.metadata)
        body: dict[str, Any] = {"ruleType": args.rule_type, "ruleMetadata": metadata}
        if args.min_interval is not None:
            body["minIntervalSecs"] = args.min_interval
        if args.receiving_app is not None:
            body["receivingAppName"] = args.receiving_app
        emit(args, c.call("POST", f"{app}/alerting-rules", json=body), "alerting rule")
    else:
        c.call("DELETE", f"{app}/alerting-rules/{seg(args.rule_id)}")
        _done(args, f"alerting rule {printable(args.rule_id)} of {printable(args.app)} deleted")


def _queues_schedules_versions(args: argparse.Namespace, c: Client, app: str) -> None:
    cmd, action = args.command, args.action
    if cmd == "queues":
        if action == "get":
            emit(args, c.call("GET", f"{app}/queues/{seg(args.queue)}"), "queue")
        else:
            emit(args, c.call("GET", f"{app}/queues"), "queues")
    elif cmd == "versions":
        if action == "list":
            emit(args, c.call("GET", f"{app}/versions"), "versions")
        else:
            c.call("PATCH", f"{app}/versions/latest", json={"versionName": args.version})
            _done(args, f"latest version of {printable(args.app)} is now {printable(args.version)}")
    elif action == "list":
        params: dict[str, Any] = {k: v for k, v in (("status", args.status), ("workflowName", args.workflow_name),
                                                    ("scheduleNamePrefix", args.prefix)) if v is not None}
        if args.load_context:
            params["loadContext"] = True
        emit(args, c.call("GET", f"{app}/schedules", params=params), "schedules",
             COLUMNS["schedules"] + (["context"] if args.load_context else []))
    else:
        one, shown = f"{app}/schedules/{seg(args.schedule)}", printable(args.schedule)
        if action == "get":
            emit(args, c.call("GET", one), "schedule")
        elif action in ("pause", "resume"):
            c.call("POST", f"{one}/{action}")
            _done(args, f"{'paused' if action == 'pause' else 'resumed'} {shown}")
        elif action == "trigger":
            started = c.call("POST", f"{one}/trigger")
            if args.json:
                print(json.dumps(started, indent=2))
            else:
                print(f"triggered {shown}: workflow {_cell(_field(started, 'workflowId'))}")
        elif action == "backfill":
            done = c.call("POST", f"{one}/backfill", json={"startTime": args.start, "endTime": args.end})
            if args.json:
                print(json.dumps(done, indent=2))
            else:
                ids = _field(done, "workflowIds")
                if not isinstance(ids, list):
                    raise CliError("the server's workflowIds is not a list")
                print(f"backfilled {shown}: {len(ids)} workflow(s)")
                for wid in ids:
                    print(_cell(wid))


def _audit(args: argparse.Namespace, c: Client, base: str) -> None:
    params: dict[str, Any] = {"limit": args.limit, "offset": args.offset}
    for name, value in (("operation", args.operation), ("subject", args.subject), ("target", args.target),
                        ("startTime", args.since), ("endTime", args.until)):
        if value is not None:
            params[name] = value
    entries = c.call("GET", f"{base}/audit-logs", params=params)
    if not args.json:
        entries = [_audit_row(e) for e in _objects(_list(entries, "audit entries"))]
    emit(args, entries, "audit entries", COLUMNS["audit"])


def _metrics(args: argparse.Namespace, c: Client, base: str) -> None:
    now = datetime.now(UTC)
    params = {"startTime": args.since or (now - timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
              "endTime": args.until or now.isoformat().replace("+00:00", "Z")}
    rows = c.call("GET", f"{base}/metrics", params=params)
    if not args.total or not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        emit(args, rows, "metrics", COLUMNS["metrics"])
        return
    sums: dict[tuple[Any, Any], Any] = {}
    for r in rows:
        key = (r.get("metricType"), r.get("metricName"))
        sums[key] = sums.get(key, 0) + (r.get("value") if isinstance(r.get("value"), int) else 0)
    emit(args, [{"metricType": t, "metricName": n, "value": v} for (t, n), v in sorted(sums.items(), key=str)],
         "metrics", COLUMNS["metric totals"])


def _audit_row(e: dict[str, Any]) -> dict[str, Any]:
    """An ``AuditLogEntry`` as a table row: the subject's display, ``type:id`` of the target,
    the outcome and message of its details."""
    details = e.get("details") if isinstance(e.get("details"), dict) else {}
    subject = e.get("subject") if isinstance(e.get("subject"), dict) else {}
    target = e.get("target") if isinstance(e.get("target"), dict) else None
    return {**e, "outcome": details.get("outcome"), "message": details.get("message"),
            "subject": subject.get("display"),
            "target": None if target is None else f"{target.get('type')}:{target.get('id')}"}


def _events(args: argparse.Namespace, c: Client, base: str) -> int:
    """One page of the feed, the oldest after ``--after`` (a table, or a JSON array), a full one followed
    by where the next starts (on stderr); with ``--follow``, every page as it comes."""
    params: dict[str, Any] = {"limit": args.limit}
    if args.app:
        params["app"] = args.app
    if args.executor:
        params["executorId"] = args.executor
    if args.after is not None:
        params["after"] = args.after
    path = f"{base}/executor-events"
    if args.follow:
        return _follow(args, c, path, params)
    entries = _feed(c, path, params)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    print(table(entries, COLUMNS["events"]) if entries else "(no events)")
    if len(entries) >= args.limit:  # the feed has no newest-first order: reading on is the way to the newest
        print(f"({len(entries)} shown; --after {entries[-1]['seq']} for the next)", file=sys.stderr)
    return 0


def _feed(c: Client, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A page of the feed whose last entry's seq, where the next page starts, is a whole number past
    ``after`` (pages that do not move on would be asked for ever)."""
    entries = _objects(_list(c.call("GET", path, params=params), "events"))
    if entries:
        _advance(entries[-1], "seq", params.get("after"))
    return entries


def _follow(args: argparse.Namespace, c: Client, path: str, params: dict[str, Any]) -> int:
    """``events --follow``: every entry as it comes (``--json``: one object a line), until
    interrupted. Once the feed has answered, a server away (:class:`Unavailable`: restarting,
    behind a proxy answering 502-504) is asked again, after :data:`RETRY_SECS` doubling up to its
    longest, from where the last page ended; told once an outage on stderr. Any other error ends it."""
    header = True  # a table's header: printed once, with the first entries
    answered = told = False
    wait = RETRY_SECS[0]
    while True:
        try:
            entries = _feed(c, path, params)
        except Unavailable as e:
            if not answered:
                raise
            if not told:
                print(f"relay: {printable(str(e))}; asking again until it answers (Ctrl-C to stop)",
                      file=sys.stderr, flush=True)
                told = True
            time.sleep(wait)
            wait = min(wait * 2, RETRY_SECS[1])
            continue
        answered, told, wait = True, False, RETRY_SECS[0]
        if entries:
            params["after"] = entries[-1]["seq"]
        if args.json:
            for e in entries:
                print(json.dumps(e), flush=True)
        elif entries:
            text = table(entries, COLUMNS["events"])
            print(text if header else "\n".join(text.splitlines()[1:]), flush=True)
            header = False
        if len(entries) < args.limit:
            time.sleep(args.interval)
