"""The SQLite store's directory deleted (``rm -rf relay-data/``) under a running ``relay serve``. The
server answered 204 to writes into the deleted file, /healthz and /readyz said ready, nothing was
logged; a second server started on the path (the lock file went with the directory) and both led; once
both stopped, everything the first had acknowledged was gone. Invariant: the server stops (exit code 3,
as on a Postgres store that changed) and says why in one line."""

from __future__ import annotations

import shutil

import httpx
import pytest

from tests.server import TLS, RelayServer

pytestmark = pytest.mark.timeout(120)


@pytest.mark.e2e
def test_a_server_whose_sqlite_directory_was_deleted_stops_and_says_why(tmp_path) -> None:
    data = tmp_path / "relay-data"
    server = RelayServer(tmp_path, args=["--database-url", f"sqlite:///{data}/relay.db"]).start()
    try:
        r = httpx.put(server.http + "/v2/orgs/local/apps/before", verify=TLS, timeout=10)
        assert r.status_code == 204, r.text
        shutil.rmtree(data)
        assert server.proc is not None
        try:
            assert server.proc.wait(60) == 3  # the lease is checked every 2 s
        except BaseException:
            print(server.log()[-8000:])
            raise
        [line] = [line for line in server.log().splitlines() if "this instance stops serving" in line]
        why = f"the store file {data}/relay.db was deleted or replaced under this process"
        assert " ERROR " in line and why in line, line
        assert "Traceback" not in server.log()
    finally:
        server.stop()
