"""The CPU a server spends: user+sys seconds of its whole process tree (the server and every
process it started, e.g. Triton's or Thaw's Python stubs), read with psutil."""

from __future__ import annotations

import psutil

__all__ = ["tree_cpu_s"]


def tree_cpu_s(pid: int) -> float:
    """User+sys CPU seconds used so far by `pid` and its live descendants (and the children
    they have reaped); 0.0 for a process that is gone."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue  # exited between the listing and the read
        total += times.user + times.system + times.children_user + times.children_system
    return total
