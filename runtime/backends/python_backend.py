"""Run Triton python_backend `model.py` files unchanged, in-process, one model per instance."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from google.protobuf import json_format

from runtime import triton_python_backend_utils as pb_utils
from runtime.backends.base import ExecTimings, LoadContext
from runtime.datatypes import config_to_v2, numpy_to_v2
from runtime.errors import (
    FeatureDisabled,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    RepositoryError,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.model_config import config_to_json
from tritonconfig.schema import mc

__all__ = ["PythonBackend", "auto_complete_config", "install_pb_utils"]

logger = logging.getLogger(__name__)

# sys.path edits and module imports are process-global: one model import at a time.
_IMPORT_LOCK = threading.Lock()
_module_counter = 0

_ERROR_CLASSES: dict[int, type[ServingError]] = {
    pb_utils.TritonError.INVALID_ARG: InvalidInput,
    pb_utils.TritonError.NOT_FOUND: ModelNotFound,
    pb_utils.TritonError.UNAVAILABLE: ModelUnavailable,
    pb_utils.TritonError.UNSUPPORTED: FeatureDisabled,
}


def install_pb_utils() -> None:
    """Make `import triton_python_backend_utils` give models Thaw's in-process module."""
    sys.modules.setdefault("triton_python_backend_utils", pb_utils)


