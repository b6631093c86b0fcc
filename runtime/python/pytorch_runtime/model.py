"""Triton's PyTorch Python runtime, as a Python model: what `backend: "pytorch"` with
`runtime: "model.py"` runs (the PyTorch backend's "PyTorch 2.0 backend", experimental in
Triton 2.51).

The model's version directory holds either a `model.py` defining a `torch.nn.Module` subclass
(instantiated with no arguments; its `state_dict` loaded from the `model.pt` beside it when
there is one) or a TorchScript `model.pt`; `default_model_filename` is looked for first. As in
Triton, the class is the first name of the module, in `dir()` order, that is a `torch.nn.Module`
subclass, and a Python model is run through `torch.compile` with the config's
`TORCH_COMPILE_OPTIONAL_PARAMETERS` (a JSON object of its keyword arguments; `{"disable":
true}` runs it eagerly). The config's `NUM_THREADS` and `NUM_INTEROP_THREADS` parameters (1
each by default) set torch's thread pools. Inputs are given to the model's `forward` in the
config's input order, its outputs (a tensor, or a tuple or list of them) taken in the config's
output order. A model that batches (`max_batch_size` > 0) gets the requests of an `execute`
concatenated along the first dimension and each request its own rows back.

Loaded by path in the model's stub process (runtime.python.pytorch_runtime.MODEL_FILE),
imports torch there only.
"""

from __future__ import annotations

import importlib.util
import json
import os
from types import ModuleType
from typing import Any

import torch
import triton_python_backend_utils as pb_utils

_PARALLELISM = ("NUM_THREADS", "NUM_INTEROP_THREADS")
_COMPILE_PARAMETERS = "TORCH_COMPILE_OPTIONAL_PARAMETERS"


def _parameter(config: dict[str, Any], key: str) -> str | None:
    value = config.get("parameters", {}).get(key)
    return None if value is None else str(value.get("string_value", ""))


def model_path(config: dict[str, Any], model_dir: str) -> str:
    """The model's file in its version directory: `default_model_filename`, model.py or
    model.pt, the first that is there."""
    names = ["model.py", "model.pt"]
    if config.get("default_model_filename"):
        names = list(dict.fromkeys([config["default_model_filename"], *names]))
    for name in names:
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            return path
    raise pb_utils.TritonModelException(f"No model found in {model_dir}/{names}")


def state_dict_path(path: str) -> str:
    """The weights file of a Python model file: its name with `.pt` for its extension, or ''."""
    weights = os.path.splitext(path)[0] + ".pt"
    return weights if os.path.exists(weights) else ""


def module_class(module: ModuleType) -> type[torch.nn.Module]:
    """The first name of `module` (in `dir()` order, as Triton's runtime looks) that is a
    `torch.nn.Module` subclass."""
    for name in dir(module):
        value = getattr(module, name)
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            return value
    raise pb_utils.TritonModelException("Cannot find a subclass of torch.nn.Module")


def compile_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """`torch.compile`'s keyword arguments from the config (a JSON object)."""
    text = _parameter(config, _COMPILE_PARAMETERS)
    if text is None:
        return {}
    try:
        params = json.loads(text)
    except ValueError as exc:
        raise pb_utils.TritonModelException(
            f"parameter {_COMPILE_PARAMETERS} is not valid JSON: {exc}"
        ) from None
    if not isinstance(params, dict):
        raise pb_utils.TritonModelException(
            f"parameter {_COMPILE_PARAMETERS} must be a JSON object of torch.compile arguments"
        )
    if "model" in params:
        raise pb_utils.TritonModelException(
            "'model' is not an optional parameter for 'torch.compile'"
        )
    return params


def set_parallelism(config: dict[str, Any]) -> str:
    """Set torch's intra-op and inter-op thread counts (1 each unless the config says);
    the log's words for them."""
    said = ""
    for key in _PARALLELISM:
        text = _parameter(config, key) or "1"
        try:
            count = int(text)
        except ValueError:
            raise pb_utils.TritonModelException(
                f"parameter {key} must be an integer, not {text!r}"
            ) from None
        if key == "NUM_THREADS":
            torch.set_num_threads(count)
        elif torch.get_num_interop_threads() != count:
            try:  # settable once per process, before any inter-op work
                torch.set_num_interop_threads(count)
            except RuntimeError as exc:
                pb_utils.Logger.log_warn(f"{key} = {count} not applied: {exc}")
        said += f"{key} = {text}; "
    return said


