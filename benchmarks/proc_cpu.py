"""The CPU a server spends: user+sys seconds of its whole process tree (the server and every
process it started, e.g. Triton's or Thaw's Python stubs), read with psutil; and, per process,
its threads' CPU and sleeps (voluntary context switches) from /proc."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = [
    "Counters",
    "parse_task",
    "process_counters",
    "stat_cpu_s",
    "tree_counters",
    "tree_cpu_s",
]


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


def stat_cpu_s(stat: str, ticks_per_s: int) -> float:
    """User+sys CPU seconds from a /proc `stat` text (a process's or a thread's)."""
    # "pid (comm) state ...": comm may hold spaces and parentheses; utime and stime are the
    # 14th and 15th fields, the 12th and 13th after the comm's closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


@dataclass(frozen=True)
class Counters:
    """CPU seconds and voluntary context switches, summed over threads."""

    cpu_s: float = 0.0
    sleeps: int = 0

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.cpu_s - other.cpu_s, self.sleeps - other.sleeps)

    def __add__(self, other: Counters) -> Counters:
        return Counters(self.cpu_s + other.cpu_s, self.sleeps + other.sleeps)


def parse_task(status: str, stat: str, ticks_per_s: int) -> Counters:
    """One thread's counters from its /proc/<pid>/task/<tid>/status and stat texts."""
    sleeps = 0
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            sleeps = int(line.split()[1])
    return Counters(stat_cpu_s(stat, ticks_per_s), sleeps)


def process_counters(pid: int) -> Counters:
    """A process's counters, over its live threads (0 for a process that is gone)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = Counters()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return total
    for tid in tids:
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended between the listing and the read
        total = total + parse_task(status, stat, ticks)
    return total


def tree_counters(pid: int, *, apart: str = "") -> tuple[Counters, Counters, Counters]:
    """(the server process, its descendants named `apart` (the native front, `thaw-front`),
    its other descendants: the stubs) now."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return Counters(), Counters(), Counters()
    named, stubs = Counters(), Counters()
    for child in children:
        try:
            name = child.name()
        except psutil.NoSuchProcess:
            continue
        if apart and name == apart:
            named = named + process_counters(child.pid)
        else:
            stubs = stubs + process_counters(child.pid)
    return process_counters(pid), named, stubs
