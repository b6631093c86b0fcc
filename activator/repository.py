"""The activator's read-only view of a Triton model repository: names, configs, metadata.

It answers model metadata, config and readiness without waking a model, and supplies each
model's `thaw.*` parameters. Parsing uses the protobuf schema tritonclient ships.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc import model_config_pb2

from activator.config import ScaleSettings, validated
from activator.errors import ConfigError, ModelUnavailable, UnknownModel

__all__ = ["ModelEntry", "Repository", "is_model_name"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_INT64_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}
# Triton's platform <-> backend spellings, and model files that name the backend when the
# config names neither (the runtime completes configs the same way; answers must match).
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
_FILE_BACKENDS = (
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.pt2", "pytorch"),
    ("model.plan", "tensorrt"),
    ("model.py", "python"),
)


def is_model_name(name: str) -> bool:
    """True for a plain model name: never a path, never `..`, never a shell word."""
    return bool(_NAME.match(name)) and name not in {".", ".."}


@dataclass(frozen=True)
class ModelEntry:
    """One model of the repository as the activator sees it."""

    name: str
    directory: Path
    config: model_config_pb2.ModelConfig
    versions: tuple[str, ...]  # served versions, per the version policy, ascending
    settings: ScaleSettings

    def metadata(self) -> dict[str, Any]:
        """KServe v2 model metadata JSON."""
        batch = self.config.max_batch_size > 0
        return {
            "name": self.name,
            "versions": list(self.versions),
            "platform": _platform(self.config),
            "inputs": [_tensor_meta(t, batch) for t in self.config.input],
            "outputs": [_tensor_meta(t, batch) for t in self.config.output],
        }

    def config_json(self) -> dict[str, Any]:
        """The ModelConfig as Triton's JSON: proto field names, int64 fields as numbers."""
        return _message_json(self.config)

    def version_dir_bytes(self) -> int:
        """Size in bytes of the newest served version's files (sizes a restore arena)."""
        if not self.versions:
            return 0
        root = self.directory / self.versions[-1]
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _platform(config: model_config_pb2.ModelConfig) -> str:
    return config.platform or config.backend


def _tensor_meta(tensor: Any, batch: bool) -> dict[str, Any]:
    datatype = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    dims = [int(d) for d in tensor.dims]
    return {
        "name": tensor.name,
        "datatype": "BYTES" if datatype == "STRING" else datatype,
        "shape": ([-1] if batch else []) + dims,
    }


def _message_json(message: Any) -> dict[str, Any]:
    raw = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers_for_int64(message.DESCRIPTOR, raw)


def _numbers_for_int64(desc: descriptor.Descriptor, value: dict[str, Any]) -> dict[str, Any]:
    """MessageToDict writes int64 as strings (proto3 JSON); Triton writes numbers."""
    for key, item in value.items():
        fd = desc.fields_by_name.get(key)
        if fd is None:
            continue
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vfd = fd.message_type.fields_by_name["value"]
            if vfd.message_type is not None:
                for k, v in item.items():
                    item[k] = _numbers_for_int64(vfd.message_type, v)
        elif fd.message_type is not None:
            items = item if isinstance(item, list) else [item]
            for sub in items:
                _numbers_for_int64(fd.message_type, sub)
        elif fd.type in _INT64_TYPES:
            value[key] = [int(x) for x in item] if isinstance(item, list) else int(item)
    return value


def _served_versions(directory: Path, config: model_config_pb2.ModelConfig) -> tuple[str, ...]:
    found = sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        chosen = found
    elif kind == "specific":
        chosen = [v for v in found if v in set(policy.specific.versions)]
    else:
        count = policy.latest.num_versions if kind == "latest" else 1
        chosen = found[-max(count, 1) :]
    return tuple(str(v) for v in chosen)