def _import_model_file(path: Path, label: str) -> ModuleType:
    """Import a model.py as a fresh module (its own globals, like Triton's per-instance stub)."""
    global _module_counter
    install_pb_utils()
    with _IMPORT_LOCK:
        _module_counter += 1
        module_name = f"_thaw_python_model_{_module_counter}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise RepositoryError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        # Registered like any imported module (pickle, dataclasses and typing look it up).
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SyntaxError, ImportError, even sys.exit() in the file
            sys.modules.pop(module_name, None)
            raise RepositoryError(
                f"{label}: importing {path} failed: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            sys.path.remove(str(path.parent))
    if not hasattr(module, "TritonPythonModel"):
        sys.modules.pop(module_name, None)
        raise RepositoryError(f"{path}: defines no class TritonPythonModel")
    return module


def auto_complete_config(config: mc.ModelConfig, model_file: Path) -> mc.ModelConfig:
    """Call the model's optional `auto_complete_config` staticmethod and apply what it returns."""
    module = _import_model_file(model_file, f"model '{config.name}'")
    sys.modules.pop(module.__name__, None)  # only this call uses it
    hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
    if hook is None:
        return config
    wrapper = pb_utils.ModelConfig(config_to_json(config))
    try:
        result = hook(wrapper)
    except BaseException as exc:
        raise RepositoryError(
            f"model '{config.name}': auto_complete_config raised {exc!r}"
        ) from exc
    updated = mc.ModelConfig()
    try:
        json_format.ParseDict(result.as_dict(), updated)
    except (json_format.ParseError, AttributeError, TypeError) as exc:
        raise RepositoryError(
            f"model '{config.name}': auto_complete_config returned an invalid config: {exc}"
        ) from exc
    return updated


class PythonBackend:
    """One instance of a Triton python model."""

    # Python code holds the GIL: a worker thread gives the event loop no parallelism back.
    gil_bound = True
    used_image = False  # a python model has no snapshot image

    def __init__(self) -> None:
        self.timings = ExecTimings()
        self._model: Any = None
        self._name = ""
        self._version = ""
        self._instance_name = ""
        self._output_types: dict[str, str] = {}
        self._module_name = ""

    def load(self, ctx: LoadContext) -> None:
        model_file = ctx.model_file or ctx.version_dir / "model.py"
        label = f"model '{ctx.model_name}' version {ctx.version}"
        module = _import_model_file(model_file, label)
        self._module_name = module.__name__
        self._name, self._version = ctx.model_name, ctx.version
        self._instance_name = ctx.instance_name or f"{ctx.model_name}_0_0"
        self._output_types = {
            o.name: config_to_v2(mc.DataType.Name(o.data_type)) for o in ctx.config.output
        }
        kind = "GPU" if ctx.instance_kind == "KIND_GPU" else "CPU"
        args = {
            "model_config": json.dumps(config_to_json(ctx.config)),
            "model_instance_kind": kind,
            "model_instance_name": self._instance_name,
            "model_instance_device_id": str(ctx.device_id),
            "model_repository": str(ctx.model_dir),
            "model_version": ctx.version,
            "model_name": ctx.model_name,
        }
        try:
            model = module.TritonPythonModel()
            if hasattr(model, "initialize"):
                model.initialize(args)
        except BaseException as exc:  # a model calling sys.exit() must not stop the server
            sys.modules.pop(self._module_name, None)
            raise RepositoryError(
                f"{label}: initialize() failed: {type(exc).__name__}: {exc}"
            ) from exc
        self._model = model

    def execute(self, requests: list[InferRequest]) -> list[InferResponse | ServingError]:
        t0 = time.perf_counter_ns()
        pb_requests = [self._to_pb(request) for request in requests]
        t1 = time.perf_counter_ns()
        try:
            responses = self._model.execute(pb_requests)
        except BaseException as exc:  # MemoryError, TritonModelException, even SystemExit
            t2 = time.perf_counter_ns()
            self.timings = ExecTimings(t1 - t0, t2 - t1, 0)
            logger.warning("model=%s execute raised %r", self._name, exc)
            # Triton's text (observed on 2.51), less the traceback it appends.
            error = ServingError(
                f"Failed to process the request(s) for model '{self._instance_name}', "
                f"message: {type(exc).__name__}: {exc}"
            )
            return [error for _ in requests]
        t2 = time.perf_counter_ns()
        results = self._from_pb(requests, responses)
        self.timings = ExecTimings(t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        return results

    def unload(self) -> None:
        sys.modules.pop(self._module_name, None)
        model, self._model = self._model, None
        if model is not None and hasattr(model, "finalize"):
            try:
                model.finalize()
            except Exception as exc:
                logger.warning("model=%s finalize() raised %r", self._name, exc)

    def _to_pb(self, request: InferRequest) -> pb_utils.InferenceRequest:
        inputs = [pb_utils.Tensor(t.name, t.data) for t in request.inputs]
        return pb_utils.InferenceRequest(
            inputs=inputs,
            request_id=request.id or "",
            correlation_id=request.parameters.get("sequence_id", 0),
            requested_output_names=[o.name for o in request.requested_outputs],
            model_name=self._name,
            parameters=request.parameters,
        )

    def _from_pb(
        self, requests: list[InferRequest], responses: Any
    ) -> list[InferResponse | ServingError]:
        if not isinstance(responses, list | tuple) or len(responses) != len(requests):
            count = len(responses) if isinstance(responses, list | tuple) else type(responses)
            error = ServingError(
                f"model '{self._name}' returned {count} responses for {len(requests)} requests"
            )
            return [error for _ in requests]
        return [self._one(req, resp) for req, resp in zip(requests, responses, strict=True)]

    def _one(self, request: InferRequest, response: Any) -> InferResponse | ServingError:
        if not isinstance(response, pb_utils.InferenceResponse):
            return ServingError(f"model '{self._name}' returned {type(response).__name__}")
        if response.has_error():
            err = response.error()
            code = err.code() if hasattr(err, "code") else pb_utils.TritonError.INTERNAL
            cls = _ERROR_CLASSES.get(code, ServingError)
            return cls(str(err.message() if hasattr(err, "message") else err))
        outputs = []
        for tensor in response.output_tensors():
            try:
                outputs.append(self._output(tensor))
            except (ServingError, AttributeError, TypeError) as exc:
                return ServingError(f"model '{self._name}' returned a bad output: {exc}")
        return InferResponse(self._name, self._version, outputs, id=request.id)

    def _output(self, tensor: pb_utils.Tensor) -> InferTensor:
        array = tensor.as_numpy()
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        name = tensor.name()
        declared = self._output_types.get(name)
        if declared == "BF16" and array.dtype == np.uint16:
            datatype = "BF16"
        else:
            datatype = numpy_to_v2(array.dtype)
        if datatype == "BYTES" and array.dtype != np.object_:
            array = array.astype(np.object_)
        return InferTensor(name, datatype, tuple(array.shape), array)
