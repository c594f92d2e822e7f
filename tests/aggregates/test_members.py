"""The OrgMembers aggregate (``relay_es/aggregates/members.py``): an org's OIDC members, the roles
granted them, its commands and events field by field, the cap, and a round trip through a real event
store (the Relay service on the in-memory store)."""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay_es.aggregates import members as members_module
from relay_es.aggregates.members import MAX_FIELD, NAMESPACE, OrgMembers, members_stream_id
from relay_es.aggregates.roles import roles_stream_id
from relay_es.domain.clock import FakeClock
from relay_es.domain.errors import IllegalTransition, InvalidSetting
from relay_es.engine.service import Relay
from tests.aggregates.support import replay_any
from tests.support import POPO

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
ORG = "acme"
PROFILE = {"email": "bob@acme.test", "name": "Bob Smith", "given_name": "Bob", "family_name": "Smith"}
EMPTY = {"email": "", "name": "", "given_name": "", "family_name": ""}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Members:
    """One OrgMembers, a hand-moved time, and every event it has recorded so far."""

    def __init__(self, org: str = ORG) -> None:
        self.now = T0
        self.agg = OrgMembers(org=org, timestamp=self.now)
        self.events: list[Any] = list(self.agg.collect_events())

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def _collect(self) -> list[Any]:
        new = list(self.agg.collect_events())
        self.events += new
        return new

    def see(self, username: str = "bob", **profile: str) -> tuple[bool, list[Any]]:
        fields = {**PROFILE, **profile}
        out = self.agg.see(username, **fields, at=self.tick())
        return out, self._collect()

    def grant(self, username: str = "bob", role: str = "admin") -> tuple[bool, list[Any]]:
        out = self.agg.grant(username, role, at=self.tick())
        return out, self._collect()

    def remove(self, username: str = "bob") -> tuple[dict[str, Any] | None, list[Any]]:
        out = self.agg.remove(username, at=self.tick())
        return out, self._collect()

    def refused(self, command: str, *args: Any, **kwargs: Any) -> InvalidSetting:
        """A command that must be refused, leaving the aggregate untouched."""
        before = copy.deepcopy(vars(self.agg))
        with pytest.raises(InvalidSetting) as info:
            getattr(self.agg, command)(*args, **kwargs, at=self.tick())
        assert vars(self.agg) == before
        assert self.agg.pending_events == []
        return info.value

    def check_replay(self) -> None:
        rebuilt = replay_any(self.events)
        assert isinstance(rebuilt, OrgMembers)
        assert vars(rebuilt) == vars(self.agg)


# ------------------------------------------------------------------ the stream


def test_one_stream_per_org_named_by_the_org() -> None:
    assert members_stream_id(ORG) == members_stream_id(ORG) == uuid.uuid5(NAMESPACE, "members/acme")
    assert members_stream_id(ORG) != members_stream_id("other")
    assert members_stream_id(ORG) != members_stream_id("ACME")
    assert members_stream_id(ORG) != roles_stream_id(ORG)  # another namespace than the roles'
    assert OrgMembers.create_id(ORG) == members_stream_id(ORG)


def test_it_is_opened_empty() -> None:
    m = Members()
    assert m.agg.id == members_stream_id(ORG)
    assert (m.agg.org, m.agg.members, m.agg.version) == (ORG, {}, 1)
    (opened,) = m.events
    assert isinstance(opened, OrgMembers.Opened)
    assert (opened.org, opened.timestamp, opened.originator_id, opened.originator_version) == (
        ORG, T0, members_stream_id(ORG), 1)


# ----------------------------------------------------------------------- see


def test_a_first_sign_in_records_member_seen_field_by_field() -> None:
    m = Members()
    recorded, (e,) = m.see("bob")
    assert recorded is True
    assert isinstance(e, OrgMembers.MemberSeen)
    assert (e.username, e.email, e.name, e.given_name, e.family_name) == (
        "bob", "bob@acme.test", "Bob Smith", "Bob", "Smith")
    assert (e.timestamp, e.originator_id, e.originator_version) == (at(1), members_stream_id(ORG), 2)
    assert m.agg.members == {"bob": {**PROFILE, "role": None, "since": at(1).isoformat()}}
    assert m.agg.version == 2
    m.check_replay()


