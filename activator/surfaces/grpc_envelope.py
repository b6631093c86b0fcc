"""The model a serialized `ModelInferRequest` is for, read without parsing its tensors.

The activator forwards inference messages to replicas as opaque bytes; to route one it needs
only `model_name` (field 1) and `model_version` (field 2), and to answer a failed one on a
stream, its `id` (field 3). Parsing the whole message with the
protobuf library would copy every tensor (`raw_input_contents` can be most of 2 GiB) into
Python objects the activator never looks at, so this walks the protobuf wire format instead:
each field's key, then its varint or its length prefix, skipping the payload without copying
it. Every field is visited (protobuf allows fields in any order and the last scalar wins), so
the answer is the protobuf library's, for a fraction of its cost. A stateful model's messages
are routed by their sequence too (`sequence_of`): of those, only the `parameters` entries are
parsed. Pure: bytes in, names out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from activator.endpoint.sequence_routes import SequenceKey
from thawwire.grpc_service import pb

__all__ = ["Envelope", "EnvelopeError", "envelope", "sequence_of"]

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_MODEL_NAME, _MODEL_VERSION, _ID, _PARAMETERS = 1, 2, 3, 4
_NAMED = (_MODEL_NAME, _MODEL_VERSION, _ID)
_MAX_VARINT_BYTES = 10
_MAX_NAME_BYTES = 4096  # a name, version or id longer than this is not one


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the activator reads of an inference message ('' for a field not set)."""

    model_name: str
    model_version: str
    id: str


class EnvelopeError(ValueError):
    """The bytes are not a protobuf message (a length runs past the end, a bad wire type)."""


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise EnvelopeError("message ends inside a varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise EnvelopeError("varint longer than 10 bytes")


def _fields(view: memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """Each top-level field: (number, wire type, where its key starts, where its payload
    starts, where the field ends); lengths checked, payloads skipped, never copied."""
    pos, end = 0, len(view)
    while pos < end:
        field_start = pos
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise EnvelopeError("field number 0")
        payload = pos
        if wire == _VARINT:
            _, pos = _varint(view, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, payload = _varint(view, pos)
            pos = payload + length
            if pos > end:
                raise EnvelopeError(f"field {number} runs {pos - end} bytes past the end")
        else:  # groups (deprecated, never in these messages) or no wire type at all
            raise EnvelopeError(f"field {number} has wire type {wire}")
        if pos > end:
            raise EnvelopeError("message ends inside a field")
        yield number, wire, field_start, payload, pos


def envelope(data: bytes | memoryview) -> Envelope:
    """The model name, version and id of a serialized ModelInferRequest."""
    view = memoryview(data)
    fields: dict[int, str] = {}
    for number, wire, _, payload, end in _fields(view):
        if number in _NAMED and wire == _LEN:
            if end - payload > _MAX_NAME_BYTES:
                raise EnvelopeError(f"field {number} is {end - payload} bytes, not a name")
            try:
                fields[number] = bytes(view[payload:end]).decode("utf-8")
            except UnicodeDecodeError:
                raise EnvelopeError(f"field {number} is not UTF-8") from None
    return Envelope(
        fields.get(_MODEL_NAME, ""), fields.get(_MODEL_VERSION, ""), fields.get(_ID, "")
    )


def sequence_of(data: bytes | memoryview) -> SequenceKey | None:
    """The sequence a serialized ModelInferRequest names in its `parameters` (`sequence_id`,
    `sequence_start`, `sequence_end`, as tritonclient sends them), read without its tensors:
    only the parameter entries are parsed. None when it names none, or no usable id (0, "",
    a bool): the replica refuses those in Triton's words. EnvelopeError: not a message."""
    view = memoryview(data)
    entries = bytearray()
    for number, wire, field_start, _, end in _fields(view):
        if number == _PARAMETERS and wire == _LEN:
            entries += view[field_start:end]
    if not entries:
        return None
    try:
        params = pb.ModelInferRequest.FromString(bytes(entries)).parameters
    except DecodeError:
        raise EnvelopeError("its parameters could not be parsed") from None
    if "sequence_id" not in params:
        return None
    chosen = params["sequence_id"].WhichOneof("parameter_choice")
    if chosen not in ("int64_param", "uint64_param", "string_param"):
        return None
    sequence = getattr(params["sequence_id"], chosen)
    if sequence in (0, ""):
        return None
    return SequenceKey(sequence, _flag(params, "sequence_start"), _flag(params, "sequence_end"))


def _flag(params: Any, name: str) -> bool:
    """A bool parameter's value (False when absent or of another kind, as Triton reads it)."""
    if name not in params or params[name].WhichOneof("parameter_choice") != "bool_param":
        return False
    return bool(params[name].bool_param)
