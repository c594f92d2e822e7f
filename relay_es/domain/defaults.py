"""Relay's timing defaults, each stated once.

``composition/settings.py`` offers them as the defaults of its flags and environment
variables; everything below it takes the value it needs from its constructor. A default
written anywhere else is a second copy that will drift.
"""

from __future__ import annotations

from datetime import timedelta

EXECUTOR_TIMEOUT = timedelta(seconds=60)  # grace of a DISCONNECTED executor before it is DEAD (per app, settable)
RECOVERY_RESPONSE_TIMEOUT = timedelta(seconds=30)  # one recovery attempt, exist_pending_workflows + recovery
RETENTION_INTERVAL = timedelta(seconds=300)  # between two retention messages to one application
RESTART_SETTLE = timedelta(seconds=5)  # after a restart, how long connected executors have to come back
PING_INTERVAL = timedelta(seconds=20)  # WebSocket pings to executors
PING_WAIT = timedelta(seconds=25)  # this long with nothing read from a socket closes it (1011)
HTTP_REQUEST_TIMEOUT = timedelta(seconds=30)  # a whole REST request, body included
CALL_TIMEOUT = timedelta(seconds=20)  # an operation asked of an executor (list, cancel, fork...) -> its answer; under a client's 30 s
HANDSHAKE_TIMEOUT = timedelta(seconds=10)  # WebSocket accepted -> executor_info answered
METRICS_INTERVAL = timedelta(seconds=300)  # get_metrics to each application: the length of one bucket (Conductor's 5 min)
METRICS_RETENTION = timedelta(days=14)  # how long the collected series are kept
ALERT_CHECK_INTERVAL = timedelta(seconds=60)  # how often a WorkflowFailure, SlowQueue or UnresponsiveApplication rule is checked
ALERT_RETRY = timedelta(seconds=5)  # the first retry of a failed alert delivery (doubled each time, at most 300 s)
