"""`ImageLoader`'s GPU target: an image's chunks streamed into one device arena from its tiers.

    restore(ref, device="cuda:N")  (restore.ImageLoader: node cache required)
        │
    the device's copier (`DeviceSettings.copier`), free VRAM? ─no─▶ DeviceMemoryError
        │ yes
    host tier keeps the image? ─yes─▶ one job over its descriptor (`pread`, in   source=host
        │ no                            parallel; never mapped nor page-locked: docs/gpu.md)
    each chunk's local home (cache, else a directory store), opened (`OpenedChunks`):
        ├─ its file carries a matching verified marker ─▶ read from that very descriptor
        └─ otherwise ─▶ through host memory once (fetched, or hashed then marked), copied
           from there (`read_from_memory`)                                    source=store|cache
        │
    `cuda_restore.restore_to_device` (the pinned ring), then typed views (`device_views`)

What it takes from the loader is explicit: `DeviceSettings` (how this loader reaches its GPUs)
and `HostSide` (the loader's host-side tiers, bound by `ImageLoader`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapshotter.arena import Arena
from snapshotter.chunk_trust import OpenedChunks
from snapshotter.cuda_restore import (
    CopierFactory,
    DeviceConfig,
    check_fits,
    device_views,
    restore_to_device,
)
from snapshotter.device_budget import DeviceMemorySource
from snapshotter.host_cache import HostCache
from snapshotter.manifest import ChunkEntry, Manifest
from snapshotter.restored_image import RestoredImage
from snapshotter.staging_ring import (
    DeviceCopier,
    DeviceJob,
    ReadFn,
    StagingPool,
    pread_piece,
    read_from_memory,
)
from snapshotter.stores.dir_store import DirStore

__all__ = ["DeviceSettings", "HostRead", "HostSide", "restore_image_to_device"]

logger = logging.getLogger(__name__)

# What reading through host memory gives back (`HostSide.read_through_host`): the artifacts, the
# model files' directory, whether anything came from the store, and the checked bytes of the
# chunks it was asked for, by digest.
HostRead = tuple[dict[str, bytes], Path | None, bool, dict[str, memoryview]]


@dataclass(frozen=True)
class DeviceSettings:
    """How a loader reaches its GPUs (`ImageLoader`'s `device`, `staging`, `copier_factory`,
    `device_memory` and `device_read`; see its docstring)."""

    config: DeviceConfig = field(default_factory=DeviceConfig)
    staging: StagingPool | None = None
    copier_factory: CopierFactory | None = None
    device_memory: DeviceMemorySource | None = None
    read: ReadFn | None = None

    def copier(self, device: str) -> DeviceCopier:
        """The `DeviceCopier` of `device`: the factory's, else CUDA through torch."""
        if self.copier_factory is not None:
            return self.copier_factory(device)
        from snapshotter.cuda_copier import TorchCudaCopier

        return TorchCudaCopier(device)

    def memory_source(self, copier: Any) -> DeviceMemorySource | None:
        """Where the device's free memory is read: `device_memory` when given; none for an
        injected factory without one; else the CUDA copier itself."""
        if self.device_memory is not None or self.copier_factory is not None:
            return self.device_memory
        return copier  # the CUDA copier reads its own device's memory


@dataclass(frozen=True)
class HostSide:
    """What the GPU path takes from the loader's host-side tiers (bound by `ImageLoader`).

    `chunk_home(chunk)`: the local directory holding the chunk at its size, or None.
    `read_through_host(manifest, todo, arena, timings)`: the artifacts, model files and `todo`
    chunks read through host memory by the loader's tier order (`arena` when big enough).
    `keep_in_host_tier(manifest, manifest_digest)`: have the host tier copy the image later.
    `use_markers`: a chunk file's verified marker is trusted (`verify="marker"`).
    `unpack_root`: where the restored image unpacks its archive artifacts."""

    host: HostCache
    chunk_home: Callable[[ChunkEntry], DirStore | None]
    read_through_host: Callable[
        [Manifest, list[ChunkEntry], Arena | None, dict[str, float]], HostRead
    ]
    keep_in_host_tier: Callable[[Manifest, str], None]
    use_markers: bool
    unpack_root: Path | None


