"""An application's metrics (``relay_es/adapters/rest/app_metrics.py``, ``listMetrics``) on a
real ``relay serve``, both stores, collected every second from fake executors over real
WebSockets (``RELAY_METRICS_INTERVAL_SECS=1``).

The executor answers ``get_metrics`` from a list of workflow creations, as its system
database would; Relay's answer holds exactly those counts, per bucket, in the reference's
``Metric`` shape, with Relay's own ``recovery_count`` beside them; the windows Relay asked
for are contiguous whole seconds; ``/metrics`` adds them up per application. Bad windows
are 422, an unknown application 404, an application-limited token 403.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.adapters.rest.test_queues import L, conforms, executors, sent, wait
from tests.rest_client import rest as call
from tests.server import RelayServer, admin_token

M = L + "/apps/shop/metrics"


@pytest.fixture
def relay(tmp_path, store_url) -> Iterator[RelayServer]:
    s = RelayServer(tmp_path, args=["--database-url", store_url], env={
        "RELAY_METRICS_INTERVAL_SECS": "1", "RELAY_CALL_TIMEOUT_SECS": "2",
        "RELAY_PING_INTERVAL_SECS": "1", "RELAY_PING_WAIT_SECS": "2"})
    s.start()
    yield s
    s.stop()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class System:
    """What an application's system database holds: workflows created (epoch s, name), steps done."""

    def __init__(self) -> None:
        self.created: list[tuple[float, str]] = []

    def get_metrics(self, req: dict[str, Any]) -> dict[str, Any]:
        start = datetime.fromisoformat(req["start_time"]).timestamp()
        end = datetime.fromisoformat(req["end_time"]).timestamp()
        counts: dict[str, int] = {}
        for at, name in list(self.created):
            if start <= at < end:
                counts[name] = counts.get(name, 0) + 1
        return {"metrics": [{"metric_type": "workflow_count", "metric_name": n, "value": v}
                            for n, v in sorted(counts.items())]
                + [{"metric_type": "step_count", "metric_name": "charge", "value": 2 * sum(counts.values())}]
                if counts else []}


def families(relay: RelayServer) -> dict[str, list[Any]]:
    text = call(relay, "GET", "/metrics").text
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_are_collected_per_bucket_and_answered_as_conductor_s(relay: RelayServer) -> None:
    system = System()
    with executors(relay, {"app": "shop", "answers": {"get_metrics": system.get_metrics}},
                   {"app": "shop", "answers": {"get_metrics": system.get_metrics}}) as (a, b):
        began = time.time()
        for i in range(6):
            system.created.append((time.time(), "checkout" if i % 2 else "refund"))
            time.sleep(0.4)
        done = time.time()

        def collected() -> list[dict[str, Any]] | None:
            got = call(relay, "GET", M, params={"startTime": iso(began - 30), "endTime": iso(done + 30)}).json()
            n = sum(m["value"] for m in got if m["metricType"] == "workflow_count")
            return got if n == 6 else None

        listed = wait(collected, "the six workflows in the metrics")
        conforms("listMetrics", call(relay, "GET", M, params={"startTime": iso(began - 30),
                                                              "endTime": iso(done + 30)}), 200)
        app_id = call(relay, "GET", L + "/apps/shop").json()["id"]
        assert {m["appId"] for m in listed} == {app_id}
        assert {m["granularity"] for m in listed} == {1}
        by = {(m["timeBucket"], m["metricType"], m["metricName"]): m["value"] for m in listed}
        expected: dict[tuple[str, str, str], int] = {}
        for at, name in system.created:
            bucket = iso(int(at)).replace("Z", ".000Z")
            expected[(bucket, "workflow_count", name)] = expected.get((bucket, "workflow_count", name), 0) + 1
            expected[(bucket, "step_count", "charge")] = expected.get((bucket, "step_count", "charge"), 0) + 2
        assert by == expected
        assert listed == sorted(listed, key=lambda m: (m["timeBucket"], m["metricType"], m["metricName"]))

        # what Relay asked: one executor at a time, contiguous whole-second windows, never twice
        asked = sorted((r["start_time"], r["end_time"]) for r in sent(a, "get_metrics") + sent(b, "get_metrics"))
        assert all(r["metric_class"] == "workflow_step_count" for r in sent(a, "get_metrics") + sent(b, "get_metrics"))
        spans = [(datetime.fromisoformat(s).timestamp(), datetime.fromisoformat(e).timestamp()) for s, e in asked]
        assert all(s.is_integer() and e - s == 1 for s, e in spans)
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1)), spans

        # a window that holds nothing is an empty list; the window is [startTime, endTime) of bucket starts
        assert conforms("listMetrics", call(relay, "GET", M, params={"startTime": iso(began - 3600),
                                                                     "endTime": iso(began - 1800)}), 200) == []
        first = min(k[0] for k in expected)
        t = datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp()
        only = call(relay, "GET", M, params={"startTime": iso(t), "endTime": iso(t + 1)}).json()
        assert {m["timeBucket"] for m in only} == {first}

        # Prometheus: added up per application and name
        fams = families(relay)
        wf = {s.labels["workflow"]: s.value for s in fams["relay_app_workflows"]
              if s.name == "relay_app_workflows_total" and s.labels["app"] == "shop"}
        assert wf == {"checkout": 3.0, "refund": 3.0}
        steps = [s.value for s in fams["relay_app_steps"] if s.name == "relay_app_steps_total"]
        assert steps == [12.0]
        until = [s.value for s in fams["relay_metrics_collected_until_timestamp_seconds"] if s.labels["app"] == "shop"]
        assert until and until[0] >= int(done)
        calls = {(s.labels["type"], s.labels["outcome"]): s.value for s in fams["relay_executor_calls"]
                 if s.name == "relay_executor_calls_total"}
        assert calls[("get_metrics", "ok")] >= len(asked)
        assert any(s.labels == {"type": "get_metrics", "le": "+Inf"} for s in fams["relay_executor_call_seconds"])

        # a recovery Relay confirmed is its own series, recovery_count
        assert call(relay, "PATCH", L + "/apps/shop", json={"executorTimeoutSecs": 1}).status_code == 204
        a.abort()

        def recovered() -> list[dict[str, Any]]:
            got = call(relay, "GET", M, params={"startTime": iso(began - 30), "endTime": iso(time.time() + 30)}).json()
            return [m for m in got if m["metricType"] == "recovery_count"]

        [rec] = wait(recovered, "a recovery in the metrics")
        assert rec["metricName"] == "recovery" and rec["value"] == 1 and rec["granularity"] == 1


