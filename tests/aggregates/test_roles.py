"""The OrgRoles aggregate (``relay_es/aggregates/roles.py``): an org's own roles, its commands and
events, the cap, the built-in names, and a round trip through a real event store (the Relay
service on the in-memory store)."""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates.roles import NAMESPACE, OrgRoles, roles_stream_id
from relay_es.aggregates.token import token_stream_id
from relay_es.domain.clock import FakeClock
from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.domain.roles import BUILT_IN, MAX_ROLES
from relay_es.engine.service import Relay
from tests.aggregates.support import replay_any
from tests.support import POPO

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
ORG = "acme"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Roles:
    """One OrgRoles, a hand-moved time, and every event it has recorded so far."""

    def __init__(self, org: str = ORG) -> None:
        self.now = T0
        self.agg = OrgRoles(org=org, timestamp=self.now)
        self.events: list[Any] = list(self.agg.collect_events())

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def create(self, name: str, permissions: list[str]) -> tuple[list[str], list[Any]]:
        out = self.agg.create(name, permissions, at=self.tick())
        new = list(self.agg.collect_events())
        self.events += new
        return out, new

    def delete(self, name: str) -> tuple[bool, list[Any]]:
        out = self.agg.delete(name, at=self.tick())
        new = list(self.agg.collect_events())
        self.events += new
        return out, new

    def refused(self, command: str, exc: type[Exception], *args: Any) -> Exception:
        """A command that must be refused, leaving the aggregate untouched."""
        before = copy.deepcopy(vars(self.agg))
        with pytest.raises(exc) as info:
            getattr(self.agg, command)(*args, at=self.tick())
        assert vars(self.agg) == before
        assert self.agg.pending_events == []
        return info.value

    def check_replay(self) -> None:
        rebuilt = replay_any(self.events)
        assert isinstance(rebuilt, OrgRoles)
        assert vars(rebuilt) == vars(self.agg)


# ------------------------------------------------------------------ the stream


def test_one_stream_per_org_named_by_the_org() -> None:
    assert roles_stream_id(ORG) == roles_stream_id(ORG) == uuid.uuid5(NAMESPACE, "roles/acme")
    assert roles_stream_id(ORG) != roles_stream_id("other")
    assert roles_stream_id(ORG) != roles_stream_id("ACME")
    assert roles_stream_id(ORG) != token_stream_id(ORG, "roles")  # another namespace than the tokens'
    assert OrgRoles.create_id(ORG) == roles_stream_id(ORG)


def test_it_is_opened_empty() -> None:
    r = Roles()
    assert r.agg.id == roles_stream_id(ORG)
    assert (r.agg.org, r.agg.roles, r.agg.version) == (ORG, {}, 1)
    (opened,) = r.events
    assert isinstance(opened, OrgRoles.Opened)
    assert (opened.org, opened.timestamp, opened.originator_id) == (ORG, T0, roles_stream_id(ORG))


# -------------------------------------------------------------------- create


def test_create_records_the_role_with_its_permissions_sorted_each_once() -> None:
    r = Roles()
    chosen, (e,) = r.create("ops", ["metric.read", "application.write", "metric.read"])
    assert chosen == ["application.write", "metric.read"]
    assert isinstance(e, OrgRoles.RoleCreated)
    assert (e.name, e.permissions, e.timestamp, e.originator_version) == ("ops", chosen, at(1), 2)
    assert r.agg.roles == {"ops": ["application.write", "metric.read"]}
    r.check_replay()


def test_a_role_may_hold_no_permission() -> None:
    r = Roles()
    assert r.create("nobody", [])[0] == []
    assert r.agg.roles == {"nobody": []}
    r.check_replay()


def test_roles_of_an_org_are_kept_by_name_and_apart() -> None:
    r = Roles()
    r.create("ops", ["application.write"])
    r.create("readers", ["application.read", "metric.read"])
    assert r.agg.roles == {"ops": ["application.write"], "readers": ["application.read", "metric.read"]}
    r.check_replay()


def test_the_permissions_held_are_not_the_callers_list() -> None:
    r = Roles()
    asked = ["metric.read"]
    r.create("ops", asked)
    asked.append("token.write")
    assert r.agg.roles["ops"] == ["metric.read"]


