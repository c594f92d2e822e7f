"""How a call to an executor can fail: the errors every operation of the Conductor API
carried over the WebSocket raises, each with the problem the REST side answers.

A call goes to one executor of the application (:mod:`relay_es.engine.routing` picks it,
the hub's ``Calls`` sends it). Each error carries ``status`` (the HTTP status of its
problem), ``title`` and ``detail``; executor-sent text in a detail is escaped and bounded
(:func:`~relay_es.protocol.limits.printable`) like every other executor text Relay repeats.
"""

from __future__ import annotations

from typing import Any

from relay_es.protocol.limits import printable

ERROR_TEXT_LIMIT = 2000  # characters of an executor's error_message quoted in a problem (Python sends tracebacks)
SAID_LIMIT = 4096  # characters of each end of an error_message a route reads its kind from (bounded work)


class CallFailed(Exception):
    """A call to an executor did not produce a usable answer."""

    status: int = 502
    title: str = "executor call failed"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NoHealthyExecutor(CallFailed):
    """No registered, open connection of the application on this instance: nothing was sent."""

    status = 503
    title = "no healthy executor"

    def __init__(self, org: str, app: str) -> None:
        super().__init__(f"no healthy executor of application {printable(app, 200)!r} is connected")
        self.org, self.app = org, app


class ExecutorTimedOut(CallFailed):
    """The executor did not answer within the call's timeout (a later answer is audited
    ``late_reply`` and never acted on)."""

    status = 504
    title = "executor did not answer"

    def __init__(self, executor_id: str, timeout: float) -> None:
        super().__init__(f"executor {printable(executor_id, 256)!r} did not answer within {timeout:g}s")
        self.executor_id, self.timeout = executor_id, timeout


class ExecutorFailed(CallFailed):
    """The executor answered with an ``error_message`` (or ``success`` not true).
    ``message`` is its text, escaped and bounded (to show); ``said`` its text as sent, its
    first and last :data:`SAID_LIMIT` characters (to read: a route tells "no such workflow"
    from it, where an SDK's traceback ends with its exception's line -- in ``message`` a
    newline is ``\u000a`` and a long traceback's end is cut); ``response`` the decoded answer
    (bulk operations may still carry what was done)."""

    title = "executor reported an error"

    def __init__(self, message: str, response: Any = None) -> None:
        self.message = printable(message, ERROR_TEXT_LIMIT)
        super().__init__(self.message)
        self.said = message if len(message) <= 2 * SAID_LIMIT else f"{message[:SAID_LIMIT]}\n...\n{message[-SAID_LIMIT:]}"
        self.response = response


class ExecutorGone(CallFailed):
    """The executor's socket closed while the call waited (or before it was sent)."""

    title = "executor disconnected"

    def __init__(self, executor_id: str, reason: str = "") -> None:
        super().__init__(f"executor {printable(executor_id, 256)!r} disconnected during the call"
                         + (f": {printable(reason, 200)}" if reason else ""))
        self.executor_id = executor_id


class ReplyRefused(CallFailed):
    """The executor's reply broke the protocol (not the expected type, a field of the wrong
    type): refused, audited as a ``protocol.violation``, never used."""

    title = "executor reply refused"

    def __init__(self, executor_id: str, reason: str) -> None:
        super().__init__(f"the reply of executor {printable(executor_id, 256)!r} was refused: {printable(reason)}")
        self.executor_id = executor_id
