"""The line every benchmark report ends with: how many CPUs, and how loaded they were.

Absolute numbers on a shared machine move with its load; a report that says the load average
at its start and end lets a reader tell a slow run from a slow server.
"""

from __future__ import annotations

import os

__all__ = ["machine_line"]


def machine_line(load_start: float, load_end: float, cpus: int | None = None) -> str:
    """`machine: N CPUs, 1-min load average A at start, B at end (...)`."""
    count = os.cpu_count() if cpus is None else cpus
    return (
        f"machine: {count} CPUs, 1-min load average {load_start:.1f} at start, {load_end:.1f} "
        "at end (other work shares these CPUs)"
    )
