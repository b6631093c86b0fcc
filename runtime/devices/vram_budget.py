"""VRAM the frameworks' own weight copies will take on each GPU, checked before the instances load.

    plan ─▶ GPU instances whose weights are not a device image's views
        │   (onnxruntime's CUDA EP and TensorRT copy them into allocators of their own, one
        │    copy per session; torch copies with `.to()` when its image was restored on the host)
        ▼
    bytes per GPU = instances there * the weights ─▶ fit in what the driver reports free
        │                                              (NVML) beside the headroom?
        ├─ yes ─▶ load
        └─ no ──▶ DeviceOutOfMemory (503), before any framework allocated a byte

tritonserver's `--model-load-gpu-limit <gpu>:<fraction>` is checked first (`check_load_limits`):
a GPU instance is not created on a GPU whose used memory (total less what the driver reports
free) is over that fraction of its total, in Triton's words.

A restore into a GPU is budgeted by the snapshotter itself (the device arena, counted once:
torch's parameters are views of it, nothing else is held). What the driver reports free is
what another framework can get: memory torch's caching allocator keeps reserved counts as used
(runtime.backends.torch_backend releases it on unload). No reading (no NVML): nothing is checked
and a framework's own out-of-memory error still fails the load with 503.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runtime.devices.plan import DevicePlan
from runtime.errors import DeviceOutOfMemory

__all__ = ["check_framework_vram", "check_load_limits", "framework_vram"]


def framework_vram(
    plan: DevicePlan, weight_bytes: int, device_images: frozenset[str]
) -> dict[int, int]:
    """Bytes of weights the frameworks will copy onto each GPU (by CUDA ordinal): one copy per
    GPU instance whose restore device has no image in `device_images` (the devices an image
    was restored into, e.g. {"cuda:0"})."""
    out: dict[int, int] = {}
    for placement in plan.placements:
        if placement.kind != "KIND_GPU" or placement.restore_device in device_images:
            continue
        out[placement.device_id] = out.get(placement.device_id, 0) + weight_bytes
    return out


def check_framework_vram(
    model: str,
    needs: Mapping[int, int],
    read: Callable[[int], object],
    *,
    headroom_bytes: int,
) -> None:
    """DeviceOutOfMemory unless each GPU's `needs` plus `headroom_bytes` fit in what `read(gpu)`
    (a `snapshotter.DeviceMemory`, or None: unknown, not checked) reports available."""
    from snapshotter import DeviceMemory, vram_shortfall

    for gpu, nbytes in sorted(needs.items()):
        memory = read(gpu)
        if not isinstance(memory, DeviceMemory):
            continue
        reason = vram_shortfall(nbytes, memory, headroom_bytes=headroom_bytes, device=f"cuda:{gpu}")
        if reason is not None:
            raise DeviceOutOfMemory(
                f"model '{model}': its instances' own weight copies do not fit: {reason}"
            )


def check_load_limits(
    model: str,
    gpus: list[int],
    limits: Mapping[int, float],
    read: Callable[[int], object],
) -> None:
    """DeviceOutOfMemory, in tritonserver's words, when one of `gpus` (those the model's GPU
    instances go to) has a limit in `limits` and `read(gpu)` (a `snapshotter.DeviceMemory`,
    or None: unknown, not checked) says more than that fraction of it is in use."""
    from snapshotter import DeviceMemory

    for gpu in sorted(set(gpus)):
        limit = limits.get(gpu)
        memory = read(gpu) if limit is not None else None
        if limit is None or not isinstance(memory, DeviceMemory):
            continue
        if memory.total_bytes - memory.free_bytes > memory.total_bytes * limit:
            raise DeviceOutOfMemory(
                f"can not create model '{model}': memory limit set for KIND_GPU {gpu} has "
                "exceeded, model loading is rejected."
            )
