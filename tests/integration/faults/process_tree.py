"""What a test sees of a process tree through /proc: descendants, and who is still alive."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fixtures.up_process import pid_alive

__all__ = ["children", "descendants", "wait_all_gone"]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def wait_all_gone(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still alive after up to `timeout_s` (zombies count as gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]
