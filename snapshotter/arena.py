"""One preallocated, page-aligned host memory arena that an image is restored into."""

from __future__ import annotations

import mmap
import time

import numpy as np

from snapshotter.errors import SnapshotError
from snapshotter.manifest import DTYPES

PAGE_BYTES = mmap.PAGESIZE


class Arena:
    """Anonymous mmap of `nbytes` (page aligned); views are numpy arrays over its memory.

    A warm-pool process allocates one and calls `prefault()` before it is assigned a model, so
    the restore writes into memory whose page faults were already paid (fresh pages cost more
    than the read itself on these machines).
    """

    def __init__(self, nbytes: int) -> None:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise SnapshotError(f"`nbytes` = {nbytes!r}, must be an integer >= 0")
        self.nbytes = nbytes
        # mmap(-1, 0) is invalid; keep one page so empty images still have an arena.
        try:
            # Private, not shared (Python's default for -1): shared anonymous memory is shmem,
            # whose page faults cost ~30% more CPU; nothing forks with an arena to share it.
            self._map = mmap.mmap(
                -1, max(nbytes, PAGE_BYTES), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
            )
        except (OSError, OverflowError, ValueError) as exc:
            raise SnapshotError(f"cannot allocate an arena of {nbytes} bytes: {exc}") from exc
        self.array = np.frombuffer(self._map, dtype=np.uint8, count=max(nbytes, 1))
        self.prefaulted = False

    def prefault(self) -> float:
        """Touch every page for writing so later copies do not fault; return seconds taken."""
        start = time.perf_counter()
        if self.nbytes:
            self.array[::PAGE_BYTES] = 0
        self.prefaulted = True
        return time.perf_counter() - start

    def memoryview(self, offset: int, nbytes: int) -> memoryview:
        """A writable byte view of `[offset, offset + nbytes)`."""
        self._check(offset, nbytes)
        return memoryview(self._map)[offset : offset + nbytes]

    def view(self, offset: int, nbytes: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        """A typed, C-contiguous numpy view; `dtype` is a manifest dtype name."""
        self._check(offset, nbytes)
        np_dtype = np.dtype(DTYPES[dtype][0])
        return self.array[offset : offset + nbytes].view(np_dtype).reshape(shape)

    def _check(self, offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise SnapshotError(f"range [{offset}, {offset + nbytes}) outside the arena")

    def __repr__(self) -> str:
        return f"Arena(nbytes={self.nbytes}, prefaulted={self.prefaulted})"
