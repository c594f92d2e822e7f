"""The applications and tokens read models: pure folds, and what the projection hands the store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from relay_es.aggregates import SettingsPatch
from relay_es.aggregates.application import Application
from relay_es.aggregates.token import Token
from relay_es.projections.apps import AppsProjection, app_named, reduce_app, reduce_token

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def test_an_application_s_row_follows_its_events() -> None:
    app = Application(org="acme", name="orders", private_mode=False, timestamp=T0)
    app.change_settings(SettingsPatch(executor_timeout=timedelta(seconds=90)), at=T0 + timedelta(seconds=1))
    app.delete(at=T0 + timedelta(seconds=2))
    row = None
    for e in app.collect_events():
        row = reduce_app(row, e)
    assert (row.org, row.name, row.version, row.executor_timeout, row.deleted) == (
        "acme", "orders", 3, timedelta(seconds=90), True)
    assert row.created_at == T0 and row.updated_at == T0 + timedelta(seconds=2)


def test_an_application_is_found_by_its_name_among_its_org_s_live_ones() -> None:
    rows = {}
    for org, name in [("acme", "orders"), ("acme", "billing"), ("other", "orders")]:
        row = None
        for e in Application(org=org, name=name, private_mode=False, timestamp=T0).collect_events():
            row = reduce_app(row, e)
        rows[org, name] = row

    class Db:
        def list_apps(self, org: str, *, include_deleted: bool = False) -> list:
            return [r for (o, _), r in rows.items() if o == org]

    assert app_named(Db(), "acme", "billing") is rows["acme", "billing"]
    assert app_named(Db(), "other", "orders") is rows["other", "orders"]
    assert app_named(Db(), "other", "billing") is None


def test_a_token_s_row_follows_its_events() -> None:
    tok = Token(org="acme", name="ci", secret_hash="h1", app_names=["orders"], timestamp=T0)
    tok.revoke(at=T0 + timedelta(seconds=1))
    row = None
    for e in tok.collect_events():
        row = reduce_token(row, e)
    assert (row.secret_hash, row.app_names, row.revoked, row.version) == ("h1", ["orders"], True, 2)
    tok.reissue(secret_hash="h2", app_names=None, at=T0 + timedelta(seconds=2))
    for e in tok.collect_events():
        row = reduce_token(row, e)
    assert (row.secret_hash, row.app_names, row.revoked, row.created_at) == ("h2", None, False,
                                                                             T0 + timedelta(seconds=2))


def test_the_projection_asks_for_rows_it_lacks_and_hands_over_what_changed() -> None:
    app = Application(org="acme", name="orders", private_mode=False, timestamp=T0)
    tok = Token(org="acme", name="ci", secret_hash="h", app_names=None, timestamp=T0)
    events = app.collect_events() + tok.collect_events()
    items = [(i + 1, str(e.originator_id), e) for i, e in enumerate(events)]
    p = AppsProjection()
    asked = p.missing(items)
    assert asked == [str(app.id), str(tok.id)]
    p.loaded(asked, {})
    for nid, sid, e in items:
        p.apply(nid, sid, e)
        p.apply(nid, sid, e)  # again: never moves backwards or twice
    apps, tokens = p.changes()
    assert [r.name for r in apps] == ["orders"] and [r.name for r in tokens] == ["ci"]
    assert p.changes() == ([], [])
    assert p.missing(items) == []


def test_the_cache_of_rows_is_bounded() -> None:
    """Deleted applications and revoked tokens are rows too: a Relay making and revoking tokens all
    day held every one it ever made."""
    p = AppsProjection()
    p.cache_limit = 3
    for i in range(5):
        tok = Token(org="acme", name=f"t{i}", secret_hash="h", app_names=None, timestamp=T0)
        (e,) = tok.collect_events()
        p.missing([(i + 1, str(tok.id), e)])
        p.loaded([str(tok.id)], {})
        p.apply(i + 1, str(tok.id), e)
        p.changes()
        p.committed()
        assert len(p.tokens) <= p.cache_limit
    assert p.missing([(9, str(tok.id), e)]) in ([], [str(tok.id)])  # asked again once forgotten: read, not lost
