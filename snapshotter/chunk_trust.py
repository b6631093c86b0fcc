"""Whether a chunk's bytes may be served: their size and digest checked, or the verified
marker of the very file they were read from (a chunk file replaced between a check of its path
and the read is hashed, never trusted on the marker of the file it replaced)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from snapshotter.errors import IntegrityError
from snapshotter.manifest import ChunkEntry
from snapshotter.stores.dir_store import DirStore

__all__ = ["check_chunk", "trusted_chunks"]


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