def device_for(kind: str, device_id: str, model: torch.nn.Module) -> torch.device:
    """Where the instance runs: its GPU, the CPU, or (KIND_MODEL) where the model's first
    parameter is."""
    if kind == "GPU":
        if torch.cuda.is_available():
            return torch.device(f"cuda:{device_id}")
        return torch.device("cpu")  # no CUDA device: the instance runs on the CPU
    if kind == "CPU":
        return torch.device("cpu")
    for parameter in model.parameters():
        return parameter.device
    raise pb_utils.TritonModelException("Cannot determine model device")


def gather(per_request: list[list[torch.Tensor]]) -> tuple[list[torch.Tensor], list[int]]:
    """Each input's tensors of all requests, concatenated along dimension 0; each request's
    batch size."""
    sections = [tensors[0].shape[0] for tensors in per_request]
    joined = [torch.cat(list(column), 0) for column in zip(*per_request, strict=True)]
    return joined, sections


def scatter(outputs: list[torch.Tensor], sections: list[int]) -> list[list[torch.Tensor]]:
    """Each request's rows of every output."""
    split = [torch.split(output, sections) for output in outputs]
    return [list(row) for row in zip(*split, strict=True)]


def _import_file(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise pb_utils.TritonModelException(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    """One instance of a PyTorch model."""

    def initialize(self, args: dict[str, str]) -> None:
        self._name = args["model_name"]
        self._for = f"for '{self._name}'"
        pb_utils.Logger.log_info(f"Initializing model instance {self._for}")
        config = json.loads(args["model_config"])
        self._batching = int(config.get("max_batch_size", 0)) > 0
        self._inputs = [io["name"] for io in config.get("input", [])]
        self._outputs = [io["name"] for io in config.get("output", [])]
        said = set_parallelism(config)
        pb_utils.Logger.log_verbose(f"Torch parallelism settings {self._for}: {said}")
        params = compile_parameters(config)
        pb_utils.Logger.log_verbose(f"'torch.compile' optional parameter(s) {self._for}: {params}")
        path = model_path(config, pb_utils.get_model_dir())
        kind, device_id = args["model_instance_kind"], args["model_instance_device_id"]
        if not path.endswith(".py"):
            pb_utils.Logger.log_info(f"Loading '{self._name}' as TorchScript")
            model = torch.jit.load(path, map_location="cpu")
            self._device = device_for(kind, device_id, model)
            self._model: Any = model.to(self._device).eval()
            return
        network = module_class(_import_file(self._name, path))()
        self._device = device_for(kind, device_id, network)
        weights = state_dict_path(path)
        if weights:
            network.load_state_dict(torch.load(weights, map_location=self._device))
        else:
            pb_utils.Logger.log_info(f"Model parameter file not found {self._for}")
        network.to(self._device).eval()
        self._model = torch.compile(network, **params)

    def execute(self, requests: list[Any]) -> list[Any]:
        with torch.inference_mode():
            per_request = [
                [
                    torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, name)).to(
                        self._device
                    )
                    for name in self._inputs
                ]
                for request in requests
            ]
            if self._batching:
                inputs, sections = gather(per_request)
                results = scatter(self._run(inputs), sections)
            else:
                results = [self._run(inputs) for inputs in per_request]
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor.from_dlpack(name, tensor.detach().cpu().contiguous())
                    for name, tensor in zip(self._outputs, tensors, strict=False)
                ]
            )
            for tensors in results
        ]

    def _run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        outputs = self._model(*inputs)
        return list(outputs) if isinstance(outputs, tuple | list) else [outputs]

    def finalize(self) -> None:
        pb_utils.Logger.log_info(f"Removing model instance {self._for}")
