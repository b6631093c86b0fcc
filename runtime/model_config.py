"""Parse, normalise, validate and auto-complete `config.pbtxt`; render it as Triton JSON."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format

from runtime.errors import RepositoryError
from runtime.model_config_schema import mc

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "PLATFORM_BACKENDS",
    "autocomplete_from_onnx",
    "config_from_json",
    "config_to_json",
    "default_model_filename",
    "fill_defaults",
    "normalize_platform",
    "parse_config",
    "validate_config",
]

# Triton's `--backend-config=default-max-batch-size` default for auto-completed models.
DEFAULT_MAX_BATCH_SIZE = 4

# platform -> backend name, both spellings Triton accepts.
PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "pytorch_torch_export": "pytorch",
    "tensorrt_plan": "tensorrt",
}
_BACKEND_PLATFORMS: dict[str, str] = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
_DEFAULT_FILES: dict[str, str] = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
# A version directory's model file -> the backend that serves it (config omits both).
_FILE_BACKENDS: tuple[tuple[str, str], ...] = (
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.pt2", "pytorch"),
    ("model.plan", "tensorrt"),
    ("model.py", "python"),
)
_INT64_TYPES = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:/\-\[\]]+$")


def parse_config(text: str, source: str) -> mc.ModelConfig:
    """Parse config.pbtxt text; a RepositoryError names `source`, the line and the field."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        where = f"{source}:{exc.GetLine()}" if exc.GetLine() else source
        raise RepositoryError(f"{where}: {_strip_position(str(exc))}") from exc
    except (ValueError, UnicodeError) as exc:
        raise RepositoryError(f"{source}: {exc}") from exc
    return config


def _strip_position(message: str) -> str:
    return re.sub(r"^\d+:\d+ : ", "", message)


def config_from_json(text: str, source: str) -> mc.ModelConfig:
    """Parse a ModelConfig given as JSON (the `config` load parameter)."""
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, ValueError, RecursionError) as exc:
        raise RepositoryError(f"{source}: {exc}") from exc
    return config


def normalize_platform(config: mc.ModelConfig, version_dir: Path | None, source: str) -> None:
    """Fill the `platform`/`backend` pair Triton's way; infer it from the model file if unset."""
    if not config.platform and not config.backend and version_dir is not None:
        _infer_from_files(config, version_dir)
    if config.platform and not config.backend:
        if config.platform not in PLATFORM_BACKENDS:
            raise RepositoryError(f"{source}: unknown platform '{config.platform}'")
        config.backend = PLATFORM_BACKENDS[config.platform]
    elif config.backend and not config.platform and config.backend in _BACKEND_PLATFORMS:
        if config.backend != "pytorch" or not _has_file(version_dir, config, "model.pt2"):
            config.platform = _BACKEND_PLATFORMS[config.backend]
        else:
            config.platform = "pytorch_torch_export"
    elif config.platform and config.backend:
        expected = PLATFORM_BACKENDS.get(config.platform)
        if expected is not None and expected != config.backend:
            raise RepositoryError(
                f"{source}: platform '{config.platform}' does not match backend '{config.backend}'"
            )
    if not config.backend:
        raise RepositoryError(
            f"{source}: no 'platform' or 'backend' set and no model file to infer it from"
        )
    if config.backend not in _DEFAULT_FILES:
        raise RepositoryError(f"{source}: unsupported backend '{config.backend}'")


def _infer_from_files(config: mc.ModelConfig, version_dir: Path) -> None:
    for filename, backend in _FILE_BACKENDS:
        if (version_dir / filename).is_file():
            config.backend = backend
            if filename == "model.pt2":
                config.platform = "pytorch_torch_export"
            return


def _has_file(version_dir: Path | None, config: mc.ModelConfig, name: str) -> bool:
    if config.default_model_filename:
        return config.default_model_filename.endswith(".pt2")
    return version_dir is not None and (version_dir / name).is_file()


def default_model_filename(config: mc.ModelConfig) -> str:
    """The model file inside a version directory: `default_model_filename` or the platform's."""
    if config.default_model_filename:
        return config.default_model_filename
    if config.platform == "pytorch_torch_export":
        return "model.pt2"
    return _DEFAULT_FILES.get(config.backend, "model")