def test_bad_windows_unknown_applications_and_tokens_are_refused(relay: RelayServer) -> None:
    assert call(relay, "PUT", L + "/apps/shop").status_code == 204
    now = time.time()
    for params in ({}, {"startTime": iso(now)}, {"endTime": iso(now)},
                   {"startTime": "yesterday", "endTime": iso(now)},
                   {"startTime": iso(now), "endTime": "2026-13-01T00:00:00Z"},
                   {"startTime": "2026-11-30T12:00:00", "endTime": iso(now)},  # no offset
                   {"startTime": "2026-11-30 12:00:00Z", "endTime": iso(now)},  # ISO 8601, not RFC 3339
                   {"startTime": iso(now), "endTime": iso(now)},  # empty
                   {"startTime": iso(now), "endTime": iso(now - 60)},  # backwards
                   {"startTime": "2" * 5000, "endTime": iso(now)}):
        conforms("listMetrics", call(relay, "GET", M, params=params), 422)
    conforms("listMetrics", call(relay, "GET", L + "/apps/nope/metrics",
                                 params={"startTime": iso(now - 60), "endTime": iso(now)}), 404)
    assert conforms("listMetrics", call(relay, "GET", M, params={"startTime": iso(now - 60),
                                                                 "endTime": iso(now)}), 200) == []


def test_an_executor_that_cannot_answer_is_asked_again_and_nothing_is_lost(relay: RelayServer) -> None:
    system = System()
    broken = {"on": True}

    def flaky(req: dict[str, Any]) -> dict[str, Any]:
        if broken["on"]:
            return {"metrics": [], "error_message": "Unexpected metric class: workflow_step_count"}
        return system.get_metrics(req)

    with executors(relay, {"app": "shop", "answers": {"get_metrics": flaky}}) as (ex,):
        began = time.time()
        system.created.append((began, "w"))
        wait(lambda: len(sent(ex, "get_metrics")) >= 3, "get_metrics asked while it fails")
        time.sleep(1.5)
        firsts = {r["start_time"] for r in sent(ex, "get_metrics")}
        broken["on"] = False
        window = {"startTime": iso(began - 30), "endTime": iso(time.time() + 30)}
        wait(lambda: call(relay, "GET", M, params=window).json(), "the workflow collected once the executor answers")
        assert [m["value"] for m in call(relay, "GET", M, params=window).json()
                if m["metricType"] == "workflow_count"] == [1]
        assert len(firsts) == 1  # every failed collection asked the same first window again

        def outcomes() -> dict[str, float]:  # the collection is counted once its rows are stored
            return {s.labels["outcome"]: s.value for s in families(relay)["relay_metrics_collections"]
                    if s.name == "relay_metrics_collections_total"}

        wait(lambda: outcomes().get("ok", 0) >= 1, "the collection counted")
        assert outcomes()["failed"] >= 3


