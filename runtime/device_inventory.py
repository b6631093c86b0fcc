"""What this machine offers the backends (CUDA devices, onnxruntime providers, TensorRT), read once.

Read lazily and only for a model whose instance groups ask for a GPU: a CPU-only server never
imports torch's CUDA parts, onnxruntime's provider list or TensorRT for this. Each answer is
read once per process and kept (devices do not come and go under a running server).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from typing import Protocol

from runtime.device_plan import CUDA_EP, Capabilities

__all__ = ["DeviceInventory", "LocalInventory"]

logger = logging.getLogger(__name__)


class DeviceInventory(Protocol):
    """Answers `Capabilities` for the backends a model uses."""

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities: ...


class LocalInventory:
    """This process's view of the machine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # loads run in worker threads

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities:
        with self._lock:
            count, reason = _cuda()
            providers: frozenset[str] = frozenset({"CPUExecutionProvider"})
            device_initializers = False
            if onnxruntime:
                providers, device_initializers = _onnxruntime()
            return Capabilities(
                cuda_devices=count,
                no_cuda_reason=reason,
                ort_providers=providers,
                ort_device_initializers=device_initializers and CUDA_EP in providers,
                tensorrt=tensorrt and _tensorrt(),
            )


@functools.cache
def _cuda() -> tuple[int, str]:
    from snapshotter import cuda_available

    ok, why = cuda_available()
    if not ok:
        return 0, why
    import torch

    return torch.cuda.device_count(), ""


@functools.cache
def _onnxruntime() -> tuple[frozenset[str], bool]:
    import numpy as np
    import onnxruntime as ort

    # `OrtValue.from_dlpack` (zero-copy from a torch CUDA tensor) is not in every onnxruntime
    # build or version; without it, initializers go through the host. Probed, not looked up:
    # the Python wrapper can have the method while the native module lacks it.
    try:
        ort.OrtValue.from_dlpack(np.zeros(1, dtype=np.float32))
    except (AttributeError, RuntimeError, TypeError) as exc:
        logger.info("onnxruntime takes no DLPack initializers (%s): GPU models restore on the "
                    "host", exc)  # fmt: skip
        return frozenset(ort.get_available_providers()), False
    return frozenset(ort.get_available_providers()), True


@functools.cache
def _tensorrt() -> bool:
    return importlib.util.find_spec("tensorrt") is not None
