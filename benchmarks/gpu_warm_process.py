"""What a CUDA-ready warm process holds when the device check times a restore on `DEVICE`: the
pinned staging ring, loaders reading into it, a warm page cache, and CUDA-synchronised timing."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEVICE = "cuda:0"


def timed(torch: Any, fn: Callable[[], Any]) -> tuple[float, Any]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


@functools.cache
def warm_pool() -> Any:
    """The pinned staging ring a `--pinned-memory-pool-byte-size 402653184` process holds."""
    from snapshotter import StagingPool
    from snapshotter.cuda_copier import TorchCudaCopier

    pool = StagingPool(slot_bytes=64 << 20, slots=6)
    pool.allocate(TorchCudaCopier(DEVICE))
    return pool


READ_THREADS = 8  # reader threads of every restore the check times


def ring_loader(cache: Path, target: str, pool: Any, **host_tier: Any) -> Any:
    """An ImageLoader whose restores into a GPU read with `READ_THREADS` threads into `pool`'s
    ring: a restore to a device takes its reader count from `DeviceConfig.read_threads`, not
    from the loader's `read_threads` (that one is for the store's reads)."""
    from snapshotter import DeviceConfig, ImageLoader

    return ImageLoader(
        None, cache, target, staging=pool, read_threads=READ_THREADS,
        device=DeviceConfig(read_threads=READ_THREADS), **host_tier,
    )  # fmt: skip


def warm_page_cache(cache: Path) -> None:
    for path in (cache / "chunks").rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(64 << 20):
                    pass
