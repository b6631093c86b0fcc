"""A model directory's fingerprint: what both servers compare to see that its files changed."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Fingerprint", "fingerprint"]

Fingerprint = tuple[tuple[str, int, int], ...]
"""(path relative to the model directory, mtime_ns, size) of each of its files, sorted."""

_BYTECODE = "__pycache__"


def fingerprint(model_dir: Path) -> Fingerprint:
    """(relative path, mtime_ns, size) of every file under a model, for change detection;
    hidden directories and `__pycache__` are skipped (a Python model's first import writes it
    into its own version directory: no change of the model), a file that vanishes meanwhile is
    left out (blocking: call it in a thread from async code)."""
    rows = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != _BYTECODE)
        for name in sorted(files):
            path = Path(root) / name
            try:
                stat = path.stat()
            except OSError:
                continue
            rows.append((str(path.relative_to(model_dir)), stat.st_mtime_ns, stat.st_size))
    return tuple(rows)
