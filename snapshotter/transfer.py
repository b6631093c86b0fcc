"""Copy, verify and garbage-collect images between stores, chunk by chunk, digest-checked."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from snapshotter.artifact_archive import UNPACKED_DIR
from snapshotter.errors import ImageNotFound, IntegrityError, SnapshotError
from snapshotter.image_ref import ImageRef
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.stores.base import ImageStore, StoredChunk

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
    """Every blob of an image (chunks, artifacts, model files), each digest once."""
    return manifest.blobs()


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
        # A reused chunk is touched, so a concurrent gc's grace period covers it too.
        if dst.chunk_size(entry.digest) == entry.size and dst.touch_chunk(entry.digest):
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


DEFAULT_GC_GRACE_S = 3600.0
"""Unreferenced chunks younger than this survive `gc`: a concurrent build or push uploads its
chunks first and writes the manifest that references them last."""


@dataclass(frozen=True)
class GcPlan:
    """Chunks no manifest in the store references: `unreferenced` (to delete) and `recent`
    (also unreferenced, but written or reused within the grace period: kept), digest -> bytes."""

    unreferenced: dict[str, int]
    recent: dict[str, int] = field(default_factory=dict)
    referenced: frozenset[str] = frozenset()

    @property
    def nbytes(self) -> int:
        return sum(self.unreferenced.values())


def select_garbage(
    chunks: dict[str, StoredChunk], referenced: set[str], *, grace_s: float, now: float
) -> GcPlan:
    """The pure decision: unreferenced chunks older than `grace_s` at `now` go, younger stay.
    A modification time in the future (clock skew) counts as recent."""
    if grace_s < 0:
        raise SnapshotError(f"gc grace period = {grace_s}, must be >= 0")
    old: dict[str, int] = {}
    recent: dict[str, int] = {}
    for digest, chunk in chunks.items():
        if digest in referenced:
            continue
        (recent if now - chunk.modified < grace_s else old)[digest] = chunk.size
    return GcPlan(old, recent)


def plan_gc(store: ImageStore, *, grace_s: float = DEFAULT_GC_GRACE_S, now: float) -> GcPlan:
    """Which chunks to delete. Chunks are listed before manifests, so a chunk uploaded after
    the listing is not considered at all, and one uploaded (or reused, see `touch_chunk`)
    before it by a build whose manifest is not written yet is younger than the grace period.
    An unreadable manifest aborts the plan: deleting chunks that a manifest we could not
    parse references would destroy an image."""
    chunks = store.chunk_stats()
    referenced: set[str] = set()
    for ref in store.list_images():
        manifest = load_manifest(store, ref)
        referenced |= manifest.all_digests()
        if manifest.files_dir_name is not None:  # the restored model files' directory
            referenced.add(manifest.files_dir_name)
    plan = select_garbage(chunks, referenced, grace_s=grace_s, now=now)
    return replace(plan, referenced=frozenset(referenced))


def unpacked_garbage(root: Path, plan: GcPlan, *, grace_s: float, now: float) -> list[Path]:
    """Unpacked archive artifacts under a node cache (`<root>/unpacked/<sha256>`) whose archive
    no manifest references any more and that are older than the grace period."""
    unpacked = root / UNPACKED_DIR
    if not unpacked.is_dir():
        return []
    gone = []
    for path in sorted(unpacked.iterdir()):
        name = path.name
        if name.startswith(".") or name in plan.referenced or not path.is_dir():
            continue  # temporaries of an unpack in progress start with "."
        if now - path.stat().st_mtime >= grace_s:
            gone.append(path)
    return gone


def delete_garbage(
    store: ImageStore,
    plan: GcPlan,
    *,
    grace_s: float,
    clock: Callable[[], float],
    on_deleted: Callable[[str], None] | None = None,
) -> list[str]:
    """Delete the planned chunks, each only if it is still older than the grace period right
    before its deletion (a build may have reused it since the plan); return those deleted,
    each also passed to `on_deleted` as soon as it is gone."""
    deleted = []
    for digest in sorted(plan.unreferenced):
        stat = store.chunk_stat(digest)
        if stat is None or clock() - stat.modified < grace_s:
            continue
        store.delete_chunk(digest)
        deleted.append(digest)
        if on_deleted is not None:
            on_deleted(digest)
    return deleted