def test_a_second_sign_in_records_nothing_whatever_it_says() -> None:
    m = Members()
    m.see("bob")
    before = copy.deepcopy(m.agg.members)
    assert m.see("bob") == (False, [])
    assert m.see("bob", email="new@acme.test", name="Robert") == (False, [])  # the first profile stays
    assert m.see("bob", email="") == (False, [])
    assert m.agg.members == before and m.agg.version == 2
    m.check_replay()


def test_a_member_seen_without_an_email_is_recorded_once_until_one_comes() -> None:
    m = Members()
    assert m.see("bob", **EMPTY)[0] is True
    assert m.agg.members["bob"] == {**EMPTY, "role": None, "since": at(1).isoformat()}
    assert m.see("bob", **EMPTY) == (False, [])  # still no email: nothing new
    recorded, (e,) = m.see("bob")  # the profile comes with an email
    assert recorded and isinstance(e, OrgMembers.MemberSeen) and e.email == "bob@acme.test"
    assert m.agg.members["bob"] == {**PROFILE, "role": None, "since": at(1).isoformat()}  # since the first
    assert m.see("bob") == (False, [])
    m.check_replay()


def test_members_are_kept_apart_by_username() -> None:
    m = Members()
    m.see("bob")
    m.see("alice", email="alice@acme.test", name="Alice", given_name="Alice", family_name="Jones")
    m.see("Bob", email="other-bob@acme.test")  # usernames are case-sensitive
    assert sorted(m.agg.members) == ["Bob", "alice", "bob"]
    assert m.agg.members["alice"]["email"] == "alice@acme.test" and m.agg.members["alice"]["since"] == at(2).isoformat()
    assert m.agg.members["Bob"]["email"] == "other-bob@acme.test"
    assert m.agg.members["bob"]["email"] == "bob@acme.test"
    m.check_replay()


def test_each_profile_field_is_cut_to_max_field() -> None:
    m = Members()
    long = {"email": "e" * (MAX_FIELD + 1), "name": "n" * 10_000, "given_name": "g" * MAX_FIELD,
            "family_name": "f" * (MAX_FIELD - 1)}
    _, (e,) = m.see("bob", **long)
    assert (e.email, e.name, e.given_name, e.family_name) == (
        "e" * MAX_FIELD, "n" * MAX_FIELD, "g" * MAX_FIELD, "f" * (MAX_FIELD - 1))
    assert {k: len(m.agg.members["bob"][k]) for k in EMPTY} == {
        "email": MAX_FIELD, "name": MAX_FIELD, "given_name": MAX_FIELD, "family_name": MAX_FIELD - 1}
    m.check_replay()


# --------------------------------------------------------------------- grant


def test_a_grant_records_role_granted_field_by_field() -> None:
    m = Members()
    m.see("bob")
    recorded, (e,) = m.grant("bob", "operator")
    assert recorded is True
    assert isinstance(e, OrgMembers.RoleGranted)
    assert (e.username, e.role, e.timestamp, e.originator_version) == ("bob", "operator", at(2), 3)
    assert m.agg.members["bob"] == {**PROFILE, "role": "operator", "since": at(1).isoformat()}
    m.check_replay()


def test_a_grant_of_the_role_held_records_nothing() -> None:
    m = Members()
    m.grant("bob", "viewer")
    before = copy.deepcopy(vars(m.agg))
    assert m.grant("bob", "viewer") == (False, [])
    assert vars(m.agg) == before
    m.check_replay()


def test_a_grant_replaces_the_role_held() -> None:
    m = Members()
    m.see("bob")
    m.grant("bob", "viewer")
    recorded, (e,) = m.grant("bob", "ops")
    assert recorded and e.role == "ops"
    assert m.agg.members["bob"]["role"] == "ops"
    assert m.grant("bob", "viewer")[0] is True  # and back again
    assert [e.role for e in m.events if isinstance(e, OrgMembers.RoleGranted)] == ["viewer", "ops", "viewer"]
    m.check_replay()


