"""The roles commands (``relay_es/engine/role_commands.py``) and a token's chosen permissions
(``Relay.create_token(..., permissions=...)``, ``authz.permissions_for``): their logic on the
in-memory store, two writers and a restart on a SQLite file and a Postgres database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from relay_es.adapters import authz
from relay_es.aggregates.members import members_stream_id
from relay_es.aggregates.roles import OrgRoles, roles_stream_id
from relay_es.aggregates.token import Token, hash_secret, token_stream_id
from relay_es.domain.errors import DomainError, IllegalTransition, InvalidSetting, UnknownRole
from relay_es.domain.roles import BUILT_IN, PERMISSIONS
from relay_es.engine.service import Relay
from tests.engine.support import kinds, stale_once

ORG, OTHER = "acme", "globex"
ADMIN = sorted(PERMISSIONS)
OPERATOR = ["application.read", "application.write", "metric.read", "organization.read", "token.read"]
VIEWER = ["application.read", "metric.read", "organization.read"]
BUILT_INS = [("admin", True, ADMIN), ("operator", True, OPERATOR), ("viewer", True, VIEWER)]


def other_first(relay: Relay, monkeypatch: pytest.MonkeyPatch, command: Callable[[], Any]) -> list[int]:
    """The first save ``relay`` makes runs ``command`` (another writer's, on another Relay) just before
    it: that writer saves between this one's reads and its save. Returns one entry per save asked."""
    real = relay.save
    saves: list[int] = []

    def save(*objs: Any, **kwargs: Any) -> Any:
        saves.append(1)
        if len(saves) == 1:
            command()
        return real(*objs, **kwargs)

    monkeypatch.setattr(relay, "save", save)
    return saves


def token(relay: Relay, name: str, org: str = ORG) -> Token:
    tok = relay._maybe(token_stream_id(org, name))
    assert isinstance(tok, Token)
    return tok


# ---------------------------------------------------------------- listing


def test_an_org_without_roles_of_its_own_has_the_built_in_ones(relay: Relay) -> None:
    assert relay.roles(ORG) == BUILT_INS
    assert relay.role(ORG, "admin") == ADMIN
    assert relay.role(ORG, "operator") == OPERATOR
    assert relay.role(ORG, "viewer") == VIEWER
    assert relay.role(ORG, "ops") is None
    assert kinds(relay, roles_stream_id(ORG)) == []  # reading opens nothing


def test_the_built_in_ones_come_first_then_the_orgs_own_by_name(relay: Relay) -> None:
    for name in ("beta", "Zeta", "alpha_2", "_under", "alpha"):
        relay.create_role(ORG, name, ["metric.read"])
    listed = relay.roles(ORG)
    assert listed[:3] == BUILT_INS
    assert [n for n, _, _ in listed[3:]] == ["Zeta", "_under", "alpha", "alpha_2", "beta"]  # sorted(): code points
    assert all(g is False for _, g, _ in listed[3:])


def test_a_role_is_listed_with_its_permissions_sorted_each_once(relay: Relay) -> None:
    chosen = relay.create_role(ORG, "ops", ["token.read", "application.write", "token.read"])
    assert chosen == ["application.write", "token.read"]
    assert relay.roles(ORG)[3:] == [("ops", False, ["application.write", "token.read"])]
    assert relay.role(ORG, "ops") == ["application.write", "token.read"]
    assert relay.role(ORG, "Ops") is None and relay.role(ORG, "Admin") is None  # names are exact
    assert relay.create_role(ORG, "nobody", []) == []
    assert relay.role(ORG, "nobody") == []


def test_an_answer_is_the_callers_to_change(relay: Relay) -> None:
    relay.create_role(ORG, "ops", ["metric.read"])
    for _, _, perms in relay.roles(ORG):
        perms.append("root")
    relay.role(ORG, "admin").clear()
    relay.role(ORG, "ops").clear()
    assert relay.roles(ORG) == BUILT_INS + [("ops", False, ["metric.read"])]
    assert BUILT_IN["admin"] == frozenset(PERMISSIONS)


def test_two_orgs_are_independent(relay: Relay) -> None:
    relay.create_role(ORG, "ops", ["application.write"])
    relay.create_role(OTHER, "ops", ["metric.read"])  # the same name, in another org
    relay.create_role(OTHER, "auditors", ["organization.read"])
    assert relay.roles(ORG) == BUILT_INS + [("ops", False, ["application.write"])]
    assert relay.roles(OTHER) == BUILT_INS + [("auditors", False, ["organization.read"]),
                                               ("ops", False, ["metric.read"])]
    relay.delete_role(ORG, "ops")
    assert relay.roles(ORG) == BUILT_INS
    assert relay.role(OTHER, "ops") == ["metric.read"]
    with pytest.raises(UnknownRole):
        relay.delete_role(ORG, "auditors")
    assert relay.role(OTHER, "auditors") == ["organization.read"]
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated", "RoleDeleted"]
    assert kinds(relay, roles_stream_id(OTHER)) == ["Opened", "RoleCreated", "RoleCreated"]


# --------------------------------------------------------- create, delete


def test_create_and_delete_are_events_of_the_orgs_roles_stream(relay: Relay, clock) -> None:
    sid = roles_stream_id(ORG)
    t0 = clock.now()
    relay.create_role(ORG, "ops", ["metric.read"])
    clock.advance(7)
    relay.delete_role(ORG, "ops")
    events = list(relay.stream(sid))
    assert [type(e).__name__ for e in events] == ["Opened", "RoleCreated", "RoleDeleted"]
    assert events[0].org == ORG
    assert (events[1].name, events[1].permissions, events[1].timestamp) == ("ops", ["metric.read"], t0)
    assert (events[2].name, events[2].timestamp) == ("ops", clock.now())
    assert relay.roles(ORG) == BUILT_INS


def test_delete_then_create_again(relay: Relay) -> None:
    relay.create_role(ORG, "ops", ["metric.read"])
    relay.delete_role(ORG, "ops")
    assert relay.role(ORG, "ops") is None
    assert relay.create_role(ORG, "ops", ["token.write"]) == ["token.write"]
    assert relay.role(ORG, "ops") == ["token.write"]
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated", "RoleDeleted", "RoleCreated"]


def test_an_existing_name_is_a_conflict_and_changes_nothing(relay: Relay) -> None:
    relay.create_role(ORG, "ops", ["metric.read"])
    with pytest.raises(IllegalTransition):
        relay.create_role(ORG, "ops", ADMIN)
    assert relay.role(ORG, "ops") == ["metric.read"]
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated"]


@pytest.mark.parametrize("name", ["admin", "Admin", "OPERATOR", "viewer"])
def test_a_built_in_name_cannot_be_made(relay: Relay, name: str) -> None:
    with pytest.raises(IllegalTransition):
        relay.create_role(ORG, name, ["metric.read"])
    assert relay.roles(ORG) == BUILT_INS
    assert kinds(relay, roles_stream_id(ORG)) == []


@pytest.mark.parametrize(("name", "permissions", "field"), [
    ("ab", ["metric.read"], "name"),
    ("x" * 31, ["metric.read"], "name"),
    ("abc\n", ["metric.read"], "name"),
    ("rôle", ["metric.read"], "name"),
    ("ops", ["metric.write"], "permissions"),
    ("ops", ["metric.read", 7], "permissions"),
])
def test_bad_names_and_permissions_are_refused_and_record_nothing(relay: Relay, name: str, permissions: list[Any],
                                                                 field: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        relay.create_role(ORG, name, permissions)
    assert info.value.field == field
    assert kinds(relay, roles_stream_id(ORG)) == []


def test_deleting_an_unknown_role_is_unknown_role(relay: Relay) -> None:
    with pytest.raises(UnknownRole) as info:  # an org with no stream at all
        relay.delete_role(ORG, "ops")
    assert "ops" in str(info.value) and ORG in str(info.value)
    assert isinstance(info.value, DomainError) and not isinstance(info.value, IllegalTransition)
    relay.create_role(ORG, "ops", ["metric.read"])
    for name in ("dev", "OPS", "Ops"):  # an org with roles, none of that name
        with pytest.raises(UnknownRole):
            relay.delete_role(ORG, name)
    relay.delete_role(ORG, "ops")
    with pytest.raises(UnknownRole):  # deleted already
        relay.delete_role(ORG, "ops")
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated", "RoleDeleted"]


@pytest.mark.parametrize("name", ["admin", "operator", "viewer", "Admin", "VIEWER"])
def test_a_built_in_role_cannot_be_deleted_whether_or_not_the_org_has_roles(relay: Relay, name: str) -> None:
    with pytest.raises(IllegalTransition) as info:  # no stream: not UnknownRole, and nothing opened
        relay.delete_role(ORG, name)
    assert not isinstance(info.value, UnknownRole)
    assert kinds(relay, roles_stream_id(ORG)) == []
    relay.create_role(ORG, "ops", ["metric.read"])
    with pytest.raises(IllegalTransition):
        relay.delete_role(ORG, name)
    assert relay.roles(ORG) == BUILT_INS + [("ops", False, ["metric.read"])]
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated"]


# ------------------------------------------------------------ two writers


def test_two_writers_making_an_orgs_first_roles_both_land(relay: Relay, monkeypatch) -> None:
    # This writer read "no roles yet" just before another writer opened the stream: its save
    # conflicts, and the command is run again on what the store holds.
    sid = roles_stream_id(ORG)
    relay.create_role(ORG, "ops", ["metric.read"])
    reads = stale_once(relay, monkeypatch, sid, None)
    relay.create_role(ORG, "dev", ["token.read"])
    assert len(reads) == 2  # retried once
    assert relay.roles(ORG)[3:] == [("dev", False, ["token.read"]), ("ops", False, ["metric.read"])]
    assert kinds(relay, sid) == ["Opened", "RoleCreated", "RoleCreated"]


def test_two_writers_making_the_same_name_one_is_a_conflict(relay: Relay, monkeypatch) -> None:
    sid = roles_stream_id(ORG)
    relay.create_role(ORG, "dev", ["token.read"])
    before = relay._maybe(sid)
    relay.create_role(ORG, "ops", ["metric.read"])  # the other writer, first
    reads = stale_once(relay, monkeypatch, sid, before)
    with pytest.raises(IllegalTransition):
        relay.create_role(ORG, "ops", ["token.write"])
    assert len(reads) == 2  # its save conflicted; run again, it finds the name taken
    assert relay.role(ORG, "ops") == ["metric.read"]
    assert kinds(relay, sid) == ["Opened", "RoleCreated", "RoleCreated"]


def test_a_delete_on_a_stale_read_is_run_again_and_finds_none(relay: Relay, monkeypatch) -> None:
    sid = roles_stream_id(ORG)
    relay.create_role(ORG, "ops", ["metric.read"])
    before = relay._maybe(sid)
    relay.delete_role(ORG, "ops")  # the other writer, first
    reads = stale_once(relay, monkeypatch, sid, before)
    with pytest.raises(UnknownRole):
        relay.delete_role(ORG, "ops")
    assert len(reads) == 2
    assert kinds(relay, sid) == ["Opened", "RoleCreated", "RoleDeleted"]


def test_roles_are_read_from_the_store_by_every_relay_and_after_a_restart(two_relays: tuple[Relay, Relay]) -> None:
    mine, other = two_relays
    mine.create_role(ORG, "ops", ["metric.read", "application.write"])
    assert other.roles(ORG) == BUILT_INS + [("ops", False, ["application.write", "metric.read"])]
    other.create_role(ORG, "dev", ["token.read"])
    other.delete_role(ORG, "ops")
    assert mine.roles(ORG) == BUILT_INS + [("dev", False, ["token.read"])]
    with pytest.raises(UnknownRole):
        mine.delete_role(ORG, "ops")
    loaded = mine._maybe(roles_stream_id(ORG))
    assert isinstance(loaded, OrgRoles) and loaded.version == 4


def test_a_deletion_is_recorded_on_the_members_stream_too(relay: Relay) -> None:
    relay.create_role(ORG, "ops", ["metric.read"])
    relay.delete_role(ORG, "ops")  # an org nobody signed in to: the members' stream is opened with it
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "RoleDeleted"]
    relay.create_role(ORG, "ops", ["metric.read"])
    relay.grant_role(ORG, "bob", "ops")
    with pytest.raises(IllegalTransition, match="granted to 1 member"):
        relay.delete_role(ORG, "ops")
    with pytest.raises(UnknownRole):
        relay.delete_role(ORG, "dev")
    assert kinds(relay, members_stream_id(ORG)) == ["Opened", "RoleDeleted", "RoleGranted"]  # refusals: nothing
    assert kinds(relay, roles_stream_id(ORG)) == ["Opened", "RoleCreated", "RoleDeleted", "RoleCreated"]


@pytest.mark.parametrize("signed_in", [True, False])
def test_a_grant_saved_while_its_role_is_deleted_makes_the_deletion_refused(two_relays: tuple[Relay, Relay],
                                                                           monkeypatch, signed_in: bool) -> None:
    mine, other = two_relays
    mine.create_role(ORG, "ops", ["metric.read"])
    if signed_in:
        mine.member_seen(ORG, "alice", email="", name="", given_name="", family_name="")
    saves = other_first(mine, monkeypatch, lambda: other.grant_role(ORG, "bob", "ops"))
    with pytest.raises(IllegalTransition, match="granted to 1 member"):
        mine.delete_role(ORG, "ops")  # its save conflicts with the grant; run again, it finds the role granted
    assert len(saves) == 1
    assert other.role(ORG, "ops") == ["metric.read"]
    assert other.member(ORG, "bob")["role"] == "ops"


@pytest.mark.parametrize("signed_in", [True, False])
def test_a_deletion_saved_while_its_role_is_granted_makes_the_grant_unknown_role(two_relays: tuple[Relay, Relay],
                                                                                monkeypatch, signed_in: bool) -> None:
    mine, other = two_relays
    mine.create_role(ORG, "ops", ["metric.read"])
    if signed_in:
        mine.member_seen(ORG, "alice", email="", name="", given_name="", family_name="")
    saves = other_first(mine, monkeypatch, lambda: other.delete_role(ORG, "ops"))
    with pytest.raises(UnknownRole):
        mine.grant_role(ORG, "bob", "ops")  # its save conflicts with the deletion; run again, it finds no role
    assert len(saves) == 1
    assert other.role(ORG, "ops") is None
    assert other.member(ORG, "bob") is None
    other.create_role(ORG, "ops", list(PERMISSIONS))  # a role made again later gives nobody anything
    assert other.member(ORG, "bob") is None


# --------------------------------------------------- tokens' permissions


def test_a_token_made_with_permissions_carries_them_on_its_stream(relay: Relay) -> None:
    secret = relay.create_token(ORG, "ci", permissions=["metric.read", "application.read", "metric.read"])
    sid = token_stream_id(ORG, "ci")
    events = list(relay.stream(sid))
    assert [type(e).__name__ for e in events] == ["Created", "PermissionsSet"]
    assert isinstance(events[1], Token.PermissionsSet)
    assert events[1].permissions == ["application.read", "metric.read"]  # sorted, each once
    tok = token(relay, "ci")
    assert tok.permissions == ["application.read", "metric.read"]
    assert tok.secret_hash == hash_secret(secret) and tok.app_names is None
    assert authz.permissions_for(tok.app_names, tok.permissions) == {"application.read", "metric.read"}


def test_a_token_made_without_permissions_has_its_scopes(relay: Relay) -> None:
    relay.create_token(ORG, "admin")
    relay.create_token(ORG, "exec", app_names=["shop"])
    assert kinds(relay, token_stream_id(ORG, "admin")) == ["Created"]
    org_wide, scoped = token(relay, "admin"), token(relay, "exec")
    assert org_wide.permissions is None and scoped.permissions is None
    assert authz.permissions_for(org_wide.app_names, org_wide.permissions) == frozenset(PERMISSIONS)
    assert authz.permissions_for(scoped.app_names, scoped.permissions) == authz.APP_TOKEN_PERMISSIONS


def test_a_token_limited_to_applications_may_be_given_other_permissions(relay: Relay) -> None:
    relay.create_token(ORG, "deployer", app_names=["shop"], permissions=["application.write", "application.read"])
    tok = token(relay, "deployer")
    assert (tok.app_names, tok.permissions) == (["shop"], ["application.read", "application.write"])
    assert authz.permissions_for(tok.app_names, tok.permissions) == {"application.read", "application.write"}


def test_a_reissued_token_carries_only_what_it_was_made_with_again(relay: Relay) -> None:
    sid = token_stream_id(ORG, "ci")
    relay.create_token(ORG, "ci", permissions=["token.write"])
    relay.revoke_token(ORG, "ci")
    relay.create_token(ORG, "ci")  # no choice this time: its scope's, not the old token's
    assert kinds(relay, sid) == ["Created", "PermissionsSet", "Revoked", "Reissued"]
    tok = token(relay, "ci")
    assert tok.permissions is None and not tok.revoked
    assert authz.permissions_for(tok.app_names, tok.permissions) == frozenset(PERMISSIONS)
    relay.revoke_token(ORG, "ci")
    relay.create_token(ORG, "ci", app_names=["shop"], permissions=["metric.read"])
    assert kinds(relay, sid)[-3:] == ["Revoked", "Reissued", "PermissionsSet"]
    tok = token(relay, "ci")
    assert (tok.app_names, tok.permissions) == (["shop"], ["metric.read"])


def test_a_live_token_is_not_made_again_and_keeps_its_permissions(relay: Relay) -> None:
    relay.create_token(ORG, "ci", permissions=["metric.read"])
    with pytest.raises(IllegalTransition):
        relay.create_token(ORG, "ci", permissions=list(PERMISSIONS))
    assert token(relay, "ci").permissions == ["metric.read"]
    assert kinds(relay, token_stream_id(ORG, "ci")) == ["Created", "PermissionsSet"]


@pytest.mark.parametrize("permissions", [["root"], ["metric.read", "metric.write"], ["Metric.Read"], [None],
                                         [["metric.read"]], "metric.read"])
def test_a_token_with_unknown_permissions_is_refused_and_not_made(relay: Relay, permissions: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        relay.create_token(ORG, "ci", permissions=permissions)
    assert info.value.field == "permissions"
    assert kinds(relay, token_stream_id(ORG, "ci")) == []


@pytest.mark.parametrize("permissions", [[], (), set()])
def test_a_token_with_no_permission_at_all_is_refused(relay: Relay, permissions: Any) -> None:
    with pytest.raises(InvalidSetting) as info:
        relay.create_token(ORG, "ci", permissions=permissions)
    assert info.value.field == "permissions" and "at least one" in info.value.message
    assert kinds(relay, token_stream_id(ORG, "ci")) == []


def test_a_refused_reissue_leaves_the_revoked_token_as_it_was(relay: Relay) -> None:
    relay.create_token(ORG, "ci", permissions=["metric.read"])
    relay.revoke_token(ORG, "ci")
    with pytest.raises(InvalidSetting):
        relay.create_token(ORG, "ci", permissions=["nope"])
    tok = token(relay, "ci")
    assert tok.revoked and tok.permissions == ["metric.read"]
    assert kinds(relay, token_stream_id(ORG, "ci")) == ["Created", "PermissionsSet", "Revoked"]


def test_a_tokens_permissions_are_read_back_by_another_relay(two_relays: tuple[Relay, Relay]) -> None:
    mine, other = two_relays
    mine.create_token(ORG, "ci", app_names=["shop", "ops"], permissions=["websocket.connect", "metric.read"])
    tok = other._maybe(token_stream_id(ORG, "ci"))
    assert (tok.app_names, tok.permissions) == (["ops", "shop"], ["metric.read", "websocket.connect"])
    other.revoke_token(ORG, "ci")
    other.create_token(ORG, "ci")
    assert mine._maybe(token_stream_id(ORG, "ci")).permissions is None


def test_a_revocation_asks_may_revoke_of_the_live_token_only(relay: Relay) -> None:
    relay.create_token(ORG, "ci", app_names=["shop"], permissions=["metric.read"])
    asked: list[Any] = []
    relay.revoke_token(ORG, "ci", may_revoke=lambda apps, perms: asked.append((apps, perms)))
    assert asked == [(["shop"], ["metric.read"])]
    with pytest.raises(IllegalTransition):  # revoked already: nothing to ask of
        relay.revoke_token(ORG, "ci", may_revoke=lambda apps, perms: asked.append((apps, perms)))
    assert len(asked) == 1


def test_a_refused_revocation_records_nothing(relay: Relay) -> None:
    relay.create_token(ORG, "ci")

    def refuse(apps: Any, perms: Any) -> None:
        raise PermissionError("stronger than the caller")

    with pytest.raises(PermissionError):
        relay.revoke_token(ORG, "ci", may_revoke=refuse)
    assert kinds(relay, token_stream_id(ORG, "ci")) == ["Created"]


def test_a_token_made_again_stronger_before_a_revocations_save_is_asked_of_again(two_relays: tuple[Relay, Relay],
                                                                                monkeypatch) -> None:
    mine, other = two_relays
    mine.create_token(ORG, "ci", permissions=["metric.read"])
    asked: list[Any] = []

    def may_revoke(apps: Any, perms: Any) -> None:  # a caller holding metric.read only
        asked.append(perms)
        if authz.permissions_for(apps, perms) - {"metric.read"}:
            raise PermissionError("stronger than the caller")

    def made_again() -> None:
        other.revoke_token(ORG, "ci")
        other.create_token(ORG, "ci")  # org-wide: every permission

    saves = other_first(mine, monkeypatch, made_again)
    with pytest.raises(PermissionError):
        mine.revoke_token(ORG, "ci", may_revoke=may_revoke)
    assert asked == [["metric.read"], None] and len(saves) == 1
    tok = token(other, "ci")
    assert not tok.revoked and tok.permissions is None


# ------------------------------------------------------- permissions_for


def test_permissions_for_honours_the_chosen_permissions_whatever_the_scope() -> None:
    assert authz.permissions_for(None, ["metric.read"]) == {"metric.read"}  # fewer than org-wide's
    assert authz.permissions_for(["shop"], ["token.write"]) == {"token.write"}  # not the app scope's
    assert authz.permissions_for(("shop",), PERMISSIONS) == frozenset(PERMISSIONS)
    assert authz.permissions_for(None, []) == frozenset()  # chosen empty: none, not the scope's
    assert isinstance(authz.permissions_for(None, ["metric.read"]), frozenset)


def test_permissions_for_without_a_choice_is_the_scopes() -> None:
    assert authz.permissions_for(None) == authz.permissions_for(None, None) == frozenset(PERMISSIONS)
    assert authz.permissions_for(["shop"]) == {"application.read", "websocket.connect"}


def test_permissions_for_ignores_unknown_strings() -> None:
    got = authz.permissions_for(None, ["metric.read", "root", "Metric.Read", "metric.read ", "", "metric.read"])
    assert got == {"metric.read"}
    assert authz.permissions_for(["shop"], ["root", "admin"]) == frozenset()  # never falls back to the scope's
    assert authz.permissions_for(None, iter(["token.read", "nope"])) == {"token.read"}


def test_a_principal_with_chosen_permissions_is_decided_by_them() -> None:
    reader = authz.Principal(ORG, "ci", None, authz.permissions_for(None, ["metric.read"]))
    authz.decide(authz.TABLE[("GET", "/metrics")], reader, None, None)
    with pytest.raises(authz.Denied):
        authz.decide(authz.TABLE[("POST", "/v2/orgs/{org}/roles")], reader, ORG, None)
    maker = authz.Principal(ORG, "roles", None, authz.permissions_for(None, ["organization.write"]))
    authz.decide(authz.TABLE[("POST", "/v2/orgs/{org}/roles")], maker, ORG, None)
    authz.decide(authz.TABLE[("DELETE", "/v2/orgs/{org}/roles/{role_name}")], maker, ORG, None)
    with pytest.raises(authz.Denied):
        authz.decide(authz.TABLE[("GET", "/v2/orgs/{org}/roles")], maker, ORG, None)  # reading is another one
