"""The members commands (``relay_es/engine/member_commands.py``): their logic on the in-memory store,
two writers and a restart on a SQLite file and a Postgres database. Who signs in (recorded once), hostile profiles kept escaped and cut, the
roles granted (built-in and an org's own), removal, two writers on one store, and a long stream loaded
from its snapshots."""

from __future__ import annotations

from typing import Any

import pytest

from relay_es.aggregates import members as members_module
from relay_es.aggregates.members import MAX_FIELD, OrgMembers, members_stream_id
from relay_es.aggregates.token import secret_matches, token_stream_id
from relay_es.domain.errors import (IllegalTransition, DomainError, InvalidSetting, MembershipChanged,
                                     UnknownMember, UnknownRole)
from relay_es.engine.service import Relay
from relay_es.engine.member_commands import membership_of
from relay_es.engine.store import SNAPSHOT_EVERY, SNAPSHOTTED
from tests.engine.support import kinds, stale_once
from tests.engine.test_role_commands import VIEWER, other_first

ORG, OTHER = "acme", "globex"
BOB = {"email": "bob@acme.test", "name": "Bob Smith", "given_name": "Bob", "family_name": "Smith"}
ALICE = {"email": "alice@acme.test", "name": "Alice Jones", "given_name": "Alice", "family_name": "Jones"}
EMPTY = {"email": "", "name": "", "given_name": "", "family_name": ""}


def since(clock) -> str:
    return clock.now().isoformat()


# ---------------------------------------------------------------- listing


def test_an_org_nobody_signed_in_to_has_no_members_and_no_stream(relay: Relay) -> None:
    assert relay.members(ORG) == {}
    assert relay.member(ORG, "bob") is None
    assert relay._maybe(members_stream_id(ORG)) is None


def test_members_are_listed_by_username_with_what_is_known(relay: Relay, clock) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    bob_since = since(clock)
    clock.advance(60)
    relay.member_seen(ORG, "alice", **ALICE)
    assert relay.members(ORG) == {
        "bob": {**BOB, "role": None, "since": bob_since},
        "alice": {**ALICE, "role": None, "since": since(clock)},
    }
    assert relay.member(ORG, "alice") == {**ALICE, "role": None, "since": since(clock)}
    assert relay.member(ORG, "carol") is None


def test_an_answer_is_the_callers_to_change(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    listed = relay.members(ORG)
    listed["mallory"] = {}
    listed.pop("bob")
    assert list(relay.members(ORG)) == ["bob"]


# ------------------------------------------------------------ member_seen


def test_a_first_sign_in_is_recorded_once(relay: Relay, clock) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)
    first = since(clock)
    assert kinds(relay, sid) == ["Opened", "MemberSeen"]
    (seen,) = [e for e in relay.stream(sid) if isinstance(e, OrgMembers.MemberSeen)]
    assert (seen.username, seen.email, seen.name, seen.given_name, seen.family_name, seen.timestamp) == (
        "bob", *BOB.values(), clock.now())
    for _ in range(3):
        clock.advance(3600)
        relay.member_seen(ORG, "bob", **{**BOB, "name": "Robert Smith"})
    assert kinds(relay, sid) == ["Opened", "MemberSeen"]  # one event per person, ever
    assert relay.member(ORG, "bob") == {**BOB, "role": None, "since": first}


def test_a_sign_in_without_an_email_is_recorded_and_filled_later(relay: Relay) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **EMPTY)
    relay.member_seen(ORG, "bob", **EMPTY)
    assert kinds(relay, sid) == ["Opened", "MemberSeen"]
    relay.member_seen(ORG, "bob", **BOB)
    assert kinds(relay, sid) == ["Opened", "MemberSeen", "MemberSeen"]
    assert relay.member(ORG, "bob")["email"] == BOB["email"]


def test_hostile_profile_strings_are_kept_escaped_and_cut(relay: Relay) -> None:
    relay.member_seen(ORG, "mallory", email="evil\x1b[31m@acme.test\r\nX-Injected: 1",
                      name="nul\x00byte\u202egnp.exe", given_name="\ud800lone" + "\x07" * 1000,
                      family_name="z" * 100_000)
    got = relay.member(ORG, "mallory")
    assert got["email"] == "evil\\x1b[31m@acme.test\\r\\nX-Injected: 1"
    assert got["name"] == "nul\\x00byte\\u202egnp.exe"  # a NUL Postgres could not hold; an RTL override
    assert got["given_name"].startswith("\\ud800lone\\x07\\x07")
    assert len(got["given_name"]) == MAX_FIELD
    assert got["family_name"] == "z" * (MAX_FIELD - 1) + "…"  # cut, and says so
    assert all(len(v) <= MAX_FIELD for k, v in got.items() if k in EMPTY)
    assert not any(c in v for k, v in got.items() if k in EMPTY for c in "\x00\x1b\r\n\x07\u202e\ud800")
    # the event holds the same as the state: nothing raw was recorded
    (seen,) = [e for e in relay.stream(members_stream_id(ORG)) if isinstance(e, OrgMembers.MemberSeen)]
    assert (seen.email, seen.name, seen.given_name, seen.family_name) == (
        got["email"], got["name"], got["given_name"], got["family_name"])


