"""A minimal stand-in for Triton's `triton_python_backend_utils`, enough to unit-test model.py."""

from __future__ import annotations

from typing import Any

import numpy as np

_TYPES = {"TYPE_INT64": np.int64, "TYPE_INT32": np.int32, "TYPE_FP32": np.float32}


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class TritonError:
    def __init__(self, message: str) -> None:
        self._message = message

    def message(self) -> str:
        return self._message


class InferenceRequest:
    def __init__(self, inputs: list[Tensor]) -> None:
        self._inputs = {t.name(): t for t in inputs}


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor], error: TritonError | None = None) -> None:
        self.output_tensors = {t.name(): t for t in output_tensors}
        self._error = error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return request._inputs.get(name)


def get_output_config_by_name(config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((o for o in config.get("output", []) if o["name"] == name), None)


def triton_string_to_numpy(name: str) -> type:
    return _TYPES[name]
