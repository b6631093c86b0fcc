"""Which framework exceptions mean "the GPU ran out of memory", and the error a user then gets.

torch raises `torch.cuda.OutOfMemoryError`; onnxruntime and TensorRT raise their own runtime
errors whose text names the failed CUDA allocation. Recognized without importing any of them,
so CPU-only servers never load CUDA modules to classify an error.
"""

from __future__ import annotations

import re

from runtime.errors import DeviceOutOfMemory, ServingError

__all__ = ["device_failure", "is_device_oom"]

# onnxruntime: "CUDA failure 2: out of memory", "Failed to allocate memory for requested buffer
# of size ..." (BFCArena); TensorRT / cuBLAS: "CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
# "cudaErrorMemoryAllocation".
_OOM_TEXT = re.compile(
    r"out of memory|failed to allocate memory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation",
    re.IGNORECASE,
)


def is_device_oom(exc: BaseException) -> bool:
    """True for a device (CUDA) out-of-memory error; host MemoryError is not one."""
    if isinstance(exc, MemoryError):
        return False
    if type(exc).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
        return True
    return _OOM_TEXT.search(str(exc)) is not None


def device_failure(model: str, exc: Exception, *, device: str) -> ServingError:
    """The error for one request whose execution raised `exc` on `device`."""
    if device != "cpu" and is_device_oom(exc):
        return DeviceOutOfMemory(f"model '{model}': {device} ran out of memory for this request")
    return ServingError(f"model '{model}' failed: {exc}")
