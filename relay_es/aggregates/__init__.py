"""The state machines. Nothing in here does I/O or reads a clock: every command is given its time.

* :mod:`~relay_es.aggregates.executor` -- one executor's connection and recovery (``Executor``);
* :mod:`~relay_es.aggregates.application` -- an application's registration and settings;
* :mod:`~relay_es.aggregates.token` -- an org's API and executor keys, stored as hashes;
* :mod:`~relay_es.aggregates.gate` -- an org's record of refused handshakes;
* :mod:`~relay_es.aggregates.skip` -- the record of an event a read model skipped (ADR 16);
* :mod:`~relay_es.aggregates.action` -- one operator action through the API: who asked, what, the outcome;
* :mod:`~relay_es.aggregates.alert` -- one alerting rule's alerts and every attempt to deliver them;
* :mod:`~relay_es.aggregates.roles` -- an org's own roles, named sets of permissions (``OrgRoles``);
* :mod:`~relay_es.aggregates.members` -- the people of an org who sign in with OIDC, and the roles
  granted them (``OrgMembers``).

Their event classes' module paths and names are stored with every event (the topic):
moving or renaming one makes the streams that hold it unreadable.
"""

from relay_es.aggregates.action import Action, Outcome
from relay_es.aggregates.application import AppSettings, Application, SettingsPatch
from relay_es.aggregates.executor import (
    DisconnectReason,
    Executor,
    ExecutorStatus,
    RecoveryPhase,
    executor_stream_id,
)
from relay_es.aggregates.token import Token

__all__ = [
    "Action",
    "AppSettings",
    "Application",
    "DisconnectReason",
    "Executor",
    "ExecutorStatus",
    "Outcome",
    "RecoveryPhase",
    "SettingsPatch",
    "Token",
    "executor_stream_id",
]
