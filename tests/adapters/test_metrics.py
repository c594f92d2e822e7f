"""The Prometheus metrics: each one is exposed under its name, with its labels; those of the
executors' metrics also on a real ``relay serve`` (both stores) collecting from fake executors."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from relay_es.adapters.metrics import CONTENT_TYPE, Metrics
from relay_es.engine.process_manager import Stats
from tests.adapters.rest.test_app_metrics import families
from tests.adapters.rest.test_queues import executors, sent, wait
from tests.server import RelayServer


class FakeOutbox:
    errors = 3

    def stuck(self) -> list[str]:
        return ["A"]

    def __len__(self) -> int:
        return 5


def row(org: str, app: str, status: str, visible: bool = True) -> Any:
    return SimpleNamespace(org=org, app=app, status=status, visible=visible)


def exposed(m: Metrics) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """Family name -> its samples (sample name, labels, value), as a scraper reads them."""
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(m.render().decode())}


def test_every_metric_is_exposed_with_its_name_and_labels() -> None:
    m = Metrics()
    m.watch_executors(lambda: [row("acme", "orders", "HEALTHY"), row("acme", "orders", "HEALTHY"),
                               row("acme", "orders", "DEAD"), row("acme", "billing", "HEALTHY", visible=False)])
    m.watch_outbox(FakeOutbox())
    m.watch_process_manager(Stats(store_errors=4, bugs=1, armed_at=1_764_000_000.5,
                                  cpu_seconds={"deadline": 0.25, "answers": 1.5}))
    m.transitions.labels("Connected").inc()
    m.recoveries_dispatched.inc()
    m.recoveries_confirmed.inc()
    m.recoveries_failed.inc()
    m.dead_to_confirmed.observe(1.5)
    m.open_connections.set(7)
    m.append_latency.observe(0.002)
    m.full_collections.observe(0.03)
    m.gc_pauses.labels("1").observe(0.4)
    m.auth_refused.labels("rest").inc()
    m.auth_refused.labels("websocket").inc(2)
    m.projection_poison.labels("executors").inc()
    got = exposed(m)

    def samples(family: str, suffix: str = "") -> dict[tuple[tuple[str, str], ...], float]:
        return {tuple(sorted(labels.items())): value for name, labels, value in got[family]
                if name == family + suffix}

    assert samples("relay_transitions", "_total") == {(("event", "Connected"),): 1.0}
    assert samples("relay_recoveries_dispatched", "_total") == {(): 1.0}
    assert samples("relay_recoveries_confirmed", "_total") == {(): 1.0}
    assert samples("relay_recoveries_failed", "_total") == {(): 1.0}
    assert samples("relay_open_connections") == {(): 7.0}
    assert samples("relay_auth_refused", "_total") == {(("where", "rest"),): 1.0, (("where", "websocket"),): 2.0}
    assert samples("relay_projection_poison_events", "_total") == {(("projection", "executors"),): 1.0}
    for histogram, value in (("relay_dead_to_recovery_confirmed_seconds", 1.5),
                             ("relay_event_store_append_seconds", 0.002),
                             ("relay_gc_full_collection_seconds", 0.03)):
        assert samples(histogram, "_count") == {(): 1.0}, histogram
        assert samples(histogram, "_sum") == {(): value}, histogram
        assert samples(histogram, "_bucket")[(("le", "+Inf"),)] == 1.0, histogram
    assert samples("relay_gc_pause_seconds", "_count") == {(("generation", "1"),): 1.0}
    assert samples("relay_gc_pause_seconds", "_sum") == {(("generation", "1"),): 0.4}
    # computed at scrape time: executors by org, app and status (invisible rows not counted)
    assert samples("relay_executors") == {(("app", "orders"), ("org", "acme"), ("status", "HEALTHY")): 2.0,
                                          (("app", "orders"), ("org", "acme"), ("status", "DEAD")): 1.0}
    assert samples("relay_outbox_errors", "_total") == {(): 3.0}
    assert samples("relay_outbox_stuck_transitions") == {(): 1.0}
    assert samples("relay_outbox_queued_transitions") == {(): 5.0}
    assert samples("relay_process_manager_store_errors", "_total") == {(): 4.0}
    assert samples("relay_process_manager_bugs", "_total") == {(): 1.0}
    assert samples("relay_process_manager_armed_timestamp_seconds") == {(): 1_764_000_000.5}
    assert samples("relay_process_manager_cpu_seconds", "_total") == {(("work", "answers"),): 1.5,
                                                                      (("work", "deadline"),): 0.25}


def test_the_scrape_follows_the_executors_as_they_change() -> None:
    rows = [row("acme", "orders", "HEALTHY")]
    m = Metrics()
    m.watch_executors(lambda: rows)
    assert exposed(m)["relay_executors"][0][2] == 1.0
    rows.append(row("acme", "orders", "HEALTHY"))
    assert exposed(m)["relay_executors"][0][2] == 2.0


def test_each_runtime_has_a_registry_of_its_own() -> None:
    a, b = Metrics(), Metrics()
    a.open_connections.set(3)
    assert ("relay_open_connections", {}, 0.0) in exposed(b)["relay_open_connections"]
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


# --- the executors' metrics, collected per application; executor calls; projections and workers ----------------


def sample(metric_type: str, metric_name: str, value: int) -> Any:
    return SimpleNamespace(metric_type=metric_type, metric_name=metric_name, value=value)


def values(m: Metrics, family: str, suffix: str = "") -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of one family as a scraper reads them: sorted labels -> value."""
    return {tuple(sorted(labels.items())): value for name, labels, value in exposed(m).get(family, [])
            if name == family + suffix}


