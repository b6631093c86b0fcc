"""The `ImageStore` Protocol the restore path and the CLI use; adapters in this package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from snapshotter.image_ref import ImageRef

OnBytes = Callable[[int, int], None]
"""Progress/tee callback: `(offset, nbytes)` of the destination that has just been filled."""


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

    def delete_chunk(self, digest: str) -> None: ...