def test_a_grant_before_the_first_sign_in_then_the_sign_in_fills_the_profile() -> None:
    m = Members()
    recorded, (granted,) = m.grant("bob", "admin")
    assert recorded and isinstance(granted, OrgMembers.RoleGranted)
    # known, with an empty profile, since the grant
    assert m.agg.members == {"bob": {**EMPTY, "role": "admin", "since": at(1).isoformat()}}
    recorded, (seen,) = m.see("bob")
    assert recorded and isinstance(seen, OrgMembers.MemberSeen)
    assert (seen.username, seen.email, seen.name, seen.given_name, seen.family_name, seen.timestamp) == (
        "bob", "bob@acme.test", "Bob Smith", "Bob", "Smith", at(2))
    # the profile filled, the grant and since kept
    assert m.agg.members == {"bob": {**PROFILE, "role": "admin", "since": at(1).isoformat()}}
    assert m.see("bob") == (False, [])  # and from then on, nothing
    assert m.see("bob", email="other@acme.test") == (False, [])
    assert [type(e).__name__ for e in m.events] == ["Opened", "RoleGranted", "MemberSeen"]
    m.check_replay()


def test_a_sign_in_without_an_email_after_a_grant_records_nothing() -> None:
    m = Members()
    m.grant("bob", "admin")
    assert m.see("bob", **{**EMPTY, "name": "Bob"}) == (False, [])  # nothing to fill the email with
    assert m.agg.members["bob"] == {**EMPTY, "role": "admin", "since": at(1).isoformat()}


# -------------------------------------------------------------------- remove


def test_remove_returns_what_was_known_and_forgets_the_member_and_their_grant() -> None:
    m = Members()
    m.see("bob")
    m.see("alice", email="alice@acme.test")
    m.grant("bob", "operator")
    known, (e,) = m.remove("bob")
    assert known == {**PROFILE, "role": "operator", "since": at(1).isoformat()}
    assert isinstance(e, OrgMembers.MemberRemoved)
    assert (e.username, e.timestamp, e.originator_version) == ("bob", at(4), 5)
    assert list(m.agg.members) == ["alice"]
    m.check_replay()
    # seen again: a new member, without the grant, since now
    recorded, _ = m.see("bob")
    assert recorded
    assert m.agg.members["bob"] == {**PROFILE, "role": None, "since": at(5).isoformat()}
    # granted again: the grant is recorded anew
    assert m.grant("bob", "operator")[0] is True
    m.check_replay()


def test_remove_of_a_member_only_granted_returns_the_empty_profile() -> None:
    m = Members()
    m.grant("bob", "viewer")
    known, (e,) = m.remove("bob")
    assert known == {**EMPTY, "role": "viewer", "since": at(1).isoformat()}
    assert m.agg.members == {}
    # a grant after the removal makes a new record
    m.grant("bob", "viewer")
    assert m.agg.members == {"bob": {**EMPTY, "role": "viewer", "since": at(3).isoformat()}}
    m.check_replay()


def test_remove_of_an_unknown_member_returns_none_and_records_nothing() -> None:
    m = Members()
    assert m.remove("nobody") == (None, [])
    m.see("bob")
    m.remove("bob")
    assert m.remove("bob") == (None, [])
    assert m.agg.version == 3
    m.check_replay()


# ------------------------------------------------------------- role deleted


def test_a_role_nobody_holds_a_grant_of_is_deleted_on_the_members_stream() -> None:
    m = Members()
    m.see("bob")
    m.grant("bob", "ops")
    m.grant("bob", "viewer")  # held no more
    before = copy.deepcopy(m.agg.members)
    m.agg.role_deleted("ops", at=m.tick())
    (e,) = m._collect()
    assert isinstance(e, OrgMembers.RoleDeleted)
    assert (e.name, e.timestamp, e.originator_version) == ("ops", at(4), 5)
    assert m.agg.members == before  # nobody's grant changes
    m.check_replay()