def test_an_existing_name_is_refused_until_it_is_deleted() -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    err = r.refused("create", IllegalTransition, "ops", ["token.write"])
    assert "ops" in str(err) and "exists" in str(err)
    assert r.agg.roles == {"ops": ["metric.read"]}


def test_names_are_case_sensitive_among_an_orgs_own() -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    r.create("Ops", ["token.read"])  # another role: only the built-in names are compared without case
    assert r.agg.roles == {"ops": ["metric.read"], "Ops": ["token.read"]}
    r.check_replay()


@pytest.mark.parametrize("name", ["admin", "operator", "viewer", "Admin", "ADMIN", "aDmIn", "Operator", "VIEWER"])
def test_a_built_in_name_is_refused_in_any_case(name: str) -> None:
    r = Roles()
    err = r.refused("create", IllegalTransition, name, ["metric.read"])
    assert "built" in str(err) and repr(name) in str(err)
    assert r.agg.roles == {}


def test_names_that_only_begin_with_a_built_in_one_are_an_orgs_own() -> None:
    r = Roles()
    for name in ("admins", "admin_2", "Viewer1", "operators"):
        r.create(name, ["metric.read"])
    assert sorted(r.agg.roles) == ["Viewer1", "admin_2", "admins", "operators"]
    r.check_replay()


@pytest.mark.parametrize("name", ["ab", "x" * 31, "x\n", "abc\n", "rôle", "a-b", "", None, 123])
def test_a_bad_name_is_refused(name: Any) -> None:
    err = Roles().refused("create", InvalidSetting, name, ["metric.read"])
    assert err.field == "name"


@pytest.mark.parametrize("permissions", [["metric.write"], ["metric.read", "root"], [None], ["Metric.Read"],
                                         "metric.read"])
def test_bad_permissions_are_refused(permissions: Any) -> None:
    err = Roles().refused("create", InvalidSetting, "ops", permissions)
    assert err.field == "permissions"


def test_the_name_is_checked_before_the_permissions() -> None:
    assert Roles().refused("create", InvalidSetting, "ab", ["nope"]).field == "name"


# ---------------------------------------------------------------------- cap


def full() -> Roles:
    r = Roles()
    for i in range(MAX_ROLES):
        r.create(f"role_{i:03d}", ["metric.read"])
    assert len(r.agg.roles) == MAX_ROLES
    return r


def test_an_org_has_at_most_max_roles_of_its_own() -> None:
    r = full()
    err = r.refused("create", InvalidSetting, "one_more", ["metric.read"])
    assert err.field == "name" and str(MAX_ROLES) in err.message
    r.check_replay()


def test_at_the_cap_an_existing_or_built_in_name_is_still_a_conflict() -> None:
    r = full()
    r.refused("create", IllegalTransition, "role_000", ["metric.read"])
    r.refused("create", IllegalTransition, "Admin", ["metric.read"])


def test_deleting_one_at_the_cap_makes_room_for_one() -> None:
    r = full()
    assert r.delete("role_050")[0] is True
    r.create("one_more", ["token.read"])
    assert len(r.agg.roles) == MAX_ROLES
    r.refused("create", InvalidSetting, "two_more", ["token.read"])
    r.check_replay()


# -------------------------------------------------------------------- delete


def test_delete_records_the_deletion_and_answers_true() -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    r.create("dev", ["token.read"])
    done, (e,) = r.delete("ops")
    assert done is True
    assert isinstance(e, OrgRoles.RoleDeleted)
    assert (e.name, e.timestamp, e.originator_version) == ("ops", at(3), 4)
    assert r.agg.roles == {"dev": ["token.read"]}
    r.check_replay()


@pytest.mark.parametrize("name", ["nope", "OPS", "Ops", "op", "", "ops\n"])
def test_deleting_a_role_the_org_does_not_have_records_nothing_and_answers_false(name: str) -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    done, new = r.delete(name)
    assert (done, new) == (False, [])
    assert r.agg.roles == {"ops": ["metric.read"]}


