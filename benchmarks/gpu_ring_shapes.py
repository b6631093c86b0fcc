"""The device check's ring-shape rows: one image restored into VRAM through pinned staging rings
of several shapes (reader threads, slots, slot size), from the page cache and from the host
tier, beside pinned H2D in the same run: what the defaults (`DeviceConfig`, the warm process's
`--pinned-memory-pool-byte-size` ring) should be on this machine."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path
from typing import Any

from benchmarks import gpu_models
from benchmarks.gpu_restore import host_tier_dir, pinned_h2d
from benchmarks.gpu_row import Row
from benchmarks.gpu_warm_process import DEVICE, best_of, ring_loader, warm_page_cache

# (reader threads, slots, slot MiB): the defaults first (DeviceConfig: 4 threads, 6 x 64 MiB;
# the check's 8 threads), then more readers and more, smaller slots.
SHAPES = (
    (4, 6, 64),
    (8, 6, 64),
    (8, 12, 32),
    (12, 12, 32),
    (16, 16, 32),
    (16, 32, 16),
    (16, 8, 64),
)
IMAGE_GIB = 4.0


def ring_shape_rows(torch: Any, state: dict[str, Any], work: Path) -> list[Row]:
    """Best of 3 restores of a 4 GiB image per ring shape, page cache and host tier."""
    from snapshotter import ImageLoader, ImageRef

    h2d = pinned_h2d(torch, state)
    cache = work / "cache"
    name = f"w{IMAGE_GIB:g}g"
    gpu_models.weights_image(cache, work, name, IMAGE_GIB, target="cpu")
    warm_page_cache(cache)
    ref = ImageRef(name, "1", "cpu")
    nbytes = ImageLoader(None, cache, "cpu").manifest(ref).arena_bytes
    tier, no_room = host_tier_dir(nbytes)
    try:
        return [
            _shape_row(torch, cache, ref, None if no_room else tier, shape, h2d) for shape in SHAPES
        ]
    finally:
        shutil.rmtree(tier, ignore_errors=True)


def _shape_row(
    torch: Any, cache: Path, ref: Any, tier: Path | None, shape: tuple[int, int, int], h2d: float
) -> Row:
    """One ring shape: its pinned pool allocated, then best-of-3 restores from the page cache
    and (with a `tier` that has room) from the host tier."""
    from snapshotter import StagingPool
    from snapshotter.cuda_copier import TorchCudaCopier

    threads, slots, slot_mib = shape
    pool = StagingPool(slot_bytes=slot_mib << 20, slots=slots)
    pool.allocate(TorchCudaCopier(DEVICE))
    cached_loader = ring_loader(cache, "cpu", pool, readers=threads)
    cached, image = best_of(torch, 3, lambda: cached_loader.restore(ref, device=DEVICE))
    nbytes = image.manifest.arena_bytes
    del image
    from_tier = "host tier skipped: /dev/shm too small"
    if tier is not None:
        tier_loader = ring_loader(
            cache, "cpu", pool, readers=threads, host_cache_dir=tier, host_max_bytes=1 << 40
        )
        tier_loader.keep_in_host_tier(ref)
        seconds, image = best_of(torch, 3, lambda: tier_loader.restore(ref, device=DEVICE))
        from_tier = f"host tier {nbytes / seconds / 1e9:.1f} GB/s (from={image.source})"
        del image
    gc.collect()
    gbps = nbytes / cached / 1e9
    return Row(
        f"ring {threads} readers x {slots} x {slot_mib} MiB, {IMAGE_GIB:g} GiB image",
        f"page cache {gbps:.1f} GB/s; {from_tier}",
        f"{gbps / h2d:.0%} of pinned H2D ({h2d:.1f} GB/s)",
        "",
    )
