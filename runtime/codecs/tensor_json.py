"""The JSON `data` of a v2 tensor (flat or nested lists) -> a numpy array of the declared shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.datatypes import v2_to_numpy
from runtime.errors import InvalidInput

__all__ = ["float32_to_bf16", "json_to_array"]


def json_to_array(
    data: Any, name: str, datatype: str, shape: tuple[int, ...], count: int
) -> np.ndarray:
    """Convert JSON `data` into an array of `shape`; 400 on wrong count, type or range."""
    if not isinstance(data, list):
        raise InvalidInput(f"input '{name}' 'data' must be a JSON list")
    if datatype == "BYTES":
        array = _bytes_array(data, name)
    else:
        dtype = np.dtype(np.float32) if datatype == "BF16" else v2_to_numpy(datatype)
        try:
            array = np.array(data, dtype=dtype)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidInput(f"input '{name}' data is not valid {datatype}: {exc}") from None
        if datatype == "BF16":
            array = float32_to_bf16(array)
    if array.size != count:
        raise InvalidInput(
            f"input '{name}' has {array.size} elements of data but shape {list(shape)} "
            f"needs {count}"
        )
    if array.ndim == 1 and len(shape) == 1:
        return array  # flat data for a 1-D shape: already (count,), which is `shape`
    return array.reshape(shape)


def _bytes_array(data: list[Any], name: str) -> np.ndarray:
    """Flatten (possibly nested) JSON strings into an object array of UTF-8 `bytes`."""
    items: list[bytes] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                items.append(item.encode("utf-8", "surrogatepass"))
            elif isinstance(item, list):
                stack.append(iter(item))
                break
            else:
                raise InvalidInput(f"input '{name}' BYTES data must be strings, got {item!r:.40}")
        else:
            stack.pop()
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even), held in a uint16 array."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    out = rounded.astype(np.uint16)
    if nan.any():
        out[nan] = 0x7FC0
    return out.reshape(values.shape)