def test_a_role_granted_to_anyone_is_not_deleted_and_nothing_is_recorded() -> None:
    m = Members()
    m.grant("bob", "ops")
    m.grant("carol", "ops")
    before = copy.deepcopy(vars(m.agg))
    with pytest.raises(IllegalTransition) as info:
        m.agg.role_deleted("ops", at=m.tick())
    assert "granted to 2 member(s)" in str(info.value)
    assert vars(m.agg) == before and m.agg.pending_events == []


def test_what_remove_returns_is_not_changed_by_later_commands() -> None:
    m = Members()
    m.see("bob")
    known, _ = m.remove("bob")
    m.see("bob", email="again@acme.test")
    m.grant("bob", "admin")
    assert known == {**PROFILE, "role": None, "since": at(1).isoformat()}


def test_the_states_of_earlier_versions_are_not_changed_by_later_events() -> None:
    # each event makes a new dict of members: a copy taken earlier is not changed under it
    m = Members()
    m.see("bob")
    earlier = m.agg.members
    m.grant("bob", "admin")
    m.see("alice", email="a@acme.test")
    m.remove("bob")
    assert earlier == {"bob": {**PROFILE, "role": None, "since": at(1).isoformat()}}


# ----------------------------------------------------------------------- cap


def test_the_number_of_members_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(members_module, "MAX_MEMBERS", 3)
    m = Members()
    m.see("a")
    m.grant("b", "viewer")
    m.see("c")
    err = m.refused("see", "d", **PROFILE)
    assert err.field == "username" and "3" in err.message
    err = m.refused("grant", "d", "admin")
    assert err.field == "username" and "3" in err.message
    # the members there may still change: a new grant, the profile of one only granted, a second sign-in
    assert m.grant("a", "admin")[0] is True
    assert m.see("b")[0] is True
    assert m.see("c") == (False, [])
    assert m.grant("b", "viewer") == (False, [])
    # one removed makes room for one more
    m.remove("a")
    assert m.see("d")[0] is True
    m.refused("grant", "e", "admin")
    assert sorted(m.agg.members) == ["b", "c", "d"]
    m.check_replay()


def test_the_cap_is_the_modules_max_members() -> None:
    assert members_module.MAX_MEMBERS == 10_000 and MAX_FIELD == 256


# ------------------------------------------------------------- a real store


def test_a_round_trip_through_a_relay_on_the_in_memory_store() -> None:
    clock = FakeClock(T0)
    relay = Relay(POPO, clock=clock)
    sid = members_stream_id(ORG)
    relay.create_role(ORG, "ops", ["metric.read"])
    assert relay.grant_role(ORG, "carol", "ops") is True  # granted first: creates the stream
    clock.advance(1)
    relay.member_seen(ORG, "bob", **PROFILE)
    clock.advance(1)
    relay.member_seen(ORG, "carol", email="carol@acme.test", name="Carol", given_name="Carol", family_name="King")
    assert relay.grant_role(ORG, "bob", "viewer") is True
    relay.member_seen(ORG, "dave", **EMPTY)
    assert relay.remove_member(ORG, "dave") == ({**EMPTY, "role": None, "since": at(2).isoformat()}, [])

    stored = list(relay.stream(sid))
    assert [type(e).__name__ for e in stored] == ["Opened", "RoleGranted", "MemberSeen", "MemberSeen", "RoleGranted",
                                                  "MemberSeen", "MemberRemoved"]
    assert all(isinstance(e, getattr(OrgMembers, type(e).__name__)) for e in stored)
    assert [e.originator_version for e in stored] == list(range(1, 8))
    assert [e.timestamp for e in stored] == [at(0), at(0), at(1), at(2), at(2), at(2), at(2)]
    opened, carol_granted, bob_seen, carol_seen, bob_granted, _, dave_removed = stored
    assert opened.org == ORG
    assert (carol_granted.username, carol_granted.role) == ("carol", "ops")
    assert (bob_seen.username, bob_seen.email, bob_seen.name, bob_seen.given_name, bob_seen.family_name) == (
        "bob", *PROFILE.values())
    assert (carol_seen.username, carol_seen.email) == ("carol", "carol@acme.test")
    assert (bob_granted.username, bob_granted.role) == ("bob", "viewer")
    assert dave_removed.username == "dave"

    loaded = relay.repository.get(sid)
    assert isinstance(loaded, OrgMembers)
    assert vars(loaded) == vars(replay_any(stored))
    assert loaded.version == 7 and loaded.org == ORG
    assert loaded.members == {
        "bob": {**PROFILE, "role": "viewer", "since": at(1).isoformat()},
        "carol": {"email": "carol@acme.test", "name": "Carol", "given_name": "Carol", "family_name": "King",
                  "role": "ops", "since": at(0).isoformat()},
    }
    assert relay.members(ORG) == loaded.members
    relay.close()


