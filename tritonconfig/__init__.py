"""Triton model configuration: parse, validate, complete, render; imports no other Thaw package.

`thaw serve` (runtime) and `thaw up` (activator) both answer a model's config and metadata, and
their answers must be Triton's and each other's; this is the one implementation both use, and
the snapshotter's too for the model parameters backends read (the TensorRT accelerator's,
`TORCH_COMPILE_OPTIONAL_PARAMETERS`). It is pure config code: protobuf (`tritonclient`'s
generated `model_config_pb2`, loaded without grpc), the model directory's file names, and an
ONNX graph's signature (onnx, imported lazily). It raises only `ModelConfigError`, which each
caller maps into its own error tree.

    schema                Triton's ModelConfig protobuf module, without tritonclient.grpc
    parse                 a ModelConfig from `config.pbtxt` text or JSON
    render                a ModelConfig as Triton's `/config` JSON
    defaults              the fields Triton fills in before it reports or serves a config
    complete              complete a parsed config the way Triton does, in Triton's order
    onnx_autocomplete     Triton's ONNX auto-complete from the graph
    onnx_io_check         a config's inputs and outputs against the ONNX model's, Triton's words
    platform              the `platform`/`backend` pair and the model file name
    python_based          Triton's Python-based backends (`--backend-directory`): their model.py
    repository_agents     a config's `model_repository_agents`: Triton's checksum agent
    validate              refuse the configs Triton refuses
    ensemble              an ensemble's steps and data flow, checked Triton's way
    sequence              a stateful model's `sequence_batching`: controls, idle timeout
    versions              a model's version directories and those its policy serves
    config_name           which file a config is read from (`--model-config-name`)
    fingerprint           a model directory's files (path, mtime, size), to see a change
    config_change         whether two configs differ in their version policy or instances only
    tensorrt_accelerator  the `tensorrt` GPU accelerator of an ONNX config
    torch_compile         `TORCH_COMPILE_OPTIONAL_PARAMETERS`, parsed strictly
    model_parameters      a config's string parameters read as Triton's backends read them
    ort_session_options   a config's onnxruntime session settings, read as Triton's backend
    torch_parameters      the libtorch config parameters (INFERENCE_MODE, weight sharing, ...)
    backend_refusal       what a backend's load refuses that the config alone says
    torch_datatypes       the datatypes a TorchScript model's config may name, Triton's refusals
    errors                ModelConfigError, the one error it raises

Exports the functions and names below.
"""

from __future__ import annotations

from tritonconfig.complete import complete_config
from tritonconfig.config_change import same_but_instances, same_but_versions
from tritonconfig.defaults import fill_defaults
from tritonconfig.ensemble import (
    ENSEMBLE_PLATFORM,
    EnsembleStep,
    UnloadPlan,
    back_with_steps,
    composing_models,
    cycle_error,
    ensemble_cycle,
    ensemble_steps,
    is_ensemble,
    needed_steps,
    unload_plan,
)
from tritonconfig.errors import ModelConfigError
from tritonconfig.onnx_autocomplete import DEFAULT_MAX_BATCH_SIZE, autocomplete_from_onnx
from tritonconfig.onnx_io_check import graph_mismatch, io_mismatch, is_scalar_dims
from tritonconfig.parse import config_from_json, parse_config
from tritonconfig.platform import PLATFORM_BACKENDS, default_model_filename, normalize_platform
from tritonconfig.render import config_to_json
from tritonconfig.repository_agents import run_repository_agents
from tritonconfig.schema import mc
from tritonconfig.sequence import (
    SEQUENCE_IDLE_DEFAULT_US,
    ControlKind,
    SequenceControl,
    is_sequence_model,
    sequence_controls,
    sequence_idle_us,
)
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
    "ENSEMBLE_PLATFORM",
    "PLATFORM_BACKENDS",
    "SEQUENCE_IDLE_DEFAULT_US",
    "TENSORRT_ACCELERATOR",
    "TORCH_COMPILE_PARAMETER",
    "CompileSettings",
    "ControlKind",
    "EnsembleStep",
    "ModelConfigError",
    "SequenceControl",
    "UnloadPlan",
    "autocomplete_from_onnx",
    "available_versions",
    "back_with_steps",
    "compile_settings",
    "complete_config",
    "composing_models",
    "config_from_json",
    "config_to_json",
    "cycle_error",
    "default_model_filename",
    "ensemble_cycle",
    "ensemble_steps",
    "fill_defaults",
    "graph_mismatch",
    "io_mismatch",
    "is_ensemble",
    "is_scalar_dims",
    "is_sequence_model",
    "mc",
    "needed_steps",
    "normalize_platform",
    "parse_compile_settings",
    "parse_config",
    "run_repository_agents",
    "same_but_instances",
    "same_but_versions",
    "select_versions",
    "sequence_controls",
    "sequence_idle_us",
    "tensorrt_parameters",
    "tensorrt_provider_options",
    "unload_plan",
    "validate_config",
]
