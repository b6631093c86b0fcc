"""The `ImageStore` Protocol the restore path and the CLI use; adapters in this package."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from snapshotter.image_ref import ImageRef

OnBytes = Callable[[int, int], None]
"""Progress/tee callback: `(offset, nbytes)` of the destination that has just been filled."""


@dataclass(frozen=True)
class StoredChunk:
    """A stored chunk as garbage collection sees it: size in bytes and when it was last
    written or reused (epoch seconds: S3's LastModified, a file's mtime)."""

    size: int
    modified: float


class ImageStore(Protocol):
    """Where manifests and content-addressed chunks live (a directory, an S3 prefix)."""

    uri: str

    def read_manifest(self, ref: ImageRef) -> bytes:
        """Raw manifest bytes; raises `ImageNotFound` when there is no such image."""
        ...

    def write_manifest(self, ref: ImageRef, data: bytes) -> None: ...

    def list_images(self) -> list[ImageRef]: ...

    def chunk_size(self, digest: str) -> int | None:
        """Size in bytes of a stored chunk, or None when it is absent."""
        ...

    def read_chunk_into(self, digest: str, dest: memoryview, *, on_bytes: OnBytes | None) -> None:
        """Fill `dest` (exactly the chunk's size) with the chunk; no digest check here."""
        ...

    def write_chunk(self, digest: str, data: memoryview) -> None: ...

    def list_chunks(self) -> dict[str, int]:
        """Every stored chunk digest and its size in bytes."""
        ...

    def chunk_stats(self) -> dict[str, StoredChunk]:
        """Every stored chunk digest with its size and modification time."""
        ...

    def chunk_stat(self, digest: str) -> StoredChunk | None:
        """One chunk's size and modification time, or None when it is absent."""
        ...

    def touch_chunk(self, digest: str) -> bool:
        """Mark a stored chunk as just written; False when it is absent. A build or push that
        reuses a chunk already in the store calls this before writing its manifest, so a
        concurrent `gc` with a grace period keeps the chunk (see `transfer.plan_gc`)."""
        ...

    def delete_chunk(self, digest: str) -> None: ...