def test_a_secret_a_member_made_is_noted_as_theirs_until_they_are_removed() -> None:
    m = OrgMembers(org=ORG, timestamp=at(0))
    assert m.secrets == {}
    m.secret_generated("bob", "secret-1", "h1", at=at(1))
    m.secret_generated("bob", "secret-2", "h2", at=at(2))
    m.secret_generated("alice", "secret-3", "h3", at=at(3))
    assert m.made_by("bob") == [("secret-1", "h1"), ("secret-2", "h2")] and m.made_by("carol") == []
    assert OrgMembers.secrets == {}  # the class default was replaced, not changed
    ev = m.collect_events()[-1]
    assert (type(ev).__name__, ev.username, ev.token_name, ev.secret_hash, ev.timestamp) == (
        "SecretGenerated", "alice", "secret-3", "h3", at(3))
    m.see("bob", email="b@x", name="", given_name="", family_name="", at=at(4))
    assert m.remove("bob", at=at(5))["email"] == "b@x"
    assert m.made_by("bob") == [] and m.made_by("alice") == [("secret-3", "h3")]


def test_a_user_who_made_secrets_but_is_no_member_on_record_can_be_removed() -> None:
    # signed in while the org was full: never seen, but their secrets are noted, and removable
    m = OrgMembers(org=ORG, timestamp=at(0))
    assert m.remove("dave", at=at(1)) is None  # nothing known: nothing recorded
    m.secret_generated("dave", "secret-1", "h1", at=at(1))
    assert m.remove("dave", at=at(2)) == {}
    assert m.made_by("dave") == [] and type(m.collect_events()[-1]).__name__ == "MemberRemoved"
    assert m.remove("dave", at=at(3)) is None


def test_a_member_makes_at_most_max_secrets(monkeypatch) -> None:
    monkeypatch.setattr(members_module, "MAX_SECRETS", 2)
    m = OrgMembers(org=ORG, timestamp=at(0))
    m.secret_generated("bob", "s1", "h", at=at(1))
    m.secret_generated("bob", "s2", "h", at=at(1))
    with pytest.raises(InvalidSetting):
        m.secret_generated("bob", "s3", "h", at=at(1))
    m.secret_generated("alice", "s3", "h", at=at(1))  # per member
    assert [name for name, _ in m.made_by("bob")] == ["s1", "s2"]


def test_the_role_a_members_groups_gave_is_recorded_each_time_it_changes() -> None:
    m = Members()
    assert m.agg.groups_gave("bob", "operator", issued_at=100, at=m.tick()) is False  # a stranger leaves nothing
    assert m._collect() == []
    m.see("bob")
    assert m.agg.groups_gave("bob", "operator", issued_at=100, at=m.tick()) is True
    (e,) = m._collect()
    assert isinstance(e, OrgMembers.GroupRoleSeen)
    assert (e.username, e.role, e.issued_at, e.timestamp, e.originator_version) == ("bob", "operator", 100, at(3), 3)
    assert m.agg.members["bob"] == {**PROFILE, "role": None, "group_role": "operator", "group_role_iat": 100,
                                    "since": at(2).isoformat()}
    assert m.agg.groups_gave("bob", "operator", issued_at=200, at=m.tick()) is False  # the same again: nothing
    assert m.agg.groups_gave("bob", "viewer", issued_at=100, at=m.tick()) is False  # a token no newer: nothing
    assert m._collect() == []
    assert m.agg.groups_gave("bob", None, issued_at=101, at=m.tick()) is True  # out of every mapped group
    (e,) = m._collect()
    assert e.role is None and m.agg.members["bob"]["group_role"] is None
    m.grant("bob", "viewer")  # a grant keeps what the groups gave, beside it
    assert m.agg.members["bob"]["role"] == "viewer" and m.agg.members["bob"]["group_role"] is None
    m.remove("bob")  # forgotten with the rest
    assert "bob" not in m.agg.members
    m.check_replay()


