"""Whether a chunk's bytes may be served: their size and digest checked, or the verified
marker of the very file they were read from (a chunk file replaced between a check of its path
and the read is hashed, never trusted on the marker of the file it replaced)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from snapshotter.errors import IntegrityError
from snapshotter.manifest import ChunkEntry
from snapshotter.stores.dir_store import DirStore

__all__ = ["OpenedChunks", "check_chunk", "trusted_chunks"]


def check_chunk(chunk: ChunkEntry, data: memoryview) -> None:
    """Raise `IntegrityError` naming the chunk unless `data` has its size and digest."""
    if len(data) != chunk.size:
        raise IntegrityError(
            f"chunk {chunk.digest} is {len(data)} bytes, expected {chunk.size}", digest=chunk.digest
        )
    if hashlib.sha256(data).hexdigest() != chunk.digest:
        raise IntegrityError(f"chunk {chunk.digest} does not match its digest", digest=chunk.digest)


def trusted_chunks(
    store: DirStore, chunks: list[ChunkEntry], read_stats: dict[Path, os.stat_result]
) -> set[str]:
    """Digests of the chunks whose verified marker matches the file their bytes were read
    from (its `fstat` after the read): a chunk file replaced or rewritten between a check of
    its path and the read is hashed, never served on the marker of the file it replaced."""
    return {
        c.digest
        for c in chunks
        if (st := read_stats.get(store.chunk_file(c.digest))) is not None
        and store.is_verified(c.digest, c.size, st)
    }


@dataclass(frozen=True)
class _Held:
    store: DirStore
    chunk: ChunkEntry
    path: Path
    fd: int


class OpenedChunks:
    """Chunk files held open for a reader that copies their bytes unhashed (the GPU ring):
    each chunk is trusted by the verified marker of the file opened (its `fstat`), and its
    bytes are read from that descriptor, never from the path again, so a file renamed over
    the path (a fill, a GC) after the check is not the one read. `unchanged()`, after the
    reads, catches a trusted file rewritten in place meanwhile (its mtime moved).

    `homes` pairs each chunk with the directory holding it (None: nowhere here); a chunk
    that is missing, not a regular file, or whose marker does not match is not trusted
    (`trusted`) and holds no descriptor. `use_markers=False` trusts nothing. A context
    manager: every descriptor is closed on exit."""

    def __init__(
        self, homes: Iterable[tuple[ChunkEntry, DirStore | None]], *, use_markers: bool = True
    ) -> None:
        self._held: dict[str, _Held] = {}
        try:
            for chunk, store in homes:
                if use_markers and store is not None and chunk.digest not in self._held:
                    self._hold(chunk, store)
        except BaseException:
            self.close()
            raise

    def _hold(self, chunk: ChunkEntry, store: DirStore) -> None:
        path = store.chunk_file(chunk.digest)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no hang
        except OSError:
            return  # gone since it was found: read through host memory, fetched again
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and store.is_verified(chunk.digest, chunk.size, st):
            self._held[chunk.digest] = _Held(store, chunk, path, fd)
        else:
            os.close(fd)

    @property
    def trusted(self) -> frozenset[str]:
        """Digests of the chunks whose opened file carries a matching verified marker."""
        return frozenset(self._held)

    def fd(self, digest: str) -> int:
        """The descriptor a trusted chunk's bytes must be read from."""
        return self._held[digest].fd

    def path(self, digest: str) -> Path:
        """Where a trusted chunk's file was opened (for messages)."""
        return self._held[digest].path

    def unchanged(self) -> None:
        """Raise `IntegrityError` naming the first trusted chunk whose opened file no longer
        matches its marker (rewritten in place while it was read): its bytes already read
        are not to be served."""
        for held in self._held.values():
            if not held.store.is_verified(held.chunk.digest, held.chunk.size, os.fstat(held.fd)):
                raise IntegrityError(
                    f"chunk {held.chunk.digest} changed while it was read", digest=held.chunk.digest
                )

    def close(self) -> None:
        for held in self._held.values():
            with contextlib.suppress(OSError):
                os.close(held.fd)
        self._held.clear()

    def __enter__(self) -> OpenedChunks:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
