"""Names typed by the user or sent by executors reach the server as the one path segment they are
(``.`` and ``..`` included: httpx removes dot segments, and ``relay workflows delete .. --app
victim`` deleted the application), ``--metadata`` that Python reads but that is not JSON is a usage
error, and tables line up by the columns a terminal gives each character, not by their count."""

from __future__ import annotations

import unicodedata

import httpx
import pytest

from relay_es.composition import client_cli
from tests.composition.test_client_cli import APP, REAL_CLIENT, run
from tests.server import RelayServer


def sent_paths(monkeypatch: pytest.MonkeyPatch, *argv: str) -> list[tuple[str, str]]:
    """The (method, raw path) of every request ``relay *argv`` sends, each answered 204 (a list: [])."""
    sent: list[tuple[str, str]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append((r.method, r.url.raw_path.decode().split("?")[0]))
        return httpx.Response(200, json=[]) if r.method == "GET" else httpx.Response(204)

    run(monkeypatch, handler, *argv)
    return sent


L = "/v2/orgs/local"
DOTS = {".": "%2E", "..": "%2E%2E"}


@pytest.mark.parametrize("name", list(DOTS))
def test_a_dot_name_is_sent_as_the_segment_it_is(monkeypatch, capsys, name: str) -> None:
    """Each command that puts a name in its path: the name is one segment, never a step up or a step nowhere."""
    d = DOTS[name]
    cases = [
        (["workflows", "delete", name, "--app", "victim"], ("DELETE", f"{L}/apps/victim/workflows/{d}")),
        (["workflows", "cancel", name, "--app", "victim"], ("POST", f"{L}/apps/victim/workflows/{d}/cancel")),
        (["workflows", "get", name, "--app", "victim"], ("GET", f"{L}/apps/victim/workflows/{d}")),
        (["workflows", "steps", name, "--app", "victim"], ("GET", f"{L}/apps/victim/workflows/{d}/steps")),
        (["workflows", "resume", name, "--app", "victim"], ("POST", f"{L}/apps/victim/workflows/{d}/resume")),
        (["workflows", "fork", name, "--app", "victim"], ("POST", f"{L}/apps/victim/workflows/{d}/fork")),
        (["alerts", "delete", name, "--app", "victim"], ("DELETE", f"{L}/apps/victim/alerting-rules/{d}")),
        (["queues", "get", name, "--app", "victim"], ("GET", f"{L}/apps/victim/queues/{d}")),
        (["schedules", "get", name, "--app", "victim"], ("GET", f"{L}/apps/victim/schedules/{d}")),
        (["schedules", "pause", name, "--app", "victim"], ("POST", f"{L}/apps/victim/schedules/{d}/pause")),
        (["schedules", "trigger", name, "--app", "victim"], ("POST", f"{L}/apps/victim/schedules/{d}/trigger")),
        (["history", name, "--app", "victim"], ("GET", f"{L}/apps/victim/executors/{d}/history")),
        (["tokens", "revoke", name], ("DELETE", f"{L}/tokens/{d}")),
        (["tokens", "create", name], ("POST", f"{L}/tokens/{d}")),
        (["roles", "delete", name], ("DELETE", f"{L}/roles/{d}")),
        (["apps", "delete", name], ("DELETE", f"{L}/apps/{d}")),
        (["apps", "show", name], ("GET", f"{L}/apps/{d}")),
        (["executors", "list", "--app", name], ("GET", f"{L}/apps/{d}/executors")),
        (["metrics", name], ("GET", f"{L}/apps/{d}/metrics")),
        (["queues", "list", "--app", name], ("GET", f"{L}/apps/{d}/queues")),
        (["alerts", "list", "--app", name], ("GET", f"{L}/apps/{d}/alerting-rules")),
        (["autoscaling", "clear", "--app", name], ("DELETE", f"{L}/apps/{d}/autoscaling-policy")),
        (["apps", "list", "--org", name], ("GET", f"/v2/orgs/{d}/apps")),
    ]
    for argv, first in cases:
        sent = sent_paths(monkeypatch, *argv)
        assert sent[:1] == [first], argv
    capsys.readouterr()


def test_a_name_ending_in_dots_or_holding_them_is_left_as_it_is(monkeypatch, capsys) -> None:
    assert sent_paths(monkeypatch, "workflows", "delete", "...", "--app", "a.b") == [
        ("DELETE", f"{L}/apps/a.b/workflows/...")]
    assert sent_paths(monkeypatch, "queues", "get", ".hidden", "--app", "orders") == [
        ("GET", APP + "/queues/.hidden")]
    capsys.readouterr()


def test_a_server_with_a_path_keeps_it_under_a_dot_name(monkeypatch, capsys) -> None:
    assert sent_paths(monkeypatch, "apps", "delete", "..", "--server", "https://relay.example/base/") == [
        ("DELETE", "/base/v2/orgs/local/apps/%2E%2E")]
    capsys.readouterr()


def test_an_empty_name_is_a_usage_error_and_nothing_is_sent(monkeypatch, capsys) -> None:
    """``apps delete ""`` asked ``DELETE .../apps/``: a path of another shape than the command's."""
    for argv in (["apps", "delete", ""], ["workflows", "delete", "", "--app", "orders"],
                 ["history", "A", "--app", ""], ["apps", "list", "--org", ""]):
        assert sent_paths(monkeypatch, *argv) == [], argv
        err = capsys.readouterr().err
        assert err.startswith("relay: ") and "empty" in err and len(err.splitlines()) == 1, err
    for argv in (["apps", "delete", ""], ["history", "A", "--app", ""]):
        assert run(monkeypatch, lambda r: httpx.Response(204), *argv) == 2
    capsys.readouterr()


def test_a_built_path_that_would_change_on_the_way_is_not_sent(monkeypatch) -> None:
    """The last guard: whatever a path was built from, the request holds exactly that path."""
    import argparse

    sent: list[httpx.Request] = []
    monkeypatch.setattr(client_cli.httpx, "Client", lambda **kw: REAL_CLIENT(
        transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200, json={})), **kw))
    args = argparse.Namespace(server="http://127.0.0.1:9/base", token=None, org="local")
    c = client_cli.Client(args)
    for path in (f"{L}/apps/victim/workflows/..", f"{L}/apps/victim/./x", f"{L}/apps/caf\u00e9",
                 f"{L}/apps/a b"):
        with pytest.raises(client_cli.CliError) as e:
            c.call("DELETE", path)
        assert e.value.code == 2 and "not sent" in str(e.value), path
    assert sent == []
    assert c.call("GET", f"{L}/apps/%2E%2E", params={"x": "a/../b"}) == {}
    assert sent[0].url.raw_path == b"/base/v2/orgs/local/apps/%2E%2E?x=a%2F..%2Fb"


