"""What a replica does to a model's config before it answers for it, done without a replica.

The activator answers model metadata and config at zero replicas, and those answers must equal
a `thaw serve` replica's. The runtime completes a config.pbtxt before it reports it (platform
and backend, version selection, ONNX auto-complete, Triton's defaults) and refuses configs
Triton refuses; the import contracts keep the activator from importing the runtime, so the
same steps are written here again, in the runtime's order (`runtime/repository.py::read_model`,
`runtime/model_config.py`). `tests/integration/activator/test_config_parity.py` compares the
two on every fixture and example model, so the copies cannot drift apart unnoticed.

Not mirrored: a python model's own `auto_complete_config` (it runs the model's code, which only
a replica does); for such a model the answers at zero replicas are the config.pbtxt's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format
from tritonclient.grpc import model_config_pb2 as mc

from activator.errors import ConfigError

__all__ = ["complete_config", "config_json"]

# Triton's `--backend-config=default-max-batch-size` default for auto-completed models.
_DEFAULT_MAX_BATCH_SIZE = 4
_PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "pytorch_torch_export": "pytorch",
    "tensorrt_plan": "tensorrt",
}
_BACKEND_PLATFORMS = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
_DEFAULT_FILES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
# A version directory's model file -> the backend that serves it (config names neither).
_FILE_BACKENDS = (
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
_IO_NAME = re.compile(r"^[A-Za-z0-9_.:/\-\[\]]+$")
_ONNX_TYPES = {
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


def complete_config(config: mc.ModelConfig, directory: Path, source: str) -> tuple[str, ...]:
    """Complete `config` in place as a replica would; return the served versions, ascending.
    ConfigError (the model is unavailable) where a replica would refuse to load it."""
    available = _available_versions(directory)
    newest = directory / str(available[-1]) if available else None
    _normalize_platform(config, newest, source)
    versions = _select_versions(config.version_policy, available, str(directory))
    # A missing model file is left to the wake-up (whose error names it), unlike a replica:
    # `thaw up` reads its repository once, and a file copied in later must still serve.
    if config.backend == "onnxruntime":
        _autocomplete_from_onnx(
            config, directory / str(versions[-1]) / _model_filename(config), source
        )
    _fill_defaults(config)
    _validate(config, source)
    return tuple(str(v) for v in versions)


def config_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as a replica's `/config` writes it: proto field names, every field, int64
    as numbers, keys in the .proto's declaration order."""
    data = json_format.MessageToDict(
        config, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    _int64_to_numbers(config.DESCRIPTOR, data)
    return _in_field_order(config.DESCRIPTOR, data)


# ---- platform, versions, files ---------------------------------------------------------


def _available_versions(directory: Path) -> list[int]:
    try:
        names = [p.name for p in directory.iterdir() if p.is_dir()]
    except OSError as exc:
        raise ConfigError(f"cannot read model directory {directory}: {exc}") from exc
    return sorted(int(n) for n in names if n.isdigit() and n == str(int(n)))


def _normalize_platform(config: mc.ModelConfig, newest: Path | None, source: str) -> None:
    if not config.platform and not config.backend and newest is not None:
        for filename, backend in _FILE_BACKENDS:
            if (newest / filename).is_file():
                config.backend = backend
                if filename == "model.pt2":
                    config.platform = "pytorch_torch_export"
                break
    if config.platform and not config.backend:
        if config.platform not in _PLATFORM_BACKENDS:
            raise ConfigError(f"{source}: unknown platform '{config.platform}'")
        config.backend = _PLATFORM_BACKENDS[config.platform]
    elif config.backend and not config.platform and config.backend in _BACKEND_PLATFORMS:
        export = config.backend == "pytorch" and _has_pt2(config, newest)
        config.platform = "pytorch_torch_export" if export else _BACKEND_PLATFORMS[config.backend]
    elif config.platform and config.backend:
        expected = _PLATFORM_BACKENDS.get(config.platform)
        if expected is not None and expected != config.backend:
            raise ConfigError(
                f"{source}: platform '{config.platform}' does not match backend '{config.backend}'"
            )
    if not config.backend:
        raise ConfigError(
            f"{source}: no 'platform' or 'backend' set and no model file to infer it from"
        )
    if config.backend not in _DEFAULT_FILES:
        raise ConfigError(f"{source}: unsupported backend '{config.backend}'")


def _has_pt2(config: mc.ModelConfig, newest: Path | None) -> bool:
    if config.default_model_filename:
        return config.default_model_filename.endswith(".pt2")
    return newest is not None and (newest / "model.pt2").is_file()


def _model_filename(config: mc.ModelConfig) -> str:
    if config.default_model_filename:
        return config.default_model_filename
    if config.platform == "pytorch_torch_export":
        return "model.pt2"
    return _DEFAULT_FILES.get(config.backend, "model")


def _select_versions(policy: Any, available: list[int], source: str) -> list[int]:
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        chosen = list(available)
    elif choice == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in available]
        if missing:
            raise ConfigError(
                f"{source}: version_policy.specific names versions {missing} that do not exist"
            )
        chosen = wanted
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        chosen = available[-count:] if count > 0 else []
    if not chosen:
        raise ConfigError(f"{source}: no version directory to serve (e.g. {source}/../1/)")
    return chosen


