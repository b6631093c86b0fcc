"""Exported programs on a GPU: devices fixed at export are found and moved, or counted."""

from __future__ import annotations

from typing import Any

import torch

from runtime.backends.export_placement import foreign_device_ops, place_program
from runtime.backends.torch_backend import release_device_cache


class _FixedCpu(torch.nn.Module):
    """Traced on a CPU machine: a factory op with `device="cpu"` written into the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x: Any) -> Any:
        return x + torch.ones(3, device="cpu") + self.w


class _Agnostic(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        return x + torch.ones_like(x)


def test_ops_pinned_to_the_cpu_at_export_are_found() -> None:
    program = torch.export.export(_FixedCpu(), (torch.zeros(3),))
    assert [op.split(" ")[0] for op in foreign_device_ops(program.graph, "cuda:0")] == ["ones"]
    assert foreign_device_ops(program.graph, "cpu") == []
    agnostic = torch.export.export(_Agnostic(), (torch.zeros(3),))
    assert foreign_device_ops(agnostic.graph, "cuda:0") == []


def test_placing_a_program_moves_those_ops_to_the_instance_device() -> None:
    # "meta" stands in for a GPU here: a device this machine can place a program on.
    program = torch.export.export(_FixedCpu(), (torch.zeros(3),))
    moved, left = place_program(program, "meta")
    assert left == []
    assert foreign_device_ops(moved.graph, "meta") == []
    out = moved.module()(torch.zeros(3, device="meta"))
    assert out.device.type == "meta"  # no op of it ran on the CPU


class _FakeCuda:
    def __init__(self, initialized: bool) -> None:
        self.initialized, self.emptied, self.devices = initialized, 0, []

    def is_initialized(self) -> bool:
        return self.initialized

    def empty_cache(self) -> None:
        self.emptied += 1

    def device(self, name: str) -> Any:
        self.devices.append(name)
        import contextlib

        return contextlib.nullcontext()


class _FakeTorch:
    def __init__(self, initialized: bool) -> None:
        self.cuda = _FakeCuda(initialized)


def test_unloading_a_gpu_model_gives_torchs_cached_vram_back() -> None:
    fake = _FakeTorch(initialized=True)
    assert release_device_cache(fake, "cuda:1") is True
    assert fake.cuda.emptied == 1 and fake.cuda.devices == ["cuda:1"]
    never = _FakeTorch(initialized=False)  # no CUDA context here: nothing to give back
    assert release_device_cache(never, "cuda:0") is False and never.cuda.emptied == 0