def test_the_first_token_carrying_a_members_groups_records_even_that_they_give_nothing() -> None:
    # a member granted a role before signing in, whose groups give no role: recorded as known to give none
    # (not unknown: grantRole and removeMember guard a member whose groups are unknown by every mapped role)
    m = Members()
    m.grant("bob", "viewer")
    assert m.agg.groups_gave("bob", None, issued_at=100, at=m.tick()) is True
    (e,) = m._collect()
    assert (e.role, e.issued_at) == (None, 100) and m.agg.members["bob"]["group_role"] is None
    assert m.agg.groups_gave("bob", None, issued_at=200, at=m.tick()) is False  # the same again: nothing
    assert m._collect() == []
    m.check_replay()


def test_a_sign_in_records_the_first_sight_and_the_groups_role_together() -> None:
    clock = FakeClock(T0)
    relay = Relay(POPO, clock=clock)
    saves: list[int] = []
    save = relay.save
    relay.save = lambda *objs, **kw: saves.append(len(objs)) or save(*objs, **kw)  # type: ignore[method-assign]
    relay.member_seen(ORG, "bob", **PROFILE, group_role="operator", groups_issued_at=100)
    relay.member_seen(ORG, "bob", **PROFILE, group_role="operator", groups_issued_at=101)  # nothing new
    relay.member_seen(ORG, "bob", **PROFILE, group_role="viewer")  # groups unknown (no such claim): nothing
    relay.member_seen(ORG, "bob", **PROFILE, group_role="viewer", groups_issued_at=102)
    stored = list(relay.stream(members_stream_id(ORG)))
    assert [type(e).__name__ for e in stored] == ["Opened", "MemberSeen", "GroupRoleSeen", "GroupRoleSeen"]
    assert saves == [1, 1]  # the first sight and its groups' role in one save; nothing saved for nothing new
    assert relay.member(ORG, "bob") == {**PROFILE, "role": None, "group_role": "viewer", "group_role_iat": 102,
                                        "since": at(0).isoformat()}
    relay.close()


def test_notes_of_tokens_no_longer_live_are_forgotten_and_makers_found(monkeypatch) -> None:
    monkeypatch.setattr(members_module, "MAX_SECRETS", 3)
    m = OrgMembers(org=ORG, timestamp=at(0))
    m.secret_generated("bob", "s1", "h1", at=at(1))
    m.secret_generated("bob", "s1", "h2", at=at(2))  # made again by bob under that name
    m.secret_generated("alice", "s3", "h3", at=at(3))
    assert not m.full("bob")
    m.secret_generated("bob", "s2", "h4", at=at(4))
    assert m.full("bob") and not m.full("alice")
    assert (m.maker_of("s1", "h2"), m.maker_of("s3", "h3"), m.maker_of("s1", "h3"), m.maker_of("x", "h1")) == (
        "bob", "alice", None, None)
    events = list(m.collect_events())
    m.forget_made("bob", [("s1", "h1"), ("s3", "h3"), ("nope", "h9")], at=at(5))  # only bob's own
    (ev,) = m.collect_events()
    assert (type(ev).__name__, ev.username, ev.tokens, ev.timestamp) == (
        "MadeTokensForgotten", "bob", [["s1", "h1"]], at(5))
    assert m.made_by("bob") == [("s1", "h2"), ("s2", "h4")] and not m.full("bob")
    m.forget_made("bob", [("s3", "h3")], at=at(6))  # nothing of bob's: nothing recorded
    assert m.collect_events() == []
    m.forget_made("alice", [("s3", "h3")], at=at(7))
    events += [ev, *m.collect_events()]
    assert m.made_by("alice") == [] and "alice" not in m.secrets
    replayed = replay_any(copy.deepcopy(events))  # as the store reads it back
    assert replayed.secrets == m.secrets