def test_an_application_limited_token_may_not_read_metrics(tmp_path, store_url) -> None:
    token = admin_token(tmp_path, store_url, "acme", "ops")
    server = RelayServer(tmp_path, args=["--database-url", store_url, "--auth"]).start()
    try:
        h = {"Authorization": f"Bearer {token}"}
        assert call(server, "PUT", "/v2/orgs/acme/apps/shop", headers=h).status_code == 204
        r = call(server, "POST", "/v2/orgs/acme/tokens/exec", headers=h, json={"appNames": ["shop"]})
        assert r.status_code == 201, r.text
        limited = r.json()["token"]
        now = time.time()
        p = {"startTime": iso(now - 60), "endTime": iso(now)}
        conforms("listMetrics", call(server, "GET", "/v2/orgs/acme/apps/shop/metrics", params=p, token=limited), 403)
        conforms("listMetrics", call(server, "GET", "/v2/orgs/acme/apps/shop/metrics", params=p), 401)
        assert conforms("listMetrics", call(server, "GET", "/v2/orgs/acme/apps/shop/metrics", params=p,
                                            headers=h), 200) == []
    finally:
        server.stop()



# ---------------------------------------------------------------- in process: wide windows


@pytest.fixture
def stored(tmp_path) -> Iterator[Any]:
    """The REST API in process on a real SQLite store: application ``shop`` registered an hour
    before ``T0``, its series holding one 60 s window a minute for two hours from ``T0``, three
    names each."""
    yield from _stored(tmp_path)


def _stored(tmp_path: Any, recovered_at: float | None = None, url: str | None = None, now: float | None = None,
            names: Callable[[int], Sequence[str]] = lambda k: "abc", registered_again_at: float | None = None,
            **given: Any) -> Iterator[Any]:
    """:func:`stored`, and one recovery confirmed at ``recovered_at`` (epoch seconds), on the store at
    ``url`` (a SQLite file in ``tmp_path`` without), the clock at ``now`` once the series is stored,
    ``names(k)`` the names of window ``k``, the application deleted and registered again at
    ``registered_again_at``, ``given`` for the context; the client holds the ``series`` and the ``clock``."""
    from litestar.testing import TestClient

    from relay_es.adapters.rest.app import build_app
    from relay_es.adapters.series import MetricSeries
    from relay_es.adapters.stores import event_store_env, open_database, parse_database_url
    from relay_es.domain.clock import FakeClock
    from relay_es.engine.metric_windows import Window
    from relay_es.engine.service import Relay
    from relay_es.projections import all_projections
    from relay_es.projections.runner import ProjectionRunner
    from relay_es.protocol.metrics import Sample
    from tests.adapters.rest.fakes import fake_context

    cfg = parse_database_url(url or f"sqlite:///{tmp_path}/relay.db")
    clock = FakeClock(datetime.fromtimestamp(T0 - 3600, UTC))
    relay = Relay(event_store_env(cfg), clock=clock)
    db = open_database(cfg)
    runner = ProjectionRunner(relay, db, all_projections())
    relay.register_app("local", "shop")
    if recovered_at is not None:
        from relay_es.aggregates.executor import executor_stream_id
        from tests.support import info

        sid = executor_stream_id("local", "shop", "A")
        relay.executor_connected("local", "shop", info("A"), connection_id="c1", owner="o")
        relay.executor_disconnected(sid, connection_id="c1", reason="socket_closed")
        clock.advance(recovered_at - clock.now().timestamp())
        assert relay.declare_dead_if_due(sid)
        assert relay.dispatch_recovery(sid, request_id="r1", target_executor_id="B")
        assert relay.confirm_recovery(sid, request_id="r1", pending_found=True)
    if registered_again_at is not None:
        clock.advance(registered_again_at - clock.now().timestamp())
        relay.delete_app("local", "shop")
        relay.register_app("local", "shop")
    runner.catch_up()
    series = MetricSeries(db)
    series.create()
    cursor = None
    for k in range(120):
        w = Window(T0 + 60 * k, T0 + 60 * (k + 1))
        assert series.record("local", "shop", cursor, w, [Sample("workflow_count", n, k + 1) for n in names(k)])
        cursor = w.end
    if now is not None:
        clock.advance(now - clock.now().timestamp())
    client = TestClient(build_app(fake_context(relay=relay, db=db, series=series, metrics_interval=60, **given)),
                        base_url="http://127.0.0.1")
    client.series, client.clock = series, clock  # type: ignore[attr-defined]
    with client:
        yield client
    db.close()
    relay.close()


