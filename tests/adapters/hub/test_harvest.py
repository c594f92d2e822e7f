"""Collecting the executors' metrics (``relay_es/adapters/hub/harvest.py``): what is asked,
what is stored, and that nothing is lost when a call fails or Relay restarts. The series is
a real SQLite store; the executor is a fake :class:`Calls` that answers from a table of
workflows, as an executor's system database would."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from relay_es.adapters.hub.harvest import Harvest
from relay_es.adapters.series import MetricSeries
from relay_es.adapters.stores import open_database, parse_database_url
from relay_es.engine.calls import ExecutorFailed, ExecutorTimedOut, NoHealthyExecutor
from relay_es.engine.metric_windows import BACKFILL, Window
from relay_es.protocol.catalogue import GetMetricsRequest, GetMetricsResponse, MetricOutput

T0 = 1_796_040_000  # 2026-11-30T12:00:00Z, a multiple of 60


def entries(*metrics: MetricOutput) -> list[msgspec.Raw]:
    """An answer's ``metrics`` as the session hands them on: each entry's JSON, unread."""
    return [msgspec.Raw(msgspec.json.encode(m)) for m in metrics]


class FakeCalls:
    """One application's executor: ``created`` holds (epoch second, workflow name)."""

    def __init__(self) -> None:
        self.created: list[tuple[int, str]] = []
        self.asked: list[tuple[str, str, str, str]] = []
        self.fail: Exception | None = None

    async def call(self, org: str, app: str, make_request: Callable[[str], Any], *, timeout: float,
                   prefer_latest: bool = False, **_: Any) -> GetMetricsResponse:
        req = make_request("rid-1")
        assert isinstance(req, GetMetricsRequest) and req.metric_class == "workflow_step_count"
        assert req.application_name is None and prefer_latest
        self.asked.append((org, app, req.start_time, req.end_time))
        if self.fail is not None:
            raise self.fail
        start = datetime.fromisoformat(req.start_time).timestamp()
        end = datetime.fromisoformat(req.end_time).timestamp()
        counts: dict[str, int] = {}
        for at, name in self.created:
            if start <= at < end:
                counts[name] = counts.get(name, 0) + 1
        return GetMetricsResponse(type="get_metrics", request_id="rid-1", metrics=entries(
            *[MetricOutput(metric_type="workflow_count", metric_name=n, value=v) for n, v in sorted(counts.items())]))


class Now:
    """The clocks: ``t`` is the time (setting it moves both on); ``step`` how far the wall clock is
    stepped from it (an NTP mis-step, a VM resumed), the monotonic clock never."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.step = 0.0

    def __call__(self) -> float:
        return self.t + self.step

    def monotonic(self) -> float:
        return self.t - T0


@pytest.fixture
def series(tmp_path) -> Any:
    db = open_database(parse_database_url(f"sqlite:///{tmp_path}/relay.db"))
    s = MetricSeries(db)
    s.create()
    yield s
    db.close()


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def harvest(calls: FakeCalls, series: MetricSeries, now: Now, *, until: list[Any] | None = None,
            **kw: Any) -> tuple[Harvest, list[Any], list[str]]:
    """A harvest on ``now``'s clocks; ``until``, if given, gets each outcome with the cursor told."""
    stored: list[Any] = []
    outcomes: list[str] = []

    def outcome(org: str, app: str, o: str, cursor: int | None) -> None:
        outcomes.append(o)
        if until is not None:
            until.append((o, cursor))

    kw.setdefault("registered", lambda org, app: 0.0)  # registered long before: no bound on the backfill
    h = Harvest(calls, series, _run, period=60, retention=3600, timeout=5,  # type: ignore[arg-type]
                now=now, monotonic=now.monotonic, collected=lambda org, app, w, got: stored.append((w, got.kept)),
                outcome=outcome, **kw)
    return h, stored, outcomes


