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
from activator.errors import ConfigError, UnknownModel

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


def _load_entry(directory: Path, defaults: ScaleSettings) -> ModelEntry:
    name = directory.name
    config = model_config_pb2.ModelConfig()
    path = directory / "config.pbtxt"
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if config.name and config.name != name:
        raise ConfigError(f"{path}: name {config.name!r} does not match directory {name!r}")
    config.name = name
    params = {k: v.string_value for k, v in config.parameters.items()}
    settings = validated(defaults, params, model=name)
    return ModelEntry(name, directory, config, _served_versions(directory, config), settings)


class Repository:
    """Models of one repository directory, scanned once at start-up."""

    def __init__(self, root: Path, entries: dict[str, ModelEntry]) -> None:
        self.root = root
        self._entries = entries

    @classmethod
    def scan(cls, root: Path, defaults: ScaleSettings) -> Repository:
        """Read every `<root>/<model>/config.pbtxt`; raises ConfigError on any invalid one."""
        if not root.is_dir():
            raise ConfigError(f"model repository {str(root)!r} is not a directory")
        entries: dict[str, ModelEntry] = {}
        for directory in sorted(root.iterdir()):
            if not directory.is_dir() or not (directory / "config.pbtxt").is_file():
                continue
            if not is_model_name(directory.name):
                logger.warning("skipping %r: not a model name", directory.name)
                continue
            entries[directory.name] = _load_entry(directory, defaults)
        return cls(root, entries)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str, version: str | None = None) -> ModelEntry:
        """The model called `name` (serving `version` if given); UnknownModel otherwise."""
        entry = self._entries.get(name) if is_model_name(name) else None
        if entry is None:
            raise UnknownModel(f"unknown model: '{name[:200]}'")
        if version is not None and version not in entry.versions:
            raise UnknownModel(f"unknown version '{version[:50]}' of model '{name}'")
        return entry