def test_a_long_string_whose_escapes_cross_the_cut_is_still_cut(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", email="a" * 250 + "\n" * 10, name="\x1b" * 300, given_name="", family_name="")
    got = relay.member(ORG, "bob")
    assert got["email"].startswith("a" * 250 + "\\n") and len(got["email"]) == MAX_FIELD
    assert got["name"].startswith("\\x1b\\x1b") and len(got["name"]) == MAX_FIELD


@pytest.mark.parametrize("username", ["", "nul\x00", "x" * 1025, 7, None])
def test_a_bad_username_is_refused_and_records_nothing(relay: Relay, username: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        relay.member_seen(ORG, username, **BOB)
    assert info.value.field == "username"
    with pytest.raises(InvalidSetting):
        relay.grant_role(ORG, username, "admin")
    assert relay._maybe(members_stream_id(ORG)) is None


def test_the_cap_on_members_is_kept_through_the_service(relay: Relay, monkeypatch) -> None:
    monkeypatch.setattr(members_module, "MAX_MEMBERS", 2)
    relay.member_seen(ORG, "a", **EMPTY)
    relay.grant_role(ORG, "b", "viewer")
    before = kinds(relay, members_stream_id(ORG))
    with pytest.raises(InvalidSetting) as info:
        relay.member_seen(ORG, "c", **BOB)
    assert info.value.field == "username"
    with pytest.raises(InvalidSetting):
        relay.grant_role(ORG, "c", "admin")
    relay.member_seen(ORG, "b", **BOB)  # one granted before signing in still fills their profile
    assert kinds(relay, members_stream_id(ORG)) == before + ["MemberSeen"]
    assert sorted(relay.members(ORG)) == ["a", "b"]


# ------------------------------------------------------------- grant_role


@pytest.mark.parametrize("role", ["admin", "operator", "viewer"])
def test_a_built_in_role_is_granted_in_any_org(relay: Relay, clock, role: str) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    assert relay.grant_role(ORG, "bob", role) is True
    assert relay.member(ORG, "bob") == {**BOB, "role": role, "since": since(clock)}
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "MemberSeen", "RoleGranted"]
    granted = list(relay.stream(members_stream_id(ORG)))[-1]
    assert (granted.username, granted.role, granted.timestamp) == ("bob", role, clock.now())


def test_a_grant_of_the_role_held_records_nothing(relay: Relay) -> None:
    assert relay.grant_role(ORG, "bob", "viewer") is True
    assert relay.grant_role(ORG, "bob", "viewer") is False
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "RoleGranted"]
    assert relay.grant_role(ORG, "bob", "admin") is True  # another role replaces it
    assert relay.member(ORG, "bob")["role"] == "admin"


def test_an_orgs_own_role_is_granted_once_made(relay: Relay) -> None:
    with pytest.raises(UnknownRole):
        relay.grant_role(ORG, "bob", "ops")
    relay.create_role(ORG, "ops", ["metric.read"])
    assert relay.grant_role(ORG, "bob", "ops") is True
    assert relay.member(ORG, "bob")["role"] == "ops"
    with pytest.raises(UnknownRole):  # another org's role
        relay.grant_role(OTHER, "bob", "ops")
    with pytest.raises(IllegalTransition):  # granted to bob: not deleted under him
        relay.delete_role(ORG, "ops")
    relay.grant_role(ORG, "bob", "viewer")
    relay.delete_role(ORG, "ops")
    with pytest.raises(UnknownRole):  # a deleted role
        relay.grant_role(ORG, "alice", "ops")


