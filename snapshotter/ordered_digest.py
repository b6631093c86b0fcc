"""sha256 of a buffer whose pieces land out of order, hashed while the rest still downloads."""

from __future__ import annotations

import hashlib
import threading


class OrderedDigest:
    """Feed it `(offset, nbytes)` as pieces of `buffer` land, from any thread, in any order.

    The contiguous prefix is hashed as soon as it grows, by whichever thread finds no other
    thread hashing; the others only record their piece and go back to downloading. So a
    chunk's digest is ready right after its last piece, instead of a second pass over it.
    """

    def __init__(self, buffer: memoryview) -> None:
        self._buffer = buffer
        self._hash = hashlib.sha256()
        self._next = 0
        self._landed: dict[int, int] = {}
        self._hashing = False
        self._lock = threading.Lock()

    def landed(self, offset: int, nbytes: int) -> None:
        with self._lock:
            self._landed[offset] = nbytes
            if self._hashing:
                return  # the thread that is hashing will pick this piece up
            self._hashing = True
        while True:
            with self._lock:
                size = self._landed.pop(self._next, None)
                if size is None:
                    self._hashing = False
                    return
                start = self._next
                self._next += size
            # Outside the lock: hashlib releases the GIL, other pieces keep landing.
            self._hash.update(self._buffer[start : start + size])

    def hexdigest(self) -> str | None:
        """The digest once every byte was fed exactly once in order, else None."""
        with self._lock:
            complete = self._next == len(self._buffer) and not self._landed
            return self._hash.hexdigest() if complete else None
