"""Settings of ``relay serve``: the resource limits (ADR 15) from flags and RELAY_* variables."""

from __future__ import annotations

import pytest

from relay_es.cli import main
from relay_es.errors import InvalidSetting
from relay_es.protocol.limits import ResourceLimits
from relay_es.settings import LIMITS, Settings


def test_generous_defaults() -> None:
    s = Settings.from_sources({}, {})
    assert s.limits == ResourceLimits()
    assert s.limits.connections_per_key >= 5000 and s.limits.executors_per_app >= 5000  # bench storms: 5,000
    assert s.limits.handshakes_per_address >= 5000


def test_each_limit_has_a_flag_and_a_variable_and_the_flag_wins() -> None:
    for key, lim in LIMITS.items():
        s = Settings.from_sources({}, {lim.env: "7"})
        assert getattr(s.limits, key) == 7, key
        s = Settings.from_sources({key: 9}, {lim.env: "7"})
        assert getattr(s.limits, key) == 9, key
        assert lim.flag.startswith("--max-") and lim.env.startswith("RELAY_MAX_")


@pytest.mark.parametrize("raw", ["0", "-1", "x", "1.5", "100000000"])
def test_a_limit_must_be_a_sensible_whole_number(raw: str) -> None:
    with pytest.raises(InvalidSetting) as e:
        Settings.from_sources({}, {"RELAY_MAX_CONNECTIONS_PER_KEY": raw})
    assert "RELAY_MAX_CONNECTIONS_PER_KEY" in str(e.value)


def test_the_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Settings] = {}

    def fake_serve(args):  # type: ignore[no-untyped-def]
        seen["s"] = Settings.from_sources(vars(args), {})
        return 0

    monkeypatch.setattr("relay_es.cli.serve", fake_serve)
    assert main(["serve", "--max-connections-per-key", "11", "--max-executors-per-app", "12",
                 "--max-handshakes-per-address", "13", "--max-executors-per-key", "14",
                 "--max-connections-per-app", "15"]) == 0
    assert seen["s"].limits == ResourceLimits(connections_per_key=11, executors_per_app=12, handshakes_per_address=13,
                                              executors_per_key=14, connections_per_app=15)
