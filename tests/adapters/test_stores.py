"""Store configuration as an unlucky operator meets it (issue 11)."""

from __future__ import annotations

import stat
from typing import Any

import pytest

from relay_es.adapters.stores import event_store_env, open_database, parse_database_url, redact_url


@pytest.mark.parametrize("url, shown", [
    ("postgresql://relay:s3cret@db:5432/relay", "postgresql://relay:***@db:5432/relay"),
    ("postgresql://relay:p@ss@w0rd@db/relay", "postgresql://relay:***@db/relay"),  # '@' in the password
    ("postgresql://relay:a/b?c@db/relay", "postgresql://relay:***@db/relay"),
    ("postgres://relay@db/relay", "postgres://relay@db/relay"),  # no password: nothing to hide
    ("postgresql://db/relay?user=x", "postgresql://db/relay?user=x"),
    ("mysql://root:hunter2@h/x", "mysql://root:***@h/x"),
    ("postgresql://db/relay?sslmode=require&password=hunter2&x=1", "postgresql://db/relay?sslmode=require&password=***&x=1"),
    ("sqlite:///relay-data/relay.db", "sqlite:///relay-data/relay.db"),
])
def test_passwords_are_redacted_whole(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_an_unsupported_url_is_refused_without_its_password() -> None:
    with pytest.raises(ValueError) as e:
        parse_database_url("mysql://root:hun@ter2@h/x")
    assert "hun" not in str(e.value) and "ter2" not in str(e.value)


def test_the_store_directory_relay_creates_is_private(tmp_path) -> None:
    cfg = parse_database_url(f"sqlite:///{tmp_path}/new/relay.db")
    event_store_env(cfg)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    cfg2 = parse_database_url(f"sqlite:///{tmp_path}/other/relay.db")
    open_database(cfg2).close()
    assert stat.S_IMODE((tmp_path / "other").stat().st_mode) == 0o700
    (tmp_path / "mine").mkdir(mode=0o755)  # one the operator made is left alone
    event_store_env(parse_database_url(f"sqlite:///{tmp_path}/mine/relay.db"))
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o755


# ---------------------------------------------------------------- every URL parameter reaches every connection

from relay_es.domain.clock import FakeClock  # noqa: E402
from relay_es.engine.service import Relay  # noqa: E402


def with_params(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def event_store(url: str, **env: str) -> Relay:
    return Relay({**event_store_env(parse_database_url(url)), "POSTGRES_CONNECT_TIMEOUT": "2", **env},
                 clock=FakeClock())


def test_the_event_store_refuses_plaintext_when_the_url_requires_tls(postgres_url: str) -> None:
    # The suite's Postgres has no SSL. The event store once connected anyway (sslmode dropped)
    # and wrote a token over plaintext; the read models' pool, given the URL, refused.
    import psycopg
    from eventsourcing.persistence import OperationalError

    with pytest.raises(OperationalError):  # the pool's timeout: every attempt refused for want of SSL
        event_store(with_params(postgres_url, "sslmode=require"))
    with pytest.raises(psycopg.OperationalError, match="SSL"):  # as libpq itself refuses the URL
        psycopg.connect(with_params(postgres_url, "sslmode=require")).close()
    relay = event_store(with_params(postgres_url, "sslmode=disable"))
    relay.close()


def test_every_parameter_of_the_url_reaches_the_event_store_s_connections(postgres_url: str) -> None:
    import psycopg

    relay = event_store(with_params(postgres_url, "application_name=relay-es-h3b&options=-c%20work_mem%3D7MB"))
    try:
        with relay.recorder.datastore.get_connection() as conn:
            row = conn.execute("SELECT current_setting('application_name') AS a, current_setting('work_mem') AS w"
                               ).fetchone()
            assert (row["a"], row["w"]) == ("relay-es-h3b", "7MB")
        with psycopg.connect(postgres_url, autocommit=True) as c:
            names = {r[0] for r in c.execute("SELECT application_name FROM pg_stat_activity "
                                              "WHERE datname = current_database()")}
        assert "relay-es-h3b" in names
    finally:
        relay.close()


@pytest.mark.parametrize("query, why", [
    ("sslmod=require", 'invalid connection option "sslmod"'),  # a typo is not silently ignored
    ("sslmode=require&sslmode=disable", "'sslmode' is given twice"),
    ("sslmode", "has no value"),
])
def test_a_url_parameter_that_cannot_be_honoured_is_refused_clearly(query: str, why: str) -> None:
    for url in ("postgresql://relay:s3cret@db/relay", "postgresql://relay@db/relay?password=s3cret"):
        with pytest.raises(ValueError) as e:
            parse_database_url(with_params(url, query))
        assert why in str(e.value) and "s3cret" not in str(e.value)


def test_the_store_files_relay_creates_are_private(tmp_path) -> None:
    # The directory was 0700, but the database, its -wal and -shm and the lease's lock file were 0644.
    import os

    from relay_es.adapters.lease import Lease
    from tests.support import info

    old = os.umask(0o022)
    try:
        cfg = parse_database_url(f"sqlite:///{tmp_path}/store/relay.db")
        lease = Lease(cfg)
        lease.acquire()
        relay = Relay(event_store_env(cfg), clock=FakeClock())
        db = open_database(cfg)
        relay.executor_connected("local", "app", info("A"), connection_id="c1", owner="relay-1")
        with db.transaction() as cur:
            cur.execute("CREATE TABLE t (x INTEGER)")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "store").iterdir()}
        db.close()
        relay.close()
        lease.release()
    finally:
        os.umask(old)
    assert {"relay.db", "relay.db-wal", "relay.db-shm", "relay.db.lock"} <= set(modes), modes
    assert modes == dict.fromkeys(modes, 0o600), modes


