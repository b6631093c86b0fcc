"""A tensor's system shared-memory reference: its `shared_memory_*` parameters, as Triton reads.

An input or a requested output names a registered region with `shared_memory_region` (a
string), `shared_memory_byte_size` (required with it) and `shared_memory_offset` (optional,
0). REST carries them as JSON values (unsigned integers, as Triton's `AsUInt` reads them:
2**64 - 32 is an offset, -1 is not), gRPC as typed `InferParameter`s (`string_param`,
`int64_param`), each checked with the texts of Triton 2.51's frontends. Both servers read
references here; what a reference points at is thawserver.shm_registry's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thawwire.datatype_names import ELEMENT_BYTES
from thawwire.errors import ErrorKind, SharedMemoryError
from thawwire.grpc_messages import parameter_kind

__all__ = [
    "BYTE_SIZE",
    "OFFSET",
    "REGION",
    "SHM_PARAMETERS",
    "ShmRef",
    "check_input_size",
    "check_json_input",
    "check_json_output",
    "grpc_ref",
    "json_ref",
    "names_shared_memory",
]

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
SHM_PARAMETERS = frozenset({REGION, OFFSET, BYTE_SIZE})
"""The tensor parameters of the extension: consumed by the server, never passed to a model."""

_MAX_UINT64 = (1 << 64) - 1
# What a body must contain, byte for byte, to name a region (JSON key or protobuf map key).
_MARKER = REGION.encode()


@dataclass(frozen=True, slots=True)
class ShmRef:
    """`byte_size` bytes at `offset` into the registered region `region`."""

    region: str
    offset: int
    byte_size: int


def names_shared_memory(data: bytes, end: int | None = None) -> bool:
    """Whether `data[:end]` (a JSON header or a serialized message) may name a region: a
    byte search, no parse, so the requests that do not pay nothing for the extension."""
    return data.find(_MARKER, 0, len(data) if end is None else end) >= 0


def json_ref(params: Mapping[str, Any], tensor: str) -> ShmRef | None:
    """The reference in a REST tensor's `parameters` object, or None when it names none."""
    if REGION not in params:
        _no_region(params, tensor)
        return None
    region = params[REGION]
    if not isinstance(region, str):
        raise _invalid("Unable to parse 'shared_memory_region'")
    offset = _json_uint(params.get(OFFSET, 0), OFFSET)
    if BYTE_SIZE not in params:
        raise _invalid(_size_required(tensor))
    return ShmRef(region, offset, _json_uint(params[BYTE_SIZE], BYTE_SIZE))


def grpc_ref(parameters: Mapping[str, Any], tensor: str) -> ShmRef | None:
    """The reference in a gRPC tensor's `parameters` map (InferParameter values), or None."""
    if REGION not in parameters:
        _no_region(parameters, tensor)
        return None
    region = parameters[REGION]
    if parameter_kind(region) != "string_param":
        raise _invalid(
            f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor}', "
            "expected string_param."
        )
    offset = 0
    if OFFSET in parameters:
        offset = _grpc_int(parameters[OFFSET], OFFSET, tensor)
    if BYTE_SIZE not in parameters:
        raise _invalid(_size_required(tensor))
    return ShmRef(region.string_param, offset, _grpc_int(parameters[BYTE_SIZE], BYTE_SIZE, tensor))


def check_input_size(
    ref: ShmRef, name: str, datatype: str, shape: tuple[int, ...] | list[int], model: str
) -> None:
    """An input's region bytes must be what its shape needs (Triton's text; BYTES elements
    carry their own lengths, so any size goes)."""
    item = ELEMENT_BYTES.get(datatype, 0)
    if not item:
        return
    expected = item
    for dim in shape:
        expected *= dim
    if expected != ref.byte_size:
        raise _invalid(
            f"input byte size mismatch for input '{name}' for model '{model}'. "
            f"Expected {expected}, got {ref.byte_size}"
        )


def check_json_input(entry: Mapping[str, Any], params: Mapping[str, Any], name: str) -> None:
    """A REST input in shared memory carries no data of its own (Triton's text)."""
    has_data, has_binary = "data" in entry, "binary_data_size" in params
    if has_data or has_binary:
        also = (" 'data'" if has_data else "") + (" 'binary_data_size'" if has_binary else "")
        raise _invalid(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            f"'parameters', 'shared_memory_region' in 'parameters'. But set{also} "
            f"'shared_memory_region' (input '{name}')"
        )


def check_json_output(params: Mapping[str, Any]) -> None:
    """A REST output in shared memory is neither classified nor binary (Triton's texts)."""
    if "classification" in params:
        raise _invalid("Output can't set both 'shared_memory_region' and 'classification'")
    if params.get("binary_data") is True:
        raise _invalid("Output can't set both 'shared_memory_region' and 'binary_data'")


def _no_region(params: Mapping[str, Any], tensor: str) -> None:
    """An offset or a size without a region is an error (Triton's gRPC text, for both)."""
    for key in (OFFSET, BYTE_SIZE):
        if key in params:
            raise _invalid(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for "
                f"tensor '{tensor}'"
            )


def _size_required(tensor: str) -> str:
    return (
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
        f"parameter for tensor '{tensor}'"
    )


def _json_uint(value: Any, key: str) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_UINT64:
        raise _invalid(f"Unable to parse '{key}'")
    return value


def _grpc_int(param: Any, key: str, tensor: str) -> int:
    if parameter_kind(param) != "int64_param":
        raise _invalid(
            f"invalid value type for '{key}' parameter for tensor '{tensor}', expected int64_param."
        )
    value = int(param.int64_param)
    if value < 0:
        raise _invalid(f"invalid value for '{key}' parameter for tensor '{tensor}': {value} < 0")
    return value


def _invalid(message: str) -> SharedMemoryError:
    return SharedMemoryError(message, ErrorKind.INVALID_ARG)