def test_against_relay_serve_a_dot_name_never_reaches_the_application(tmp_path, capsys) -> None:
    """Before: ``workflows delete ..`` deleted the application (the audit said deleteApp), ``queues get ..``
    printed it, ``history ..`` of an executor really named ``..`` was a 404."""
    from relay_es.composition import cli

    relay = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/relay.db"])
    relay.start()
    common = ["--app", "victim", "--server", relay.http]
    try:
        assert cli.main(["apps", "register", "victim", "--server", relay.http]) == 0
        capsys.readouterr()
        assert cli.main(["workflows", "delete", "..", *common]) != 0  # no executor to ask: 503
        assert cli.main(["alerts", "delete", "..", *common]) != 0
        assert cli.main(["queues", "get", "..", *common]) != 0
        capsys.readouterr()
        assert relay.get("/v2/orgs/local/apps/victim").status_code == 200
        audit = relay.get("/v2/orgs/local/audit-logs", params={"operation": "deleteApp"}).json()
        assert audit == []
        assert cli.main(["history", "..", *common, "--json"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("relay: 404 ") and "'..'" in err, err
    finally:
        relay.stop()


@pytest.mark.parametrize(("metadata", "why"), [
    ('{"threshold": NaN}', "NaN"), ('{"threshold": Infinity}', "Infinity"), ('{"a": -Infinity}', "-Infinity"),
    ("[" * 100_000, "nested too deeply"), ('{"a":' * 100_000, "nested too deeply")],
    ids=["nan", "infinity", "-infinity", "deep-list", "deep-object"])
def test_alert_metadata_python_reads_but_that_is_not_json_is_a_usage_error(monkeypatch, capsys, metadata: str,
                                                                           why: str) -> None:
    sent: list[httpx.Request] = []
    code = run(monkeypatch, lambda r: sent.append(r) or httpx.Response(201, json={}), "alerts", "create",
               "WorkflowFailure", "--app", "orders", "--metadata", metadata)
    captured = capsys.readouterr()
    assert code == 2 and sent == [] and captured.out == ""
    assert captured.err.startswith("relay: --metadata is not JSON: ") and why in captured.err
    assert len(captured.err.splitlines()) == 1


def columns(text: str) -> int:
    """Terminal columns ``text`` takes: a wide or full-width character two, a combining one none."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def test_tables_line_up_by_display_width(monkeypatch, capsys) -> None:
    rows = [{"hostname": "web-1", "appVersion": "v1"}, {"hostname": "主机名", "appVersion": "v1"},
            {"hostname": "e\u0301" * 5, "appVersion": "v1"}, {"hostname": "ｗｅｂ", "appVersion": "v1"}]
    lines = client_cli.table(rows, ["hostname", "appVersion"]).splitlines()
    starts = {columns(line[:line.rindex("v")]) for line in lines[1:]} | {columns(lines[0][:lines[0].index("appVersion")])}
    assert starts == {len("hostname  ")}, lines


def test_a_wide_cell_is_cut_to_the_column_s_width(monkeypatch, capsys) -> None:
    rows = [{"hostname": "主" * 50, "appVersion": "v1"}, {"hostname": "x" * 70, "appVersion": "v2"}]
    lines = client_cli.table(rows, ["hostname", "appVersion"]).splitlines()
    assert [columns(line[:line.rindex("v")]) for line in lines[1:]] == [62, 62]
    assert lines[1].startswith("主" * 29 + "…") and columns(lines[1].split("  v")[0].rstrip()) <= 60


def test_a_key_value_listing_lines_up_by_display_width(monkeypatch, capsys) -> None:
    app = {"名前": "orders", "name": "x"}
    assert run(monkeypatch, lambda r: httpx.Response(200, json=app), "apps", "show", "orders") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [columns(line[:line.index(v)]) for line, v in zip(lines, ("orders", "x"))] == [6, 6]