def test_the_read_models_writer_frees_pages_without_zeroing_them(tmp_path) -> None:
    """Debian's SQLite zeroes every page a delete frees (SECURE_DELETE), which made dropping a
    rebuild's old tables take seconds. Everything the read models' writer deletes is derived
    from the event log in the same file, so it frees pages as SQLite does by default."""
    cfg = parse_database_url(f"sqlite:///{tmp_path}/relay.db")
    db = open_database(cfg)
    try:
        with db.transaction() as cur:
            cur.execute("PRAGMA secure_delete")
            assert cur.fetchone()[0] == 0
    finally:
        db.close()


def test_runners_opening_an_empty_database_together_make_the_read_models_tables_one_at_a_time() -> None:
    """``Database.schema``: without its advisory lock, four runners making the read models' tables at
    once on an empty Postgres database failed in six of six tries (a unique violation on pg_type)."""
    import uuid

    from relay_es.adapters.series import MetricSeries
    from relay_es.projections import all_projections
    from relay_es.projections.runner import ProjectionRunner
    from tests.conftest import create_database, drop_database, postgres_admin_url
    from tests.support import at_once

    admin = postgres_admin_url()
    for _ in range(3):
        name = f"relay_test_{uuid.uuid4().hex[:12]}"
        cfg = parse_database_url(create_database(admin, name))
        Relay(event_store_env(cfg), clock=FakeClock()).close()  # the event store's tables (pgfactory's own test)
        def make(opened: tuple[Relay, Any]) -> None:
            relay, db = opened
            try:
                ProjectionRunner(relay, db, all_projections())
                MetricSeries(db).create()
            finally:
                db.close()
                relay.close()

        errors = at_once(4, lambda: (Relay(event_store_env(cfg), clock=FakeClock()), open_database(cfg)), make)
        drop_database(admin, name)
        assert errors == []


# ---------------------------------------------------------------- one database for every connection

def test_the_store_s_connection_string_holds_what_the_url_says_and_nothing_more() -> None:
    # Relay once filled in database postgres and port 5432 for the event store alone; libpq fills in what the
    # URL leaves out, for every connection alike.
    from psycopg.conninfo import conninfo_to_dict

    from relay_es.adapters.pgfactory import CONNINFO

    cfg = parse_database_url("postgresql://alice@db.example?sslmode=require")
    assert conninfo_to_dict(cfg.conninfo) == {"user": "alice", "host": "db.example", "sslmode": "require"}
    assert event_store_env(cfg)[CONNINFO] == cfg.conninfo


@pytest.fixture
def own_database() -> Any:
    """A role and a database of the same name, which it owns (a user's default database is its name)."""
    import uuid

    import psycopg

    from tests.conftest import create_database, drop_database, postgres_admin_url

    admin = postgres_admin_url()
    name = f"relay_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        create_database(admin, name, f'OWNER "{name}"')
        yield name
    finally:
        drop_database(admin, name)
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP ROLE IF EXISTS "{name}"')


@pytest.mark.parametrize("left_out", ["database: the user's name", "database: PGDATABASE", "port: PGPORT"])
def test_the_events_the_read_models_and_the_lease_are_in_one_database(left_out: str, own_database: str,
                                                                        monkeypatch) -> None:
    """``postgresql://alice@host`` put the events in database ``postgres`` (Relay's default) and the lease
    and the read models in ``alice`` (libpq's): a second instance under another user led the same events."""
    from urllib.parse import urlparse

    from relay_es.adapters.lease import Lease
    from tests.conftest import postgres_admin_url

    name, cluster = own_database, urlparse(postgres_admin_url())
    for var in ("PGDATABASE", "PGPORT", "PGHOST", "PGUSER", "PGSERVICE"):
        monkeypatch.delenv(var, raising=False)
    url = f"postgresql://{name}@{cluster.hostname}:{cluster.port}"
    if left_out == "database: PGDATABASE":
        monkeypatch.setenv("PGDATABASE", name)
    elif left_out == "port: PGPORT":
        url = f"postgresql://{name}@{cluster.hostname}/{name}"
        monkeypatch.setenv("PGPORT", str(cluster.port))
    where = "SELECT current_database(), inet_server_port()"
    cfg = parse_database_url(url)
    lease = Lease(cfg)
    lease.acquire()
    relay = db = None
    try:
        relay = Relay(event_store_env(cfg), clock=FakeClock())
        db = open_database(cfg)
        with relay.recorder.datastore.get_connection() as conn:
            events = tuple(conn.execute(where).fetchone().values())
        with db.read() as cur:
            read_models = tuple(cur.execute(where).fetchone())
        leased = tuple(lease._conn.execute(where).fetchone())
        assert {"events": events, "read models": read_models, "lease": leased} == dict.fromkeys(
            ("events", "read models", "lease"), (name, cluster.port))
    finally:
        for opened in (db, relay):
            if opened is not None:
                opened.close()
        lease.release()