def values(series: MetricSeries, start: int = 0, end: int = 2**40) -> dict[tuple[int, str], int]:
    return {(p.bucket, p.metric_name): p.value for p in series.query("local", "orders", start, end, limit=10_000)}


def test_a_first_collection_backfills_then_each_bucket_is_asked_once(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)  # the bucket ending at T0 is complete, and its lag over
    calls.created = [(T0 - 90, "a"), (T0 - 30, "a"), (T0 - 29, "b"), (T0 + 10, "a")]
    h, stored, outcomes = harvest(calls, series, now)
    assert asyncio.run(h.collect("local", "orders")) == BACKFILL
    assert [w for w, _ in stored][-2:] == [Window(T0 - 120, T0 - 60), Window(T0 - 60, T0)]
    assert values(series) == {(T0 - 120, "a"): 1, (T0 - 60, "a"): 1, (T0 - 60, "b"): 1}
    assert series.cursor("local", "orders") == T0
    assert outcomes == ["ok"]
    assert asyncio.run(h.collect("local", "orders")) == 0  # nothing new is due: nothing asked
    assert len(calls.asked) == BACKFILL
    now.t = T0 + 64.9  # the next bucket ended, its lag not yet over
    assert asyncio.run(h.collect("local", "orders")) == 0
    now.t = T0 + 65
    assert asyncio.run(h.collect("local", "orders")) == 1
    assert calls.asked[-1][2:] == ("2026-11-30T12:00:00+00:00", "2026-11-30T12:01:00+00:00")
    assert values(series, T0) == {(T0, "a"): 1}
    p = series.query("local", "orders", T0, T0 + 60, limit=10)[0]
    assert (p.metric_type, p.granularity) == ("workflow_count", 60)


@pytest.mark.parametrize("failure", [NoHealthyExecutor("local", "orders"), ExecutorTimedOut("e1", 5),
                                     ExecutorFailed("unknown message type: get_metrics")])
def test_a_failed_call_keeps_the_cursor_and_the_buckets_are_asked_again(series: MetricSeries, failure,
                                                                        caplog) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 - 30, "a"), (T0 + 30, "a"), (T0 + 90, "a")]
    h, _, outcomes = harvest(calls, series, now)
    asyncio.run(h.collect("local", "orders"))
    calls.fail = failure
    now.t = T0 + 125
    for _ in range(3):
        assert asyncio.run(h.collect("local", "orders")) == 0
    assert series.cursor("local", "orders") == T0
    assert outcomes == ["ok", "failed", "failed", "failed"]
    warned = [r for r in caplog.records if "not collected" in r.getMessage()]
    assert len(warned) == 1  # once per reason, not once a period
    calls.fail = None
    assert asyncio.run(h.collect("local", "orders")) == 2
    assert values(series, T0) == {(T0, "a"): 1, (T0 + 60, "a"): 1}


def test_after_a_restart_the_missed_buckets_are_collected_from_the_stored_cursor(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 + 60 * k + 1, "w") for k in range(10)]
    h, _, _ = harvest(calls, series, now)
    asyncio.run(h.collect("local", "orders"))
    now.t = T0 + 6 * 60 + 5  # Relay was down for six buckets
    again, _, _ = harvest(calls, series, now)  # a new process: nothing in memory
    assert asyncio.run(again.collect("local", "orders")) == 6
    assert values(series, T0) == {(T0 + 60 * k, "w"): 1 for k in range(6)}


def test_a_window_stored_by_another_collector_meanwhile_is_not_stored_twice(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 + 1, "w")]
    h, _, _ = harvest(calls, series, now)
    asyncio.run(h.collect("local", "orders"))
    now.t = T0 + 65
    other, _, _ = harvest(calls, series, now)
    real_cursor = series.cursor
    series.cursor = lambda org, app: T0  # type: ignore[method-assign]  # both read the cursor at T0
    try:
        assert asyncio.run(other.collect("local", "orders")) == 1
        assert asyncio.run(h.collect("local", "orders")) == 0  # the compare-and-set refuses it
    finally:
        series.cursor = real_cursor  # type: ignore[method-assign]
    assert values(series, T0) == {(T0, "w"): 1}