@pytest.mark.parametrize("role", ["nope", "Admin", "ADMIN", "", "admin ", "viewer\x00"])
def test_a_role_the_org_does_not_have_is_unknown_role_and_records_nothing(relay: Relay, role: str) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    before = kinds(relay, members_stream_id(ORG))
    with pytest.raises(UnknownRole) as info:
        relay.grant_role(ORG, "bob", role)
    assert isinstance(info.value, DomainError) and ORG in str(info.value)
    with pytest.raises(UnknownRole):
        relay.grant_role(OTHER, "bob", role)
    assert kinds(relay, members_stream_id(ORG)) == before
    assert relay._maybe(members_stream_id(OTHER)) is None  # no stream made for nothing
    assert relay.member(ORG, "bob")["role"] is None


def test_a_grant_before_the_first_sign_in_then_the_sign_in_fills_the_profile(relay: Relay, clock) -> None:
    granted_at = since(clock)
    assert relay.grant_role(ORG, "bob", "operator") is True
    assert relay.member(ORG, "bob") == {**EMPTY, "role": "operator", "since": granted_at}
    clock.advance(30)
    relay.member_seen(ORG, "bob", **BOB)
    assert relay.member(ORG, "bob") == {**BOB, "role": "operator", "since": granted_at}
    relay.member_seen(ORG, "bob", **BOB)
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "RoleGranted", "MemberSeen"]


def test_two_orgs_are_independent(relay: Relay) -> None:
    relay.create_role(OTHER, "ops", ["metric.read"])
    relay.member_seen(ORG, "bob", **BOB)
    relay.member_seen(OTHER, "bob", **{**BOB, "email": "bob@globex.test"})
    relay.grant_role(ORG, "bob", "admin")
    relay.grant_role(OTHER, "bob", "ops")
    relay.grant_role(OTHER, "alice", "viewer")
    assert members_stream_id(ORG) != members_stream_id(OTHER)
    assert {u: (v["email"], v["role"]) for u, v in relay.members(ORG).items()} == {"bob": ("bob@acme.test", "admin")}
    assert {u: (v["email"], v["role"]) for u, v in relay.members(OTHER).items()} == {
        "bob": ("bob@globex.test", "ops"), "alice": ("", "viewer")}
    relay.remove_member(OTHER, "bob")
    assert relay.member(ORG, "bob")["role"] == "admin"
    with pytest.raises(UnknownMember):
        relay.remove_member(ORG, "alice")
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "MemberSeen", "RoleGranted"]


# ---------------------------------------------------------- remove_member


def test_remove_member_returns_what_was_known_and_forgets_the_grant(relay: Relay, clock) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    first = since(clock)
    relay.grant_role(ORG, "bob", "admin")
    relay.member_seen(ORG, "alice", **ALICE)
    clock.advance(10)
    assert relay.remove_member(ORG, "bob") == ({**BOB, "role": "admin", "since": first}, [])
    assert kinds(relay, members_stream_id(ORG))[-1] == "MemberRemoved"
    removed = list(relay.stream(members_stream_id(ORG)))[-1]
    assert (removed.username, removed.timestamp) == ("bob", clock.now())
    assert list(relay.members(ORG)) == ["alice"]
    relay.member_seen(ORG, "bob", **BOB)  # back: a new member, no grant, since now
    assert relay.member(ORG, "bob") == {**BOB, "role": None, "since": since(clock)}
    assert relay.grant_role(ORG, "bob", "admin") is True  # the old grant is gone: recorded again


def test_removing_an_unknown_member_is_unknown_member(relay: Relay) -> None:
    with pytest.raises(UnknownMember) as info:  # an org without a stream
        relay.remove_member(ORG, "bob")
    assert isinstance(info.value, DomainError) and "bob" in str(info.value) and ORG in str(info.value)
    assert relay._maybe(members_stream_id(ORG)) is None
    relay.member_seen(ORG, "bob", **BOB)
    relay.remove_member(ORG, "bob")
    with pytest.raises(UnknownMember):  # removed already
        relay.remove_member(ORG, "bob")
    with pytest.raises(UnknownMember) as info:  # never known; a huge name is cut in the message
        relay.remove_member(ORG, "x" * 100_000)
    assert len(str(info.value)) < 400
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "MemberSeen", "MemberRemoved"]


def test_removing_a_member_only_granted_returns_an_empty_profile(relay: Relay, clock) -> None:
    relay.grant_role(ORG, "bob", "viewer")
    assert relay.remove_member(ORG, "bob") == ({**EMPTY, "role": "viewer", "since": since(clock)}, [])
    assert relay.members(ORG) == {}


# --------------------------------------------------------- two writers


def test_two_writers_on_a_first_sign_in_record_it_once(relay: Relay, monkeypatch) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)  # the other writer, first
    reads = stale_once(relay, monkeypatch, sid, None)  # this one read the org before it had members
    relay.member_seen(ORG, "bob", **BOB)
    assert len(reads) == 2  # its save conflicted; run again, it finds bob seen
    assert kinds(relay, sid) == ["Opened", "MemberSeen"]


