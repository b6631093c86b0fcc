"""The two spellings of a tensor datatype: the v2 protocol's (`FP32`, `BYTES`) and the model
config's enum names (`TYPE_FP32`, `TYPE_STRING`)."""

from __future__ import annotations

__all__ = ["config_to_v2", "v2_to_config"]


def config_to_v2(config_type: str) -> str:
    """`TYPE_FP32` -> `FP32`, `TYPE_STRING` -> `BYTES`."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def v2_to_config(datatype: str) -> str:
    """`FP32` -> `TYPE_FP32`, `BYTES` -> `TYPE_STRING`."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
