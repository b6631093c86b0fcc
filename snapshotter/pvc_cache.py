"""The node-local image cache (a PVC or local disk): verified fills, per-image locks, LRU budget."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from snapshotter.direct_io import ALIGN, aligned_prefix, open_direct
from snapshotter.errors import SnapshotStoreError, StoreTimeout
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from thawserver.cache_counters import record_evictions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheEntry:
    """One cached chunk as the eviction policy sees it; `last_used` in epoch seconds."""

    digest: str
    size: int
    last_used: float


def plan_eviction(
    entries: list[CacheEntry],
    *,
    budget_bytes: int,
    incoming_bytes: int,
    keep: frozenset[str],
    now: float,
    protect_recent_s: float = 60.0,
) -> list[str]:
    """Digests to delete, least recently used first, so that what stays plus `incoming_bytes`
    fits `budget_bytes`. Chunks in `keep` (the image being restored) and chunks used within
    `protect_recent_s` of `now` (probably being read by another process) are never chosen;
    if the budget cannot be met without them, the cache runs over budget instead."""
    total = sum(e.size for e in entries) + incoming_bytes
    victims = []
    for entry in sorted(entries, key=lambda e: (e.last_used, e.digest)):
        if total <= budget_bytes:
            break
        if entry.digest in keep or now - entry.last_used < protect_recent_s:
            continue
        victims.append(entry.digest)
        total -= entry.size
    return victims


class ChunkFill:
    """A chunk being written into the cache while it streams in (tee); invisible until commit.

    With `direct`, aligned pieces (an arena's ranges) go to the file with O_DIRECT: the device
    reads them from the arena itself, so the tee costs neither a copy into page-cache pages
    nor the CPU to allocate them; other pieces, and filesystems without O_DIRECT, are written
    normally. The filled file is then not in the page cache: the next restore from the cache
    reads it from the device (with O_DIRECT too, see `parallel_read`).
    """

    def __init__(self, cache: NodeCache, digest: str, size: int, *, direct: bool = False) -> None:
        self._cache, self.digest, self.size = cache, digest, size
        self._final = cache.store.chunk_file(digest)
        self._fd, self._temp = cache.store.temp_file(self._final)
        self._direct: int | None = None
        try:
            os.ftruncate(self._fd, size)
            if direct:
                self._direct = open_direct(self._temp, os.O_WRONLY)
        except OSError as exc:
            self.abort()
            raise self._write_failed(exc) from exc
        except BaseException:
            self.abort()
            raise

    def write(self, offset: int, data: memoryview) -> None:
        """Write `data` at `offset` (any order, from any thread). A full disk (ENOSPC, EDQUOT)
        or any other write failure is a SnapshotStoreError; the caller aborts the fill."""
        done = 0
        try:
            if self._direct is not None:
                done = self._write_direct(offset, data, aligned_prefix(data, offset))
            while done < len(data):
                done += os.pwrite(self._fd, data[done:], offset + done)
        except OSError as exc:
            raise self._write_failed(exc) from exc

    def _write_failed(self, exc: OSError) -> SnapshotStoreError:
        return SnapshotStoreError(
            f"cannot write chunk {self.digest} into the cache at {self._cache.root}: "
            f"{exc.strerror or exc}"
        )

    def _write_direct(self, offset: int, data: memoryview, until: int) -> int:
        assert self._direct is not None
        done = 0
        while done < until:
            try:
                done += os.pwrite(self._direct, data[done:until], offset + done)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: stricter alignment; write it normally
                    raise
                return done
            if done % ALIGN:
                return done
        return done

    def commit(self) -> None:
        """Publish the chunk; call only after its bytes matched the digest."""
        self._close_direct()
        store = self._cache.store
        store.commit(self._fd, self._temp, self._final)
        try:
            store.mark_verified(self.digest)
        except SnapshotStoreError:
            # No room for the marker (a full disk): drop the chunk too, so the cache never
            # holds an entry that is only half recorded.
            store.delete_chunk(self.digest)
            raise

    def abort(self) -> None:
        self._close_direct()
        os.close(self._fd)
        self._temp.unlink(missing_ok=True)

    def _close_direct(self) -> None:
        if self._direct is not None:
            os.close(self._direct)
            self._direct = None


class NodeCache:
    """A `DirStore` under `root` plus a byte budget, LRU eviction and per-image file locks.
    `direct_io`: fills from a store write aligned pieces with O_DIRECT (see `ChunkFill`)."""

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int | None = None,
        lock_timeout_s: float = 600.0,
        direct_io: bool = True,
    ) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise SnapshotStoreError(f"`max_cache_bytes` = {max_bytes}, must be > 0")
        self.root = Path(root)
        self.store = DirStore(self.root, fsync=False)
        self.max_bytes = max_bytes
        self.lock_timeout_s = lock_timeout_s
        self.direct_io = direct_io
        self.evictions = 0  # chunks this object evicted, and their bytes
        self.evicted_bytes = 0

    @contextmanager
    def image_lock(self, ref: ImageRef) -> Iterator[None]:
        """Hold an exclusive lock on one image across processes (flock), so two cold starts of
        the same model download it once: the second waits, then finds it cached."""
        path = self.root / "locks" / f"{ref.model}@{ref.version}@{ref.target.replace(':', '_')}"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._flock(fd, ref)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _flock(self, fd: int, ref: ImageRef) -> None:
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise SnapshotStoreError(f"cannot lock image {ref}: {exc.strerror}") from exc
            if time.monotonic() > deadline:
                raise StoreTimeout(f"image {ref} stayed locked for {self.lock_timeout_s}s")
            time.sleep(0.02)

    def begin_fill(self, digest: str, size: int) -> ChunkFill:
        return ChunkFill(self, digest, size, direct=self.direct_io)

    def entries(self) -> list[CacheEntry]:
        out = []
        for digest, size in self.store.list_chunks().items():
            marker = self.store.chunk_file(digest).with_name(digest + ".ok")
            try:
                last_used = marker.stat().st_mtime
            except OSError:
                last_used = 0.0
            out.append(CacheEntry(digest, size, last_used))
        return out

    def make_room(self, incoming_bytes: int, *, keep: frozenset[str], now: float) -> list[str]:
        """Evict least recently used chunks so `incoming_bytes` fit the budget; return them."""
        if self.max_bytes is None:
            return []
        entries = self.entries()
        victims = plan_eviction(
            entries,
            budget_bytes=self.max_bytes,
            incoming_bytes=incoming_bytes,
            keep=keep,
            now=now,
        )
        for digest in victims:
            self.store.delete_chunk(digest)
        if victims:
            sizes = {e.digest: e.size for e in entries}
            freed = sum(sizes[d] for d in victims)
            self.evictions += len(victims)
            self.evicted_bytes += freed
            record_evictions(self.root, len(victims), freed)
            logger.info("cache evicted chunks=%d bytes=%d root=%s", len(victims), freed, self.root)
        return victims
