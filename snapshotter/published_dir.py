"""A directory that appears whole or not at all: filled under a temporary name beside it, then
renamed into place. A copy another process published first is kept, and ours is dropped.

    publish_dir(root, name, fill, what="archive")   fill(tmp) writes the files; -> root/name
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["publish_dir"]

logger = logging.getLogger(__name__)


def publish_dir(root: Path, name: str, fill: Callable[[Path], None], *, what: str) -> Path:
    """`root/name`, filled by `fill(tmp)` if it is not there yet; an existing one (written
    before, by any process) is returned as it is. Whatever `fill` raises propagates, and
    nothing of ours is left behind."""
    root.mkdir(parents=True, exist_ok=True)
    dest = root / name
    if dest.is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".{name[:16]}-", dir=root))
    try:
        fill(tmp)
        try:
            os.rename(tmp, dest)  # atomic: readers see all of it or none
        except OSError:
            if not dest.is_dir():
                raise
            logger.debug("%s %s was written concurrently; using that copy", what, name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