def fill_defaults(config: mc.ModelConfig, *, gpu_available: bool) -> None:
    """Fields Triton fills before it reports a config (observed on Triton 2.51)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if len(config.instance_group) == 0:
        config.instance_group.add(name=config.name)  # Triton names it after the model
    if config.backend == "python" and not config.default_model_filename:
        config.default_model_filename = "model.py"
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        batching = config.dynamic_batching
        if len(batching.preferred_batch_size) == 0:
            batching.preferred_batch_size.append(config.max_batch_size)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.count < 1:
            group.count = 1
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            use_gpu = gpu_available and config.backend != "python"
            group.kind = (
                mc.ModelInstanceGroup.KIND_GPU if use_gpu else (mc.ModelInstanceGroup.KIND_CPU)
            )
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and len(group.gpus) == 0:
            group.gpus.append(0)


def validate_config(config: mc.ModelConfig, source: str) -> None:
    """Refuse configs Triton would refuse; every message names `source` and the field."""
    if config.max_batch_size < 0:
        raise RepositoryError(f"{source}: max_batch_size = {config.max_batch_size}, must be >= 0")
    _validate_ios(config.input, "input", config, source)
    _validate_ios(config.output, "output", config, source)
    if config.backend != "python" and (len(config.input) == 0 or len(config.output) == 0):
        raise RepositoryError(f"{source}: model must declare at least one input and one output")
    for group in config.instance_group:
        if group.count < 0:
            raise RepositoryError(
                f"{source}: instance_group '{group.name}' count = {group.count}, must be >= 1"
            )
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL and config.backend != "python":
            raise RepositoryError(f"{source}: instance_group kind KIND_MODEL is not supported")
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 1:
        raise RepositoryError(
            f"{source}: version_policy.latest.num_versions = {policy.latest.num_versions}, "
            "must be >= 1"
        )


def _validate_ios(ios: Iterable[Any], field: str, config: mc.ModelConfig, source: str) -> None:
    seen: set[str] = set()
    for io in ios:
        label = f"{field} '{io.name}'"
        if not io.name:
            raise RepositoryError(f"{source}: {field} without a name")
        if not _NAME_RE.match(io.name):
            raise RepositoryError(f"{source}: {label} has an invalid name")
        if io.name in seen:
            raise RepositoryError(f"{source}: duplicate {field} name '{io.name}'")
        seen.add(io.name)
        if io.data_type in (mc.TYPE_INVALID,) or io.data_type not in mc.DataType.values():
            raise RepositoryError(f"{source}: {label} data_type must be set to a valid TYPE_*")
        if len(io.dims) == 0 and not io.HasField("reshape") and config.max_batch_size == 0:
            raise RepositoryError(f"{source}: {label} dims must be set")
        for dim in io.dims:
            if dim < -1 or dim == 0:
                raise RepositoryError(
                    f"{source}: {label} dims = {list(io.dims)}, each must be -1 or >= 1"
                )
        if io.HasField("reshape"):
            for dim in io.reshape.shape:
                if dim < -1:
                    raise RepositoryError(
                        f"{source}: {label} reshape.shape = {list(io.reshape.shape)}, "
                        "each must be -1 or >= 0"
                    )


_ONNX_TO_CONFIG: dict[int, int] = {
    1: mc.TYPE_FP32,
    2: mc.TYPE_UINT8,
    3: mc.TYPE_INT8,
    4: mc.TYPE_UINT16,
    5: mc.TYPE_INT16,
    6: mc.TYPE_INT32,
    7: mc.TYPE_INT64,
    8: mc.TYPE_STRING,
    9: mc.TYPE_BOOL,
    10: mc.TYPE_FP16,
    11: mc.TYPE_FP64,
    12: mc.TYPE_UINT32,
    13: mc.TYPE_UINT64,
    16: mc.TYPE_BF16,
}


def _onnx_ios(path: Path, source: str) -> tuple[list[tuple[str, int, list[int]]], ...]:
    import onnx  # lazily: only configs that need auto-completion pay for it

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise RepositoryError(f"{source}: cannot read ONNX model {path.name}: {exc}") from exc
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    result: list[list[tuple[str, int, list[int]]]] = []
    for values in ([v for v in graph.input if v.name not in initializers], list(graph.output)):
        ios = []
        for value in values:
            tensor = value.type.tensor_type
            if tensor.elem_type not in _ONNX_TO_CONFIG:
                raise RepositoryError(
                    f"{source}: ONNX tensor '{value.name}' has unsupported element type "
                    f"{tensor.elem_type}"
                )
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            ios.append((value.name, _ONNX_TO_CONFIG[tensor.elem_type], dims))
        result.append(ios)
    return result[0], result[1]


def autocomplete_from_onnx(config: mc.ModelConfig, model_path: Path, source: str) -> None:
    """Triton's ONNX auto-complete: inputs/outputs from the graph, max_batch_size when batchable."""
    if len(config.input) > 0 and len(config.output) > 0:
        return
    inputs, outputs = _onnx_ios(model_path, source)
    everything = inputs + outputs
    batchable = bool(everything) and all(dims and dims[0] == -1 for _, _, dims in everything)
    strip = False
    if config.max_batch_size == 0 and batchable:
        # Triton: a batchable model gets default-max-batch-size and the dynamic batcher.
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        strip = True
        if not config.HasField("sequence_batching"):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size > 0:
        strip = batchable
    if len(config.input) == 0:
        for name, dtype, dims in inputs:
            config.input.add(name=name, data_type=dtype, dims=dims[1:] if strip else dims)
    if len(config.output) == 0:
        for name, dtype, dims in outputs:
            config.output.add(name=name, data_type=dtype, dims=dims[1:] if strip else dims)


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's `/config` returns it: proto names, defaults, int64 as numbers."""
    data = json_format.MessageToDict(
        config, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    _int64_to_numbers(config.DESCRIPTOR, data)
    return _in_field_order(config.DESCRIPTOR, data)


def _in_field_order(desc: descriptor.Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its keys in the .proto's declaration order, as Triton writes them."""
    ordered: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        sub = field.message_type
        if sub is not None and not sub.GetOptions().map_entry:
            if isinstance(value, list):
                value = [_in_field_order(sub, v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = _in_field_order(sub, value)
        ordered[field.name] = value
    for key, value in data.items():  # nothing should be left, but never drop a field
        ordered.setdefault(key, value)
    return ordered


def _int64_to_numbers(desc: descriptor.Descriptor, data: dict[str, Any]) -> None:
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
            sub = field.message_type
            if sub is None:
                continue
            if sub.GetOptions().map_entry:
                _map_int64_to_numbers(sub, value)
            elif isinstance(value, list):
                for item in value:
                    _int64_to_numbers(sub, item)
            elif isinstance(value, dict):
                _int64_to_numbers(sub, value)


def _map_int64_to_numbers(entry: descriptor.Descriptor, value: dict[str, Any]) -> None:
    value_field = entry.fields_by_name["value"]
    if value_field.message_type is not None:
        for item in value.values():
            _int64_to_numbers(value_field.message_type, item)
    elif value_field.type in _INT64_TYPES:
        for key in list(value):
            value[key] = int(value[key])
