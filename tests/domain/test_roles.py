"""Permissions and roles (``relay_es/domain/roles.py``): Conductor's eight permissions, the built-in
roles, and the checks of a permission list and of a role name."""

from __future__ import annotations

import pytest

from relay_es.domain import roles
from relay_es.domain.errors import InvalidSetting
from relay_es.domain.roles import (
    BUILT_IN,
    MAX_ROLES,
    PERMISSIONS,
    check_permissions,
    check_role_name,
    ordered,
)

CONDUCTOR = ["organization.read", "organization.write", "application.read", "application.write", "metric.read",
             "token.read", "token.write", "websocket.connect"]


# ---------------------------------------------------------------- constants


def test_the_permissions_are_conductors_eight_each_once() -> None:
    assert isinstance(PERMISSIONS, tuple)  # a constant nobody appends to
    assert list(PERMISSIONS) == CONDUCTOR
    assert len(set(PERMISSIONS)) == 8
    named = [roles.ORGANIZATION_READ, roles.ORGANIZATION_WRITE, roles.APPLICATION_READ, roles.APPLICATION_WRITE,
             roles.METRIC_READ, roles.TOKEN_READ, roles.TOKEN_WRITE, roles.WEBSOCKET_CONNECT]
    assert named == CONDUCTOR


def test_the_built_in_roles_are_admin_operator_viewer_in_that_order() -> None:
    assert list(BUILT_IN) == ["admin", "operator", "viewer"]
    for name, perms in BUILT_IN.items():
        assert isinstance(perms, frozenset), name  # never changed
        assert perms <= set(PERMISSIONS), name
        assert perms, name
        assert check_role_name(name) == name  # a built-in name is a well-formed one: only its owner differs


def test_admin_holds_every_permission_and_each_built_in_role_holds_less_than_the_one_before() -> None:
    assert BUILT_IN["admin"] == frozenset(PERMISSIONS)
    assert BUILT_IN["viewer"] < BUILT_IN["operator"] < BUILT_IN["admin"]


def test_operator_runs_the_applications_and_changes_no_member_role_or_key() -> None:
    op = BUILT_IN["operator"]
    assert op == {"organization.read", "application.read", "application.write", "metric.read", "token.read"}
    assert not {"organization.write", "token.write", "websocket.connect"} & op


def test_viewer_only_reads() -> None:
    assert BUILT_IN["viewer"] == {"organization.read", "application.read", "metric.read"}
    assert all(p.endswith(".read") for p in BUILT_IN["viewer"])


def test_an_org_may_have_a_hundred_roles_of_its_own() -> None:
    assert MAX_ROLES == 100


# -------------------------------------------------------- check_permissions


def test_check_permissions_answers_a_frozenset_each_once() -> None:
    got = check_permissions("permissions", ["metric.read", "token.read", "metric.read"])
    assert isinstance(got, frozenset)
    assert got == {"metric.read", "token.read"}


@pytest.mark.parametrize("asked", [[], (), set(), iter([]), frozenset()])
def test_no_permission_at_all_is_an_empty_set_not_a_refusal(asked) -> None:
    # a role may hold none; the token command refuses an empty choice itself
    assert check_permissions("permissions", asked) == frozenset()


def test_check_permissions_takes_any_iterable() -> None:
    assert check_permissions("p", (p for p in PERMISSIONS)) == frozenset(PERMISSIONS)
    assert check_permissions("p", {"token.write": 1}) == {"token.write"}  # a mapping's keys
    assert check_permissions("p", frozenset({"websocket.connect"})) == {"websocket.connect"}


