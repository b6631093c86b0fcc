"""The runtime's snapshot image loader, built once from ServeConfig, and its caches' metrics.

The loader (snapshotter.ImageLoader) reads images through the shared host-memory tier
(`--host-cache`, `--host-cache-bytes`), the node cache (`--cache`, `--cache-max-bytes`) and
the store (`--store`), and restores into GPUs through a CUDA-ready warm process's pinned
staging pool (`--pinned-memory-pool-byte-size`, runtime.process.cuda_warmup) leaving
`--vram-headroom-bytes` free. `ImageCacheCollector` reports on `/metrics` what this process saw of
the tiers: host-tier hits and misses, evictions and their bytes per tier, and the host tier's
size now.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.config import ServeConfig
from runtime.devices.target import DeviceTarget, resolve_target
from runtime.errors import ServingError

if TYPE_CHECKING:
    from snapshotter import ImageLoader, StagingPool

__all__ = ["ImageCacheCollector", "default_host_cache_dir", "make_image_loader"]


def default_host_cache_dir() -> Path:
    """Where `thaw serve --host-cache-bytes N` keeps images without `--host-cache`."""
    return Path("/dev/shm") / f"thaw-host-{os.getuid()}"


def make_image_loader(
    config: ServeConfig, *, staging: StagingPool | None = None, target: DeviceTarget | None = None
) -> ImageLoader:
    """The snapshotter's ImageLoader, imported only when a store or cache is configured;
    `staging`: a CUDA-ready warm process's pinned ring (runtime.process.cuda_warmup), lent to each
    restore into a GPU; `target`: what `--target` resolved to (default: resolved here)."""
    from snapshotter import DeviceConfig, ImageLoader, cuda_target, local_gpus

    resolved = target or resolve_target(config.target, local_gpus())
    image_target = resolved.image_target
    if image_target == "cuda":
        scan = local_gpus()
        if scan.count == 0 and not _torch_sees_cuda():  # no NVML, no /dev/nvidia*: ask CUDA
            raise ServingError(f"`target` = {config.target!r}, but {scan.reason}")
        image_target = cuda_target(0, scan)  # NVML when it knows: no CUDA context for this
    host_dir = None
    if config.host_cache_bytes > 0:
        host_dir = config.host_cache or default_host_cache_dir()
    try:
        return ImageLoader(
            store_uri=config.store,
            cache_dir=config.cache,
            target=image_target,
            max_cache_bytes=config.cache_max_bytes,
            host_cache_dir=host_dir,
            host_max_bytes=config.host_cache_bytes,
            device=DeviceConfig(headroom_bytes=config.vram_headroom_bytes),
            staging=staging,
        )
    except Exception as exc:  # bad URI, unreadable cache dir: say which setting is wrong
        raise ServingError(
            f"cannot open snapshot store {config.store!r} / cache {config.cache}: {exc}"
        ) from exc


def _torch_sees_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class ImageCacheCollector(Collector):
    """Scrape-time metrics of one ImageLoader's tiers."""

    def __init__(self, loader: ImageLoader) -> None:
        self._loader = loader

    def collect(self) -> Iterator[Any]:
        host = self._loader.host
        lookups = CounterMetricFamily(
            "thaw_host_cache_lookups",
            "Restores that looked for their image in the host-memory tier, by result",
            labels=["result"],
        )
        lookups.add_metric(["hit"], host.hits)
        lookups.add_metric(["miss"], host.misses)
        yield lookups
        evictions = CounterMetricFamily(
            "thaw_image_cache_evictions",
            "Entries this process evicted to fit a cache budget, by tier (host: images, "
            "node: chunks)",
            labels=["tier"],
        )
        evicted = CounterMetricFamily(
            "thaw_image_cache_evicted_bytes",
            "Bytes this process evicted to fit a cache budget, by tier",
            labels=["tier"],
        )
        for tier, (count, nbytes) in self._loader.eviction_counts().items():
            evictions.add_metric([tier], count)
            evicted.add_metric([tier], nbytes)
        yield evictions
        yield evicted
        size = GaugeMetricFamily(
            "thaw_host_cache_bytes", "Bytes of images in the host-memory tier now (all processes)"
        )
        size.add_metric([], host.bytes_used())
        yield size
