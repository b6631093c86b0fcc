"""onnxruntime initializers from a snapshot image restored on the host: OrtValues over its memory.

A host restore hands numpy views of the arena: `OrtValue`s over them cost nothing. On the CPU EP
the session computes from that memory itself; the CUDA EP copies each initializer to the device
once when the session is created (at pinned speed when the arena is the warm process's
page-locked `--arena-bytes` arena, else pageable).

An image restored into a GPU is refused here, by design: `add_external_initializers` with device
OrtValues is copied to the host when added and back when the session is created
(onnxruntime#29009), so it would cost two extra copies and keep the weights twice in VRAM while
the device budget counted them once. `runtime.devices.plan` therefore restores onnxruntime
instances on the host; the candidate zero-copy path (`SessionOptions.add_initializer` with device
OrtValues) is measured by `benchmarks/gpu_check.py` (VRAM before and after) before it may be used.
"""

from __future__ import annotations

from typing import Any

from runtime.backends.snapshot_image import SnapshotImage
from runtime.errors import ServingError

__all__ = ["initializer_values"]


def initializer_values(ort: Any, image: SnapshotImage) -> tuple[list[str], list[Any]]:
    """Names and `OrtValue`s of every weight in a host-restored `image`, over the image's memory.
    The values must outlive the session (keep them with it)."""
    if image.device != "cpu":
        raise ServingError(
            f"model '{image.ref.model}': an onnxruntime image restored into {image.device}; "
            "onnxruntime takes its weights from a host restore (see device_plan)"
        )
    names = list(image.tensors)
    return names, [ort.OrtValue.ortvalue_from_numpy(image.tensors[n]) for n in names]
