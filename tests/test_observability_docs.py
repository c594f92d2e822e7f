"""The Grafana dashboard and the Prometheus alerts in docs/observability/ use only what Relay exposes.

Every metric their queries name is one a real ``relay serve`` exposes on ``/metrics``; the
README's metric list is exactly what it exposes; every query parses, and the trickier alert
expressions select what they should, as the real ``promtool`` (Debian package ``prometheus``,
installed by ``scripts/test``) says.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.server import RelayServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "observability"
DASHBOARD = DOCS / "relay-dashboard.json"
ALERTS = DOCS / "relay-alerts.yml"
README = DOCS / "README.md"

FROM_PROMETHEUS = {"up"}  # series Prometheus makes itself, not Relay
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's interval variables, as promtool is given them; any other variable is a label matcher's regex
GRAFANA_INTERVALS = {"__rate_interval": "5m", "__interval": "5m", "__range": "1h"}
# The alerts the brief for these rules names: renaming one is a decision, not an accident
REQUIRED_ALERTS = {"RelayDown", "RelayProcessManagerBug", "RelayOutboxStuck", "RelayRecoveriesFailing",
                   "RelayExecutorsDeadUnrecovered", "RelayNoHealthyExecutor", "RelayProjectionLagging",
                   "RelayMetricsCollectionStale", "RelayExecutorCallsTimingOut", "RelayWorkerFailing",
                   "RelayAuthRefusalsSpike"}
# Families labelled by org and app: a dashboard query of one filters by the $org and $app variables
PER_APP = {"relay_executors", "relay_app_workflows_total", "relay_app_steps_total", "relay_metrics_collections_total",
           "relay_metrics_collected_until_timestamp_seconds"}


# --- reading PromQL -------------------------------------------------------------------------

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
            "atan2", "inf", "nan"}
IDENT = re.compile(r"(?<![\w:.])[a-zA-Z_:][\w:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: every identifier left once strings, label
    matchers, ranges and label lists are taken out that is neither a keyword, an aggregation
    nor a function (followed by ``(``)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", "{}", s)
    s = re.sub(r"\[[^\]]*\]", "[]", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", s)
    names = set()
    for m in IDENT.finditer(s):
        word = m.group()
        if word.lower() in KEYWORDS or word in AGGREGATIONS or re.match(r"\s*\(", s[m.end():]):
            continue
        names.add(word)
    return names


def test_metric_names_reads_promql() -> None:
    assert metric_names('sum by (org, app) (rate(a_total{x="y b", z=~"$org"}[$__rate_interval])) '
                        '/ on (org) group_left (app) b_seconds_bucket offset 5m > 1e3') == {"a_total", "b_seconds_bucket"}
    assert metric_names("histogram_quantile(0.99, sum(rate(c_bucket[5m])) by (le)) and time() - d > 3 * 300") \
        == {"c_bucket", "d"}
    assert metric_names("up == 0 unless count without (job) (e) > bool 2") == {"up", "e"}


def grafana_to_promql(expr: str) -> str:
    """A dashboard query as Prometheus sees it once Grafana has put in its variables."""
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return GRAFANA_INTERVALS.get(name, ".*")

    out = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)
    assert "$" not in out, expr
    return out


def template_selector(query: str) -> str | None:
    """The PromQL inside a Grafana Prometheus variable query (None if it has none)."""
    q = query.strip()
    if m := re.fullmatch(r"label_values\((.+),\s*\w+\s*\)", q, flags=re.S):
        return m.group(1)
    if m := re.fullmatch(r"query_result\((.+)\)", q, flags=re.S):
        return m.group(1)
    if re.fullmatch(r"(label_values\(\s*\w+\s*\)|label_names\(\)|metrics\(.*\))", q):
        return None
    raise AssertionError(f"a variable query this test does not read: {query!r}")


# --- the two files -----------------------------------------------------------------------------

def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))  # a collapsed row holds its panels


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL as written) of every panel target and variable query."""
    found = []
    for p in all_panels(dashboard()["panels"]):
        for t in p.get("targets", []):
            found.append((f"panel {p['title']!r}", t["expr"]))
    for v in dashboard()["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            if (sel := template_selector(q)) is not None:
                found.append((f"variable {v['name']}", sel))
    return found


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def alert(name: str) -> str:
    (rule,) = [r for r in alert_rules() if r.get("alert") == name]
    return str(rule["expr"])


# --- what a real relay serve exposes ----------------------------------------------------------------

@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> str:
    server = RelayServer(tmp_path_factory.mktemp("relay")).start()
    try:
        r = server.get("/metrics")
        assert r.status_code == 200, r.text
        return r.text
    finally:
        server.stop()


def families(text: str) -> dict[str, str]:
    """Family name -> type, as a scraper reads them (a counter's family name is without ``_total``);
    ``# TYPE`` lines read directly too, in case the parser ever drops a family with no samples."""
    found = {f.name: f.type for f in text_string_to_metric_families(text)}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        if kind == "counter":
            name = name.removesuffix("_total")
        found.setdefault(name, kind)
    return found


def sample_names(text: str) -> set[str]:
    """Every series name the scrape's families can produce, whether they have samples yet or not."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "summary": ["", "_sum", "_count"],
                "gaugehistogram": ["_bucket", "_gsum", "_gcount"], "gauge": [""], "untyped": [""], "unknown": [""],
                "info": ["_info"], "stateset": [""]}
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for name, kind in families(text).items():
        names |= {name + suffix for suffix in suffixes[kind]}
    return names


def test_every_metric_the_dashboard_and_the_alerts_use_is_exposed(scrape: str) -> None:
    exposed = sample_names(scrape) | FROM_PROMETHEUS
    assert "relay_transitions_total" in exposed and "relay_dead_to_recovery_confirmed_seconds_bucket" in exposed
    used: dict[str, set[str]] = {}
    queries = dashboard_queries() + [(f"alert {r['alert']}", str(r["expr"])) for r in alert_rules()]
    for where, expr in queries:
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        for name in names:
            used.setdefault(name, set()).add(where)
    assert len(used) >= 25
    missing = sorted(set(used) - exposed)
    assert not missing, "used by the dashboard or the alerts but not exposed by relay serve's /metrics: " + ", ".join(
        f"{name} ({', '.join(sorted(used[name]))})" for name in missing)


def test_the_readme_lists_exactly_the_metrics_relay_exposes(scrape: str) -> None:
    listed = dict(re.findall(r"^\| `(relay_\w+)` \| (\w+) \|", README.read_text(), flags=re.M))
    assert len(listed) >= 20, "the README's metric table is no longer read by this test"
    exposed = families(scrape)
    missing = sorted(n for n in listed if exposed.get(n.removesuffix("_total") if listed[n] == "counter" else n)
                     is None)
    wrong = sorted(f"{n} (listed {listed[n]}, exposed {exposed[f]})" for n in listed
                   if (f := n.removesuffix("_total") if listed[n] == "counter" else n) in exposed
                   and exposed[f] != listed[n])
    created = {f for f, kind in exposed.items() if f.endswith("_created") and kind == "gauge"
               and f.removesuffix("_created") in exposed}
    listed_families = {n.removesuffix("_total") if kind == "counter" else n for n, kind in listed.items()}
    unlisted = sorted(f for f in exposed if f.startswith("relay_") and f not in created | listed_families)
    assert not (missing or wrong or unlisted), (
        f"docs/observability/README.md lists metrics relay serve does not expose: {', '.join(missing) or '-'}; "
        f"with another type: {', '.join(wrong) or '-'}; and does not list: {', '.join(unlisted) or '-'}")


# --- promtool ----------------------------------------------------------------------------------------

def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    venv = Path(sys.executable).parent / "promtool"  # where scripts/test puts it
    tool = str(venv) if venv.exists() else shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(tool).exists():
        pytest.fail("promtool is not installed: run the suite with ./scripts/test, which installs the Debian "
                    "package prometheus")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def test_the_alert_rules_pass_promtool() -> None:
    out = promtool("check", "rules", str(ALERTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in out.stdout


def test_the_alert_rules_are_well_formed() -> None:
    rules = alert_rules()
    problems = []
    for r in rules:
        name = r.get("alert")
        if not (isinstance(name, str) and re.fullmatch(r"Relay[A-Z]\w+", name)):
            problems.append(f"{name!r}: not a Relay... alert")
        if not (isinstance(r.get("expr"), str) and r["expr"].strip()):
            problems.append(f"{name}: no expr")
        if not re.fullmatch(r"\d+[smh]", str(r.get("for", ""))):
            problems.append(f"{name}: no for")
        if (r.get("labels") or {}).get("severity") not in ("critical", "warning"):
            problems.append(f"{name}: severity is not critical or warning")
        for key in ("summary", "description"):
            if not str((r.get("annotations") or {}).get(key, "")).strip():
                problems.append(f"{name}: no {key} annotation")
    assert not problems, problems
    names = [r.get("alert") for r in rules]
    assert len(set(names)) == len(names), "an alert name appears twice"
    assert REQUIRED_ALERTS <= set(names), REQUIRED_ALERTS - set(names)
    assert "RELAY_METRICS_INTERVAL_SECS" in str(
        [r for r in rules if r["alert"] == "RelayMetricsCollectionStale"][0]["annotations"]["description"])


def test_the_trickier_alert_expressions_select_what_they_should(tmp_path: Path) -> None:
    """``promtool test rules`` on the expressions themselves (their firing, ``for`` and annotations
    are Prometheus's): each picks out the series in trouble and leaves the others alone."""
    tests = {"evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            # orders has a dead and a disconnected executor, no healthy one; billing has a healthy one
            {"series": 'relay_executors{org="acme",app="orders",status="DEAD",job="relay"}', "values": "1x30"},
            {"series": 'relay_executors{org="acme",app="orders",status="DISCONNECTED",job="relay"}', "values": "1x30"},
            {"series": 'relay_executors{org="acme",app="billing",status="HEALTHY",job="relay"}', "values": "2x30"},
            {"series": 'relay_executors{org="acme",app="billing",status="DEAD",job="relay"}', "values": "1x30"},
            # recoveries fail on instance a and are never confirmed; on b some are confirmed
            {"series": 'relay_recoveries_failed_total{instance="a",job="relay"}', "values": "0+1x40"},
            {"series": 'relay_recoveries_confirmed_total{instance="a",job="relay"}', "values": "0x40"},
            {"series": 'relay_recoveries_failed_total{instance="b",job="relay"}', "values": "0+1x40"},
            {"series": 'relay_recoveries_confirmed_total{instance="b",job="relay"}', "values": "0+1x40"},
            # orders' metrics were last collected up to the epoch; billing's keep up with the clock
            {"series": 'relay_metrics_collected_until_timestamp_seconds{org="acme",app="orders"}', "values": "0x40"},
            {"series": 'relay_metrics_collected_until_timestamp_seconds{org="acme",app="billing"}',
             "values": "0+60x40"},
            # half of list_workflows time out; 1 get_metrics in 101
            {"series": 'relay_executor_calls_total{type="list_workflows",outcome="timeout"}', "values": "0+1x40"},
            {"series": 'relay_executor_calls_total{type="list_workflows",outcome="ok"}', "values": "0+1x40"},
            {"series": 'relay_executor_calls_total{type="get_metrics",outcome="timeout"}', "values": "0+1x40"},
            {"series": 'relay_executor_calls_total{type="get_metrics",outcome="ok"}', "values": "0+100x40"},
            # instance a's process-manager thread uses a whole core, b's half of one; a's read models one too
            {"series": 'relay_worker_cpu_seconds_total{worker="process-manager",instance="a",job="relay"}',
             "values": "0+60x40"},
            {"series": 'relay_worker_cpu_seconds_total{worker="process-manager",instance="b",job="relay"}',
             "values": "0+30x40"},
            {"series": 'relay_worker_cpu_seconds_total{worker="projections",instance="a",job="relay"}',
             "values": "0+60x40"},
        ],
        "promql_expr_test": [
            {"expr": alert("RelayNoHealthyExecutor"), "eval_time": "10m",
             "exp_samples": [{"labels": '{org="acme",app="orders"}', "value": 2}]},
            {"expr": alert("RelayExecutorsDeadUnrecovered"), "eval_time": "10m",
             "exp_samples": [{"labels": '{org="acme",app="orders"}', "value": 1},
                             {"labels": '{org="acme",app="billing"}', "value": 1}]},
            {"expr": alert("RelayRecoveriesFailing"), "eval_time": "35m",
             "exp_samples": [{"labels": '{instance="a",job="relay"}', "value": 30}]},
            {"expr": alert("RelayMetricsCollectionStale"), "eval_time": "14m", "exp_samples": []},
            {"expr": alert("RelayMetricsCollectionStale"), "eval_time": "20m",
             "exp_samples": [{"labels": '{org="acme",app="orders"}', "value": 1200}]},
            {"expr": alert("RelayExecutorCallsTimingOut"), "eval_time": "20m",
             "exp_samples": [{"labels": '{type="list_workflows"}', "value": 0.5}]},
            {"expr": alert("RelayProcessManagerSaturated"), "eval_time": "20m",
             "exp_samples": [{"labels": '{instance="a",job="relay",worker="process-manager"}', "value": 1}]},
        ],
    }]}
    path = tmp_path / "alerts-test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    out = promtool("test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_dashboard_queries_pass_promtool(tmp_path: Path) -> None:
    exprs = list(dict.fromkeys(grafana_to_promql(expr) for _, expr in dashboard_queries()))
    assert len(exprs) >= 30
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:expr:{n}", "expr": e}
                                                        for n, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout


def test_the_readmes_scrape_config_passes_promtool(tmp_path: Path) -> None:
    """The README's scrape config, with its rule_files naming relay-alerts.yml, is a valid prometheus.yml."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S)
    (scrape_block,) = [b for b in blocks if "scrape_configs:" in b]
    (rules_block,) = [b for b in blocks if "rule_files:" in b]
    config = yaml.safe_load(scrape_block) | yaml.safe_load(rules_block)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "relay" and 'up{job="relay"}' in alert("RelayDown")
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    token = tmp_path / "relay-token"
    token.write_text("secret\n")
    job["authorization"]["credentials_file"] = str(token)
    assert config["rule_files"] == [ALERTS.name]
    config["rule_files"] = [str(ALERTS)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = promtool("check", "config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


# --- the dashboard's shape ----------------------------------------------------------------------------

def test_the_dashboard_is_a_tidy_grafana_model() -> None:
    d = dashboard()
    assert d["schemaVersion"] >= 36 and d["uid"] and d["title"] and d["id"] is None
    panels = list(all_panels(d["panels"]))
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids), "panel ids repeat"
    assert all(isinstance(i, int) for i in ids)

    boxes = []
    for p in panels:
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and all(isinstance(g[k], int) for k in "hwxy"), p["title"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        boxes.append((p["title"], g))
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "stat"), p["title"]
        assert p["datasource"] == DATASOURCE and p.get("description"), p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"].strip(), p["title"]
            for name in metric_names(t["expr"]) & PER_APP:
                assert 'org=~"$org"' in t["expr"] and 'app=~"$app"' in t["expr"], \
                    f"{p['title']}: {name} is not filtered by the org and app variables"
    overlaps = [(a, b) for i, (a, ga) in enumerate(boxes) for b, gb in boxes[i + 1:]
                if ga["x"] < gb["x"] + gb["w"] and gb["x"] < ga["x"] + ga["w"]
                and ga["y"] < gb["y"] + gb["h"] and gb["y"] < ga["y"] + ga["h"]]
    assert not overlaps, overlaps

    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("org", "app"):
        v = variables[name]
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        assert v["type"] == "query" and v["datasource"] == DATASOURCE
        assert re.fullmatch(rf"label_values\(relay_executors(\{{.*\}})?, {name}\)", q), q
        assert v["includeAll"] and v["allValue"] == ".*"