def restore_image_to_device(
    manifest: Manifest,
    device: str,
    arena: Arena | None,
    start: float,
    cancel: threading.Event | None,
    *,
    settings: DeviceSettings,
    tiers: HostSide,
) -> RestoredImage:
    """Restore `manifest`'s image into one arena on `device` (`start`: the restore's
    `perf_counter` start, for its total). Raises DeviceMemoryError when the GPU has no room,
    RestoreCancelled once `cancel` is set."""
    copier = settings.copier(device)
    check_fits(
        copier, settings.memory_source(copier), manifest.arena_bytes,
        settings.config.headroom_bytes,
    )  # fmt: skip
    ref = manifest.ref
    mdigest = hashlib.sha256(manifest.to_json()).hexdigest()
    timings: dict[str, float] = {"fetch": 0.0, "read": 0.0, "verify": 0.0}
    kept = tiers.host.open_entry(mdigest, manifest.arena_bytes)  # read, never mapped or pinned
    if kept is not None:
        try:
            artifacts, files_dir, _, _ = tiers.read_through_host(manifest, [], arena, timings)
            path = tiers.host.path_of(mdigest)
            jobs = [DeviceJob(path, 0, manifest.arena_bytes, 0, mdigest, fd=kept)]
            device_arena, copy = restore_to_device(
                jobs, manifest.arena_bytes, copier, settings.config, pool=settings.staging,
                cancel=cancel,
            )  # fmt: skip
        finally:
            os.close(kept)
        source = "host"
    else:
        device_arena, copy, artifacts, files_dir, source = _stream_chunks(
            manifest, copier, arena, timings, cancel, settings=settings, tiers=tiers
        )
    if source != "host":
        tiers.keep_in_host_tier(manifest, mdigest)
    timings.update(copy)
    bases = manifest.chunk_bases
    views = device_views(
        device_arena,
        [(t.name, bases[t.chunk] + t.offset, t.dtype, t.shape, t.nbytes) for t in manifest.tensors],
    )
    timings["total"] = time.perf_counter() - start
    logger.info(
        "restored model=%s version=%s to=%s from=%s bytes=%d total=%.3fs",
        ref.model, ref.version, device, source, manifest.weight_bytes, timings["total"],
    )  # fmt: skip
    return RestoredImage(
        ref, manifest, Arena(0), {}, artifacts, timings, source, copier.device, views,
        unpack_root=tiers.unpack_root, files_dir=files_dir,
    )  # fmt: skip


def _stream_chunks(
    manifest: Manifest,
    copier: DeviceCopier,
    arena: Arena | None,
    timings: dict[str, float],
    cancel: threading.Event | None,
    *,
    settings: DeviceSettings,
    tiers: HostSide,
) -> tuple[Any, dict[str, float], dict[str, bytes], Path | None, str]:
    """Fill a device arena from the chunks: those whose opened file carries a matching
    verified marker are read from that very descriptor (a file renamed over the path
    since is not the one read; one rewritten in place meanwhile fails the restore with
    IntegrityError); the others go through host memory once (fetched, or hashed then
    marked) and are copied to the device from there, never read from a path again."""
    homes = [(c, tiers.chunk_home(c)) for c in manifest.chunks]
    with OpenedChunks(homes, use_markers=tiers.use_markers) as opened:
        todo = [c for c in manifest.chunks if c.digest not in opened.trusted]
        artifacts, files_dir, fetched, checked = tiers.read_through_host(
            manifest, todo, arena, timings
        )
        # A job of a `todo` chunk names no file: `read_from_memory` copies it from `checked`.
        jobs = [
            DeviceJob(opened.path(c.digest), 0, c.size, base, c.digest, opened.fd(c.digest))
            if c.digest in opened.trusted
            else DeviceJob(Path(c.digest), 0, c.size, base, c.digest)
            for c, base in zip(manifest.chunks, manifest.chunk_bases, strict=True)
        ]
        read = read_from_memory(checked, settings.read or pread_piece)
        device_arena, copy = restore_to_device(
            jobs, manifest.arena_bytes, copier, settings.config, pool=settings.staging,
            read=read, cancel=cancel,
        )  # fmt: skip
        opened.unchanged()
    return device_arena, copy, artifacts, files_dir, "store" if fetched else "cache"