# ---- ONNX auto-complete, defaults, validation -------------------------------------------


def _autocomplete_from_onnx(config: mc.ModelConfig, model_path: Path, source: str) -> None:
    """Triton's ONNX auto-complete: inputs/outputs from the graph, batching when batchable."""
    if len(config.input) > 0 and len(config.output) > 0:
        return
    inputs, outputs = _onnx_ios(model_path, source)
    everything = inputs + outputs
    batchable = bool(everything) and all(dims and dims[0] == -1 for _, _, dims in everything)
    strip = False
    if config.max_batch_size == 0 and batchable:
        config.max_batch_size = _DEFAULT_MAX_BATCH_SIZE
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


_Io = tuple[str, int, list[int]]


def _onnx_ios(path: Path, source: str) -> tuple[list[_Io], list[_Io]]:
    import onnx  # lazily: only configs that need auto-completion pay for it

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError...
        raise ConfigError(f"{source}: cannot read ONNX model {path.name}: {exc}") from exc
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    found: list[list[_Io]] = []
    for values in ([v for v in graph.input if v.name not in initializers], list(graph.output)):
        ios = []
        for value in values:
            tensor = value.type.tensor_type
            if tensor.elem_type not in _ONNX_TYPES:
                raise ConfigError(
                    f"{source}: ONNX tensor '{value.name}' has unsupported element type "
                    f"{tensor.elem_type}"
                )
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            ios.append((value.name, _ONNX_TYPES[tensor.elem_type], dims))
        found.append(ios)
    return found[0], found[1]


def _fill_defaults(config: mc.ModelConfig) -> None:
    """Fields Triton fills before it reports a config; replicas run on CPU (`--target cpu`)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if len(config.instance_group) == 0:
        config.instance_group.add(name=config.name)
    if config.backend == "python" and not config.default_model_filename:
        config.default_model_filename = "model.py"
    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        preferred = config.dynamic_batching.preferred_batch_size
        if len(preferred) == 0:
            preferred.append(config.max_batch_size)
    for index, group in enumerate(config.instance_group):
        group.name = group.name or f"{config.name}_{index}"
        group.count = max(group.count, 1)
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = mc.ModelInstanceGroup.KIND_CPU


def _validate(config: mc.ModelConfig, source: str) -> None:
    if config.max_batch_size < 0:
        raise ConfigError(f"{source}: max_batch_size = {config.max_batch_size}, must be >= 0")
    _validate_ios(config.input, "input", config, source)
    _validate_ios(config.output, "output", config, source)
    if config.backend != "python" and (len(config.input) == 0 or len(config.output) == 0):
        raise ConfigError(f"{source}: model must declare at least one input and one output")
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL and config.backend != "python":
            raise ConfigError(f"{source}: instance_group kind KIND_MODEL is not supported")
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 1:
        raise ConfigError(
            f"{source}: version_policy.latest.num_versions = {policy.latest.num_versions}, "
            "must be >= 1"
        )


def _validate_ios(ios: Iterable[Any], field: str, config: mc.ModelConfig, source: str) -> None:
    seen: set[str] = set()
    for io in ios:
        label = f"{field} '{io.name}'"
        if not io.name:
            raise ConfigError(f"{source}: {field} without a name")
        if not _IO_NAME.match(io.name):
            raise ConfigError(f"{source}: {label} has an invalid name")
        if io.name in seen:
            raise ConfigError(f"{source}: duplicate {field} name '{io.name}'")
        seen.add(io.name)
        if io.data_type == mc.TYPE_INVALID or io.data_type not in mc.DataType.values():
            raise ConfigError(f"{source}: {label} data_type must be set to a valid TYPE_*")
        if len(io.dims) == 0 and not io.HasField("reshape") and config.max_batch_size == 0:
            raise ConfigError(f"{source}: {label} dims must be set")
        if any(d < -1 or d == 0 for d in io.dims):
            raise ConfigError(f"{source}: {label} dims = {list(io.dims)}, each must be -1 or >= 1")
        if io.HasField("reshape") and any(d < -1 for d in io.reshape.shape):
            raise ConfigError(
                f"{source}: {label} reshape.shape = {list(io.reshape.shape)}, "
                "each must be -1 or >= 0"
            )


# ---- JSON ------------------------------------------------------------------------------


def _in_field_order(desc: descriptor.Descriptor, data: dict[str, Any]) -> dict[str, Any]:
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
    """MessageToDict writes int64 as strings (proto3 JSON); Triton writes numbers."""
    for field in desc.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.type == descriptor.FieldDescriptor.TYPE_MESSAGE and field.message_type:
            sub = field.message_type
            if sub.GetOptions().map_entry:
                value_field = sub.fields_by_name["value"]
                for key in list(value):
                    if value_field.message_type is not None:
                        _int64_to_numbers(value_field.message_type, value[key])
                    elif value_field.type in _INT64_TYPES:
                        value[key] = int(value[key])
            elif isinstance(value, list):
                for item in value:
                    _int64_to_numbers(sub, item)
            elif isinstance(value, dict):
                _int64_to_numbers(sub, value)
