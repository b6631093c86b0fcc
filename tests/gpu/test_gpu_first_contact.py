"""What would go wrong on first contact with a GPU: the fixes, checked where only a GPU can."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from runtime.backends.cuda_graphs import GraphShape, capture_graphs
from runtime.backends.torch_backend import release_device_cache
from snapshotter import local_gpus
from snapshotter.arena import Arena
from snapshotter.cuda_copier import register_arena


def test_the_scan_sees_what_cuda_sees_without_a_context() -> None:
    scan = local_gpus()
    assert scan.count == torch.cuda.device_count()
    if scan.source == "nvml":
        assert scan.gpus[0].compute_capability == torch.cuda.get_device_capability(0)


class _HostSync(torch.nn.Module):
    """`.item()` inside forward: a host sync, which a CUDA graph capture refuses."""

    def forward(self, x: Any) -> Any:
        return x * float(x.sum().item())


def test_a_capture_that_fails_leaves_an_eager_module_that_still_runs() -> None:
    shape = GraphShape((("x", (2, 4), np.dtype(np.float32)),))
    graphed = capture_graphs(_HostSync().cuda(), [shape], {"x": 0}, "cuda:0")
    assert graphed.captured == 0 and len(graphed.failures) == 1
    # The loading thread is back on its own stream (torch.cuda.graph leaves it on the capture's)
    assert torch.cuda.current_stream(0) == torch.cuda.default_stream(0)
    x = torch.ones(2, 4, device="cuda:0")
    assert torch.equal(graphed(x), x * 8.0)  # and CUDA is usable after the failed capture
    # and what this thread allocates afterwards is torch's cache, which it gives back
    release_device_cache(torch, "cuda:0")
    before = torch.cuda.memory_reserved(0)
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    del block
    assert torch.cuda.memory_reserved(0) >= before + (256 << 20)
    release_device_cache(torch, "cuda:0")
    assert torch.cuda.memory_reserved(0) <= before


def test_a_failed_host_registration_does_not_poison_the_next_kernel() -> None:
    arena = Arena(1 << 20)
    cudart = torch.cuda.cudart()
    assert register_arena(arena, cudart)
    again = Arena(arena.nbytes, _map=arena._map)  # the same range: CUDA refuses it twice
    assert register_arena(again, cudart) is False
    y = torch.ones(1024, device="cuda:0") * 2  # a kernel launch torch checks right after
    torch.cuda.synchronize()
    assert float(y.sum()) == 2048.0


def test_unloading_gives_torchs_cache_back_to_the_driver() -> None:
    release_device_cache(torch, "cuda:0")  # what earlier tests left cached
    empty = torch.cuda.memory_reserved(0)
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda:0")
    del block
    reserved = torch.cuda.memory_reserved(0)
    assert reserved >= empty + (256 << 20)  # freed, but torch's cache keeps it
    assert release_device_cache(torch, "cuda:0")
    assert torch.cuda.memory_reserved(0) <= empty
