"""One file of a model repository read as hostile input: a regular file only, and bounded.

A repository is whatever its owner put there: a FIFO would block the open (nobody writes), a
device such as /dev/zero never ends, a huge file fills memory. `read_regular_file` opens without
blocking, refuses what is not a regular file, and reads at most `max_bytes` (+1 to see more),
however the file's size changes after the check. Used for `config.pbtxt` (runtime.models.
repository) and outputs' label files (runtime.models.output_labels).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runtime.errors import RepositoryError

__all__ = ["read_regular_file"]


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """Its bytes. RepositoryError when it is not a regular file or over `max_bytes`; OSError
    when it cannot be opened or read (the caller says it in its words)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RepositoryError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    finally:
        os.close(fd)
    size = max(st.st_size, len(data))
    if size > max_bytes:
        raise RepositoryError(f"{path}: {size} bytes, over the {max_bytes} byte limit")
    return data
