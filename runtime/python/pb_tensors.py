"""pb_utils' tensors and errors: `Tensor`, `TritonError`, `TritonModelException`, the datatype
tables and BYTES (de)serialization, exactly as Triton's `triton_python_backend_utils` has them.

runtime.python.pb_utils re-exports every name (models import that module only); these need no
host, so they live apart from the calls that reach the server. numpy and the stdlib only: a
stub process under another Python (`EXECUTION_ENV_PATH`) imports it.
"""

from __future__ import annotations

import enum
import struct

import numpy as np

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITON_STRING_TO_NUMPY",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]


TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# Triton's TRITONSERVER_DataType enum values.
_TRITON_TO_NUMPY = {
    1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
    7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64,
    13: np.object_,
}  # fmt: skip
_NUMPY_TO_TRITON = {np.dtype(v): k for k, v in _TRITON_TO_NUMPY.items()}


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    dtype = np.dtype(data_type)
    if dtype.kind in ("S", "O"):
        return 13
    return _NUMPY_TO_TRITON.get(dtype)


def serialize_byte_tensor(input_tensor):
    """Triton's BYTES wire format of an object or `np.bytes_` array, as its python backend's
    (r22.12 on) returns it: the items' length-prefixed bytes in C order as `bytes`, `()` for
    an empty array, None for an array of any other dtype. A `str` item is written as UTF-8."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for item in input_tensor.reshape(-1):
        s = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(s)))
        parts.append(s)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    items = []
    offset = 0
    buf = bytes(encoded_tensor)
    while offset < len(buf):
        (length,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        items.append(buf[offset : offset + length])
        offset += length
    return np.array(items, dtype=np.object_)


class _ErrorCode(enum.IntEnum):
    """TritonError's codes as Triton's binding has them: an enum named `__ErrorCode` (a value
    prints as `__ErrorCode.CANCELLED`), each value its TRITONSERVER_Error_Code number."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __str__(self):
        return f"__ErrorCode.{self.name}"

    def __format__(self, spec):
        return format(str(self), spec)

    def __repr__(self):
        return f"<__ErrorCode.{self.name}: {self.value}>"


_ErrorCode.__name__ = _ErrorCode.__qualname__ = "__ErrorCode"


class TritonError:
    """An error a model returns in an `InferenceResponse` (or raises as TritonModelException);
    `code()` is one of the class's codes (a number is taken for one)."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message, code=INTERNAL):  # Triton's keywords: message=, code=
        self._msg = message
        self._code = _ErrorCode(code) if isinstance(code, int) and code in _CODE_VALUES else code

    def __str__(self):
        return str(self._msg)

    def message(self):
        return self._msg

    def code(self):
        return self._code


setattr(TritonError, "__ErrorCode", _ErrorCode)  # as pybind11 nests the enum in the class
_CODE_VALUES = frozenset(int(code) for code in _ErrorCode)


class TritonModelException(Exception):
    """The exception pb_utils raises; a model may raise it too."""

    def __init__(self, msg):
        super().__init__(msg)
        self._msg = msg

    def message(self):
        return self._msg


class Tensor:
    """A named tensor backed by a numpy array (no copy)."""

    __slots__ = ("_name", "_numpy_array", "_triton_dtype")

    def __init__(self, name, numpy_array=None, triton_dtype=None):
        # Triton's binding: a str name and an array (a wrong type is a TypeError), then a name
        # that is not empty.
        if not isinstance(name, str):
            raise TypeError(f"Tensor(): name must be str, not {type(name).__name__}")
        if numpy_array is None:
            raise TypeError("Tensor(): numpy_array must be a numpy array, not None")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if not isinstance(numpy_array, np.ndarray):
            numpy_array = np.asarray(numpy_array)
        if triton_dtype is None:
            # Fast path, taken by nearly every tensor: a plain numeric dtype.
            triton_dtype = _NUMPY_TO_TRITON.get(numpy_array.dtype)
            if triton_dtype is not None:
                self._name = name
                self._numpy_array = numpy_array
                self._triton_dtype = triton_dtype
                return
        if numpy_array.dtype.kind == "U" or numpy_array.dtype == np.void:
            raise TritonModelException(
                "NumPy dtype is not supported."  # Triton 2.51's text (numpy_to_triton_type)
            )
        if triton_dtype is not None:
            wanted = triton_to_numpy_type(triton_dtype)
            if wanted is not None and numpy_array.dtype != wanted and wanted is not np.object_:
                numpy_array = numpy_array.view(wanted)
        else:
            triton_dtype = numpy_to_triton_type(numpy_array.dtype)
        self._name = name
        self._numpy_array = numpy_array
        self._triton_dtype = triton_dtype

    def name(self):
        return self._name

    def triton_dtype(self):
        return self._triton_dtype

    def as_numpy(self):
        return self._numpy_array

    def shape(self):
        return list(self._numpy_array.shape)

    def is_cpu(self):
        return True

    def to_dlpack(self):
        return self._exportable().__dlpack__()

    def __dlpack__(self, stream=None, **kwargs):
        """The DLPack protocol (`np.from_dlpack(tensor)`, `torch.from_dlpack(tensor)`), as
        Triton's Tensor has it: the array's memory, shared (a read-only array's as a copy:
        DLPack before 1.0 cannot mark memory read-only)."""
        return self._exportable().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        return self._numpy_array.__dlpack_device__()

    def _exportable(self):
        array = self._numpy_array
        return array if array.flags.writeable else array.copy()

    @staticmethod
    def from_dlpack(name, capsule):
        """From an object with `__dlpack__` (numpy, torch, cupy) or a raw DLPack capsule."""
        if not isinstance(name, str):
            raise TypeError(f"Tensor.from_dlpack(): name must be str, not {type(name).__name__}")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if hasattr(capsule, "__dlpack__"):
            return Tensor(name, np.from_dlpack(capsule))
        if type(capsule).__name__ != "PyCapsule":
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        import torch.utils.dlpack  # a bare capsule: torch can consume it, numpy cannot

        return Tensor(name, torch.utils.dlpack.from_dlpack(capsule).cpu().numpy())


class PreferredMemory:
    """Where a BLS call would like its outputs; accepted (Thaw's outputs are always CPU)."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


TRITONSERVER_MEMORY_GPU = 1
TRITONSERVER_MEMORY_CPU = 0