T0 = 1_796_040_000  # 2026-11-30T12:00:00Z


def test_a_window_with_too_many_metrics_is_answered_in_wider_buckets(stored, monkeypatch) -> None:
    from relay_es.adapters.rest import app_metrics

    whole = {"startTime": iso(T0), "endTime": iso(T0 + 7200)}
    fine = stored.get(M, params=whole).json()
    assert len(fine) == 360 and {m["granularity"] for m in fine} == {60}
    monkeypatch.setattr(app_metrics, "MAX_POINTS", 100)
    wide = conforms("listMetrics", stored.get(M, params=whole), 200)
    assert len(wide) <= 100 and {m["granularity"] for m in wide} == {240}  # 60 -> 120 -> 240 s
    assert sum(m["value"] for m in wide) == sum(m["value"] for m in fine)  # the same counts, added up
    first = [m for m in wide if m["timeBucket"] == "2026-11-30T12:00:00.000Z"]
    assert [(m["metricName"], m["value"]) for m in first] == [("a", 10), ("b", 10), ("c", 10)]  # 1+2+3+4
    monkeypatch.setattr(app_metrics, "MAX_POINTS", 2)  # fewer than the names themselves
    conforms("listMetrics", stored.get(M, params=whole), 422)


def test_recoveries_in_wider_buckets_cover_the_periods_the_executors_counts_do(tmp_path, monkeypatch) -> None:
    """Widened, the executors' counts add up the periods starting in the window into epoch-aligned
    buckets (the first starting before startTime); the recoveries of that first bucket were left out."""
    from relay_es.adapters.rest import app_metrics

    client = _stored(tmp_path, recovered_at=T0 + 90)  # in the window's first period (T0+60), bucket T0 (240 s)
    stored = next(client)
    try:
        window = {"startTime": iso(T0 + 60), "endTime": iso(T0 + 7200)}
        fine = stored.get(M, params=window).json()
        assert [(m["timeBucket"], m["value"]) for m in fine if m["metricType"] == "recovery_count"] == [
            ("2026-11-30T12:01:00.000Z", 1)]
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 100)
        wide = conforms("listMetrics", stored.get(M, params=window), 200)
        assert {m["granularity"] for m in wide} == {240}
        recovered = [(m["timeBucket"], m["value"]) for m in wide if m["metricType"] == "recovery_count"]
        assert recovered == [("2026-11-30T12:00:00.000Z", 1)]  # in the bucket its period's counts are in
        first = [m for m in wide if m["timeBucket"] == "2026-11-30T12:00:00.000Z" and m["metricName"] == "a"]
        assert [m["value"] for m in first] == [2 + 3 + 4]  # the periods starting in the window
    finally:
        next(client, None)


def test_buckets_start_in_the_window_and_partial_seconds_round_up(stored) -> None:
    got = stored.get(M, params={"startTime": iso(T0 + 59.5), "endTime": iso(T0 + 120.5)}).json()
    assert {m["timeBucket"] for m in got} == {"2026-11-30T12:01:00.000Z", "2026-11-30T12:02:00.000Z"}


def test_samples_from_before_the_applications_registration_are_not_answered(tmp_path, monkeypatch) -> None:
    """A deleted application's counts stored under its name (before the collector bounded its first
    collection by the registration) are not those of the one registered again, narrow or widened."""
    from relay_es.adapters.rest import app_metrics

    client = _stored(tmp_path, registered_again_at=T0 + 3630)
    stored = next(client)
    try:
        whole = {"startTime": iso(T0), "endTime": iso(T0 + 7200)}
        fine = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert len(fine) == 59 * 3 and fine[0]["timeBucket"] == "2026-11-30T13:01:00.000Z"  # T0 + 3660
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 100)
        wide = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert {m["granularity"] for m in wide} == {120}
        assert sum(m["value"] for m in wide) == sum(m["value"] for m in fine)
        assert [(m["timeBucket"], m["value"]) for m in wide[:1]] == [("2026-11-30T13:00:00.000Z", 62)]  # T0+3660
    finally:
        next(client, None)


