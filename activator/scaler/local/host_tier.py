"""The directory of the shared host-memory tier: one per `thaw up`, on a tmpfs, gone at exit.

Replicas keep restored images there (snapshotter.host_cache, `thaw serve --host-cache`), so
the next wake of a model maps its image instead of reading it. Memory in a tmpfs is not freed
when no process uses it, so the directory belongs to one `thaw up`: made at start (named with
its pid), removed at exit, and the directories of `thaw up` processes that died without
removing theirs (SIGKILL) are swept by the next one.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["SHM_ROOT", "default_budget_bytes", "make_tier_dir", "remove_tier_dir"]

logger = logging.getLogger(__name__)

SHM_ROOT = Path("/dev/shm")
_PREFIX = "thaw-host-"


def default_budget_bytes(root: Path = SHM_ROOT) -> int:
    """1/8 of this machine's memory, within what the tmpfs can hold; 0 without a tmpfs."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        free = shutil.disk_usage(root).free
    except (OSError, ValueError):
        return 0
    return min(pages * page // 8, free // 2)


def make_tier_dir(root: Path = SHM_ROOT) -> Path | None:
    """A fresh 0700 directory for this process's tier (None without a usable tmpfs), after
    sweeping the directories of `thaw up` processes that are gone."""
    if not root.is_dir():
        return None
    _sweep(root)
    try:
        return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root))
    except OSError as exc:
        logger.warning("no host-memory tier: cannot create a directory in %s: %s", root, exc)
        return None


def remove_tier_dir(path: Path | None) -> None:
    """Remove the tier (its images' memory is freed once no replica maps them)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _sweep(root: Path) -> None:
    for entry in root.glob(f"{_PREFIX}*"):
        pid = entry.name[len(_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)) or entry.stat().st_uid != os.getuid():
            continue
        logger.info("removing the host-memory tier of a gone thaw up: %s", entry)
        shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
