"""The `triton_python_backend_utils` module Triton python models import, in-process."""

from __future__ import annotations

import json
import logging
import struct

import numpy as np

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "InferenceRequest",
    "InferenceResponse",
    "LogLevel",
    "Logger",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]

_log = logging.getLogger("triton_python_backend_utils")

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

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
    """Triton's BYTES wire format as a uint8 array (None for an empty tensor)."""
    if input_tensor.size == 0:
        return None
    parts = []
    for item in input_tensor.reshape(-1):
        s = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(s)))
        parts.append(s)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


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


class TritonError:
    """An error a model returns in an `InferenceResponse` (or raises as TritonModelException)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, msg, code=INTERNAL):
        self._msg = msg
        self._code = code

    def __str__(self):
        return str(self._msg)

    def message(self):
        return self._msg

    def code(self):
        return self._code


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
                "Tensor dtype used for numpy_array is not support by Python backend. "
                "Please use np.object_ instead."
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
        return self._numpy_array.__dlpack__()

    @staticmethod
    def from_dlpack(name, capsule):
        """From an object with `__dlpack__` (numpy, torch, cupy) or a raw DLPack capsule."""
        if hasattr(capsule, "__dlpack__"):
            return Tensor(name, np.from_dlpack(capsule))
        import torch.utils.dlpack  # a bare capsule: torch can consume it, numpy cannot

        return Tensor(name, torch.utils.dlpack.from_dlpack(capsule).cpu().numpy())


class InferenceRequest:
    """A request as a python model sees it; `exec` (BLS) is not supported in-process."""

    def __init__(
        self,
        inputs=None,
        request_id="",
        correlation_id=0,
        requested_output_names=None,
        model_name="",
        model_version=-1,
        flags=0,
        parameters=None,
        **_unused,
    ):
        self._inputs = list(inputs or [])
        self._request_id = request_id or ""
        self._correlation_id = correlation_id
        self._requested_output_names = list(requested_output_names or [])
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        # Kept as given; serialized only if the model asks (most never do).
        self._parameters = parameters

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def requested_output_names(self):
        return self._requested_output_names

    def flags(self):
        return self._flags

    def parameters(self):
        if not isinstance(self._parameters, str):
            self._parameters = json.dumps(self._parameters or {})
        return self._parameters

    def model_name(self):
        return self._model_name

    def is_cancelled(self):
        return False

    def get_response_sender(self):
        raise TritonModelException("decoupled models are not supported by Thaw")

    def exec(self, *args, **kwargs):
        raise TritonModelException(
            "BLS (InferenceRequest.exec) is not supported by Thaw's python backend"
        )

    async def async_exec(self, *args, **kwargs):
        return self.exec()


class InferenceResponse:
    """The response for one request: output tensors, or an error."""

    __slots__ = ("_err", "_output_tensors", "_parameters")

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, list):
            raise TritonModelException('"output_tensors" must be a list.')
        self._output_tensors = output_tensors
        self._err = error
        self._parameters = parameters

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._err is not None

    def error(self):
        return self._err


def get_input_tensor_by_name(inference_request, name):
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for props in model_config.get("input", []):
        if props["name"] == name:
            return props
    return None


def get_output_config_by_name(model_config, name):
    for props in model_config.get("output", []):
        if props["name"] == name:
            return props
    return None


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Triton's model logger; writes to the `triton_python_backend_utils` Python logger."""

    @staticmethod
    def log(message, level=LogLevel.INFO):
        levels = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}
        _log.log(levels.get(level, logging.INFO), "%s", message)

    @staticmethod
    def log_info(message):
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, LogLevel.VERBOSE)


class ModelConfig:
    """The wrapper `auto_complete_config(auto_complete_model_config)` receives and returns."""

    def __init__(self, model_config):
        self._model_config = (
            model_config if isinstance(model_config, dict) else json.loads(model_config)
        )

    def as_dict(self):
        return self._model_config

    def max_batch_size(self):
        return int(self._model_config.get("max_batch_size", 0))

    def set_max_batch_size(self, max_batch_size):
        current = self.max_batch_size()
        if current not in (0, max_batch_size) and current != max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._model_config.get('name')}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict):
        self._model_config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_input(self, input):
        self._add_io("input", input)

    def add_output(self, output):
        self._add_io("output", output)

    def _add_io(self, kind, io):
        if not isinstance(io, dict):
            raise ValueError(f"{kind} must be a dict, got {type(io).__name__}")
        for key in ("name", "data_type", "dims"):
            if key not in io:
                raise ValueError(f"{kind} for model '{self._model_config.get('name')}' lacks {key}")
        existing = self._model_config.setdefault(kind, [])
        for item in existing:
            if item.get("name") == io["name"]:
                if list(item.get("dims", [])) and list(item["dims"]) != list(io["dims"]):
                    raise ValueError(
                        f"model '{self._model_config.get('name')}': {kind} '{io['name']}' "
                        f"dims {item['dims']} conflict with {io['dims']}"
                    )
                item.update(io)
                return
        existing.append(dict(io))
