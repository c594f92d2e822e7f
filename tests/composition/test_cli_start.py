"""``relay serve`` (and ``relay admin``, ``relay projections``) when they cannot start: one line on
stderr, no traceback, no password, and an exit code of their own (1; 2 for a setting; 3 is a lost
lease's only); and "relay serving on" said once the port is bound, naming it."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading

import httpx

from relay_es.composition.cli import main
from tests.server import RELAY, TLS

UNREACHABLE = "postgresql://postgres:hunter2@127.0.0.1:1/relay"  # nothing listens on port 1


def _failed(r: subprocess.CompletedProcess[str], code: int) -> str:
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr and "hunter2" not in r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("relay: "), r.stderr
    return last


def test_a_port_in_use_exits_1_saying_so_and_never_says_serving(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(RELAY + ["serve", "--port", str(port)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    last = _failed(r, 1)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in last
    assert "relay serving on" not in r.stderr


def test_serving_is_said_once_bound_with_the_port_bound(tmp_path) -> None:
    proc = subprocess.Popen(RELAY + ["serve", "--port", "0"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    timer = threading.Timer(60, proc.kill)  # a server that never says it: the read below ends
    timer.start()
    try:
        said = next((line for line in proc.stderr if "relay serving on" in line), "")
        port = int(re.search(r"relay serving on http://127\.0\.0\.1:(\d+) ", said).group(1))  # type: ignore[union-attr]
        assert port > 0
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", verify=TLS, timeout=10).status_code == 200
    finally:
        timer.cancel()
        proc.terminate()
        proc.wait(timeout=30)


def test_an_unknown_log_level_is_refused_naming_it(capsys) -> None:
    assert main(["serve", "--log-level", "foo"]) == 2
    assert capsys.readouterr().err == ("relay: --log-level (RELAY_LOG_LEVEL) must be one of DEBUG, INFO, WARNING, "
                                       "ERROR, CRITICAL, got 'foo'\n")


def test_a_store_that_cannot_be_reached_is_one_line_without_the_password(tmp_path) -> None:
    env = {**os.environ, "RELAY_DATABASE_URL": UNREACHABLE}
    for argv in (["serve", "--port", "0"], ["projections", "rebuild"], ["admin", "create-token", "ci", "--org", "o"]):
        r = subprocess.run(RELAY + argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        last = _failed(r, 1)
        assert last.startswith("relay: cannot open the store postgresql://postgres:***@127.0.0.1:1/relay: "), argv
        assert "Connection refused" in last, argv  # libpq's reason, not a pool's "couldn't get a connection"
        assert "relay serving on" not in r.stderr


def test_ctrl_c_stops_serve_with_exit_code_0_and_no_traceback(tmp_path) -> None:
    import signal

    proc = subprocess.Popen(RELAY + ["serve", "--port", "0"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    timer = threading.Timer(60, proc.kill)
    timer.start()
    try:
        next((line for line in proc.stderr if "relay serving on" in line), "")
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 0
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest


def test_admin_checks_its_arguments_before_it_opens_or_makes_a_store(tmp_path) -> None:
    """A refused token leaves no new store behind; a path with no store yet is said to be made
    (the first token may come before the first serve; a mistyped path does not pass unseen); a
    rebuild of a store that is not there is refused."""
    url = f"sqlite:///{tmp_path}/typo/relay.db"
    r = subprocess.run(RELAY + ["admin", "create-token", "ci", "--org", "bad org", "--database-url", url],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "org" in _failed(r, 2)  # a usage error, as serve's settings
    assert not (tmp_path / "typo").exists()
    r = subprocess.run(RELAY + ["projections", "rebuild", "--database-url", url], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert _failed(r, 1) == f"relay: no Relay store at {tmp_path}/typo/relay.db: nothing to rebuild"
    assert not (tmp_path / "typo").exists()
    r = subprocess.run(RELAY + ["admin", "create-token", "ci", "--org", "acme", "--database-url", url],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert f"relay: no Relay store at {tmp_path}/typo/relay.db yet: making a new one" in r.stderr
    assert (tmp_path / "typo" / "relay.db").exists()
    r = subprocess.run(RELAY + ["admin", "create-token", "ci2", "--org", "acme", "--database-url", url],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "making a new one" not in r.stderr, r.stderr


def test_admin_on_a_store_a_newer_relay_wrote_is_one_line(tmp_path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path}/relay.db"
    argv = RELAY + ["admin", "create-token", "ci", "--org", "acme", "--database-url", url]
    assert subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60).returncode == 0
    with sqlite3.connect(tmp_path / "relay.db") as db:  # an event of a kind this Relay does not know
        (sid,) = db.execute("SELECT originator_id FROM stored_events").fetchone()
        db.execute("INSERT INTO stored_events VALUES (?, 2, 'relay_es.aggregates.token:Token.FutureThing', ?)",
                   (sid, b'{"timestamp": "2026-12-06T00:00:00+00:00"}'))
    last = _failed(subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60), 1)
    assert last.startswith("relay: the store holds events this Relay cannot read"), last
