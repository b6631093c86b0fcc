"""The CUDA DeviceCopier and the staging ring on a real GPU: async copies, pinning, memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from snapshotter.arena import Arena
from snapshotter.cuda_copier import TorchCudaCopier, pin_arena
from snapshotter.staging_ring import DeviceJob, RingStaging, stream_to_device


def test_the_ring_fills_device_memory_exactly(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 256, (3 << 20) + 123, dtype=np.uint8).tobytes()
    (tmp_path / "chunk").write_bytes(data)
    copier = TorchCudaCopier("cuda:0")
    dest = copier.allocate(len(data))
    ring = RingStaging([copier.pinned(1 << 20) for _ in range(2)], 1 << 20)
    stream_to_device([DeviceJob(tmp_path / "chunk", 0, len(data), 0, "c")], dest, copier, ring)
    assert dest.is_cuda and bytes(dest[: len(data)].cpu().numpy()) == data


def test_pinning_an_arena_makes_it_page_locked_once() -> None:
    arena = Arena(8 << 20)
    assert pin_arena(arena) and pin_arena(arena)  # the second call is a no-op, not an error
    tensor = torch.frombuffer(arena.memoryview(0, arena.nbytes), dtype=torch.uint8)
    assert tensor.is_pinned()


def test_memory_reading_counts_the_allocators_reserve() -> None:
    copier = TorchCudaCopier("cuda:0")
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    del block  # reserved by torch's caching allocator, free for a restore
    memory = copier.memory("cuda:0")
    assert memory.reusable_bytes >= 256 << 20
    assert 0 < memory.free_bytes <= memory.total_bytes
