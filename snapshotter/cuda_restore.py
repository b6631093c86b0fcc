"""Restore cached chunks into one CUDA device arena through a pinned staging ring (GPU targets).

Reader threads `preadv` pieces of the cache files into pinned host slots; each filled slot is
copied to its place in the device arena with a non-blocking copy on one CUDA stream, and the
slot returns to the ring once its copy's event has completed. Reads and host-to-device copies
therefore overlap, and at most `ring_slots * slot_bytes` of pinned memory is ever used.
Tested only where a GPU exists (`tests/integration/snapshotter`, `benchmarks/gpu_restore.py`).
"""

from __future__ import annotations

import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapshotter.errors import IntegrityError, SnapshotError


@dataclass(frozen=True)
class DeviceJob:
    """Copy `nbytes` of `path` from `file_offset` to `device_offset` of the device arena."""

    path: Path
    file_offset: int
    nbytes: int
    device_offset: int
    tag: str


@dataclass(frozen=True)
class DeviceConfig:
    """Pinned staging ring shape and reader threads; sizes in bytes."""

    slot_bytes: int = 64 << 20
    ring_slots: int = 6
    read_threads: int = 4


class _Slot:
    def __init__(self, torch: Any, nbytes: int) -> None:
        self.host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self.view = memoryview(self.host.numpy())
        self.event = torch.cuda.Event()
        self.used = False


def restore_to_device(
    jobs: list[DeviceJob], total_bytes: int, device: str, config: DeviceConfig | None = None
) -> tuple[Any, dict[str, float]]:
    """Allocate one device arena of `total_bytes` and fill it from `jobs`; returns the arena
    (a uint8 `torch.Tensor` on `device`) and timings in seconds ("alloc", "copy")."""
    import torch

    if not torch.cuda.is_available():
        raise SnapshotError(f"target device {device}: CUDA is not available in this process")
    cfg = config or DeviceConfig()
    start = time.perf_counter()
    arena = torch.empty(max(total_bytes, 1), dtype=torch.uint8, device=device)
    stream = torch.cuda.Stream(device=device)
    ring: queue.Queue[_Slot] = queue.Queue()
    for _ in range(cfg.ring_slots):
        ring.put(_Slot(torch, cfg.slot_bytes))
    allocated = time.perf_counter()
    pieces = [
        (job, off, min(cfg.slot_bytes, job.nbytes - off))
        for job in jobs
        for off in range(0, job.nbytes, cfg.slot_bytes)
    ]
    with ThreadPoolExecutor(max_workers=cfg.read_threads, thread_name_prefix="thaw-h2d") as ex:
        futures = [ex.submit(_piece, torch, arena, stream, ring, *p) for p in pieces]
        for future in futures:
            future.result()
    stream.synchronize()
    done = time.perf_counter()
    return arena[:total_bytes], {"alloc": allocated - start, "copy": done - allocated}


def _piece(
    torch: Any,
    arena: Any,
    stream: Any,
    ring: queue.Queue[_Slot],
    job: DeviceJob,
    offset: int,
    nbytes: int,
) -> None:
    slot = ring.get()
    try:
        if slot.used:
            slot.event.synchronize()  # the previous copy out of this slot has finished
        _pread(job, offset, slot.view[:nbytes])
        dst = job.device_offset + offset
        with torch.cuda.stream(stream):
            arena[dst : dst + nbytes].copy_(slot.host[:nbytes], non_blocking=True)
            slot.event.record(stream)
        slot.used = True
    finally:
        ring.put(slot)


def _pread(job: DeviceJob, offset: int, view: memoryview) -> None:
    fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], job.file_offset + offset + done)
            if got == 0:
                raise IntegrityError(f"chunk {job.tag} is truncated", digest=job.tag)
            done += got
    finally:
        os.close(fd)


def device_views(
    arena: Any, entries: list[tuple[str, int, str, tuple[int, ...], int]]
) -> dict[str, Any]:
    """Typed views `(name, offset, dtype, shape, nbytes)` into a uint8 device arena."""
    import torch

    out = {}
    for name, offset, dtype, shape, nbytes in entries:
        raw = arena[offset : offset + nbytes]
        out[name] = raw.view(getattr(torch, dtype)).reshape(shape)
    return out
