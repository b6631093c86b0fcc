"""Run a Triton python_backend `model.py` inside another server (KServe, MLServer) for benchmarks.

Provides a small in-process `triton_python_backend_utils` (the names such models use, on plain
numpy arrays) and a loader that initializes the model the way Triton does. Needs only numpy, so
it runs in the peers' own virtualenvs.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TritonModelRunner"]

_NUMPY_OF = {
    "TYPE_FP32": np.float32, "TYPE_FP64": np.float64, "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32, "TYPE_STRING": np.object_, "TYPE_BOOL": np.bool_,
}  # fmt: skip


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError(Exception):
    def message(self) -> str:
        return str(self)


class InferenceRequest:
    def __init__(self, inputs: list[Tensor]) -> None:
        self.inputs = {t.name(): t for t in inputs}


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor], error: TritonError | None = None) -> None:
        self.output_tensors, self.error = output_tensors, error


def _module() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    names: dict[str, Any] = {
        "Tensor": Tensor,
        "TritonError": TritonError,
        "InferenceRequest": InferenceRequest,
        "InferenceResponse": InferenceResponse,
        "get_input_tensor_by_name": lambda r, n: r.inputs.get(n),
        "get_output_config_by_name": lambda c, n: next(
            (o for o in c.get("output", []) if o["name"] == n), None
        ),
        "triton_string_to_numpy": _NUMPY_OF.__getitem__,
    }
    module.__dict__.update(names)
    return module


class TritonModelRunner:
    """One `TritonPythonModel` from `version_dir/model.py`, initialized as Triton would."""

    def __init__(self, name: str, version_dir: Path, config_json: str) -> None:
        sys.modules.setdefault("triton_python_backend_utils", _module())
        spec = importlib.util.spec_from_file_location(f"{name}_model", version_dir / "model.py")
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot import {version_dir / 'model.py'}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.model = module.TritonPythonModel()
        if hasattr(self.model, "initialize"):
            self.model.initialize({
                "model_config": config_json, "model_repository": str(version_dir.parent),
                "model_version": version_dir.name, "model_name": name,
                "model_instance_kind": "CPU", "model_instance_device_id": "0",
            })  # fmt: skip

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Execute one request; a model error raises ValueError with its message."""
        request = InferenceRequest([Tensor(n, a) for n, a in inputs.items()])
        [response] = self.model.execute([request])
        if response.error is not None:
            raise ValueError(response.error.message())
        return {t.name(): t.as_numpy() for t in response.output_tensors}
