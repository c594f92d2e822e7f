"""The timing defaults, each stated once (relay_es/domain/defaults.py), and everything that offers them."""

from __future__ import annotations

from datetime import timedelta

from relay_es.composition.cli import main
from relay_es.composition.settings import TIMINGS, Settings, seconds_text
from relay_es.domain import defaults
from relay_es.engine.process_manager import Timing

# Each setting of ``relay serve`` and the default it must offer.
EXPECTED = {
    "ping_interval": defaults.PING_INTERVAL,
    "ping_wait": defaults.PING_WAIT,
    "default_executor_timeout": defaults.EXECUTOR_TIMEOUT,
    "recovery_response_timeout": defaults.RECOVERY_RESPONSE_TIMEOUT,
    "retention_interval": defaults.RETENTION_INTERVAL,
    "restart_settle": defaults.RESTART_SETTLE,
    "http_request_timeout": defaults.HTTP_REQUEST_TIMEOUT,
    "call_timeout": defaults.CALL_TIMEOUT,
    "metrics_interval": defaults.METRICS_INTERVAL,
    "metrics_retention": defaults.METRICS_RETENTION,
    "alert_check_interval": defaults.ALERT_CHECK_INTERVAL,
    "alert_retry": defaults.ALERT_RETRY,
}

ALL = [v for k, v in vars(defaults).items() if k.isupper()]


def test_every_default_is_a_positive_duration() -> None:
    assert len(ALL) >= len(EXPECTED) + 1  # the settings' ten, and the handshake's
    for value in ALL:
        assert isinstance(value, timedelta)
        assert value > timedelta(0)


def test_a_pong_has_time_to_come_back() -> None:
    assert defaults.PING_WAIT > defaults.PING_INTERVAL


def test_a_recovery_attempt_ends_before_the_next_retention_round() -> None:
    # Not a rule of the code, a sanity check of the numbers: an unanswered recovery is
    # given up long before an application is sent its next retention message.
    assert defaults.RECOVERY_RESPONSE_TIMEOUT < defaults.RETENTION_INTERVAL


def test_every_timing_setting_defaults_to_the_stated_value() -> None:
    assert set(TIMINGS) == set(EXPECTED)
    for key, value in EXPECTED.items():
        assert TIMINGS[key].default == value.total_seconds(), key


def test_settings_built_from_nothing_and_by_hand_agree_with_the_defaults() -> None:
    read = Settings.from_sources({}, {})
    by_hand = Settings()
    for key, value in EXPECTED.items():
        assert getattr(read, key) == value, key
        assert getattr(by_hand, key) == value, key


def test_the_process_manager_s_timing_agrees_with_the_defaults() -> None:
    t = Timing()
    assert t.settle == defaults.RESTART_SETTLE
    assert t.response_timeout == defaults.RECOVERY_RESPONSE_TIMEOUT


def test_the_help_shows_each_default(capsys) -> None:
    try:
        main(["serve", "--help"])
    except SystemExit as e:
        assert e.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for key, value in EXPECTED.items():
        t = TIMINGS[key]
        assert f"{t.env}, default {seconds_text(value.total_seconds())})" in out, key
    assert "1209600)" in out and "e+" not in out  # two weeks read as seconds, not 1.2096e+06


def test_an_executor_call_ends_before_a_client_gives_up() -> None:
    # The CLI waits 30 s for an answer: a call the executor never answers must be a 504 before that.
    from relay_es.composition.client_cli import REQUEST_TIMEOUT_SECS
    assert defaults.CALL_TIMEOUT.total_seconds() < REQUEST_TIMEOUT_SECS
