"""onnxruntime initializers from a snapshot image: the image's own memory, host or device.

A host restore hands numpy views of the (pinned, for CUDA targets) arena: `OrtValue`s over them
cost nothing, and the CUDA EP copies each to the device once at session creation. A restore into
a GPU hands torch views of device memory: `OrtValue.from_dlpack` wraps them without a copy (on
onnxruntime releases that use a supplied device initializer in place, the session's weights are
the arena itself; older ones copy device to device once). `runtime.device_plan` restores into a
GPU for onnxruntime only when its `OrtValue.from_dlpack` works. Small and integer initializers
(shape and index constants, which onnxruntime may place on CPU kernels) are copied to the host
first: a device pointer where a CPU kernel reads would be wrong, and they cost nothing to copy.
"""

from __future__ import annotations

from typing import Any

from runtime.backends.snapshot_image import SnapshotImage

__all__ = ["initializer_values"]

# Below this, or integer-typed: handed to onnxruntime from host memory (see the module doc).
SMALL_BYTES = 64 << 10


def initializer_values(ort: Any, image: SnapshotImage) -> tuple[list[str], list[Any]]:
    """Names and `OrtValue`s of every weight in `image`, over the image's memory. The values
    must outlive the session (keep them with it)."""
    if image.device == "cpu":
        names = list(image.tensors)
        return names, [ort.OrtValue.ortvalue_from_numpy(image.tensors[n]) for n in names]
    views = image.torch_tensors()
    names = list(views)
    return names, [ort.OrtValue.from_dlpack(_placed(views[n])) for n in names]


def _placed(view: Any) -> Any:
    """A device view, or its host copy for a small or integer tensor."""
    small = view.numel() * view.element_size() < SMALL_BYTES
    return view.cpu() if small or not view.is_floating_point() else view
