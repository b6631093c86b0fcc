"""onnxruntime initializers from a snapshot image: the image's own memory, host or device.

A host restore hands numpy views of the (pinned, for CUDA targets) arena: `OrtValue`s over them
cost nothing, and the CUDA EP copies each to the device once at session creation. A restore into
a GPU hands torch views of device memory: `OrtValue.from_dlpack` wraps them without a copy (on
onnxruntime releases that use a supplied device initializer in place, the session's weights are
the arena itself; older ones copy device to device once). `runtime.device_plan` restores into a
GPU for onnxruntime only when its `OrtValue` has `from_dlpack`.
"""

from __future__ import annotations

from typing import Any

from runtime.backends.snapshot_image import SnapshotImage

__all__ = ["initializer_values"]


def initializer_values(ort: Any, image: SnapshotImage) -> tuple[list[str], list[Any]]:
    """Names and `OrtValue`s of every weight in `image`, over the image's memory. The values
    must outlive the session (keep them with it)."""
    if image.device == "cpu":
        names = list(image.tensors)
        return names, [ort.OrtValue.ortvalue_from_numpy(image.tensors[n]) for n in names]
    views = image.torch_tensors()
    names = list(views)
    return names, [ort.OrtValue.from_dlpack(views[n]) for n in names]