def test_the_read_models_pool_replaces_the_connections_postgres_cut(postgres_url: str) -> None:
    # After a Postgres restart the pool handed out connections Postgres had cut: the first reads failed
    # (500 AdminShutdown) until each had failed once.
    import time

    import psycopg

    name = postgres_url.rpartition("/")[2]
    db = open_database(parse_database_url(postgres_url))
    try:
        with db.read() as cur:
            assert cur.execute("SELECT 1").fetchone() == (1,)
        with psycopg.connect(postgres_url, autocommit=True) as c:
            mine = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
            pids = [pid for pid, in c.execute(mine, (name,))]
            assert pids
            for pid in pids:
                c.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + 10
            while c.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
                assert time.monotonic() < deadline, f"backends {pids} still there 10 s after they were terminated"
                time.sleep(0.01)
        with db.read() as cur:
            assert cur.execute("SELECT 1").fetchone() == (1,)
    finally:
        db.close()


# ---------------------------------------------------------------- a search_path would split the store

SEARCH_PATHS = ["-csearch_path%3Dsa", "-c%20search_path%3Dsa", "--search_path%3Dsa", "--search-path%3Dsa",
                "-c%20SEARCH_PATH%3Dsa", "-c%20work_mem%3D7MB%20-c%20search_path%3Dsa", "-ec%20search_path%3Dsa",
                "-c%20search%5C_path%3Dsa"]


@pytest.mark.parametrize("options", SEARCH_PATHS)
def test_a_search_path_in_the_urls_options_is_refused(options: str) -> None:
    """The event store's tables are always in schema public, the read models' where search_path puts
    them: two stores told apart by search_path shared one event log. Each form Postgres reads is refused."""
    with pytest.raises(ValueError) as e:
        parse_database_url(f"postgresql://relay:s3cret@db/relay?options={options}")
    assert "search_path" in str(e.value) and "s3cret" not in str(e.value)


@pytest.mark.parametrize("options", ["-c%20work_mem%3D7MB", "-c%20application_name%3Drelay"])
def test_other_options_are_accepted(options: str) -> None:
    assert parse_database_url(f"postgresql://relay@db/relay?options={options}").is_postgres


def test_a_search_path_in_pgoptions_is_refused_where_libpq_reads_it(monkeypatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c search_path=sa")
    with pytest.raises(ValueError, match="PGOPTIONS .* search_path"):
        parse_database_url("postgresql://relay@db/relay")
    # libpq reads PGOPTIONS only for a connection string without options (an empty one included)
    for options in ("-c%20work_mem%3D7MB", ""):
        assert parse_database_url(f"postgresql://relay@db/relay?options={options}").is_postgres
    assert parse_database_url("sqlite:///relay.db").sqlite_path == "relay.db"


# ---------------------------------------------------------------- whether a database holds a Relay store

def test_holds_event_log_tells_a_relay_store_from_another_applications(store_url: str, tmp_path) -> None:
    import sqlite3

    import psycopg

    from relay_es.adapters.stores import holds_event_log

    config = parse_database_url(store_url)
    assert not holds_event_log(config)
    assert config.is_postgres or not (tmp_path / "relay.db").exists()  # a missing file is not made
    if config.is_postgres:
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE customers (id int PRIMARY KEY)")
    else:
        with sqlite3.connect(tmp_path / "relay.db") as conn:
            conn.execute("CREATE TABLE customers (id int PRIMARY KEY)")
    assert not holds_event_log(config)
    relay = event_store(store_url)
    try:  # the table it looks for is the one the library made
        assert holds_event_log(config)
    finally:
        relay.close()


def test_holds_event_log_on_a_file_that_is_not_a_database_says_so(tmp_path) -> None:
    import sqlite3

    from relay_es.adapters.stores import holds_event_log

    (tmp_path / "notes.db").write_text("not a database, " * 100)
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        holds_event_log(parse_database_url(f"sqlite:///{tmp_path}/notes.db"))
