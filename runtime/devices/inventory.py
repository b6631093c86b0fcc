"""What this machine offers the backends (CUDA devices, onnxruntime providers, TensorRT), read once.

Read lazily and only for a model whose instance groups ask for a GPU: a CPU-only server never
imports torch's CUDA parts, onnxruntime's provider list or TensorRT for this. Each answer is
read once per process and kept (devices do not come and go under a running server).

How many GPUs there are is asked of the framework that will use them, never of torch alone:

- onnxruntime instances: the GPU scan (`snapshotter.local_gpus`: NVML or /dev/nvidia*, with
  CUDA_VISIBLE_DEVICES applied), so onnxruntime-gpu beside a CPU build of torch (or no torch)
  still runs on the GPU, and no torch CUDA context is created for an onnxruntime-only model.
  Whether its CUDA EP really starts is checked on the session itself
  (backends/ort_providers.py);
- torch and TensorRT-plan instances (the plan backend's buffers are torch's): torch's count.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from dataclasses import replace
from typing import Protocol

from runtime.devices.plan import Capabilities
from thawserver.device_flags import MIN_COMPUTE_CAPABILITY

__all__ = ["DeviceInventory", "LocalInventory"]

logger = logging.getLogger(__name__)


class DeviceInventory(Protocol):
    """Answers `Capabilities` for the backends a model uses."""

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities: ...


class LocalInventory:
    """This process's view of the machine; GPUs below `min_compute_capability`
    (`--min-supported-compute-capability`) are there but not supported, as in Triton."""

    def __init__(self, min_compute_capability: float = MIN_COMPUTE_CAPABILITY) -> None:
        self._lock = threading.Lock()  # loads run in worker threads
        self._minimum = min_compute_capability

    def capabilities(self, *, onnxruntime: bool, tensorrt: bool) -> Capabilities:
        with self._lock:
            if onnxruntime:
                count, reason = _scanned()
                caps = Capabilities(
                    cuda_devices=count, no_cuda_reason=reason, ort_providers=_onnxruntime()
                )
            else:
                count, reason = _torch_cuda()
                caps = Capabilities(
                    cuda_devices=count, no_cuda_reason=reason, tensorrt=tensorrt and _tensorrt()
                )
            if not count:
                return caps
            return replace(
                caps,
                unsupported_gpus=_unsupported(self._minimum),
                min_compute_capability=self._minimum,
            )


@functools.cache
def _scanned() -> tuple[int, str]:
    from snapshotter import local_gpus

    scan = local_gpus()
    return scan.count, scan.reason


@functools.cache
def _unsupported(minimum: float) -> frozenset[int]:
    from runtime.devices.target import unsupported_gpus
    from snapshotter import local_gpus

    return unsupported_gpus(local_gpus(), minimum)


@functools.cache
def _torch_cuda() -> tuple[int, str]:
    from snapshotter import cuda_available

    ok, why = cuda_available()
    if not ok:
        return 0, why
    import torch

    return torch.cuda.device_count(), ""


@functools.cache
def _onnxruntime() -> frozenset[str]:
    import onnxruntime as ort

    return frozenset(ort.get_available_providers())


@functools.cache
def _tensorrt() -> bool:
    return importlib.util.find_spec("tensorrt") is not None