def key(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_collected_buckets_are_added_up_per_application_and_name() -> None:
    m = Metrics()
    m.app_collected("acme", "orders", 1_800_000_300, [sample("workflow_count", "checkout", 3),
                                                       sample("step_count", "charge", 5),
                                                       sample("workflow_count", "refund", 1)])
    m.app_collected("acme", "orders", 1_800_000_600, [sample("workflow_count", "checkout", 4),
                                                       sample("step_count", "charge", 0),  # nothing to add
                                                       sample("queue_depth", "q", 9)])  # a type not exposed
    m.app_collected("other", "orders", 1_800_000_300, [sample("workflow_count", "checkout", 2)])
    assert values(m, "relay_app_workflows", "_total") == {
        key(org="acme", app="orders", workflow="checkout"): 7.0,
        key(org="acme", app="orders", workflow="refund"): 1.0,
        key(org="other", app="orders", workflow="checkout"): 2.0}
    assert values(m, "relay_app_steps", "_total") == {key(org="acme", app="orders", step="charge"): 5.0}
    assert values(m, "relay_metrics_collected_until_timestamp_seconds") == {
        key(org="acme", app="orders"): 1_800_000_600.0, key(org="other", app="orders"): 1_800_000_300.0}
    assert not any("q" in dict(labels).values() for family in ("relay_app_workflows", "relay_app_steps")
                   for labels in values(m, family, "_total"))


def test_a_bucket_without_samples_still_moves_collected_until() -> None:
    m = Metrics()
    m.app_collected("acme", "orders", 1_800_000_300, [])
    assert values(m, "relay_metrics_collected_until_timestamp_seconds") == {key(org="acme", app="orders"):
                                                                            1_800_000_300.0}
    assert values(m, "relay_app_workflows", "_total") == {}


def test_collection_outcomes_are_counted() -> None:
    m = Metrics()
    m.app_outcome("acme", "orders", "ok")
    m.app_outcome("acme", "orders", "ok")
    m.app_outcome("acme", "orders", "failed")
    m.app_outcome("acme", "billing", "failed")
    assert values(m, "relay_metrics_collections", "_total") == {
        key(org="acme", app="orders", outcome="ok"): 2.0, key(org="acme", app="orders", outcome="failed"): 1.0,
        key(org="acme", app="billing", outcome="failed"): 1.0}


def test_every_collection_sets_collected_until_to_the_cursor_it_was_told() -> None:
    m = Metrics()
    m.app_outcome("acme", "orders", "failed")  # the cursor could not be read: nothing to say
    assert values(m, "relay_metrics_collected_until_timestamp_seconds") == {}
    m.app_outcome("acme", "orders", "failed", 1_800_000_300)
    assert values(m, "relay_metrics_collected_until_timestamp_seconds") == {key(org="acme", app="orders"):
                                                                            1_800_000_300.0}
    m.app_outcome("acme", "orders", "ok", 1_800_000_600)
    assert values(m, "relay_metrics_collected_until_timestamp_seconds") == {key(org="acme", app="orders"):
                                                                            1_800_000_600.0}


def test_names_beyond_the_cap_are_counted_under_other() -> None:
    from relay_es.adapters.metrics import MAX_APP_NAMES, OTHER

    m = Metrics()
    first = [sample("workflow_count", f"w{i:04d}", 1) for i in range(MAX_APP_NAMES - 1)]
    m.app_collected("acme", "orders", 1.0, first)
    # later buckets: the known names keep their own series, new ones go under (other)
    m.app_collected("acme", "orders", 2.0, [sample("workflow_count", "w0000", 2),
                                             sample("workflow_count", "late-1", 5),
                                             sample("workflow_count", "late-2", 7),
                                             sample("step_count", "s", 1)])  # another family has its own cap
    m.app_collected("acme", "orders", 3.0, [sample("workflow_count", "late-1", 1),
                                             sample("workflow_count", OTHER, 10)])  # an executor's own "(other)"
    m.app_collected("acme", "billing", 3.0, [sample("workflow_count", "late-1", 4)])  # each application its own
    got = values(m, "relay_app_workflows", "_total")
    orders = {dict(k)["workflow"]: v for k, v in got.items() if dict(k)["app"] == "orders"}
    assert len(orders) == MAX_APP_NAMES
    assert orders[OTHER] == 5 + 7 + 1 + 10
    assert orders["w0000"] == 3.0 and orders[f"w{MAX_APP_NAMES - 2:04d}"] == 1.0
    assert "late-1" not in orders and "late-2" not in orders
    assert sum(orders.values()) == (MAX_APP_NAMES - 1) + 2 + 5 + 7 + 1 + 10  # the totals stay right
    assert {dict(k)["workflow"]: v for k, v in got.items() if dict(k)["app"] == "billing"} == {"late-1": 4.0}
    assert values(m, "relay_app_steps", "_total") == {key(org="acme", app="orders", step="s"): 1.0}


def test_an_executor_other_is_never_refused_by_the_cap() -> None:
    from relay_es.adapters.metrics import MAX_APP_NAMES, OTHER

    m = Metrics()
    m.app_collected("acme", "orders", 1.0, [sample("step_count", f"s{i:04d}", 1) for i in range(MAX_APP_NAMES + 50)]
                    + [sample("step_count", OTHER, 3)])
    steps = {dict(k)["step"]: v for k, v in values(m, "relay_app_steps", "_total").items()}
    assert len(steps) == MAX_APP_NAMES
    assert steps[OTHER] == 51 + 3
    assert sum(steps.values()) == MAX_APP_NAMES + 50 + 3


def test_forgetting_an_application_removes_its_series_only() -> None:
    from relay_es.adapters.metrics import MAX_APP_NAMES, OTHER

    m = Metrics()
    for app in ("orders", "billing"):
        m.app_collected("acme", app, 1.0, [sample("workflow_count", "w", 1), sample("step_count", "s", 2)])
        m.app_outcome("acme", app, "ok")
        m.app_outcome("acme", app, "failed")
    m.forget_app("acme", "orders")
    for family, suffix in (("relay_app_workflows", "_total"), ("relay_app_steps", "_total"),
                           ("relay_metrics_collections", "_total"),
                           ("relay_metrics_collected_until_timestamp_seconds", "")):
        apps = {dict(k)["app"] for k in values(m, family, suffix)}
        assert apps == {"billing"}, family
    m.forget_app("acme", "orders")  # twice is fine
    m.forget_app("acme", "never-seen")
    m.app_outcome("acme", "fresh", "ok")
    m.forget_app("acme", "fresh")  # only an outcome, never collected
    assert {dict(k)["app"] for k in values(m, "relay_metrics_collections", "_total")} == {"billing"}
    # a new application of that name starts afresh, with the whole cap of names again
    m.app_collected("acme", "orders", 2.0, [sample("workflow_count", "w", 5)])
    assert values(m, "relay_app_workflows", "_total")[key(org="acme", app="orders", workflow="w")] == 5.0
    m.forget_app("acme", "orders")
    m.app_collected("acme", "orders", 3.0, [sample("workflow_count", f"w{i:04d}", 1) for i in range(MAX_APP_NAMES)])
    m.forget_app("acme", "orders")
    m.app_collected("acme", "orders", 4.0, [sample("workflow_count", f"n{i:04d}", 1)
                                             for i in range(MAX_APP_NAMES - 1)])
    names = {dict(k)["workflow"] for k in values(m, "relay_app_workflows", "_total") if dict(k)["app"] == "orders"}
    assert len(names) == MAX_APP_NAMES - 1 and OTHER not in names


def test_executor_calls_are_counted_and_timed_unless_nothing_was_sent() -> None:
    m = Metrics()
    m.executor_call("get_metrics", "ok", 0.02)
    m.executor_call("get_metrics", "ok", 0.2)
    m.executor_call("get_metrics", "timeout", 30.0)
    m.executor_call("cancel", "unavailable", 0.0)
    assert values(m, "relay_executor_calls", "_total") == {
        key(type="get_metrics", outcome="ok"): 2.0, key(type="get_metrics", outcome="timeout"): 1.0,
        key(type="cancel", outcome="unavailable"): 1.0}
    assert values(m, "relay_executor_call_seconds", "_count") == {key(type="get_metrics"): 3.0}
    assert values(m, "relay_executor_call_seconds", "_sum")[key(type="get_metrics")] == 30.22
    buckets = values(m, "relay_executor_call_seconds", "_bucket")
    assert buckets[key(type="get_metrics", le="0.025")] == 1.0
    assert buckets[key(type="get_metrics", le="0.25")] == 2.0
    assert buckets[key(type="get_metrics", le="+Inf")] == 3.0


def test_projection_lag_and_worker_failures_are_read_at_each_scrape() -> None:
    lag = {"executors": 3, "apps": 0}
    failures = {"projections": 0}
    m = Metrics()
    m.watch_projections(lambda: dict(lag))
    cpu = {"process-manager": 1.5}
    m.watch_workers(lambda: dict(failures), cpu=lambda: dict(cpu))
    assert values(m, "relay_projection_lag_events") == {key(projection="apps"): 0.0,
                                                        key(projection="executors"): 3.0}
    assert values(m, "relay_worker_cpu_seconds", "_total") == {key(worker="process-manager"): 1.5}
    cpu["process-manager"] = 2.25
    cpu["lease"] = 0.5
    assert values(m, "relay_worker_cpu_seconds", "_total") == {key(worker="process-manager"): 2.25,
                                                               key(worker="lease"): 0.5}
    assert values(m, "relay_worker_failures", "_total") == {key(worker="projections"): 0.0}
    lag["executors"] = 0
    lag["audit"] = 12
    failures["lease"] = 2
    assert values(m, "relay_projection_lag_events") == {key(projection="apps"): 0.0,
                                                        key(projection="executors"): 0.0,
                                                        key(projection="audit"): 12.0}
    assert values(m, "relay_worker_failures", "_total") == {key(worker="projections"): 0.0,
                                                           key(worker="lease"): 2.0}
    families = {f.name: f.type for f in text_string_to_metric_families(m.render().decode())}
    assert families["relay_projection_lag_events"] == "gauge"
    assert families["relay_worker_failures"] == "counter"


def test_nothing_watched_nothing_exposed_for_projections_and_workers() -> None:
    got = exposed(Metrics())
    assert "relay_projection_lag_events" not in got and "relay_worker_failures" not in got
    assert "relay_worker_cpu_seconds" not in got
    m = Metrics()
    m.watch_projections(dict)
    m.watch_workers(dict)
    assert values(m, "relay_projection_lag_events") == {} and values(m, "relay_worker_failures", "_total") == {}


def test_long_names_are_cut_on_metrics_to_a_label_s_length() -> None:
    from relay_es.adapters.metrics import MAX_LABEL

    m = Metrics()
    m.app_collected("acme", "orders", 1.0, [SimpleNamespace(metric_type="workflow_count", metric_name="w" * 600,
                                                            value=2)])
    [name] = [s[1]["workflow"] for s in exposed(m)["relay_app_workflows"] if s[0] == "relay_app_workflows_total"]
    assert len(name) == MAX_LABEL and name.endswith("...")


def test_the_alert_managers_counters_are_read_at_scrape_time() -> None:
    from relay_es.engine.alerting import AlertStats

    stats = AlertStats(fired=3, suppressed=2, delivered=5, delivery_failures=1, probe_failures=4, errors=0)
    m = Metrics()
    m.watch_alerts(stats)
    got = exposed(m)
    assert got["relay_alerts_fired"] == [("relay_alerts_fired_total", {}, 3.0)]
    assert got["relay_alerts_suppressed"] == [("relay_alerts_suppressed_total", {}, 2.0)]
    assert got["relay_alert_deliveries"] == [
        ("relay_alert_deliveries_total", {"outcome": "delivered"}, 5.0),
        ("relay_alert_deliveries_total", {"outcome": "failed"}, 1.0)]
    assert got["relay_alert_check_failures"] == [("relay_alert_check_failures_total", {}, 4.0)]
    stats.fired += 1  # read again at the next scrape, not copied
    assert exposed(m)["relay_alerts_fired"] == [("relay_alerts_fired_total", {}, 4.0)]


def test_a_scrape_for_one_org_leaves_out_the_series_of_the_others() -> None:
    """A tenant's token reads its own applications' series and the process-wide ones, nothing of
    another org's (its application and workflow names)."""
    m = Metrics()
    m.watch_executors(lambda: [row("acme", "orders", "HEALTHY"), row("other", "secret-app", "HEALTHY")])
    m.app_collected("acme", "orders", 1_800_000_300, [sample("workflow_count", "checkout", 3)])
    m.app_collected("other", "secret-app", 1_800_000_300, [sample("workflow_count", "launch-codes", 2)])
    m.transitions.labels("Connected").inc(2)
    whole = m.render().decode()
    assert "secret-app" in whole and "launch-codes" in whole
    acme = m.render("acme").decode()
    assert "secret-app" not in acme and "launch-codes" not in acme and 'org="other"' not in acme
    families = {f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
                for f in text_string_to_metric_families(acme)}
    assert families["relay_executors"] == {("relay_executors", (("app", "orders"), ("org", "acme"),
                                                                 ("status", "HEALTHY"))): 1.0}
    assert families["relay_app_workflows"] == {("relay_app_workflows_total", (("app", "orders"), ("org", "acme"),
                                                                               ("workflow", "checkout"))): 3.0}
    assert families["relay_transitions"][("relay_transitions_total", (("event", "Connected"),))] == 2.0
    nobody = m.render("nobody").decode()
    assert "relay_app_workflows_total{" not in nobody and "# TYPE relay_app_workflows_total counter" in nobody
    assert 'relay_transitions_total{event="Connected"} 2.0' in nobody


# --- on a real relay serve ------------------------------------------------------------------------------------

FAST = {"RELAY_METRICS_INTERVAL_SECS": "1", "RELAY_CALL_TIMEOUT_SECS": "2",
        "RELAY_PING_INTERVAL_SECS": "1", "RELAY_PING_WAIT_SECS": "2"}


def scraped(relay: RelayServer, family: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``family`` on relay's /metrics whose labels include ``labels``."""
    return {key(**s.labels): s.value for s in families(relay).get(family, [])
            if s.name in (family, family + "_total") and labels.items() <= s.labels.items()}


def test_an_answer_with_entries_that_do_not_read_still_counts_its_good_samples(tmp_path, store_url) -> None:
    bad = ['{"metric_type":"workflow_count","metric_name":null,"value":1}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":3.0}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":true}',
           '{"metric_type":"workflow_count","metric_name":"checkout","value":1e400}']

    def answer(req: dict[str, Any]) -> str:
        good = '{"metric_type":"workflow_count","metric_name":"checkout","value":1}'
        return ('{"type":"get_metrics","request_id":"%s","error_message":null,"metrics":[%s]}'
                % (req["request_id"], ",".join([bad[0], good, *bad[1:]])))

    relay = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    try:
        with executors(relay, {"app": "shop", "answers": {"get_metrics": answer}}):
            # (a collection at once after the registration, before a bucket is complete, asks for nothing: ok)
            counted = wait(lambda: scraped(relay, "relay_app_workflows", app="shop"), "a window counted")
            assert scraped(relay, "relay_metrics_collections", app="shop", outcome="ok")
            assert list(counted) == [key(org="local", app="shop", workflow="checkout")]
            assert list(counted.values())[0] >= 1  # one a window
            assert not scraped(relay, "relay_metrics_collections", app="shop", outcome="failed")
        assert "samples refused" in relay.log()
    finally:
        relay.stop()


def test_after_a_restart_collected_until_is_exposed_while_the_executors_fail(tmp_path, store_url) -> None:
    relay = RelayServer(tmp_path, args=["--database-url", store_url], env=FAST).start()
    try:
        with executors(relay, {"app": "shop", "answers": {"get_metrics": lambda req: {"metrics": []}}}):
            wait(lambda: scraped(relay, "relay_metrics_collected_until_timestamp_seconds", app="shop"),
                 "a window collected")
        relay.stop()
        relay.start()  # a new process, and from now on every collection fails
        failing = {"metrics": [], "error_message": "the system database is down"}
        with executors(relay, {"app": "shop", "answers": {"get_metrics": lambda req: failing}}) as (ex,):
            # what RelayMetricsCollectionStale watches
            until = wait(lambda: scraped(relay, "relay_metrics_collected_until_timestamp_seconds", app="shop"),
                         "collected_until exposed")
            assert list(until) == [key(org="local", app="shop")]
            asked = min(datetime.fromisoformat(r["start_time"]).timestamp() for r in sent(ex, "get_metrics"))
            assert list(until.values()) == [asked]  # the stored cursor: where the collection asked from
            assert scraped(relay, "relay_metrics_collections", app="shop", outcome="failed")
        assert not scraped(relay, "relay_metrics_collections", app="shop", outcome="ok")
    finally:
        relay.stop()
