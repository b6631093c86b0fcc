"""The model a serialized `ModelInferRequest` is for, read without parsing its tensors.

The activator forwards inference messages to replicas as opaque bytes; to route one it needs
only `model_name` (field 1) and `model_version` (field 2), and to answer a failed one on a
stream, its `id` (field 3). Parsing the whole message with the
protobuf library would copy every tensor (`raw_input_contents` can be most of 2 GiB) into
Python objects the activator never looks at, so this walks the protobuf wire format instead:
each field's key, then its varint or its length prefix, skipping the payload without copying
it. Every field is visited (protobuf allows fields in any order and the last scalar wins), so
the answer is the protobuf library's, for a fraction of its cost. Pure: bytes in, names out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Envelope", "EnvelopeError", "envelope"]

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
_MODEL_NAME, _MODEL_VERSION, _ID = 1, 2, 3
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


def envelope(data: bytes | memoryview) -> Envelope:
    """The model name, version and id of a serialized ModelInferRequest."""
    view = memoryview(data)
    fields: dict[int, str] = {}
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise EnvelopeError("field number 0")
        if wire == _VARINT:
            _, pos = _varint(view, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(view, pos)
            if pos + length > end:
                raise EnvelopeError(f"field {number} runs {pos + length - end} bytes past the end")
            if number in _NAMED:
                if length > _MAX_NAME_BYTES:
                    raise EnvelopeError(f"field {number} is {length} bytes, not a name")
                try:
                    fields[number] = bytes(view[pos : pos + length]).decode("utf-8")
                except UnicodeDecodeError:
                    raise EnvelopeError(f"field {number} is not UTF-8") from None
            pos += length
        else:  # groups (deprecated, never in these messages) or no wire type at all
            raise EnvelopeError(f"field {number} has wire type {wire}")
        if pos > end:
            raise EnvelopeError("message ends inside a field")
    return Envelope(
        fields.get(_MODEL_NAME, ""), fields.get(_MODEL_VERSION, ""), fields.get(_ID, "")
    )