def _complete(config: model_config_pb2.ModelConfig, directory: Path, source: str) -> None:
    """Fill what the runtime fills before it reports a config (platform/backend pair, version
    policy, instance groups on CPU), so metadata and config match a direct `thaw serve`."""
    if not config.platform and not config.backend:
        versions = [p for p in directory.iterdir() if p.name.isdigit() and p.is_dir()]
        newest = max(versions, key=_num) if versions else directory
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
        export = config.backend == "pytorch" and _has_pt2(config, directory)
        config.platform = "pytorch_torch_export" if export else _BACKEND_PLATFORMS[config.backend]
    if not config.backend:
        raise ConfigError(
            f"{source}: no 'platform' or 'backend' set and no model file to infer it from"
        )
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
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO:
            group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU


def _num(path: Path) -> int:
    return int(path.name)


def _has_pt2(config: model_config_pb2.ModelConfig, directory: Path) -> bool:
    if config.default_model_filename:
        return config.default_model_filename.endswith(".pt2")
    return any(directory.glob("[0-9]*/model.pt2"))


def _load_entry(directory: Path, defaults: ScaleSettings) -> ModelEntry:
    """One model; ConfigError when its config is missing, unreadable or invalid."""
    name = directory.name
    config = model_config_pb2.ModelConfig()
    path = directory / "config.pbtxt"
    if not path.is_file():
        raise ConfigError(f"{path}: missing (thaw up needs a config.pbtxt for every model)")
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except text_format.ParseError as exc:
        where = f"{path}:{exc.GetLine()}" if exc.GetLine() else str(path)
        raise ConfigError(f"{where}: {re.sub(r'^[0-9]+:[0-9]+ : ', '', str(exc))}") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if config.name and config.name != name:
        raise ConfigError(f"{path}: name {config.name!r} does not match directory {name!r}")
    config.name = name
    _complete(config, directory, str(path))
    params = {k: v.string_value for k, v in config.parameters.items()}
    settings = validated(defaults, params, model=name)
    return ModelEntry(name, directory, config, _served_versions(directory, config), settings)


class Repository:
    """Models of one repository directory, scanned once at start-up.

    A model whose config cannot be used is *unavailable*: it is listed (index, status) with
    the reason, its routes answer 503 with that reason, and every other model is served.
    """

    def __init__(
        self, root: Path, entries: dict[str, ModelEntry], unavailable: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self._entries = entries
        self.unavailable: dict[str, str] = dict(unavailable or {})

    @classmethod
    def scan(cls, root: Path, defaults: ScaleSettings, *, strict: bool = False) -> Repository:
        """Read every `<root>/<model>/config.pbtxt`. An invalid model is recorded as
        unavailable, or raises ConfigError when `strict`. Invalid `thaw.*` settings always
        raise: they are the operator's mistake, refused at start-up."""
        if not root.is_dir():
            raise ConfigError(f"model repository {str(root)!r} is not a directory")
        entries: dict[str, ModelEntry] = {}
        unavailable: dict[str, str] = {}
        for directory in sorted(root.iterdir()):
            if not directory.is_dir() or directory.name.startswith("."):
                continue
            if not is_model_name(directory.name):
                logger.warning("skipping %r: not a model name", directory.name)
                continue
            try:
                entries[directory.name] = _load_entry(directory, defaults)
            except ConfigError as exc:
                if strict or exc.message.startswith(("`thaw.", "unknown setting `thaw.")):
                    raise
                logger.warning("model=%s unavailable: %s", directory.name, exc.message)
                unavailable[directory.name] = exc.message
        return cls(root, entries, unavailable)

    def names(self) -> list[str]:
        """Models that can be served (unavailable ones are in `unavailable`)."""
        return sorted(self._entries)

    def get(self, name: str, version: str | None = None) -> ModelEntry:
        """The model called `name` (serving `version` if given); UnknownModel otherwise,
        ModelUnavailable (503) when its config could not be used."""
        entry = self._entries.get(name) if is_model_name(name) else None
        if entry is None:
            if name in self.unavailable:
                reason = self.unavailable[name]
                raise ModelUnavailable(f"model '{name}' is not ready: {reason}")
            raise UnknownModel(f"Request for unknown model: '{name[:200]}' is not found")
        if version is not None and version not in entry.versions:
            raise UnknownModel(
                f"Request for unknown model: '{name}' version {version[:50]} is not found"
            )
        return entry
