"""The two spellings of a tensor datatype: the v2 protocol's (`FP32`, `BYTES`) and the model
config's enum names (`TYPE_FP32`, `TYPE_STRING`); and each v2 datatype's bytes per element."""

from __future__ import annotations

__all__ = ["ELEMENT_BYTES", "config_to_v2", "v2_to_config"]

ELEMENT_BYTES: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 1,
    "UINT16": 2,
    "UINT32": 4,
    "UINT64": 8,
    "INT8": 1,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "FP16": 2,
    "BF16": 2,
    "FP32": 4,
    "FP64": 8,
    "BYTES": 0,
}
"""Bytes per element of each v2 datatype on the wire (BYTES: 0, its elements vary)."""


def config_to_v2(config_type: str) -> str:
    """`TYPE_FP32` -> `FP32`, `TYPE_STRING` -> `BYTES`."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def v2_to_config(datatype: str) -> str:
    """`FP32` -> `TYPE_FP32`, `BYTES` -> `TYPE_STRING`."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
