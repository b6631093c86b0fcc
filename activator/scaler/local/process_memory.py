"""What a local process costs in memory: its proportional set size (PSS), read from /proc.

PSS counts every page the process maps, private pages whole and each shared page divided by
the number of processes that map it, so the PSS of all processes adds up to the memory they
use together: the number for a pool whose processes share framework pages copy-on-write. An
idle pool process is counted with its children (the Python stubs it started ahead).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["pss_bytes", "tree_pss_bytes"]


def pss_bytes(pid: int) -> int | None:
    """The PSS of `pid` in bytes, or None when it cannot be read (gone, not ours, no /proc)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
            for line in file:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def tree_pss_bytes(pid: int) -> int | None:
    """The PSS of `pid` and of its children (and theirs), or None when `pid`'s cannot be read."""
    own = pss_bytes(pid)
    if own is None:
        return None
    return own + sum(pss_bytes(child) or 0 for child in _descendants(pid))


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 256:  # bounded: a pool process starts a few stubs at most
        parent = todo.pop()
        for task in _listdir(Path(f"/proc/{parent}/task")):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []
