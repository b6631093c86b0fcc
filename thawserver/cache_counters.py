"""Eviction counters of an image cache directory, kept in the directory itself.

The process that evicts (a `thaw serve` replica restoring an image) adds to them; `thaw up`
reads them for its `/metrics` without knowing anything else of the cache's layout. The file
is `<dir>/evictions.json`, `{"evictions": N, "evicted_bytes": B}`, rewritten under an
exclusive `flock` of itself, so concurrent evictors never lose a count.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COUNTERS_FILE", "EvictionCounts", "read_counts", "record_evictions"]

COUNTERS_FILE = "evictions.json"


@dataclass(frozen=True)
class EvictionCounts:
    """Entries evicted from one cache directory since it was made, and their bytes."""

    evictions: int = 0
    evicted_bytes: int = 0


def record_evictions(directory: Path, count: int, nbytes: int) -> None:
    """Add `count` evictions of `nbytes` in total to `directory`'s counters."""
    if count <= 0:
        return
    fd = os.open(directory / COUNTERS_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        now = _parse(os.pread(fd, 4096, 0))
        body = json.dumps(
            {"evictions": now.evictions + count, "evicted_bytes": now.evicted_bytes + nbytes}
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, body, 0)
    finally:
        os.close(fd)  # releases the lock


def read_counts(directory: Path) -> EvictionCounts:
    """The counters of `directory` (zeros when none were recorded or it is unreadable)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory / COUNTERS_FILE, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # never half of a rewrite
            return _parse(os.pread(fd, 4096, 0))
        finally:
            os.close(fd)
    return EvictionCounts()


def _parse(raw: bytes) -> EvictionCounts:
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        return EvictionCounts()
    if not isinstance(doc, dict):
        return EvictionCounts()
    values = [doc.get("evictions", 0), doc.get("evicted_bytes", 0)]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return EvictionCounts()
    return EvictionCounts(values[0], values[1])