def test_two_writers_granting_the_same_role_record_it_once(relay: Relay, monkeypatch) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)
    before = relay._maybe(sid)
    relay.grant_role(ORG, "bob", "admin")  # the other writer, first
    reads = stale_once(relay, monkeypatch, sid, before)
    assert relay.grant_role(ORG, "bob", "admin") is False
    assert len(reads) == 2
    assert kinds(relay, sid) == ["Opened", "MemberSeen", "RoleGranted"]


def test_a_remove_on_a_stale_read_is_run_again_and_finds_none(relay: Relay, monkeypatch) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)
    before = relay._maybe(sid)
    relay.remove_member(ORG, "bob")  # the other writer, first
    reads = stale_once(relay, monkeypatch, sid, before)
    with pytest.raises(UnknownMember):
        relay.remove_member(ORG, "bob")
    assert len(reads) == 2
    assert kinds(relay, sid) == ["Opened", "MemberSeen", "MemberRemoved"]


def test_may_grant_is_asked_with_the_roles_permissions_and_what_is_known_of_the_member(relay: Relay) -> None:
    asked: list[Any] = []
    relay.grant_role(ORG, "bob", "viewer", may_grant=lambda perms, known: asked.append((perms, known)))
    with pytest.raises(UnknownRole):  # asked first: a caller it refuses learns nothing of the role
        relay.grant_role(ORG, "bob", "ops", may_grant=lambda perms, known: asked.append((perms, known)))
    assert asked == [(VIEWER, None), (None, {**EMPTY, "role": "viewer", "since": relay.member(ORG, "bob")["since"]})]

    def refuse(perms: Any, known: Any) -> None:
        known["role"] = "admin"  # a copy: the aggregate keeps its own
        raise PermissionError("stronger than the caller")

    with pytest.raises(PermissionError):
        relay.grant_role(ORG, "bob", "admin", may_grant=refuse)
    assert relay.member(ORG, "bob")["role"] == "viewer"
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "RoleGranted"]


def test_a_grant_saved_meanwhile_is_what_may_grant_is_asked_of(two_relays: tuple[Relay, Relay], monkeypatch) -> None:
    # A weaker caller's grant of viewer and a grant of admin to the same user, at once: the weaker one
    # conflicts, is run again, and is asked of the admin it would demote.
    mine, other = two_relays
    mine.member_seen(ORG, "alice", **ALICE)
    asked: list[Any] = []

    def may_grant(perms: Any, known: Any) -> None:
        asked.append(None if known is None else known["role"])
        if known is not None and known["role"] == "admin":
            raise PermissionError("a member whose role holds more than the caller")

    saves = other_first(mine, monkeypatch, lambda: other.grant_role(ORG, "bob", "admin"))
    with pytest.raises(PermissionError):
        mine.grant_role(ORG, "bob", "viewer", may_grant=may_grant)
    assert asked == [None, "admin"] and len(saves) == 1
    assert other.member(ORG, "bob")["role"] == "admin"


def test_a_grant_saved_meanwhile_is_what_may_change_is_asked_of_before_a_removal(two_relays: tuple[Relay, Relay],
                                                                                monkeypatch) -> None:
    mine, other = two_relays
    mine.grant_role(ORG, "bob", "viewer")
    asked: list[Any] = []

    def may_change(known: Any) -> None:
        asked.append(known["role"])
        if known["role"] == "admin":
            raise PermissionError("a member whose role holds more than the caller")

    saves = other_first(mine, monkeypatch, lambda: other.grant_role(ORG, "bob", "admin"))
    with pytest.raises(PermissionError):
        mine.remove_member(ORG, "bob", may_change=may_change)
    assert asked == ["viewer", "admin"] and len(saves) == 1
    assert other.member(ORG, "bob")["role"] == "admin"


def test_may_change_is_asked_before_a_removal_with_what_is_known(relay: Relay) -> None:
    asked: list[Any] = []
    with pytest.raises(UnknownMember):
        relay.remove_member(ORG, "bob", may_change=asked.append)
    relay.member_seen(ORG, "bob", **BOB)
    relay.remove_member(ORG, "bob", may_change=asked.append)
    assert asked == [None, {**BOB, "role": None, "since": asked[1]["since"]}]


