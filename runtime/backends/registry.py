"""Map a model config's backend name to its Backend class, importing only the one needed."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from runtime.errors import RepositoryError

if TYPE_CHECKING:
    from runtime.backends.base import Backend

__all__ = ["BACKEND_MODULES", "backend_class"]

# backend name -> (module, class); modules import their framework lazily too.
BACKEND_MODULES: dict[str, tuple[str, str]] = {
    "onnxruntime": ("runtime.backends.onnxruntime_backend", "OnnxRuntimeBackend"),
    "pytorch": ("runtime.backends.torch_backend", "TorchBackend"),
    "python": ("runtime.python.backend", "PythonBackend"),
    "tensorrt": ("runtime.backends.tensorrt_backend", "TensorRTBackend"),
}


def backend_class(name: str) -> type[Backend]:
    """The Backend class for a config's `backend`; RepositoryError for unknown names."""
    try:
        module_name, class_name = BACKEND_MODULES[name]
    except KeyError:
        raise RepositoryError(f"unsupported backend '{name}'") from None
    cls: type[Backend] = getattr(importlib.import_module(module_name), class_name)
    return cls
