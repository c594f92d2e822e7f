"""How a call to an executor fails (``relay_es.engine.calls``): each error's problem, and
executor text in it escaped and bounded."""

from __future__ import annotations

from relay_es.engine.calls import (CallFailed, ExecutorFailed, ExecutorGone, ExecutorTimedOut, NoHealthyExecutor,
                                   ReplyRefused)


def test_each_failure_is_a_problem_of_its_own_status() -> None:
    errors = [NoHealthyExecutor("local", "app"), ExecutorTimedOut("E", 2.5), ExecutorFailed("no such workflow"),
              ExecutorGone("E", "connection c1 closed"), ReplyRefused("E", "reply had type 'cancel'")]
    assert all(isinstance(e, CallFailed) and e.detail == str(e) for e in errors)
    assert [(e.status, e.title) for e in errors] == [
        (503, "no healthy executor"), (504, "executor did not answer"), (502, "executor reported an error"),
        (502, "executor disconnected"), (502, "executor reply refused")]
    assert errors[1].detail == "executor 'E' did not answer within 2.5s"


def test_an_executors_error_text_is_escaped_and_bounded() -> None:
    e = ExecutorFailed("boom\x1b[31m\u202e" + "x" * 10_000, response="the answer")
    assert "\x1b" not in e.message and "\u202e" not in e.message and "\\u001b" in e.message
    assert len(e.message) <= 2003 and str(e) == e.message and e.response == "the answer"


def test_executor_ids_in_details_are_escaped() -> None:
    assert "\\u0000" in ExecutorGone("E\x00").detail and "\x00" not in ExecutorTimedOut("E\x00", 1).detail
