"""Whether a restore fits in a device's free memory: a pure decision over an injected reading.

The reading (`DeviceMemory`) comes from a `DeviceMemorySource`: on CUDA, `cudaMemGetInfo` plus
what the framework's caching allocator holds reserved but unused (a warm process's memory pool
is reserved, so the driver counts it as used, yet a restore allocates out of it first). Tests
pass readings of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["DeviceMemory", "DeviceMemorySource", "vram_shortfall"]


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory, in bytes: `free` per the driver, `total`, and `reusable` (reserved
    by this process's allocator and not in use)."""

    free_bytes: int
    total_bytes: int
    reusable_bytes: int = 0

    @property
    def available_bytes(self) -> int:
        return self.free_bytes + self.reusable_bytes


class DeviceMemorySource(Protocol):
    """Reads a device's memory now (`device` like `cuda:0`)."""

    def memory(self, device: str) -> DeviceMemory: ...


def vram_shortfall(
    need_bytes: int, memory: DeviceMemory, *, headroom_bytes: int, device: str
) -> str | None:
    """None when `need_bytes` plus `headroom_bytes` (room the framework needs beside the weights:
    workspaces, activations) fit in what is available; else the reason, fit for an error."""
    if need_bytes + headroom_bytes <= memory.available_bytes:
        return None
    return (
        f"{device} has {_gib(memory.available_bytes)} free "
        f"({_gib(memory.free_bytes)} free on the device + {_gib(memory.reusable_bytes)} reserved "
        f"by this process), the image needs {_gib(need_bytes)} + {_gib(headroom_bytes)} headroom "
        f"(of {_gib(memory.total_bytes)} in total)"
    )


def _gib(nbytes: int) -> str:
    """Bytes in the unit a reader takes in at a glance (GiB, MiB, else bytes)."""
    if nbytes >= 1 << 30:
        return f"{nbytes / (1 << 30):.2f} GiB"
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f} MiB"
    return f"{nbytes} bytes"
