"""safetensors files: every tensor of a checkpoint's `*.safetensors` shards moves into the image.

The header is parsed here (8-byte little-endian length + JSON) so bf16 needs no torch and a
hostile file is refused with a clear error instead of an out-of-range read.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snapshotter.errors import BuildError
from snapshotter.manifest import DTYPES
from snapshotter.sources import ExtractedModel, SourceTensor
from snapshotter.sources.checkpoint_dir import CheckpointDir, check_weight_map

_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "BOOL": "bool",
}
_MAX_HEADER = 100 << 20


def extract_checkpoint(checkpoint: CheckpointDir) -> ExtractedModel:
    """Every tensor of a checkpoint's shards (checked against its index when it has one), with
    the shards and the other files for the manifest."""
    extracted = _extract_shards(list(checkpoint.shards))
    if checkpoint.weight_map is not None:
        check_weight_map(checkpoint.weight_map, extracted.holders)
    return ExtractedModel(
        framework="safetensors",
        tensors=extracted.model.tensors,
        shards=checkpoint.shards,
        files=checkpoint.files,
    )


@dataclass(frozen=True)
class _Extracted:
    model: ExtractedModel
    holders: dict[str, str]
    """Tensor name -> the file name of the shard that holds it."""


def _extract_shards(paths: list[Path]) -> _Extracted:
    """Map every tensor of `paths` (read-only memmaps; the builder copies them once)."""
    tensors: list[SourceTensor] = []
    holders: dict[str, str] = {}
    for path in sorted(paths):
        for tensor in _read_file(path):
            if tensor.name in holders:
                raise BuildError(
                    f"{path}: tensor {tensor.name!r} is also in {holders[tensor.name]}"
                )
            holders[tensor.name] = path.name
            tensors.append(tensor)
    return _Extracted(ExtractedModel(framework="safetensors", tensors=tensors), holders)


def _read_file(path: Path) -> list[SourceTensor]:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise BuildError(f"{path}: truncated safetensors header")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > min(_MAX_HEADER, size - 8):
            raise BuildError(f"{path}: header length {hlen} is out of range")
        try:
            header = json.loads(f.read(hlen))
        except ValueError as exc:
            raise BuildError(f"{path}: header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise BuildError(f"{path}: header is not a JSON object")
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + hlen) if size > 8 + hlen else None
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        out.append(_tensor(path, name, info, data))
    return out


def _tensor(path: Path, name: str, info: object, data: np.ndarray | None) -> SourceTensor:
    try:
        dtype = _DTYPES[info["dtype"]]  # type: ignore[index]
        shape = tuple(int(d) for d in info["shape"])  # type: ignore[index]
        begin, end = (int(x) for x in info["data_offsets"])  # type: ignore[index]
    except (KeyError, TypeError, ValueError) as exc:
        raise BuildError(f"{path}: tensor {name!r} has a bad header entry") from exc
    np_dtype, itemsize = DTYPES[dtype]
    total = 0 if data is None else len(data)
    if 0 <= begin <= total < end:
        raise BuildError(
            f"{path}: tensor {name!r} ends at data byte {end}, past the file's {total}: "
            "the file is truncated"
        )
    if not (0 <= begin <= end <= total) or end - begin != math.prod(shape) * itemsize:
        raise BuildError(f"{path}: tensor {name!r} offsets do not match its shape")
    raw = np.empty(0, np.uint8) if data is None else data[begin:end]
    return SourceTensor(name, dtype, raw.view(np_dtype).reshape(shape))
