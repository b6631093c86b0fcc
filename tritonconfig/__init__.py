"""Triton model configuration: parse, validate, complete, render; imports no other Thaw package.

`thaw serve` (runtime) and `thaw up` (activator) both answer a model's config and metadata, and
their answers must be Triton's and each other's; this is the one implementation both use, and
the snapshotter's too for the model parameters backends read (the TensorRT accelerator's,
`TORCH_COMPILE_OPTIONAL_PARAMETERS`). It is pure config code: protobuf (`tritonclient`'s
generated `model_config_pb2`, loaded without grpc), the model directory's file names, and an
ONNX graph's signature (onnx, imported lazily). It raises only `ModelConfigError`, which each
caller maps into its own error tree.
"""

from __future__ import annotations

from tritonconfig.complete import complete_config
from tritonconfig.defaults import fill_defaults
from tritonconfig.errors import ModelConfigError
from tritonconfig.onnx_autocomplete import DEFAULT_MAX_BATCH_SIZE, autocomplete_from_onnx
from tritonconfig.parse import config_from_json, parse_config
from tritonconfig.platform import PLATFORM_BACKENDS, default_model_filename, normalize_platform
from tritonconfig.render import config_to_json
from tritonconfig.schema import mc
from tritonconfig.tensorrt_accelerator import (
    TENSORRT_ACCELERATOR,
    tensorrt_parameters,
    tensorrt_provider_options,
)
from tritonconfig.torch_compile import (
    TORCH_COMPILE_PARAMETER,
    CompileSettings,
    compile_settings,
    parse_compile_settings,
)
from tritonconfig.validate import validate_config
from tritonconfig.versions import available_versions, select_versions

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "PLATFORM_BACKENDS",
    "TENSORRT_ACCELERATOR",
    "TORCH_COMPILE_PARAMETER",
    "CompileSettings",
    "ModelConfigError",
    "autocomplete_from_onnx",
    "available_versions",
    "compile_settings",
    "complete_config",
    "config_from_json",
    "config_to_json",
    "default_model_filename",
    "fill_defaults",
    "mc",
    "normalize_platform",
    "parse_compile_settings",
    "parse_config",
    "select_versions",
    "tensorrt_parameters",
    "tensorrt_provider_options",
    "validate_config",
]
