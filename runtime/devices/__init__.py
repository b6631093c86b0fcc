"""Devices: what this machine offers the backends, and where each model instance runs.

    inventory       CUDA devices, onnxruntime providers, TensorRT: read once
    target          what `--target auto|cpu|cuda[:sm_NN]` means here (pure)
    plan            where each instance runs and its weights are restored (pure)
    vram_budget     VRAM the frameworks' own weight copies will take, checked first
    errors          which framework exceptions mean out of GPU memory, and the user's error

Exports `DeviceInventory`, `DevicePlan`, `plan_devices` and `DeviceTarget`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.devices.inventory import DeviceInventory
    from runtime.devices.plan import DevicePlan, plan_devices
    from runtime.devices.target import DeviceTarget

__all__ = ["DeviceInventory", "DevicePlan", "DeviceTarget", "plan_devices"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "DeviceInventory": "runtime.devices.inventory",
    "DevicePlan": "runtime.devices.plan",
    "DeviceTarget": "runtime.devices.target",
    "plan_devices": "runtime.devices.plan",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
