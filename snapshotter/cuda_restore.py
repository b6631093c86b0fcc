"""Restore cached chunks into one device arena: budget check, then the staging ring or one copy.

    free VRAM? (device_budget) ─no─▶ DeviceMemoryError (that load fails; the server goes on)
        │ yes
    allocate the device arena ─OOM─▶ DeviceMemoryError
        ├─ host tier has the arena ─▶ one host-to-device copy out of it (pinned: full speed)
        ├─ host tier wants it      ─▶ ArenaStaging: pieces read into the (pinned) host arena,
        │                             each copied as soon as it lands; the arena is kept
        └─ otherwise               ─▶ RingStaging: a few pinned slots, reused
    views into the device arena, typed as the manifest says (`device_views`)

Everything device-specific goes through a `DeviceCopier`; the CUDA one is
`cuda_copier.TorchCudaCopier`. Callers: `restore.ImageLoader` (GPU targets).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapshotter.arena import Arena
from snapshotter.device_budget import DeviceMemorySource, vram_shortfall
from snapshotter.errors import DeviceMemoryError
from snapshotter.staging_ring import (
    ArenaStaging,
    DeviceCopier,
    DeviceJob,
    ReadFn,
    StagingPool,
    stream_to_device,
)

__all__ = ["DeviceConfig", "DeviceJob", "device_views", "restore_to_device"]


@dataclass(frozen=True)
class DeviceConfig:
    """Pinned staging ring shape, reader threads and the VRAM headroom; sizes in bytes.

    `slot_bytes` x `ring_slots` is the pinned memory a restore without the host tier uses
    (384 MiB by default); `piece_bytes` the copy size when staging through a host arena.
    `headroom_bytes` must stay free beside the image (framework workspaces, activations)."""

    slot_bytes: int = 64 << 20
    ring_slots: int = 6
    read_threads: int = 4
    piece_bytes: int = 64 << 20
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
    host_arena: Arena | None = None,
    read: ReadFn | None = None,
    cancel: threading.Event | None = None,
) -> tuple[Any, dict[str, float]]:
    """A device arena of `total_bytes` filled from `jobs`; returns it and timings in seconds
    ("alloc", "copy"). With `host_arena` the pieces are staged there (see the module doc);
    else through `pool`'s ring (or a ring allocated for this restore)."""
    start = time.perf_counter()
    arena = copier.allocate(total_bytes)
    allocated = time.perf_counter()
    if host_arena is not None:
        source = copier.wrap_host(host_arena.memoryview(0, host_arena.nbytes))
        staging = ArenaStaging(source, config.piece_bytes)
        stream_to_device(
            jobs, arena, copier, staging, threads=config.read_threads, read=read, cancel=cancel
        )
    else:
        ring_pool = pool or StagingPool(slot_bytes=config.slot_bytes, slots=config.ring_slots)
        with ring_pool.ring(copier) as ring:
            stream_to_device(
                jobs, arena, copier, ring, threads=config.read_threads, read=read, cancel=cancel
            )
    done = time.perf_counter()
    return arena, {"alloc": allocated - start, "copy": done - allocated}


def copy_from_host(
    arena: Arena, total_bytes: int, copier: DeviceCopier
) -> tuple[Any, dict[str, float]]:
    """A device arena filled by one copy out of a host-tier arena (pinned: PCIe speed)."""
    start = time.perf_counter()
    device = copier.allocate(total_bytes)
    allocated = time.perf_counter()
    if total_bytes:
        source = copier.wrap_host(arena.memoryview(0, total_bytes))
        copier.copy(source, 0, total_bytes, device, 0).wait()
    copier.synchronize()
    return device, {"alloc": allocated - start, "copy": time.perf_counter() - allocated}


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
