"""Restore an image into one device arena: budget check, then the pinned staging ring.

    free VRAM? (device_budget) ─no─▶ DeviceMemoryError (that load fails; the server goes on)
        │ yes
    allocate the device arena ─OOM─▶ DeviceMemoryError
        │
    RingStaging: a few pinned slots, reused; each piece is read into a slot and copied to the
        │        device as soon as it landed, from
        ├─ the host tier's entry, when it keeps the image (`pread_piece` from its descriptor:
        │  no hash, no mapping to fill with page-table entries, never page-locked)
        └─ otherwise the chunk files (`pread_piece`), each read from the descriptor whose
           verified marker was checked (`chunk_trust.OpenedChunks`); chunks without one are
           checked in host memory first and copied from there (`read_from_memory`)
    views into the device arena, typed as the manifest says (`device_views`)

Everything device-specific goes through a `DeviceCopier`; the CUDA one is
`cuda_copier.TorchCudaCopier`. Caller: `device_restore` (ImageLoader's GPU targets).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snapshotter.device_budget import DeviceMemorySource, vram_shortfall
from snapshotter.errors import DeviceMemoryError
from snapshotter.staging_ring import (
    DeviceCopier,
    DeviceJob,
    ReadFn,
    StagingPool,
    fitted_ring,
    stream_to_device,
)

__all__ = [
    "DeviceConfig",
    "DeviceJob",
    "default_read_threads",
    "device_views",
    "restore_to_device",
]


def default_read_threads(cpus: int | None = None) -> int:
    """Ring readers for this machine: one per CPU this process may run on, 4 to 16."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(4, min(16, cpus or 4))


@dataclass(frozen=True)
class DeviceConfig:
    """Pinned staging ring shape, reader threads and the VRAM headroom; sizes in bytes.

    `slot_bytes` x `ring_slots` is the pinned memory a restore pins for itself when no warm
    process's pool is lent to it (512 MiB by default). `headroom_bytes` must stay free beside
    the image (framework workspaces, activations).

    The defaults are the fastest shape measured on an H200 (16 CPUs, PCIe pinned H2D 55 GB/s;
    `benchmarks/gpu_check.py --steps "ring shapes"`, docs/gpu.md): 16 readers into 16 slots
    of 32 MiB restored a 4 GiB image from the page cache at 34.9 GB/s, where the previous
    defaults (4 readers, 6 x 64 MiB) gave 16.8; the readers, not PCIe, are the bound (each
    `preadv` copies from the page cache at a few GB/s), so they follow the CPU count."""

    slot_bytes: int = 32 << 20
    ring_slots: int = 16
    read_threads: int = field(default_factory=default_read_threads)
    headroom_bytes: int = 512 << 20


CopierFactory = Callable[[str], DeviceCopier]


def check_fits(
    copier: DeviceCopier, memory: DeviceMemorySource | None, nbytes: int, headroom: int
) -> None:
    """Raise DeviceMemoryError unless `nbytes` + `headroom` fit on the copier's device."""
    if memory is None:
        return
    reason = vram_shortfall(
        nbytes, memory.memory(copier.device), headroom_bytes=headroom, device=copier.device
    )
    if reason is not None:
        raise DeviceMemoryError(f"not enough free device memory for the restore: {reason}")


def restore_to_device(
    jobs: list[DeviceJob],
    total_bytes: int,
    copier: DeviceCopier,
    config: DeviceConfig,
    *,
    pool: StagingPool | None = None,
    read: ReadFn | None = None,
    cancel: threading.Event | None = None,
) -> tuple[Any, dict[str, float]]:
    """A device arena of `total_bytes` filled from `jobs` through `pool`'s ring (or a ring
    pinned for this restore), each piece read by `read` (default: from the job's file);
    returns it and timings in seconds ("alloc", "copy")."""
    start = time.perf_counter()
    arena = copier.allocate(total_bytes)
    allocated = time.perf_counter()
    if pool is None:  # pinned now, on the wake's path: no more than this image needs
        slot, slots = fitted_ring(total_bytes, config.slot_bytes, config.ring_slots)
        pool = StagingPool(slot_bytes=slot, slots=slots)
    with pool.ring(copier, total_bytes) as ring:
        stream_to_device(
            jobs, arena, copier, ring, threads=config.read_threads, read=read, cancel=cancel
        )
    done = time.perf_counter()
    return arena, {"alloc": allocated - start, "copy": done - allocated}


def device_views(
    arena: Any, entries: list[tuple[str, int, str, tuple[int, ...], int]]
) -> dict[str, Any]:
    """Typed views `(name, offset, dtype, shape, nbytes)` into a uint8 device arena (torch)."""
    import torch

    out = {}
    for name, offset, dtype, shape, nbytes in entries:
        raw = arena[offset : offset + nbytes]
        out[name] = raw.view(getattr(torch, dtype)).reshape(shape)
    return out
