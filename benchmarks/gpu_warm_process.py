"""What a CUDA-ready warm process holds when the device check times a restore on `DEVICE`: the
pinned staging ring, loaders reading into it, a warm page cache, and CUDA-synchronised timing."""

from __future__ import annotations

import functools
import gc
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


def best_of(torch: Any, n: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest of `n` timed runs of `fn`, and the last run's result (each earlier result is
    dropped before the next run, so VRAM holds one at a time)."""
    best, out = float("inf"), None
    for _ in range(n):
        out = None
        gc.collect()
        seconds, out = timed(torch, fn)
        best = min(best, seconds)
    return best, out


@functools.cache
def warm_pool() -> Any:
    """The pinned staging ring a `--pinned-memory-pool-byte-size 536870912` process holds
    (the shape of `DeviceConfig`'s defaults: 16 slots of 32 MiB)."""
    from runtime.process.cuda_warmup import staging_shape
    from snapshotter import StagingPool
    from snapshotter.cuda_copier import TorchCudaCopier

    slot, slots = staging_shape(512 << 20)
    pool = StagingPool(slot_bytes=slot, slots=slots)
    pool.allocate(TorchCudaCopier(DEVICE))
    return pool


def ring_loader(
    cache: Path, target: str, pool: Any, *, readers: int | None = None, **host_tier: Any
) -> Any:
    """An ImageLoader whose restores into a GPU read into `pool`'s ring with `readers` threads,
    by default the count a server uses (`DeviceConfig`'s: one per CPU, 4 to 16); a restore to a
    device takes its readers from `DeviceConfig.read_threads`, not from the loader's
    `read_threads` (that one is for the store's reads)."""
    from snapshotter import DeviceConfig, ImageLoader

    config = DeviceConfig() if readers is None else DeviceConfig(read_threads=readers)
    return ImageLoader(
        None, cache, target, staging=pool, read_threads=config.read_threads, device=config,
        **host_tier,
    )  # fmt: skip


def warm_page_cache(cache: Path) -> None:
    for path in (cache / "chunks").rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(64 << 20):
                    pass