def test_deleting_twice_answers_false_the_second_time() -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    assert r.delete("ops")[0] is True
    assert r.delete("ops") == (False, [])


@pytest.mark.parametrize("name", list(BUILT_IN) + ["Admin", "OPERATOR", "vIeWeR"])
def test_a_built_in_role_cannot_be_deleted(name: str) -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    err = r.refused("delete", IllegalTransition, name)
    assert "built" in str(err)


def test_delete_then_create_again_with_other_permissions() -> None:
    r = Roles()
    r.create("ops", ["metric.read"])
    r.delete("ops")
    chosen, (e,) = r.create("ops", ["token.write", "application.write"])
    assert chosen == ["application.write", "token.write"]
    assert r.agg.roles == {"ops": ["application.write", "token.write"]}
    assert [type(x).__name__ for x in r.events] == ["Opened", "RoleCreated", "RoleDeleted", "RoleCreated"]
    r.check_replay()


def test_the_roles_dict_is_replaced_never_changed_in_place() -> None:
    # a copy held elsewhere (an earlier load, an answer) never changes under its holder
    r = Roles()
    r.create("ops", ["metric.read"])
    held = r.agg.roles
    r.create("dev", ["token.read"])
    r.delete("ops")
    assert held == {"ops": ["metric.read"]}


# ----------------------------------------------------- through a real store


@pytest.fixture
def relay() -> Relay:
    return Relay(POPO, clock=FakeClock())


def kinds(relay: Relay, org: str = ORG) -> list[str]:
    return [type(e).__name__ for e in relay.stream(roles_stream_id(org))]


def test_the_stream_is_made_with_the_first_role_and_read_back_whole(relay: Relay) -> None:
    assert relay._maybe(roles_stream_id(ORG)) is None
    assert relay.create_role(ORG, "ops", ["metric.read", "application.write"]) == ["application.write", "metric.read"]
    assert kinds(relay) == ["Opened", "RoleCreated"]
    relay.clock.advance(5)
    relay.create_role(ORG, "dev", ["token.read"])
    relay.clock.advance(5)
    relay.delete_role(ORG, "ops")
    relay.create_role(ORG, "ops", ["metric.read"])
    assert kinds(relay) == ["Opened", "RoleCreated", "RoleCreated", "RoleDeleted", "RoleCreated"]
    loaded = relay._maybe(roles_stream_id(ORG))
    assert isinstance(loaded, OrgRoles)
    assert (loaded.org, loaded.version) == (ORG, 5)
    assert loaded.roles == {"dev": ["token.read"], "ops": ["metric.read"]}
    events = list(relay.stream(roles_stream_id(ORG)))
    assert vars(replay_any(events)) == vars(loaded)
    t = [e.timestamp for e in events]
    start = relay.clock.now() - timedelta(seconds=10)
    assert t == [start, start, start + timedelta(seconds=5), start + timedelta(seconds=10),
                 start + timedelta(seconds=10)]


def test_a_refused_command_records_nothing(relay: Relay) -> None:
    with pytest.raises(IllegalTransition):
        relay.create_role(ORG, "Admin", ["metric.read"])
    with pytest.raises(InvalidSetting):
        relay.create_role(ORG, "ops", ["nope"])
    assert kinds(relay) == []  # not even opened
    relay.create_role(ORG, "ops", ["metric.read"])
    with pytest.raises(IllegalTransition):
        relay.create_role(ORG, "ops", ["metric.read"])
    with pytest.raises(IllegalTransition):
        relay.delete_role(ORG, "viewer")
    assert kinds(relay) == ["Opened", "RoleCreated"]


def test_the_cap_holds_through_the_store(relay: Relay) -> None:
    for i in range(MAX_ROLES):
        relay.create_role(ORG, f"r{i:03d}", ["metric.read"])
    with pytest.raises(InvalidSetting):
        relay.create_role(ORG, "one_more", ["metric.read"])
    assert len(kinds(relay)) == 1 + MAX_ROLES
    relay.delete_role(ORG, "r000")
    relay.create_role(ORG, "one_more", ["metric.read"])
    assert len(relay._maybe(roles_stream_id(ORG)).roles) == MAX_ROLES
