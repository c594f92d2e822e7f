"""The exception hierarchy: what each error is, what callers tell apart, and what it says."""

from __future__ import annotations

import builtins
import re

import pytest

from relay_es.domain import errors
from relay_es.domain.errors import (
    DomainError,
    IllegalTransition,
    InvalidSetting,
    NotDue,
    RelayError,
    StaleConnection,
    UnknownApplication,
    UnknownExecutor,
    UnknownToken,
)


def test_the_hierarchy_is_the_one_the_docstring_draws() -> None:
    assert issubclass(DomainError, RelayError)
    assert issubclass(IllegalTransition, DomainError)
    assert issubclass(StaleConnection, IllegalTransition) and issubclass(NotDue, IllegalTransition)
    for cls in (UnknownApplication, UnknownExecutor, UnknownToken):
        assert issubclass(cls, DomainError) and not issubclass(cls, IllegalTransition)
    assert issubclass(InvalidSetting, RelayError) and issubclass(InvalidSetting, ValueError)
    assert not issubclass(InvalidSetting, DomainError)


def test_the_docstring_names_every_class_and_no_other() -> None:
    doc = errors.__doc__ or ""
    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    named = set(re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b", doc)) - set(dir(builtins))  # CamelCase, not ValueError
    assert named == classes


def test_an_illegal_transition_says_what_was_refused_and_why() -> None:
    e = IllegalTransition("executor 'e'", "DEAD", "disconnect", "only a HEALTHY executor can disconnect")
    assert (e.entity, e.state, e.command) == ("executor 'e'", "DEAD", "disconnect")
    assert str(e) == "executor 'e': cannot disconnect while DEAD (only a HEALTHY executor can disconnect)"
    assert str(IllegalTransition("token 't'", "revoked", "revoke")) == "token 't': cannot revoke while revoked"


def test_unknown_things_are_named_with_their_org() -> None:
    e = UnknownApplication("acme", "orders")
    assert (e.org, e.app) == ("acme", "orders")
    assert "'orders'" in str(e) and "'acme'" in str(e)
    assert str(UnknownExecutor("acme", "orders", "e-1")) == (
        "executor 'e-1' of application 'orders' in org 'acme' is unknown")
    assert str(UnknownToken("acme", "ci")) == "token 'ci' does not exist in org 'acme'"


def test_an_invalid_setting_names_the_field() -> None:
    e = InvalidSetting("executorTimeoutSecs", "must be at least 1 second(s), got 0")
    assert (e.field, e.message) == ("executorTimeoutSecs", "must be at least 1 second(s), got 0")
    assert str(e) == "executorTimeoutSecs: must be at least 1 second(s), got 0"
    with pytest.raises(ValueError):  # argparse and callers that only know ValueError still catch it
        raise e
