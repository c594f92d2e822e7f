"""The state machines. Nothing in here does I/O or reads a clock."""

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
    "AppSettings",
    "Application",
    "DisconnectReason",
    "Executor",
    "ExecutorStatus",
    "RecoveryPhase",
    "SettingsPatch",
    "Token",
    "executor_stream_id",
]