def test_members_are_read_from_the_store_by_every_relay_and_after_a_restart(
        two_relays: tuple[Relay, Relay], store_env: dict[str, str], clock) -> None:
    mine, other = two_relays
    mine.create_role(ORG, "ops", ["metric.read"])
    mine.member_seen(ORG, "bob", **BOB)
    bob_since = since(clock)
    assert other.members(ORG) == {"bob": {**BOB, "role": None, "since": bob_since}}
    assert other.grant_role(ORG, "bob", "ops") is True  # the other sees mine's own role too
    assert mine.grant_role(ORG, "bob", "ops") is False  # and mine sees the other's grant
    clock.advance(5)
    other.member_seen(ORG, "alice", **ALICE)
    mine.member_seen(ORG, "alice", **ALICE)  # seen by the other already: nothing recorded
    mine.remove_member(ORG, "alice")
    with pytest.raises(UnknownMember):
        other.remove_member(ORG, "alice")
    mine.close()  # a restart: nothing of the first Relay is left in memory
    restarted = Relay(store_env, clock=clock)
    try:
        assert restarted.members(ORG) == {"bob": {**BOB, "role": "ops", "since": bob_since}}
        assert kinds(restarted, members_stream_id(ORG)) == ["Opened", "MemberSeen", "RoleGranted", "MemberSeen",
                                                            "MemberRemoved"]
        loaded = restarted._maybe(members_stream_id(ORG))
        assert isinstance(loaded, OrgMembers) and loaded.version == 5
    finally:
        restarted.close()


# --------------------------------------------------------------- snapshots


def test_a_long_members_stream_loads_from_its_snapshots(relay: Relay, clock) -> None:
    assert SNAPSHOTTED[OrgMembers] == SNAPSHOT_EVERY == 100
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)  # versions 1, 2
    bob_since = since(clock)
    for i in range(250):  # versions 3 .. 252: each a change of role
        clock.advance(1)
        assert relay.grant_role(ORG, "bob", "viewer" if i % 2 else "operator") is True
    relay.member_seen(ORG, "alice", **ALICE)  # version 253
    assert relay.grant_role(ORG, "bob", "viewer") is False  # the last of the 250
    assert [s.originator_version for s in relay.snapshots.recorder.select_events(sid)] == [100, 200]
    assert len(list(relay.stream(sid))) == 253  # every event still there

    replayed = None
    for e in relay.stream(sid):
        replayed = e.mutate(replayed)
    recorder, counts = relay.recorder, []
    real_select = recorder.select_events

    def select_events(*args: Any, **kwargs: Any) -> Any:
        found = list(real_select(*args, **kwargs))
        counts.append(len(found))
        return found

    recorder.select_events = select_events  # type: ignore[method-assign]
    try:
        loaded = relay._maybe(sid)  # the latest snapshot and the events after it
    finally:
        recorder.select_events = real_select  # type: ignore[method-assign]
    assert counts == [53]  # not the whole stream: the events after the snapshot of version 200
    assert isinstance(loaded, OrgMembers)
    assert loaded.version == 253
    assert vars(loaded) == vars(replayed)
    assert relay.members(ORG) == {"bob": {**BOB, "role": "viewer", "since": bob_since},
                                  "alice": {**ALICE, "role": None, "since": since(clock)}}
    # and it still moves on from the snapshot
    assert relay.grant_role(ORG, "bob", "admin") is True
    assert relay.member(ORG, "bob")["role"] == "admin"
    assert relay.remove_member(ORG, "alice")[0]["email"] == ALICE["email"]
    assert list(relay.members(ORG)) == ["bob"]
    assert relay._maybe(sid).version == 255


def test_the_secrets_a_member_made_survive_a_snapshot(relay: Relay) -> None:
    sid = members_stream_id(ORG)
    relay.member_seen(ORG, "bob", **BOB)
    relay.generate_secret(ORG, "bob", "secret-0000000a", permissions=["metric.read"])
    relay.generate_secret(ORG, "bob", "secret-0000000b", permissions=["metric.read"])
    for i in range(100):
        relay.grant_role(ORG, "bob", "viewer" if i % 2 else "operator")
    assert [s.originator_version for s in relay.snapshots.recorder.select_events(sid)] == [100]
    hashes = [token(relay, n).secret_hash for n in ("secret-0000000a", "secret-0000000b")]
    assert relay._maybe(sid).made_by("bob") == list(zip(("secret-0000000a", "secret-0000000b"), hashes))
    assert relay.remove_member(ORG, "bob")[1] == ["secret-0000000a", "secret-0000000b"]


# --------------------------------------------------------- secrets a member made


def token(relay: Relay, name: str) -> Any:
    return relay._maybe(token_stream_id(ORG, name))


