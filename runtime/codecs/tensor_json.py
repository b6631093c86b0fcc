"""The JSON `data` of a v2 tensor (flat or nested lists) -> a numpy array of the declared shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.datatypes import string_count_refusal, v2_to_numpy
from runtime.errors import InvalidInput

__all__ = ["SHAPE_MISMATCH", "float32_to_bf16", "json_to_array"]

# A tensor's JSON `data` holds more or fewer elements than its `shape` (Triton's text).
SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def json_to_array(
    data: Any, name: str, datatype: str, shape: tuple[int, ...], count: int, model: str = ""
) -> np.ndarray:
    """Convert JSON `data` into an array of `shape`; 400 on wrong count, type or range.

    As Triton's HTTP front reads it: the leaves in order whatever the nesting (`[[1, 2], [3]]`
    is three elements), a leaf of the wrong kind refused as it is reached, and an element
    past the shape's count refused there (so a bad leaf after it is never looked at).
    A BYTES input's count is checked as Triton's core checks it, naming `model`."""
    if not isinstance(data, list):
        raise InvalidInput(f"input '{name}' 'data' must be a JSON list")
    if datatype == "BYTES":
        array = _bytes_array(data, name)
        if array.size != count:
            raise string_count_refusal(count, array.size, name, model)
        return array.reshape(shape)
    dtype = np.dtype(np.float32) if datatype == "BF16" else v2_to_numpy(datatype)
    source: list[Any] = data
    try:
        probe = np.array(data)  # the widest JSON kind of its leaves; even nesting as dims
    except (ValueError, OverflowError):  # ragged nesting, whose leaves Triton reads all the same
        source = _leaves(data)
        probe = np.array(source)
    if probe.size != count:
        first = _leaves(data)[:count]  # what Triton reads before it finds the count wrong
        _check_json_kind(np.array(first), first, name, dtype)
        raise InvalidInput(SHAPE_MISMATCH)  # Triton's exact words (qa/L0_http greps them)
    _check_json_kind(probe, source, name, dtype)
    try:
        array = np.array(source, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(f"input '{name}' data is not valid {datatype}: {exc}") from None
    if datatype == "BF16":
        array = float32_to_bf16(array)
    if array.ndim == 1 and len(shape) == 1:
        return array  # flat data for a 1-D shape: already (count,), which is `shape`
    return array.reshape(shape)


def _leaves(data: list[Any]) -> list[Any]:
    """The leaves of nested lists `data`, in order."""
    leaves: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            leaves.append(item)
        else:
            stack.pop()
    return leaves


# What JSON values a numeric tensor takes, as Triton's JSON parser takes them (2.51): numbers
# for floats, integers (never 1.5 or true) for ints, true/false for BOOL; its texts. numpy
# alone would truncate 1.5 to an int and read true or "2" as a float.
_KINDS: dict[str, tuple[str, str]] = {
    "f": ("iuf", "attempt to access JSON non-number as double"),
    "i": ("iu", "attempt to access JSON non-signed-integer as signed-integer"),
    "u": ("iu", "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "b": ("b", "attempt to access JSON non-boolean as boolean"),
}


def _check_json_kind(probe: np.ndarray, data: list[Any], name: str, dtype: np.dtype[Any]) -> None:
    """400 when `data` (whose array `probe` numpy made without a dtype) holds a JSON value of
    the wrong kind for `dtype` (Triton's words)."""
    allowed, text = _KINDS[dtype.kind]
    kind = probe.dtype.kind  # int64, float64, bool, str or object: the widest
    if kind in allowed or not data:
        return
    if kind in "fO" and dtype.kind != "b" and _all_ints(data):
        return  # integers past int64 make numpy choose float64 (beside others) or object
    raise InvalidInput(f"Unable to parse 'data': {text} (input '{name}')")


def _all_ints(data: list[Any]) -> bool:
    """Whether every leaf of nested lists `data` is a JSON integer."""
    stack: list[Any] = [data]
    while stack:
        for item in stack.pop():
            if isinstance(item, list):
                stack.append(item)
            elif type(item) is not int:
                return False
    return True


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
                raise InvalidInput(  # Triton's text, and the input
                    "Unable to parse JSON bytes array: attempt to access JSON non-string as "
                    f"string (input '{name}')"
                )
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
