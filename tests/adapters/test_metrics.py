"""The Prometheus metrics: each one is exposed under its name, with its labels."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from relay_es.adapters.metrics import CONTENT_TYPE, Metrics
from relay_es.engine.process_manager import Stats


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
    m.watch_process_manager(Stats(store_errors=4, bugs=1))
    m.transitions.labels("Connected").inc()
    m.recoveries_dispatched.inc()
    m.recoveries_confirmed.inc()
    m.recoveries_failed.inc()
    m.dead_to_confirmed.observe(1.5)
    m.open_connections.set(7)
    m.append_latency.observe(0.002)
    m.full_collections.observe(0.03)
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
    # computed at scrape time: executors by org, app and status (invisible rows not counted)
    assert samples("relay_executors") == {(("app", "orders"), ("org", "acme"), ("status", "HEALTHY")): 2.0,
                                          (("app", "orders"), ("org", "acme"), ("status", "DEAD")): 1.0}
    assert samples("relay_outbox_errors", "_total") == {(): 3.0}
    assert samples("relay_outbox_stuck_transitions") == {(): 1.0}
    assert samples("relay_outbox_queued_transitions") == {(): 5.0}
    assert samples("relay_process_manager_store_errors", "_total") == {(): 4.0}
    assert samples("relay_process_manager_bugs", "_total") == {(): 1.0}


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
