"""Copy, verify and garbage-collect images between stores, chunk by chunk, digest-checked."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from snapshotter.errors import ImageNotFound, IntegrityError, SnapshotError
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.stores.base import ImageStore

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with a number of bytes just processed."""


def load_manifest(store: ImageStore, ref: ImageRef) -> Manifest:
    """The validated manifest of `ref` in `store`."""
    manifest = Manifest.from_json(store.read_manifest(ref))
    if manifest.ref != ref:
        raise SnapshotError(f"manifest at {ref.key} in {store.uri} describes {manifest.ref}")
    return manifest


def latest_ref(store: ImageStore, model: str, version: str | None, target: str) -> ImageRef:
    """`model:version` for `target`, or the highest version in `store` when `version` is None."""
    if version is not None:
        return ImageRef(model, version, target)
    versions = [r for r in store.list_images() if r.model == model and r.target == target]
    if not versions:
        raise ImageNotFound(f"no image of {model!r} for target {target} in {store.uri}")
    return max(versions, key=lambda r: int(r.version))


def entries(manifest: Manifest) -> list[ChunkEntry]:
    """Every chunk and artifact blob of an image."""
    return list(manifest.chunks) + list(manifest.artifacts.values())


def read_verified(
    store: ImageStore, entry: ChunkEntry, progress: Progress | None = None
) -> bytearray:
    """A blob from `store`, checked against its size and digest."""
    size = store.chunk_size(entry.digest)
    if size is None:
        raise IntegrityError(
            f"chunk {entry.digest} is missing from {store.uri}", digest=entry.digest
        )
    if size != entry.size:
        raise IntegrityError(
            f"chunk {entry.digest} is {size} bytes in {store.uri}, manifest says {entry.size}",
            digest=entry.digest,
        )
    buf = bytearray(entry.size)
    on_bytes = None if progress is None else (lambda _off, n: progress(n))
    store.read_chunk_into(entry.digest, memoryview(buf), on_bytes=on_bytes)
    if hashlib.sha256(buf).hexdigest() != entry.digest:
        raise IntegrityError(
            f"chunk {entry.digest} in {store.uri} does not match its digest", digest=entry.digest
        )
    return buf


def copy_image(
    src: ImageStore, dst: ImageStore, ref: ImageRef, progress: Progress | None = None
) -> Manifest:
    """Copy one image; chunks `dst` already holds (same digest and size) are skipped.
    The manifest is written last, so a reader never sees an image with chunks missing."""
    manifest = load_manifest(src, ref)
    for entry in entries(manifest):
        if dst.chunk_size(entry.digest) == entry.size:
            if progress is not None:
                progress(entry.size)
            continue
        dst.write_chunk(entry.digest, memoryview(read_verified(src, entry, progress)))
    dst.write_manifest(ref, manifest.to_json())
    logger.info(
        "copied model=%s version=%s from %s to %s", ref.model, ref.version, src.uri, dst.uri
    )
    return manifest


def verify_image(store: ImageStore, ref: ImageRef, progress: Progress | None = None) -> Manifest:
    """Read back every blob of an image; raise `IntegrityError` naming the first bad chunk."""
    manifest = load_manifest(store, ref)
    for entry in entries(manifest):
        read_verified(store, entry, progress)
    return manifest


@dataclass(frozen=True)
class GcPlan:
    """Chunks no manifest in the store references, and their total size in bytes."""

    unreferenced: dict[str, int]

    @property
    def nbytes(self) -> int:
        return sum(self.unreferenced.values())


def plan_gc(store: ImageStore) -> GcPlan:
    """Which chunks to delete. An unreadable manifest aborts the plan: deleting chunks that a
    manifest we could not parse references would destroy an image."""
    referenced: set[str] = set()
    for ref in store.list_images():
        referenced |= load_manifest(store, ref).all_digests()
    chunks = store.list_chunks()
    return GcPlan({d: s for d, s in chunks.items() if d not in referenced})