def test_hostile_samples_are_bounded_before_they_are_stored(series: MetricSeries) -> None:
    class Hostile(FakeCalls):
        async def call(self, org: str, app: str, make_request: Callable[[str], Any], **kw: Any) -> Any:
            await super().call(org, app, make_request, **kw)
            return GetMetricsResponse(type="get_metrics", request_id="r", metrics=entries(
                MetricOutput(metric_type="workflow_count", metric_name="evil\x1b[31m" + "x" * 5000, value=3),
                MetricOutput(metric_type="DROP TABLE", metric_name="a", value=1),
                MetricOutput(metric_type="step_count", metric_name="s", value=-1)))

    h, stored, _ = harvest(Hostile(), series, Now(T0 + 5))
    asyncio.run(h.collect("local", "orders"))
    names = {p.metric_name for p in series.query("local", "orders", 0, 2**40, limit=100)}
    assert len(names) == 1
    name = names.pop()
    assert name.startswith("evil\\u001b[31m") and len(name) <= 515


def test_old_samples_are_pruned_once_a_period(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 - 30, "a")]
    h, _, _ = harvest(calls, series, now)
    asyncio.run(h.collect("local", "orders"))
    assert values(series)
    now.t = T0 + 3600 + 65  # an hour later (the retention): the sample's bucket is older than it
    calls.fail = ExecutorTimedOut("e1", 5)
    asyncio.run(h.collect("local", "orders"))
    assert values(series) == {}


def test_one_collection_of_an_application_at_a_time(series: MetricSeries) -> None:
    gate = asyncio.Event

    class Slow(FakeCalls):
        async def call(self, *a: Any, **kw: Any) -> Any:
            await self.release.wait()
            return await super().call(*a, **kw)

    async def scenario() -> tuple[int, int]:
        calls = Slow()
        calls.release = gate()
        h, _, _ = harvest(calls, series, Now(T0 + 5))
        first = asyncio.ensure_future(h.collect("local", "orders"))
        await asyncio.sleep(0)
        second = await h.collect("local", "orders")  # while the first waits on its executor
        calls.release.set()
        return await first, second

    assert asyncio.run(scenario()) == (BACKFILL, 0)


def test_an_application_deleted_during_a_collection_gets_nothing_stored_or_told(series: MetricSeries) -> None:
    class Deleting(FakeCalls):
        harvest: Harvest

        async def call(self, *a: Any, **kw: Any) -> Any:
            answer = await super().call(*a, **kw)
            self.harvest.forget("local", "orders")  # the application is deleted while its executor answers
            series.forget("local", "orders")
            return answer

    calls = Deleting()
    calls.created = [(T0 - 30, "a")]
    h, stored, outcomes = harvest(calls, series, Now(T0 + 5))
    calls.harvest = h
    assert asyncio.run(h.collect("local", "orders")) == 0
    assert stored == [] and outcomes == [] and values(series) == {}
    assert series.cursor("local", "orders") is None  # the cursor it wrote before asking went with the delete
    plain = FakeCalls()
    again, stored, outcomes = harvest(plain, series, Now(T0 + 5))
    series.forget("local", "orders")
    assert asyncio.run(again.collect("local", "orders")) == BACKFILL  # a new application of that name starts afresh
    assert outcomes == ["ok"]


