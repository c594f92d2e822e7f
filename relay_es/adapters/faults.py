"""Crash points for the fault suite.

Off unless ``RELAY_FAULT_CRASH_AT`` names one of :data:`POINTS`; then the
process exits on the spot with status 137, as if SIGKILLed: nothing flushed,
nothing closed. Used by ``tests/fault`` to crash Relay between recording a
dispatch and sending it, and between sending it and recording the answer.
"""

from __future__ import annotations

import logging
import os

POINTS = ("after_dispatch_recorded", "before_answer_recorded")

_armed = os.environ.get("RELAY_FAULT_CRASH_AT")
if _armed is not None and _armed not in POINTS:
    raise SystemExit(f"RELAY_FAULT_CRASH_AT={_armed!r} is not one of {', '.join(POINTS)}")


def crash_point(name: str) -> None:
    if _armed == name:
        logging.getLogger(__name__).critical("fault injection: crashing at %s", name)
        os._exit(137)
