"""Hypothesis fuzzers.

(a) The wire decoder, in process (no server): ``Session.receive`` on
    arbitrary text and bytes and on structurally plausible frames (real and
    random types, pending and random request ids, values shaped after the
    response Structs and then mutated), and ``decode_response_for`` for every
    wire type.
(b) The REST inputs of a live ``relay serve`` on both stores: random JSON
    bodies for PUT/PATCH apps and POST tokens, random path segments and random
    asOf/after/limit/app/executorId query strings. Never a 5xx; the store
    invariants hold afterwards.

Deep nesting is part of every JSON strategy: nesting is how valid JSON
exhausts a recursive decoder. Failures are collected or reported unshrunk
(no shrink phase): shrinking a 3,000-deep frame costs minutes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

import httpx
import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from relay_es.protocol import messages as m
from relay_es.protocol.catalogue import RESPONSES, decode_response_for
from relay_es.protocol.limits import check_executor_info
from relay_es.protocol.messages import UnknownTypeResponse
from relay_es.protocol.session import Answered, Registered, Session, State, Violation
from tests.fake_executor import FakeExecutor
from tests.fault.clients import assert_invariants
from tests.server import RelayServer, TLS

FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck),
                phases=(Phase.explicit, Phase.generate))

WIRE_TYPES = sorted(RESPONSES)
VIOLATION_KINDS = {"binary_frame", "invalid_frame", "unsolicited", "type_mismatch", "malformed_reply", "info_refused",
                   "handshake_frame", "info_out_of_bounds", "late_reply"}

# ------------------------------------------------------------------ JSON


def _deep(depth: int, opener: str) -> str:
    closer = {"[": "]", '{"a":': "}"}[opener]
    return opener * depth + ("0" if opener != "[" else "") + closer * depth


DEEP = "\u2063deep\u2063"  # a string value later replaced by deeply nested raw JSON

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, -(2**63) - 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, -0.0, 1e308, 5e-324, 1e-7]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=30), st.just(DEEP))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12,
)
deep_texts = st.builds(_deep, st.integers(min_value=1, max_value=3000), st.sampled_from(["[", '{"a":']))


def dumps(value: Any, deep: str) -> str:
    """JSON text of ``value``, with every DEEP marker replaced by ``deep``."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).replace(json.dumps(DEEP, ensure_ascii=False), deep)