def test_missed_buckets_are_asked_for_no_further_back_than_they_are_kept(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, _ = harvest(calls, series, now)  # retention 3600 s: 60 buckets of 60 s
    asyncio.run(h.collect("local", "orders"))
    now.t = T0 + 5 + 86400  # a day later
    asked = len(calls.asked)
    assert asyncio.run(h.collect("local", "orders")) == 60
    assert len(calls.asked) - asked == 60


def test_a_deleted_application_leaves_nothing_behind(series: MetricSeries, caplog) -> None:
    """Each deletion kept a counter and the last failure logged, for ever (100,000 applications: 27 MB),
    and one registered again under the name inherited the failure (a spurious 'collected again')."""
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, _ = harvest(calls, series, now)
    calls.fail = NoHealthyExecutor("local", "orders")
    asyncio.run(h.collect("local", "orders"))
    for i in range(100):
        h.forget("local", f"gone-{i}")
    h.forget("local", "orders")
    assert h._generation == {} and h._failing == {}
    calls.fail = None
    series.forget("local", "orders")
    caplog.clear()
    assert asyncio.run(h.collect("local", "orders")) == BACKFILL
    assert not [r for r in caplog.records if "again" in r.getMessage()]


def test_a_first_collection_asks_nothing_from_before_the_applications_registration(series: MetricSeries) -> None:
    """An application registered again under a deleted one's name shares its executors' system database: the
    backfill (12 buckets back) brought the deleted application's workflows back as the new one's."""
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 - 170, "oldwf"), (T0 - 152, "oldwf"), (T0 - 150.2, "new"), (T0 - 10, "new")]
    h, stored, _ = harvest(calls, series, now, registered=lambda org, app: T0 - 150.5)
    assert asyncio.run(h.collect("local", "orders")) == 3
    assert [w for w, _ in stored] == [Window(T0 - 151, T0 - 120), Window(T0 - 120, T0 - 60), Window(T0 - 60, T0)]
    assert values(series) == {(T0 - 151, "new"): 1, (T0 - 60, "new"): 1}  # from its registration's second
    assert calls.asked[0][2] == "2026-11-30T11:57:29+00:00"
    now.t = T0 + 65
    assert asyncio.run(h.collect("local", "orders")) == 1  # then bucket by bucket, as ever


