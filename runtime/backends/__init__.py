"""Model backends behind one Protocol; `backend_class` maps a config's backend name to its class.

Each framework is imported lazily, inside the backend that needs it (the python backend is
runtime.python's).

    base                 the Backend Protocol every backend implements, and its LoadContext
    registry             a config's backend name -> its Backend class, importing only that one
    onnxruntime_backend  ONNX models on onnxruntime (CPU, CUDA/TensorRT providers)
    ort_providers        onnxruntime execution providers for one instance
    ort_initializers     onnxruntime initializers over a restored snapshot's memory
    torch_backend        PyTorch models: TorchScript `model.pt`, `torch.export` `model.pt2`
    torch_strings        BYTES tensors as TorchScript's `List[str]` and back (Triton's rules)
    export_placement     a `torch.export` program put on its instance's device
    cuda_graphs          CUDA graphs captured at load for a torch model on a GPU
    tensorrt_backend     TensorRT `model.plan` engines (TensorRT 10 Python API)
    tensorrt_dtypes      TensorRT I/O tensor types as Thaw carries them
    batch_tensors        one framework execution for a batch: inputs joined, outputs split
    snapshot_image       what a backend reads from its snapshot image (snapshotter's seam)

Exports `Backend`, `ExecTimings`, `LoadContext` and `backend_class`, each imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.backends.base import Backend, ExecTimings, LoadContext
    from runtime.backends.registry import backend_class

__all__ = ["Backend", "ExecTimings", "LoadContext", "backend_class"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "Backend": "runtime.backends.base",
    "ExecTimings": "runtime.backends.base",
    "LoadContext": "runtime.backends.base",
    "backend_class": "runtime.backends.registry",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