def shaped(t: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped after a msgspec type, mixed with arbitrary JSON."""
    if depth > 4:
        return scalars
    if isinstance(t, mi.StructType):
        return st.fixed_dictionaries({}, optional={f.encode_name: shaped(f.type, depth + 1) for f in t.fields})
    if isinstance(t, mi.UnionType):
        s: st.SearchStrategy[Any] = st.one_of(*[shaped(x, depth + 1) for x in t.types])
    elif isinstance(t, mi.ListType):
        s = st.lists(shaped(t.item_type, depth + 1), max_size=3)
    elif isinstance(t, mi.DictType):
        s = st.dictionaries(st.text(max_size=8), shaped(t.value_type, depth + 1), max_size=3)
    elif isinstance(t, mi.StrType):
        s = st.one_of(st.text(max_size=20), st.sampled_from(["1796040658645", "", "\x00", "2026-11-30T12:00:00Z"]))
    elif isinstance(t, mi.BoolType):
        s = st.booleans()
    elif isinstance(t, mi.IntType):
        s = numbers
    elif isinstance(t, mi.FloatType):
        s = numbers
    elif isinstance(t, mi.NoneType):
        s = st.none()
    elif isinstance(t, mi.LiteralType):
        s = st.sampled_from(list(t.values))
    else:
        s = json_values
    return st.one_of(s, s, s, json_values)  # mostly well-typed, sometimes anything


SHAPES = {name: shaped(mi.type_info(cls)) for name, cls in RESPONSES.items()}
SHAPES["unknown"] = shaped(mi.type_info(UnknownTypeResponse))


# --------------------------------------------------------- (a) the decoder


class Probe(m.Request, kw_only=True):
    """A request of any wire type, to have a session wait for its answer."""

    TYPE: ClassVar[str] = "probe"


def new_session(state: str, catalogue: bool) -> Session:
    counter = itertools.count()
    session = Session(new_request_id=lambda: f"req-{next(counter)}", responses=RESPONSES if catalogue else None)
    info = json.loads(session.open())
    if state == "registered":
        events = session.receive(json.dumps({"type": "executor_info", "request_id": info["request_id"],
                                             "executor_id": "E", "application_version": "v1"}))
        assert isinstance(events[0], Registered)
        for t in (WIRE_TYPES if catalogue else sorted(m.CORE_RESPONSES)):
            if t != "executor_info":
                session.request(lambda rid, t=t: Probe(type=t, request_id=rid))
    return session


def check_events(session: Session, before: dict[str, str], events: list[Any]) -> None:
    """Only the documented event types, each consistent with what was pending."""
    assert isinstance(events, list)
    for ev in events:
        assert isinstance(ev, (Registered, Answered, Violation)), ev
        if isinstance(ev, Violation):
            assert ev.kind in VIOLATION_KINDS and isinstance(ev.detail, str), ev
        elif isinstance(ev, Answered):
            assert before.get(ev.request_id) == ev.type, (ev, before)
            assert isinstance(ev.response, m.Response) and ev.request_id not in session.pending
            assert isinstance(ev.response.failed, bool)
        else:
            assert session.state is State.REGISTERED and isinstance(ev.info, m.ExecutorInfoResponse)
            assert isinstance(ev.info.executor_id, str) and ev.info.executor_id
            check_executor_info(ev.info)  # nothing out of bounds registers
    assert set(session.pending) <= set(before)


@settings(FUZZ, max_examples=1000)
@given(state=st.sampled_from(["awaiting", "registered"]), catalogue=st.booleans(),
       data=st.one_of(st.text(), st.binary(), json_values.map(lambda v: dumps(v, "[]")),
                      deep_texts, st.text().map(str.encode)))
def test_session_receive_never_raises_on_arbitrary_input(state: str, catalogue: bool, data: str | bytes) -> None:
    """Invariant: ``Session.receive`` turns any frame into a list of
    Registered / Answered / Violation and never raises."""
    session = new_session(state, catalogue)
    before = dict(session.pending)
    check_events(session, before, session.receive(data))


@st.composite
def plausible_frames(draw: st.DrawFn, pending: dict[str, str]) -> str | bytes:
    ids = list(pending)
    type_ = draw(st.one_of(st.sampled_from(WIRE_TYPES), st.sampled_from(sorted(set(pending.values())) or ["x"]),
                           st.text(max_size=12), json_values))
    rid = draw(st.one_of(st.sampled_from(ids or ["none"]), st.sampled_from(ids or ["none"]), st.text(max_size=40),
                         json_values))
    shape_of = type_ if isinstance(type_, str) and type_ in SHAPES else pending.get(rid, "unknown") \
        if isinstance(rid, str) else "unknown"
    body = draw(SHAPES.get(shape_of, SHAPES["unknown"]))
    body = dict(body)
    if draw(st.integers(0, 9)):
        body["type"] = type_
    if draw(st.integers(0, 9)):
        body["request_id"] = rid
    extra = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
    for k, v in extra.items():
        body.setdefault(k, v)
    if draw(st.integers(0, 3)) == 0:
        body[draw(st.text(max_size=5))] = DEEP
    deep = draw(st.one_of(st.just("[]"), deep_texts))
    text = dumps(body, deep)
    return text.encode() if draw(st.integers(0, 19)) == 0 else text


@settings(FUZZ, max_examples=1000)
@given(state=st.sampled_from(["awaiting", "registered"]), catalogue=st.booleans(), data=st.data())
def test_session_receive_plausible_frames(state: str, catalogue: bool, data: st.DataObject) -> None:
    """Invariant: for frames that look like answers (real and random types,
    pending and random request ids, field values shaped after the response
    Structs and mutated), ``Session.receive`` never raises, only returns the
    documented events, answers only requests that were pending (each once, with
    the type that was asked) and registers only in answer to executor_info."""
    session = new_session(state, catalogue)
    for _ in range(data.draw(st.integers(1, 6))):
        before = dict(session.pending)
        frame = data.draw(plausible_frames(before))
        events = session.receive(frame)
        check_events(session, before, events)
        if session.state is State.CLOSED:
            break


info_strings = st.one_of(st.none(), st.text(max_size=20), st.text(max_size=400),
                         st.sampled_from(["web\u00001", "x" * 5000, "a\nb", "\u202e", "ok"]))


@settings(FUZZ, max_examples=1000)
@given(executor_id=info_strings, version=info_strings, hostname=info_strings, language=info_strings,
       dbos_version=info_strings, metadata=st.one_of(json_values, st.dictionaries(st.text(max_size=8), json_values)))
def test_executor_info_registers_only_within_bounds(executor_id: Any, version: Any, hostname: Any, language: Any,
                                                   dbos_version: Any, metadata: Any) -> None:
    """Invariant: an executor_info reply with any strings and any metadata
    either registers with every field within the bounds of
    ``relay_es.protocol.limits`` (no NUL or control character, lengths, a
    metadata object within its cap) or is one fatal violation that closes the
    session; it never raises."""
    session = Session()
    rid = json.loads(session.open())["request_id"]
    frame = dumps({"type": "executor_info", "request_id": rid, "executor_id": executor_id,
                   "application_version": version, "hostname": hostname, "language": language,
                   "dbos_version": dbos_version, "executor_metadata": metadata}, "[]")
    events = session.receive(frame)
    assert len(events) == 1
    if isinstance(events[0], Registered):
        check_executor_info(events[0].info)
        assert session.state is State.REGISTERED
    else:
        assert isinstance(events[0], Violation) and events[0].fatal and session.state is State.CLOSED
        assert "\x00" not in events[0].detail


def test_decode_response_for_decodes_every_wire_type() -> None:
    """Every wire type has a response Struct that decodes the minimal answer
    (the envelope and the required fields) and a failure answer, and unknown
    types decode generically: the fuzzer below explores from these."""
    for type_name in WIRE_TYPES + ["no_such_type"]:
        cls = RESPONSES.get(type_name, UnknownTypeResponse)
        minimal = {"type": type_name, "request_id": "r"}
        minimal.update({f.encode_name: "x" for f in mi.type_info(cls).fields
                        if f.required and f.encode_name not in minimal})
        assert type(decode_response_for(type_name, json.dumps(minimal))) is cls
        failed = decode_response_for(type_name, json.dumps({**minimal, "error_message": "Unknown message type"}))
        assert failed.failed is True


@settings(FUZZ, max_examples=1500)
@given(data=st.data(), type_name=st.sampled_from(WIRE_TYPES + ["no_such_type"]),
       deep=st.one_of(st.just("[]"), deep_texts))
def test_decode_response_for_raises_only_msgspec_errors(data: st.DataObject, type_name: str, deep: str) -> None:
    """Invariant: ``decode_response_for(type, frame)`` returns the type's
    response Struct (whose ``failed`` is a bool) or raises
    ``msgspec.DecodeError`` / ``msgspec.ValidationError``; nothing else, for
    every wire type and any JSON value."""
    cls = RESPONSES.get(type_name, UnknownTypeResponse)
    shape = SHAPES.get(type_name, SHAPES["unknown"])
    value = data.draw(st.one_of(shape, shape, json_values))
    if isinstance(value, dict) and data.draw(st.integers(0, 3)) == 0:
        value[data.draw(st.text(max_size=5))] = DEEP
    frame = dumps(value, deep)
    try:
        out = decode_response_for(type_name, frame)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    assert isinstance(out, cls)
    assert isinstance(out.failed, bool)


# ------------------------------------------------------------ (b) REST


@pytest.fixture
def live(tmp_path: Path, store_url: str) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url],
                    env={"RELAY_PING_INTERVAL_SECS": "1", "RELAY_PING_WAIT_SECS": "2",
                         "RELAY_RESTART_SETTLE_SECS": "0.5"}).start()
    yield s
    s.stop()


CAMEL = ["executorTimeoutSecs", "gcTimeThresholdMs", "gcRowsThreshold", "globalTimeoutMs", "privateMode",
         "appNames", "name", "orgId", "status", "language", "tokenName", "dbosCloud", "id"]
bodies = st.one_of(
    json_values,
    st.dictionaries(st.one_of(st.sampled_from(CAMEL), st.text(max_size=12)),
                    st.one_of(numbers, numbers, json_values, st.lists(st.sampled_from(["fz-a", "fz-b", "x y"]))),
                    max_size=5),
)
raw_bodies = st.one_of(
    st.builds(dumps, bodies, st.one_of(st.just("[]"), deep_texts)).map(str.encode),
    st.binary(max_size=40), st.just(b""), st.text(max_size=40).map(str.encode),
)
# (segment, sent raw?) raw segments go on the wire as they are, '%' and all
segments = st.one_of(
    st.tuples(st.text(min_size=1, max_size=30), st.just(False)),
    st.tuples(st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "🙂", "%", "-"]), st.integers(100, 3000)),
              st.just(False)),
    st.tuples(st.text(alphabet="%0123456789abcdefxzAF./-_~", min_size=1, max_size=12), st.just(True)),
    st.tuples(st.sampled_from([".", "..", "%", "%%", "%zz", "%00", "%2e%2e", "%2F", "%C3%A9", "%ff",
                               "local", "fz-a", "fz-b"]), st.just(True)),
)
names = st.one_of(st.sampled_from([("fz-a", True), ("fz-b", True), ("tok-1", True)]), segments)
offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda m_: ("+" if m_ >= 0 else "-") + f"{abs(m_) // 60:02d}:{abs(m_) % 60:02d}")
instants = st.one_of(
    st.builds(lambda d, off: d.isoformat() + off, st.datetimes(), st.one_of(offsets, st.sampled_from(["Z", "z", ""]))),
    st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00Z",
                     "9999-12-31T23:59:59.999999Z", "2026-11-30T12:00:00Z", "2026-11-30", "now", ""]),
    st.text(max_size=30),
)


ints_text = st.one_of(numbers.map(str), st.text(max_size=20),
                    st.sampled_from(["9223372036854775807", "9223372036854775808", "-1", "0", "1e3", "0x10", ""]))
query_params = st.fixed_dictionaries({}, optional={
    "asOf": instants, "after": ints_text, "limit": ints_text,
    "app": st.one_of(st.text(max_size=20), st.sampled_from(["fz-a", "\x00", "a\x00b"])),
    "executorId": st.one_of(st.text(max_size=20), st.sampled_from(["fz-1", "\x00"])),
    "x": st.text(max_size=10)})


def seg(s: tuple[str, bool]) -> str:
    text, raw = s
    return text if raw else quote(text, safe="")


def raw_request(port: int, method: str, target: str, timeout: float = 30.0) -> int:
    """One HTTP/1.1 request with the target exactly as given (bytes as UTF-8);
    returns the status code."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"{method} ".encode() + target.encode("utf-8", "surrogatepass") +
                     b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    assert line.startswith("HTTP/1.1 "), f"no HTTP status line for {method} {target[:80]!r}: {data[:100]!r}"
    return int(line.split()[1])


def last_error(server: RelayServer) -> str:
    """The exception line of the last traceback in Relay's log."""
    lines = server.log().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback"):
            for line in lines[i + 1:]:
                if line and not line.startswith((" ", "Traceback", "The above", "During handling")):
                    return line[:160]
    return "?"


def test_rest_inputs_never_cause_a_server_error(live: RelayServer, store_url: str) -> None:
    """Invariant: whatever the body, path segments or query strings, the REST
    API answers with a 2xx/3xx/4xx, never a 5xx; Relay keeps serving; and the
    store's invariants hold afterwards (executors were connected and dropped
    under it meanwhile, and the application they use was fuzzed too)."""
    failures: dict[str, list[str]] = {}
    http = httpx.Client(base_url=live.http, timeout=30, verify=TLS)

    def record(kind: str, status: int, what: str) -> None:
        if status >= 500:
            failures.setdefault(f"{kind} -> {last_error(live)}", []).append(f"{status} {what[:300]}")

    assert http.put("/v2/orgs/local/apps/fz-a").status_code == 204

    async def connect() -> tuple[FakeExecutor, FakeExecutor]:
        a = await FakeExecutor(live.ws, app="fz-a", executor_id="fz-1").connect()
        b = await FakeExecutor(live.ws, app="fz-a", executor_id="fz-2").connect()
        return a, b

    loop = asyncio.new_event_loop()
    try:
        a, b = loop.run_until_complete(connect())
        b.abort()

        @settings(FUZZ, max_examples=400)
        @given(method=st.sampled_from(["PUT", "PATCH", "POST"]), name=names, body=raw_bodies,
               content_type=st.sampled_from(["application/json", "application/json", "text/plain", ""]))
        @example(method="PATCH", name=("fz-a", True), body=b'{"gcRowsThreshold": ' + b"[" * 3000 + b"]" * 3000 + b"}",
                 content_type="application/json")
        @example(method="POST", name=("tok-1", True), body=b'{"appNames": ' + b"[" * 3000 + b"]" * 3000 + b"}",
                 content_type="application/json")
        def fuzz_bodies(method: str, name: tuple[str, bool], body: bytes, content_type: str) -> None:
            path = f"/v2/orgs/local/{'tokens' if method == 'POST' else 'apps'}/{seg(name)}"
            headers = {"content-type": content_type} if content_type else {}
            r = http.request(method, path, content=body, headers=headers)
            record(f"{method} body", r.status_code, f"{method} {path} {body[:120]!r}")

        @settings(FUZZ, max_examples=400)
        @given(template=st.sampled_from([
            ("GET", "/v2/orgs/{0}/apps"), ("GET", "/v2/orgs/local/apps/{1}"), ("PUT", "/v2/orgs/local/apps/{1}"),
            ("DELETE", "/v2/orgs/local/apps/{1}"), ("PATCH", "/v2/orgs/local/apps/{1}"),
            ("GET", "/v2/orgs/local/apps/{1}/executors"), ("GET", "/v2/orgs/local/apps/{1}/executors/{2}/history"),
            ("GET", "/v2/orgs/local/apps/{1}/executors?asOf=2026-11-30T12:00:00Z"),
            ("GET", "/v2/orgs/{0}/tokens"), ("POST", "/v2/orgs/local/tokens/{1}"),
            ("DELETE", "/v2/orgs/local/tokens/{1}"), ("GET", "/v2/orgs/{0}/executor-events"),
            ("GET", "/websocket/{1}/{2}"), ("GET", "/{0}"), ("GET", "/healthz/{1}")]),
            a=names, b_=names, c=names)
        @example(template=("GET", "/v2/orgs/local/apps/{1}/executors?asOf=2026-11-30T12:00:00Z"),
                 a=("local", True), b_=("%00", True), c=("x", True))
        def fuzz_paths(template: tuple[str, str], a: tuple[str, bool], b_: tuple[str, bool],
                       c: tuple[str, bool]) -> None:
            method, pattern = template
            target = pattern.format(seg(a), seg(b_), seg(c))
            status = raw_request(live.port, method, target)
            record(f"{method} {pattern}", status, f"{method} {target}")

        @settings(FUZZ, max_examples=400)
        @given(where=st.sampled_from(["/v2/orgs/local/apps/fz-a/executors", "/v2/orgs/local/apps/nope/executors",
                                      "/v2/orgs/local/executor-events", "/v2/orgs/local/apps/fz-a/executors/fz-1/history"]),
               params=query_params,
               raw=st.booleans())
        @example(where="/v2/orgs/local/executor-events", params={"after": "9223372036854775808"}, raw=False)
        @example(where="/v2/orgs/local/executor-events", params={"app": "\x00"}, raw=False)
        @example(where="/v2/orgs/local/executor-events", params={"executorId": "a\x00b"}, raw=False)
        @example(where="/v2/orgs/local/apps/fz-a/executors", params={"asOf": "0001-01-01T00:00:00+14:00"}, raw=False)
        @example(where="/v2/orgs/local/apps/fz-a/executors", params={"asOf": "9999-12-31T23:59:59-14:00"}, raw=False)
        def fuzz_queries(where: str, params: dict[str, str], raw: bool) -> None:
            query = "&".join(f"{k}={v}" for k, v in params.items()) if raw else urlencode(params)
            target = f"{where}?{query}"
            status = raw_request(live.port, "GET", target)
            record(f"GET {where}", status, f"GET {target}")

        fuzz_bodies()
        fuzz_paths()
        fuzz_queries()

        async def finish() -> None:
            c = await FakeExecutor(live.ws, app="fz-a", executor_id="fz-3").connect()  # still accepting executors
            for fx in (a, c):
                await fx.close()
            await asyncio.gather(b._task, return_exceptions=True)  # type: ignore[arg-type]

        loop.run_until_complete(finish())
        assert http.get("/healthz").status_code == 200
    finally:
        http.close()
        loop.close()

    summary = "\n".join(f"{kind}: {len(v)} x, e.g. " + " | ".join(sorted(v, key=len)[:3])
                        for kind, v in sorted(failures.items()))
    assert not failures, "server errors:\n" + summary
    assert "unhandled error" not in live.log(), live.log()[-3000:]
    assert_invariants(store_url)