def test_an_application_whose_registration_is_not_read_yet_is_collected_later(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    registered: list[float | None] = [None]  # the read model has not folded its registration yet
    h, _, outcomes = harvest(calls, series, now, registered=lambda org, app: registered[0])
    assert asyncio.run(h.collect("local", "orders")) == 0
    assert (calls.asked, series.cursor("local", "orders"), outcomes) == ([], None, ["failed"])
    registered[0] = T0 - 61
    assert asyncio.run(h.collect("local", "orders")) == 2  # [T0 - 61, T0 - 60) and [T0 - 60, T0)
    assert series.cursor("local", "orders") == T0


def test_the_registration_is_read_from_the_applications_read_model(series: MetricSeries) -> None:
    from relay_es.adapters.readmodels import TABLES
    from relay_es.projections.apps import AppRow

    def app(name: str, at: float, deleted: bool = False) -> AppRow:
        when = datetime.fromtimestamp(at, UTC)
        return AppRow(f"sid-{name}", "local", name, 1, False, None, None, None, None, when, when, deleted)

    with series.db.schema() as cur:
        TABLES["apps"].create(cur)
    with series.db.transaction() as cur:
        TABLES["apps"].write(cur, ([app("orders", T0 - 90), app("gone", T0 - 3600, deleted=True)], []))
    calls, now = FakeCalls(), Now(T0 + 5)
    h, stored, _ = harvest(calls, series, now, registered=None)  # the default
    assert h.registered("local", "orders") == T0 - 90 and h.registered("local", "gone") is None
    assert asyncio.run(h.collect("local", "orders")) == 2
    assert stored[0][0] == Window(T0 - 90, T0 - 60)
    assert asyncio.run(h.collect("local", "gone")) == 0 and series.cursor("local", "gone") is None


def test_a_wall_clock_stepped_ahead_neither_skips_buckets_nor_prunes_history(series: MetricSeries, caplog) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    calls.created = [(T0 - 30 - 60 * i, "a") for i in range(50)]  # a workflow a minute, the last 50 minutes
    h, _, _ = harvest(calls, series, now)  # retention 3600 s
    asyncio.run(h.collect("local", "orders"))
    history = values(series)
    assert len(history) == BACKFILL
    for k in range(1, 11):  # ten minutes, a workflow each; the wall clock is a day ahead for the first three
        calls.created.append((T0 + 60 * k - 30, "b"))
        now.t, now.step = T0 + 60 * k + 5, 86_400.0 if k <= 3 else 0.0
        with caplog.at_level(logging.WARNING):
            asyncio.run(h.collect("local", "orders"))
        assert max(datetime.fromisoformat(end).timestamp() for *_, end in calls.asked) <= T0 + 60 * k  # none ahead
    assert series.cursor("local", "orders") == T0 + 600
    assert values(series) == {**history, **{(T0 + 60 * k - 60, "b"): 1 for k in range(1, 11)}}
    ahead = [r for r in caplog.records if "ahead" in r.getMessage()]
    assert ahead and all(r.levelno == logging.WARNING for r in ahead)


def test_every_collection_tells_the_stored_cursor_whatever_came_of_it(series: MetricSeries) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    told: list[Any] = []
    h, _, _ = harvest(calls, series, now, until=told)
    asyncio.run(h.collect("local", "orders"))
    assert told == [("ok", T0)]
    now.t = T0 + 3 * 60 + 5  # Relay restarted; the executors fail every collection since
    calls.fail = ExecutorTimedOut("e1", 5)
    told.clear()
    again, _, _ = harvest(calls, series, now, until=told)
    asyncio.run(again.collect("local", "orders"))
    assert told == [("failed", T0)]
    told.clear()
    new, _, _ = harvest(calls, series, now, until=told)  # an application failing from its first collection
    asyncio.run(new.collect("local", "billing"))
    assert told == [("failed", T0 + 3 * 60 - BACKFILL * 60)]  # the cursor its first collection set


def test_a_windows_counts_are_told_in_the_same_call_that_stores_it(series: MetricSeries) -> None:
    """listMetrics reads the stored series, /metrics the counts ``collected`` is told: told on the loop
    after the store's call returned, a scrape between the two saw the buckets without their counts
    (a test waiting for the one and asserting the other was a flaky one)."""
    inside: list[bool] = []
    running = [False]

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        running[0] = True
        try:
            return fn(*args)
        finally:
            running[0] = False

    calls = FakeCalls()
    calls.created = [(T0 - 30, "a")]
    h, _, _ = harvest(calls, series, Now(T0 + 5))
    h.run, h.collected = run, lambda org, app, w, got: inside.append(running[0])
    assert asyncio.run(h.collect("local", "orders")) == BACKFILL
    assert inside and all(inside)


def failing(names: set[str], error: Exception) -> Callable[..., Any]:
    """A store call runner under which the store calls named ``names`` (``cursor``, ``begin``,
    ``_record``, ``prune``) raise ``error``; an empty set lets every call through."""

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        if getattr(fn, "__name__", "") in names:
            raise error
        return fn(*args)

    return run


def harvest_log(caplog) -> list[tuple[str, str, bool]]:
    """What the harvest logged: (level, message, with a traceback)."""
    return [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records
            if r.name == "relay_es.adapters.hub.harvest"]


APPS = [f"app{i}" for i in range(5)]


@pytest.mark.parametrize("failing_call,doing", [
    ("cursor", "reading the cursor of local/app0"),
    ("begin", "starting the cursor of local/app0"),
    ("_record", "storing the metrics of local/app0"),
])
def test_a_store_away_is_one_outage_for_every_application_not_a_traceback_each(
        series: MetricSeries, caplog, failing_call: str, doing: str) -> None:
    """A full disk failed every application's collection every period with a traceback each (5
    applications, 1 s periods, a 30 s outage: 304 ERROR lines, 454 tracebacks): told as an outage
    now, a line as it starts, one a minute with a count, one as it ends."""
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, outcomes = harvest(calls, series, now)
    if failing_call == "_record":  # the cursors are set: what fails is storing the answers
        for app in APPS:
            asyncio.run(h.collect("local", app))
        now.t += 60
    full = sqlite3.OperationalError("database or disk is full")
    h.run = failing({failing_call}, full)
    outcomes.clear()
    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.harvest")
    for _ in range(30):  # a 30 s outage, a collection a second
        for app in APPS:
            asyncio.run(h.collect("local", app))
        now.t += 1
    said = f"metrics collection failed {doing} on the store (OperationalError: database or disk is full); " \
           "asked again next period"
    assert harvest_log(caplog) == [("WARNING", said, False)]
    assert outcomes == ["failed"] * 150  # each still counted in /metrics
    now.t += 30  # a minute since the first line
    asyncio.run(h.collect("local", "app0"))
    assert harvest_log(caplog)[1:] == [
        ("WARNING", said + " (149 more failures since the last line)", False)]
    h.run = failing(set(), full)  # the store is back
    asyncio.run(h.collect("local", "app1"))
    ends = "reads the store again" if failing_call == "cursor" else "writes to the store again"
    assert harvest_log(caplog)[2:] == [("INFO", f"metrics collection {ends} (0 failures since the last line)",
                                         False)]
    assert outcomes[-1] == "ok"


def test_a_full_disk_whose_reads_work_is_still_one_outage_of_the_writes(series: MetricSeries, caplog) -> None:
    """On a full disk the reads go on working: a read that worked between two writes that failed did not
    end the writes' outage (a line each would be back)."""
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, _ = harvest(calls, series, now)
    h.run = failing({"begin"}, sqlite3.OperationalError("database or disk is full"))
    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.harvest")
    for app in APPS * 3:
        asyncio.run(h.collect("local", app))
    assert [level for level, _, _ in harvest_log(caplog)] == ["WARNING"]


def test_a_prune_that_fails_on_the_store_is_one_line_and_a_bug_is_a_traceback(series: MetricSeries,
                                                                              caplog) -> None:
    """A prune a period: with a period of a second (RELAY_METRICS_INTERVAL_SECS=1), one a second."""
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, _ = harvest(calls, series, now)
    h.period = 1
    calls.fail = NoHealthyExecutor("local", "orders")  # nothing collected; the pruning comes all the same
    h.run = failing({"prune"}, sqlite3.OperationalError("disk I/O error"))
    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.harvest")

    def pruning() -> list[tuple[str, str, bool]]:
        return [r for r in harvest_log(caplog) if "prun" in r[1]]

    for _ in range(30):
        asyncio.run(h.collect("local", "orders"))
        now.t += 1
    assert pruning() == [("WARNING", "metrics pruning failed on the store (OperationalError: disk I/O "
                                     "error); tried again next period", False)]
    h.run = failing(set(), RuntimeError("unused"))
    asyncio.run(h.collect("local", "orders"))
    assert pruning()[1:] == [("INFO", "metrics pruning works on the store again (29 failures since the last line)",
                              False)]
    caplog.clear()
    now.t += 1
    h.run = failing({"prune"}, RuntimeError("a bug"))
    asyncio.run(h.collect("local", "orders"))
    assert pruning() == [("ERROR", "could not prune the metrics series", True)]


@pytest.mark.parametrize("failing_call,said", [
    ("cursor", "could not read the metrics cursor of local/{app}"),
    ("begin", "could not start the metrics cursor of local/{app}"),
])
def test_a_bug_in_a_store_call_is_still_logged_with_its_traceback_each_time(
        series: MetricSeries, caplog, failing_call: str, said: str) -> None:
    calls, now = FakeCalls(), Now(T0 + 5)
    h, _, outcomes = harvest(calls, series, now)
    h.run = failing({failing_call}, RuntimeError("a bug"))
    caplog.set_level(logging.INFO, logger="relay_es.adapters.hub.harvest")
    for app in APPS[:2]:
        asyncio.run(h.collect("local", app))
    assert harvest_log(caplog) == [("ERROR", said.format(app=app), True) for app in APPS[:2]]
    assert outcomes == ["failed", "failed"]
