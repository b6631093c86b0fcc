"""The `tensorrt` GPU execution accelerator of an ONNX model's config: its parameters, checked,
as the TensorRT execution provider's options.

Triton users turn TensorRT on for an ONNX model with `optimization { execution_accelerators {
gpu_execution_accelerator: [ { name: "tensorrt" parameters { ... } } ] } }`; the parameter
names are the Triton onnxruntime backend's (`precision_mode`, `max_workspace_size_bytes`,
`trt_*`), mapped here to onnxruntime's TensorRT EP provider options as that backend maps them.
The runtime (session options) and the snapshotter (engine caches built ahead) read them here.
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["TENSORRT_ACCELERATOR", "tensorrt_parameters", "tensorrt_provider_options"]

TENSORRT_ACCELERATOR = "tensorrt"

_BOOL, _INT, _STR = "bool", "int", "str"
# Triton onnxruntime backend key -> (TensorRT EP option, kind); `precision_mode` is separate.
_OPTIONS: dict[str, tuple[str, str]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", _INT),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", _STR),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _BOOL),
    **{
        key: (key, kind)
        for key, kind in {
            "trt_max_partition_iterations": _INT,
            "trt_min_subgraph_size": _INT,
            "trt_dla_enable": _BOOL,
            "trt_dla_core": _INT,
            "trt_engine_cache_enable": _BOOL,
            "trt_engine_cache_path": _STR,
            "trt_engine_cache_prefix": _STR,
            "trt_dump_subgraphs": _BOOL,
            "trt_force_sequential_engine_build": _BOOL,
            "trt_context_memory_sharing_enable": _BOOL,
            "trt_layer_norm_fp32_fallback": _BOOL,
            "trt_timing_cache_enable": _BOOL,
            "trt_timing_cache_path": _STR,
            "trt_force_timing_cache": _BOOL,
            "trt_detailed_build_log": _BOOL,
            "trt_build_heuristics_enable": _BOOL,
            "trt_sparsity_enable": _BOOL,
            "trt_builder_optimization_level": _INT,
            "trt_auxiliary_streams": _INT,
            "trt_tactic_sources": _STR,
            "trt_extra_plugin_lib_paths": _STR,
            "trt_profile_min_shapes": _STR,
            "trt_profile_max_shapes": _STR,
            "trt_profile_opt_shapes": _STR,
            "trt_cuda_graph_enable": _BOOL,
            "trt_dump_ep_context_model": _BOOL,
            "trt_ep_context_file_path": _STR,
            "trt_ep_context_embed_mode": _INT,
        }.items()
    },
}
_PRECISION = {"FP32": {}, "FP16": {"trt_fp16_enable": "True"}, "INT8": {"trt_int8_enable": "True"}}


def tensorrt_parameters(config: mc.ModelConfig) -> dict[str, str] | None:
    """The parameters of the config's `tensorrt` GPU accelerator, or None without one."""
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    return next((dict(a.parameters) for a in accelerators if a.name == TENSORRT_ACCELERATOR), None)


def tensorrt_provider_options(params: Mapping[str, str], *, device_id: int) -> dict[str, str]:
    """TensorRT EP provider options (all strings) for a tensorrt accelerator's parameters.
    Raises ModelConfigError naming the parameter for an unknown key or a malformed value."""
    options = {"device_id": str(device_id)}
    for key, value in sorted(params.items()):
        if key == "precision_mode":
            if value.upper() not in _PRECISION:
                raise ModelConfigError(
                    f"tensorrt parameter `precision_mode` = {value!r}, must be FP32, FP16 or INT8"
                )
            options.update(_PRECISION[value.upper()])
            continue
        if key not in _OPTIONS:
            raise ModelConfigError(
                f"tensorrt parameter `{key}` is unknown (see Triton's onnxruntime backend: "
                "TensorRT optimization parameters)"
            )
        name, kind = _OPTIONS[key]
        options[name] = _value(key, value, kind)
    return options


def _value(key: str, value: str, kind: str) -> str:
    if kind == _BOOL:
        lowered = value.strip().lower()
        if lowered not in ("1", "0", "true", "false"):
            raise ModelConfigError(
                f"tensorrt parameter `{key}` = {value!r}, must be 1, 0, true or false"
            )
        return "True" if lowered in ("1", "true") else "False"
    if kind == _INT:
        try:
            return str(int(value))
        except ValueError:
            raise ModelConfigError(
                f"tensorrt parameter `{key}` = {value!r}, must be an integer"
            ) from None
    return value
