"""A disk that fills up: writes to files under one directory fail with ENOSPC past a budget.

`FullDisk(root, free_bytes)` is a context manager that stands in for a small filesystem
mounted at `root` where none can be mounted (tests run unprivileged in CI): while it is
active, `os.write` and `os.pwrite` on a descriptor whose file lies under `root` succeed for
the first `free_bytes` bytes in all, then raise `OSError(ENOSPC)` as the kernel does; writes
elsewhere pass through untouched. `free(n)` makes room again, as deleting files would.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["FullDisk"]


class FullDisk:
    def __init__(self, root: Path, free_bytes: int) -> None:
        self.root = str(Path(root).resolve())
        self.left = free_bytes
        self.refused = 0  # writes that failed with ENOSPC
        self._lock = threading.Lock()
        self._real: dict[str, Callable[..., int]] = {}

    def free(self, nbytes: int) -> None:
        with self._lock:
            self.left += nbytes

    def _under_root(self, fd: int) -> bool:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return target == self.root or target.startswith(self.root + os.sep)

    def _take(self, fd: int, nbytes: int) -> int:
        """How many of `nbytes` may be written now (a short write at the edge, as the kernel
        does); raises ENOSPC when there is no room at all."""
        if not self._under_root(fd):
            return nbytes
        with self._lock:
            if self.left <= 0 and nbytes > 0:
                self.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            allowed = min(nbytes, self.left)
            self.left -= allowed
            return allowed

    def __enter__(self) -> FullDisk:
        self._real = {"write": os.write, "pwrite": os.pwrite}
        real_write, real_pwrite = self._real["write"], self._real["pwrite"]

        def write(fd: int, data: Any) -> int:
            view = memoryview(data).cast("B")
            return real_write(fd, view[: self._take(fd, len(view))])

        def pwrite(fd: int, data: Any, offset: int) -> int:
            view = memoryview(data).cast("B")
            return real_pwrite(fd, view[: self._take(fd, len(view))], offset)

        os.write, os.pwrite = write, pwrite  # type: ignore[assignment]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.write, os.pwrite = self._real["write"], self._real["pwrite"]  # type: ignore[assignment]