class Counted:
    """A database noting every statement read from it."""

    def __init__(self, db: Any) -> None:
        self.db, self.statements = db, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self.db.read() as cur:
            yield Cursor(cur, self.statements)


class Cursor:
    def __init__(self, cur: Any, statements: list[str]) -> None:
        self.cur, self.statements = cur, statements

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cur, name)

    def execute(self, sql: str, params: Any = None) -> Any:
        self.statements.append(sql)
        return self.cur.execute(sql, params)


def test_a_wide_window_is_answered_in_three_queries_of_the_series(tmp_path, store_url, monkeypatch) -> None:
    """The width is chosen from each window's size, not by asking the series again at each width (2, 4,
    8... periods): 60 s windows over two hours, widened to 7,680 s, took eight queries."""
    from relay_es.adapters.rest import app_metrics

    client = _stored(tmp_path, url=store_url)
    stored = next(client)
    try:
        whole = {"startTime": iso(T0), "endTime": iso(T0 + 7200)}
        fine = stored.get(M, params=whole).json()
        stored.series.db = counted = Counted(stored.series.db)
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 6)  # three names in two buckets 7,680 s wide
        wide = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert {m["granularity"] for m in wide} == {7680} and len(wide) == 6
        assert [m["timeBucket"] for m in wide] == ["2026-11-30T11:12:00.000Z"] * 3 + ["2026-11-30T13:20:00.000Z"] * 3
        assert sum(m["value"] for m in wide) == sum(m["value"] for m in fine)
        assert len(counted.statements) == 3  # the windows as they are, their sizes, the answer
        counted.statements.clear()
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 5)  # fits no width
        conforms("listMetrics", stored.get(M, params=whole), 422)
        assert len(counted.statements) == 2
    finally:
        next(client, None)


def test_names_that_change_from_window_to_window_are_counted_for_every_width_at_once(tmp_path, store_url,
                                                                                   monkeypatch) -> None:
    """Windows of two names, ``a`` and one of each two windows' own: 120 s buckets would hold two metrics
    each (the size of their windows) but hold 90; the others are counted in one query."""
    from relay_es.adapters.rest import app_metrics

    client = _stored(tmp_path, url=store_url, names=lambda k: ["a", f"x{k // 2:03}"])
    stored = next(client)
    try:
        whole = {"startTime": iso(T0), "endTime": iso(T0 + 7200)}
        fine = stored.get(M, params=whole).json()
        stored.series.db = counted = Counted(stored.series.db)
        # the metrics of 120, 240... 7,680 s buckets: a's buckets and x's 60 names, 120 90 75 68 65 63 62
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 66)
        wide = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert {m["granularity"] for m in wide} == {1920} and len(wide) == 65
        assert sum(m["value"] for m in wide) == sum(m["value"] for m in fine)
        assert len(counted.statements) == 5  # as they are, sizes, 240 s (too many), the counts, the answer
        counted.statements.clear()
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 61)
        conforms("listMetrics", stored.get(M, params=whole), 422)
        assert len(counted.statements) == 4
    finally:
        next(client, None)


def test_samples_older_than_the_retention_are_not_answered_though_still_stored(tmp_path, store_url,
                                                                              monkeypatch) -> None:
    """The collector prunes only while it collects: whatever it left, the answer stops at the retention."""
    from relay_es.adapters.rest import app_metrics

    client = _stored(tmp_path, url=store_url, now=T0 + 7800, metrics_retention=3600)
    stored = next(client)
    try:
        whole = {"startTime": iso(T0 - 3600), "endTime": iso(T0 + 7200)}
        got = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert len(got) == 150 and got[0]["timeBucket"] == "2026-11-30T13:10:00.000Z"  # T0 + 4200: now - 3600
        assert len(stored.series.query("local", "shop", T0, T0 + 7200, limit=1000)) == 360  # none pruned
        monkeypatch.setattr(app_metrics, "MAX_POINTS", 100)  # widened: 120 s buckets of the kept windows only
        wide = conforms("listMetrics", stored.get(M, params=whole), 200)
        assert {m["granularity"] for m in wide} == {120} and len(wide) == 75
        assert [(m["timeBucket"], m["metricName"], m["value"]) for m in wide[:3]] == [
            ("2026-11-30T13:10:00.000Z", n, 71 + 72) for n in "abc"]
        stored.clock.advance(3600)  # an hour on, nothing kept
        assert stored.get(M, params=whole).json() == []
    finally:
        next(client, None)
