"""KServe v2 / Triton datatypes: names, numpy dtypes, element sizes and BYTES (de)serialization.

Three spellings meet here: the v2 protocol name (`"FP32"`), the model-config enum
(`TYPE_FP32`, or `TYPE_STRING` for `BYTES`: thawwire.datatype_names, which v2 model metadata
uses too) and numpy. BYTES tensors are numpy object arrays of `bytes`; on the wire (binary
extension) each element is a 4-byte little-endian length followed by its bytes. BF16 has no
numpy dtype: it travels as raw 2-byte words in a `uint16` array view.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from runtime.errors import InvalidInput
from thawwire.datatype_names import ELEMENT_BYTES, config_to_v2, v2_to_config

__all__ = [
    "V2_DATATYPES",
    "config_to_v2",
    "deserialize_bytes",
    "element_size",
    "from_wire",
    "numpy_to_v2",
    "serialize_bytes",
    "string_count_refusal",
    "v2_to_config",
    "v2_to_numpy",
    "wire_dtype",
]

# v2 name -> numpy dtype. BYTES maps to object; BF16 to a uint16 carrier.
_V2_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}

V2_DATATYPES: frozenset[str] = frozenset(_V2_TO_NUMPY)

# Bytes per element on the wire: thawwire's table, the one `thaw up` checks sizes with too.
_ELEMENT_SIZE: dict[str, int] = {name: ELEMENT_BYTES[name] for name in _V2_TO_NUMPY}

# Little-endian wire dtypes of the fixed-size datatypes (BF16 travels as uint16 words). Made
# from their strings ("<i4"), which numpy normalizes: on a little-endian host the native dtype
# (`int32`, as Triton hands a model), where `newbyteorder("<")` would keep an explicit '<'.
_WIRE: dict[str, np.dtype] = {
    name: np.dtype(dt.newbyteorder("<").str) for name, dt in _V2_TO_NUMPY.items() if name != "BYTES"
}

_NUMPY_TO_V2: dict[np.dtype, str] = {
    dt: name for name, dt in _V2_TO_NUMPY.items() if name not in ("BF16",)
}


def v2_to_numpy(datatype: str) -> np.dtype:
    """The numpy dtype a tensor of this v2 datatype is held in; InvalidInput if unknown."""
    try:
        return _V2_TO_NUMPY[datatype]
    except KeyError:
        raise InvalidInput(f"unknown datatype '{datatype}'") from None


def element_size(datatype: str) -> int:
    """Bytes per element on the wire; 0 for BYTES (variable length)."""
    try:
        return _ELEMENT_SIZE[datatype]
    except KeyError:
        raise InvalidInput(f"unknown datatype '{datatype}'") from None


def wire_dtype(datatype: str) -> np.dtype:
    """The little-endian dtype of a fixed-size datatype's wire bytes (BF16: uint16 words)."""
    try:
        return _WIRE[datatype]
    except KeyError:
        raise InvalidInput(f"datatype '{datatype}' has no fixed-size wire format") from None


def from_wire(
    buffer: bytes | memoryview,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    *,
    model: str = "",
) -> np.ndarray:
    """A zero-copy (read-only) array of `shape` over a tensor's wire bytes; sizes must match
    (Triton's texts, naming `model` when given).

    `shape` must already be checked (non-negative, element count in range).
    """
    if datatype == "BYTES":
        return deserialize_bytes(buffer, shape, name=name, model=model)
    count = 1
    for dim in shape:
        count *= dim
    expected = count * element_size(datatype)
    if len(buffer) != expected:
        raise InvalidInput(
            f"input byte size mismatch for input '{name}'{_for_model(model)}. Expected "
            f"{expected}, got {len(buffer)}"
        )
    array = np.frombuffer(buffer, dtype=wire_dtype(datatype))
    if len(shape) != 1:  # a 1-D shape is (count,): what frombuffer made
        array = array.reshape(shape)
    if datatype == "BOOL" and bytes(buffer).translate(None, b"\x00\x01"):
        raise InvalidInput(f"input '{name}' holds BOOL bytes other than 0 and 1")
    return array


def _for_model(model: str) -> str:
    return f" for model '{model}'" if model else ""


def string_count_refusal(count: int, got: int, name: str, model: str = "") -> InvalidInput:
    """Triton's refusal (core's `ValidateBytesInputs`) of a BYTES input of `name` holding `got`
    elements where its shape needs `count`: its walk stops at the first one too many."""
    what = f"inference input '{name}'{_for_model(model)}"
    if got > count:
        return InvalidInput(
            f"unexpected number of string elements {count + 1} for {what}, expecting {count}"
        )
    return InvalidInput(f"expected {count} string elements for {what}, got {got}")


def numpy_to_v2(dtype: np.dtype) -> str:
    """The v2 datatype of a numpy dtype (str/bytes/object -> BYTES)."""
    found = _NUMPY_TO_V2.get(dtype)  # fast path: a numeric dtype object
    if found is not None:
        return found
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _NUMPY_TO_V2[dtype]
    except KeyError:
        raise InvalidInput(f"numpy dtype {dtype} has no v2 datatype") from None


def serialize_bytes(array: np.ndarray) -> bytes:
    """Triton's BYTES wire format: per element (C order) a uint32 LE length then the bytes."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, bytes | bytearray):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(
    buffer: bytes | memoryview, shape: Sequence[int], *, name: str = "", model: str = ""
) -> np.ndarray:
    """Parse a BYTES wire buffer into an object array of `shape`; lies about lengths -> 400.

    The element count is checked as Triton's core does (`ValidateBytesInputs`): one element
    too many stops the walk, too few is counted at the end (before a cut last element is
    named); its texts, naming input `name` and `model`.
    """
    count = 1
    for dim in shape:
        count *= dim
    what = f"inference input '{name}'{_for_model(model)}"
    view = memoryview(buffer)
    items: list[bytes] = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise InvalidInput(
                f"incomplete string length indicator for {what}, expecting 4 bytes but only "
                f"{len(view) - offset} bytes available. Please make sure the string length "
                "indicator is in one buffer."
            )
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if len(items) == count:
            raise string_count_refusal(count, count + 1, name, model)
        if offset + length > len(view):
            # The cut element is the last one read: Triton counts elements before it
            # looks at the cut, so a short count is named first.
            if len(items) + 1 != count:
                raise string_count_refusal(count, len(items) + 1, name, model)
            raise InvalidInput(  # (Triton 2.51's text names no model here)
                f"incomplete string data for inference input '{name}', expecting string of "
                f"length {length} but only {len(view) - offset} bytes available"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise string_count_refusal(count, len(items), name, model)
    out = np.empty(count, dtype=np.object_)
    out[:] = items
    return out.reshape(tuple(shape))