def test_a_generated_secret_is_a_token_noted_as_the_members_in_one_transaction(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    secret = relay.generate_secret(ORG, "bob", "secret-0a1b2c3d", permissions=["metric.read", "application.read"])
    tok = token(relay, "secret-0a1b2c3d")
    assert (tok.org, tok.name, tok.app_names, tok.permissions, tok.revoked) == (
        ORG, "secret-0a1b2c3d", None, ["application.read", "metric.read"], False)
    assert secret_matches(secret, tok.secret_hash)
    assert relay._maybe(members_stream_id(ORG)).made_by("bob") == [("secret-0a1b2c3d", tok.secret_hash)]
    assert kinds(relay, members_stream_id(ORG))[-1] == "SecretGenerated"
    with pytest.raises(InvalidSetting):  # a permission that does not exist: nothing recorded
        relay.generate_secret(ORG, "bob", "secret-ffffffff", permissions=["everything"])
    with pytest.raises(InvalidSetting):
        relay.generate_secret(ORG, "bob", "secret/../x", permissions=["metric.read"])
    assert relay._maybe(members_stream_id(ORG)).made_by("bob") == [("secret-0a1b2c3d", tok.secret_hash)]


def test_removing_a_member_revokes_the_secrets_they_made_and_no_other_token(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    relay.member_seen(ORG, "alice", **ALICE)
    mine = [f"secret-{i:08x}" for i in range(3)]
    for name in mine:
        relay.generate_secret(ORG, "bob", name, permissions=["metric.read"])
    relay.generate_secret(ORG, "alice", "secret-aaaaaaaa", permissions=["metric.read"])
    relay.create_token(ORG, "ci")
    relay.revoke_token(ORG, "secret-00000001")  # revoked already: not revoked twice
    known, revoked = relay.remove_member(ORG, "bob")
    assert known["email"] == BOB["email"] and revoked == ["secret-00000000", "secret-00000002"]
    assert [token(relay, n).revoked for n in mine] == [True, True, True]
    assert not token(relay, "secret-aaaaaaaa").revoked and not token(relay, "ci").revoked
    assert [n for n, _ in relay._maybe(members_stream_id(ORG)).made_by("alice")] == ["secret-aaaaaaaa"]
    assert relay._maybe(members_stream_id(ORG)).made_by("bob") == []


def test_a_token_made_again_under_a_members_secrets_name_is_not_revoked_with_them(relay: Relay) -> None:
    # bob's secret is revoked; an admin makes a token of that name again (createToken reissues a
    # revoked name): it is the admin's now, and removing bob leaves it live
    relay.member_seen(ORG, "bob", **BOB)
    relay.generate_secret(ORG, "bob", "secret-0000000b", permissions=["metric.read"])
    relay.revoke_token(ORG, "secret-0000000b")
    relay.create_token(ORG, "secret-0000000b")
    known, revoked = relay.remove_member(ORG, "bob")
    assert known["email"] == BOB["email"] and revoked == []
    assert not token(relay, "secret-0000000b").revoked


def test_a_user_the_full_org_did_not_record_is_removed_with_the_secrets_they_made(relay: Relay, monkeypatch) -> None:
    monkeypatch.setattr(members_module, "MAX_MEMBERS", 1)
    relay.member_seen(ORG, "alice", **ALICE)
    with pytest.raises(InvalidSetting):  # the org is full: bob's sign-in is not recorded
        relay.member_seen(ORG, "bob", **BOB)
    relay.generate_secret(ORG, "bob", "secret-0000000b", permissions=["metric.read"])
    assert relay.member(ORG, "bob") is None
    known, revoked = relay.remove_member(ORG, "bob")
    assert known == {} and revoked == ["secret-0000000b"] and token(relay, "secret-0000000b").revoked
    with pytest.raises(UnknownMember):
        relay.remove_member(ORG, "bob")
    assert list(relay.members(ORG)) == ["alice"]


def test_a_member_may_make_a_bounded_number_of_secrets(relay: Relay, monkeypatch) -> None:
    monkeypatch.setattr(members_module, "MAX_SECRETS", 2)
    relay.generate_secret(ORG, "bob", "secret-00000000", permissions=["metric.read"])
    relay.generate_secret(ORG, "bob", "secret-00000001", permissions=["metric.read"])
    with pytest.raises(InvalidSetting):
        relay.generate_secret(ORG, "bob", "secret-00000002", permissions=["metric.read"])
    assert relay._maybe(token_stream_id(ORG, "secret-00000002")) is None  # the token was not made either


def test_revoking_what_a_member_made_makes_room_for_more(relay: Relay, monkeypatch) -> None:
    # at the bound, the notes of tokens no longer live with their secret are forgotten first: removing the
    # member had nothing of them to revoke
    monkeypatch.setattr(members_module, "MAX_SECRETS", 2)
    relay.generate_secret(ORG, "bob", "secret-00000000", permissions=["metric.read"])
    relay.generate_secret(ORG, "bob", "secret-00000001", permissions=["metric.read"])
    relay.revoke_token(ORG, "secret-00000000")
    relay.generate_secret(ORG, "bob", "secret-00000002", permissions=["metric.read"])
    assert [n for n, _ in relay._maybe(members_stream_id(ORG)).made_by("bob")] == ["secret-00000001",
                                                                                   "secret-00000002"]
    assert kinds(relay, members_stream_id(ORG))[-2:] == ["MadeTokensForgotten", "SecretGenerated"]
    with pytest.raises(InvalidSetting):  # both live: no room
        relay.create_member_token(ORG, "ci", user="bob", via=None)
    assert token(relay, "ci") is None
    assert relay.remove_member(ORG, "bob")[1] == ["secret-00000001", "secret-00000002"]


# --------------------------------------------------------- tokens a member made with createToken


def test_a_token_a_signed_in_member_makes_is_noted_as_theirs_and_revoked_with_them(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    relay.create_member_token(ORG, "bobs-ci", user="bob", via=None, app_names=["orders"],
                              permissions=["application.read"])
    tok = token(relay, "bobs-ci")
    assert (tok.app_names, tok.permissions) == (["orders"], ["application.read"])
    assert relay._maybe(members_stream_id(ORG)).made_by("bob") == [("bobs-ci", tok.secret_hash)]
    relay.create_member_token(ORG, "ci", user=None, via=None)  # nobody's: development mode
    with pytest.raises(InvalidSetting):  # checked as createToken's: nothing recorded
        relay.create_member_token(ORG, "x", user="bob", via=None, app_names=[])
    asked = []
    known, revoked = relay.remove_member(ORG, "bob", may_revoke=lambda apps, perms: asked.append((apps, perms)))
    assert revoked == ["bobs-ci"] and asked == [(["orders"], ["application.read"])]
    assert token(relay, "bobs-ci").revoked and not token(relay, "ci").revoked


def test_a_token_made_with_a_members_key_is_theirs_too_and_with_an_admins_nobodys(relay: Relay) -> None:
    relay.member_seen(ORG, "bob", **BOB)
    relay.generate_secret(ORG, "bob", "secret-0000000b", permissions=["token.write", "metric.read"])
    relay.create_member_token(ORG, "hop-1", user=None, via="secret-0000000b", permissions=["metric.read"])
    relay.create_member_token(ORG, "hop-2", user=None, via="hop-1", permissions=["metric.read"])  # and so on
    relay.create_token(ORG, "admin")
    relay.create_member_token(ORG, "ci", user=None, via="admin")
    relay.create_member_token(ORG, "ci-2", user=None, via=None)  # development mode: no key
    assert [n for n, _ in relay._maybe(members_stream_id(ORG)).made_by("bob")] == ["secret-0000000b", "hop-1",
                                                                                   "hop-2"]
    # a name of bob's revoked and made again by an admin: its keys are nobody's
    relay.revoke_token(ORG, "hop-2")
    relay.create_token(ORG, "hop-2")
    relay.create_member_token(ORG, "hop-3", user=None, via="hop-2")
    assert relay.remove_member(ORG, "bob")[1] == ["secret-0000000b", "hop-1"]
    assert not any(token(relay, n).revoked for n in ("admin", "ci", "ci-2", "hop-2", "hop-3"))


def test_a_token_made_with_a_key_revoked_since_it_let_the_request_in_is_refused(relay: Relay) -> None:
    """The key checked, then its maker removed (the key revoked) before the command ran: the token it
    made was noted as nobody's and outlived the removal. Refused now, and nothing made."""
    from relay_es.domain.errors import UnknownToken

    relay.member_seen(ORG, "bob", **BOB)
    relay.generate_secret(ORG, "bob", "secret-0000000b", permissions=["token.write", "metric.read"])
    assert relay.remove_member(ORG, "bob")[1] == ["secret-0000000b"]
    for via in ("secret-0000000b", "no-such-token"):
        with pytest.raises(UnknownToken):
            relay.create_member_token(ORG, "backdoor", user=None, via=via, permissions=["metric.read"])
    assert token(relay, "backdoor") is None


# --------------------------------------------------------- a membership changed after the request was let in


def makes(relay: Relay, tag: str, membership: Any) -> list[str]:
    """What bob, let in on ``membership``, makes: a token (createToken signed in) and a secret (generateSecret);
    the names of those made, each refusal (MembershipChanged) leaving nothing."""
    def create_token(name: str) -> None:
        relay.create_member_token(ORG, name, user="bob", via=None, permissions=["metric.read"], membership=membership)

    def generate_secret(name: str) -> None:
        relay.generate_secret(ORG, "bob", name, permissions=["metric.read"], membership=membership)

    made = []
    for name, make in ((f"ci-{tag}", create_token), (f"secret-{tag}", generate_secret)):
        try:
            make(name)
        except MembershipChanged:
            assert token(relay, name) is None
            continue
        made.append(name)
    return made


def test_a_key_asked_by_a_member_removed_since_they_were_let_in_is_refused_and_nothing_is_made(
        relay: Relay, clock) -> None:
    """The guard let bob in on his admin grant, then his removal committed before the command ran: the
    key it made was noted as a removed member's and outlived the removal. Refused now; so too once he is
    added again (another record, another ``since``)."""
    relay.grant_role(ORG, "bob", "admin")
    let_in = membership_of(relay.member(ORG, "bob"))
    assert let_in == (since(clock), "admin")
    relay.remove_member(ORG, "bob")
    assert makes(relay, "removed", let_in) == []
    clock.advance(60)
    relay.grant_role(ORG, "bob", "admin")
    assert makes(relay, "again", let_in) == []
    assert relay._maybe(members_stream_id(ORG)).made_by("bob") == []
    assert makes(relay, "now", membership_of(relay.member(ORG, "bob"))) == ["ci-now", "secret-now"]


def test_a_key_asked_by_a_member_given_another_role_since_they_were_let_in_is_refused(relay: Relay) -> None:
    relay.grant_role(ORG, "bob", "admin")
    as_admin = membership_of(relay.member(ORG, "bob"))
    relay.grant_role(ORG, "bob", "viewer")  # demoted: a key of the admin's permissions is not his to make
    assert makes(relay, "demoted", as_admin) == []
    relay.member_seen(ORG, "bob", **BOB)  # a sign-in filling his profile changes not what he was let in on
    as_viewer = membership_of(relay.member(ORG, "bob"))
    assert makes(relay, "viewer", as_viewer) == ["ci-viewer", "secret-viewer"]
    assert [n for n, _ in relay._maybe(members_stream_id(ORG)).made_by("bob")] == ["ci-viewer", "secret-viewer"]


def test_a_member_let_in_on_their_groups_role_makes_keys_while_their_record_stands(relay: Relay, clock) -> None:
    relay.member_seen(ORG, "bob", **BOB, group_role="operator", groups_issued_at=100)
    let_in = membership_of(relay.member(ORG, "bob"))
    assert let_in == (since(clock), None)
    relay.member_seen(ORG, "bob", **BOB, group_role="viewer", groups_issued_at=200)  # another token's groups
    assert makes(relay, "groups", let_in) == ["ci-groups", "secret-groups"]
    relay.grant_role(ORG, "bob", "viewer")  # a grant now decides his permissions, not his groups
    assert makes(relay, "granted", let_in) == []
    assert makes(relay, "unasked", None) == ["ci-unasked", "secret-unasked"]  # nothing read: nothing asked


def test_a_removal_saved_between_the_commands_read_and_its_save_refuses_the_key(two_relays: tuple[Relay, Relay],
                                                                              monkeypatch) -> None:
    """The race itself, on a real store: the removal commits after the command read bob's record and before
    its save, which conflicts (it saves on the members' stream too); run again, it finds him gone."""
    mine, other = two_relays
    mine.grant_role(ORG, "bob", "admin")
    let_in = membership_of(mine.member(ORG, "bob"))
    saves = other_first(mine, monkeypatch, lambda: other.remove_member(ORG, "bob"))
    with pytest.raises(MembershipChanged):
        mine.create_member_token(ORG, "late", user="bob", via=None, membership=let_in)
    assert len(saves) == 1 and token(other, "late") is None and other.member(ORG, "bob") is None
    other.grant_role(ORG, "bob", "admin")
    let_in = membership_of(mine.member(ORG, "bob"))
    saves = other_first(mine, monkeypatch, lambda: other.grant_role(ORG, "bob", "viewer"))
    with pytest.raises(MembershipChanged):
        mine.generate_secret(ORG, "bob", "secret-late", permissions=["metric.read"], membership=let_in)
    assert len(saves) == 1 and token(other, "secret-late") is None
