"""What a process the server or ``relay projections rebuild`` starts does first: end with its parent.

A read-model process (the follower, a share of a fill) writes the read models' tables; one that
outlived the process that started it would go on writing them beside the next one's, which drops
and fills the same tables (a killed server's fill left shares writing for a minute into the next
server's tables, and that server skipped some 30,000 events as poison).
"""

from __future__ import annotations

import os
import signal


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends, however it ends (``PR_SET_PDEATHSIG``:
    strictly when the parent *thread* that started it ends; the callers start their processes from a
    thread that outlives them). Elsewhere nothing: a closed pipe ends the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def exit_if_gone(pid: int) -> None:
    """Ends this process at once when ``pid`` (the process it works for) has ended already: before
    :func:`die_with_parent` took effect, or a grandparent that a fork server stands between."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        os._exit(1)
    except PermissionError:
        pass  # alive, another user's
