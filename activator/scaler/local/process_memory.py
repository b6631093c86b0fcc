"""What a local process costs in memory: its proportional set size (PSS), read from /proc.

PSS counts every page the process maps, private pages whole and each shared page divided by
the number of processes that map it, so the PSS of all processes adds up to the memory they
use together: the number for a pool whose processes share framework pages copy-on-write.
"""

from __future__ import annotations

__all__ = ["pss_bytes"]


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
