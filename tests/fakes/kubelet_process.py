"""Process hygiene for the test kubelet: every container process leads its own process group,
is registered while alive, and is SIGKILLed with its group at interpreter exit or when the
thread that started it dies (Linux PR_SET_PDEATHSIG), so no test leaves a process behind."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys

__all__ = ["die_with_parent", "kill_group", "track_group"]

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_LIVE_GROUPS: set[int] = set()


def die_with_parent() -> None:
    """A `preexec_fn`: runs in the child between fork and exec (only an async-signal-safe
    prctl call, resolved before the fork)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def kill_group(pgid: int, sig: int) -> None:
    """Signal a process group; one that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def track_group(pgid: int, *, alive: bool) -> None:
    if alive:
        _LIVE_GROUPS.add(pgid)
    else:
        _LIVE_GROUPS.discard(pgid)


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_LIVE_GROUPS):
        kill_group(pgid, signal.SIGKILL)