@pytest.mark.parametrize("unknown", [
    "metric.write",          # not one of the eight
    "Metric.Read",           # case matters
    "METRIC.READ",
    " metric.read",          # no trimming
    "metric.read ",
    "metric.read\n",
    "metric",
    "",
    "*",
    "admin",                 # a role, not a permission
])
def test_an_unknown_permission_is_refused_naming_the_field_and_it(unknown: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_permissions("permissions", ["metric.read", unknown])
    assert info.value.field == "permissions"
    assert repr(unknown) in info.value.message
    for p in PERMISSIONS:  # says which ones there are
        assert p in info.value.message


@pytest.mark.parametrize("not_a_str", [None, 1, 1.5, True, b"metric.read", ["metric.read"], ("metric.read",),
                                        {"metric.read"}, {"p": "metric.read"}, object()])
def test_a_permission_that_is_not_a_str_is_refused(not_a_str: object) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_permissions("perms", [not_a_str])
    assert info.value.field == "perms"  # the caller's name for it
    assert isinstance(info.value, ValueError)


def test_a_str_subclass_equal_to_a_permission_passes_as_it() -> None:
    class Named(str):
        pass

    assert check_permissions("p", [Named("metric.read")]) == {"metric.read"}


def test_the_first_unknown_permission_is_the_one_named() -> None:
    with pytest.raises(InvalidSetting) as info:
        check_permissions("permissions", ["metric.read", "first.bad", "second.bad"])
    assert "'first.bad'" in info.value.message and "second.bad" not in info.value.message


def test_a_huge_unknown_permission_is_not_echoed_whole() -> None:
    huge = "x" * 10_000
    with pytest.raises(InvalidSetting) as info:
        check_permissions("permissions", [huge])
    assert huge not in info.value.message
    assert len(info.value.message) < 400


def test_a_bare_string_is_read_letter_by_letter_and_so_refused() -> None:
    with pytest.raises(InvalidSetting):
        check_permissions("permissions", "metric.read")


# ---------------------------------------------------------- check_role_name


@pytest.mark.parametrize("name", ["abc", "ops", "Ops", "ABC", "a_b", "___", "123", "role_2", "x" * 30, "A1_" * 10,
                                  "admins", "admin_2", "viewer1"])
def test_a_role_name_is_3_to_30_ascii_letters_digits_or_underscores(name: str) -> None:
    assert check_role_name(name) == name


@pytest.mark.parametrize("name", [
    "", "a", "ab",                      # too short
    "x" * 31, "x" * 1000,               # too long
    "x\n", "abc\n", "\nabc", "ab\nc",   # fullmatch: no trailing newline slips through as it would with $
    "abc ", " abc", "a b c",
    "a-b", "a.b", "a/b", "a:b", "a\x00b", "abc\t",
    "rôle", "ålpha", "naïve", "Straße", "名前名", "ロール",  # Unicode letters
    "ａｂｃ",                          # fullwidth letters
    "١٢٣", "²³⁴",                      # Unicode digits
    "abc\u200b",                       # a zero-width space
])
def test_other_role_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_role_name(name)
    assert info.value.field == "name"
    assert "3-30" in info.value.message


@pytest.mark.parametrize("not_a_str", [None, 123, 12345.0, b"abcd", ["abcd"], ("abcd",), {"abcd"}, object()])
def test_a_role_name_that_is_not_a_str_is_refused(not_a_str: object) -> None:
    with pytest.raises(InvalidSetting) as info:
        check_role_name(not_a_str)
    assert info.value.field == "name"


def test_the_role_name_pattern_is_used_with_fullmatch() -> None:
    assert roles.ROLE_NAME.match("abc\n") is not None  # match() alone would take a prefix
    assert roles.ROLE_NAME.fullmatch("abc\n") is None


# ------------------------------------------------------------------ ordered


def test_ordered_sorts_and_keeps_each_once() -> None:
    assert ordered(["token.read", "metric.read", "token.read", "application.read"]) == [
        "application.read", "metric.read", "token.read"]


def test_ordered_takes_any_iterable_and_answers_a_new_list() -> None:
    assert ordered(frozenset(PERMISSIONS)) == sorted(CONDUCTOR)
    assert ordered(p for p in reversed(PERMISSIONS)) == sorted(CONDUCTOR)
    assert ordered([]) == []
    given = ["b", "a"]
    out = ordered(given)
    assert isinstance(out, list) and out is not given and given == ["b", "a"]


def test_ordered_is_the_same_whatever_the_order_given() -> None:
    assert ordered(PERMISSIONS) == ordered(reversed(PERMISSIONS)) == ordered(BUILT_IN["admin"])
    for perms in BUILT_IN.values():
        assert ordered(perms) == sorted(perms)
