"""`ModelInferRequest` / `ModelInferResponse` <-> InferRequest / InferResponse (gRPC's codec).

The gRPC twin of runtime.codecs.rest: the same InferRequest the HTTP path builds, so the model
manager, signature checks, statistics and errors are one for both protocols. Tensor bytes go
through runtime.datatypes (`from_wire`, BYTES length prefixes, BF16 as uint16 words) and shapes
through `codec.checked_shape`, before anything is allocated.

Inputs carry their data in `raw_input_contents` (what tritonclient sends: one entry per input,
in input order; entries past the last input are not read, as Triton's) or in the typed
`contents` of the input (never both in one request, as Triton refuses), or in a registered
shared-memory region (`shared_memory_*` parameters, read
through the request's runtime.codecs.shm_tensors binding; such inputs take no raw entry). Outputs
always leave in `raw_output_contents`, one entry per output, as Triton writes them: empty for
an output written to shared memory. Request parameters become the plain values HTTP's JSON
parameters are (`sequence_id`, `priority`, `timeout`, ...), type-checked the way Triton's gRPC
frontend does.

The client's direction too, for BLS streams sent to `thaw up`'s gRPC front door
(runtime.direct.front_door): `model_infer_request` (an InferRequest as a `ModelInferRequest`,
inputs in `raw_input_contents`) and `model_infer_response` (a `ModelInferResponse` as an
InferResponse, `triton_final_response` read into `final`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from runtime.codecs.rest import checked_shape, selected_outputs, tensor_bytes
from runtime.codecs.shm_tensors import ShmBinding
from runtime.datatypes import (
    V2_DATATYPES,
    element_size,
    from_wire,
    string_count_refusal,
    v2_to_numpy,
)
from runtime.errors import InvalidInput, ModelNotFound
from runtime.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from thawwire.errors import SharedMemoryError
from thawwire.grpc_messages import FINAL_RESPONSE, parameter_kind, parameter_value, set_parameter
from thawwire.grpc_service import pb
from thawwire.names import canonical_version, is_model_name, unknown_model, version_refusal
from thawwire.shm_params import REGION, SHM_PARAMETERS, ShmRef, grpc_ref

__all__ = [
    "THREAD_THRESHOLD_BYTES",
    "UnknownDatatype",
    "decode_model_infer",
    "encode_model_infer",
    "message_ref",
    "model_infer_request",
    "model_infer_response",
    "request_parameters",
]

# Messages above this are parsed, decoded and encoded in a worker thread (as HTTP bodies are).
THREAD_THRESHOLD_BYTES = 256 * 1024

# Request parameters Triton reserves; the one a client may send (Triton 2.51's common.h).
_RESERVED_PREFIX = "triton_"
_RESERVED_ALLOWED = frozenset({"triton_enable_empty_final_response"})

# parameter -> (allowed InferParameter kinds, Triton's text for any other kind).
_TYPED_PARAMETERS: dict[str, tuple[frozenset[str], str]] = {
    "sequence_id": (frozenset({"int64_param", "string_param"}), "int64_param or string_param"),
    "sequence_start": (frozenset({"bool_param"}), "bool_param"),
    "sequence_end": (frozenset({"bool_param"}), "bool_param"),
    "priority": (frozenset({"int64_param", "uint64_param"}), "int64_param or uint64_param"),
    "timeout": (frozenset({"int64_param"}), "int64_param"),
    "triton_enable_empty_final_response": (frozenset({"bool_param"}), "bool_param"),
}

# The typed `contents` fields in Triton's order of looking at them (the message's), each with
# the element type it carries; None: the 32-bit integer fields, which carry 8- and 16-bit types
# too (_NARROW), else their own (_WIDE).
_TRITON_FIELD_ORDER: tuple[tuple[str, str | None], ...] = (
    ("bool_contents", "BOOL"),
    ("int_contents", None),
    ("int64_contents", "INT64"),
    ("uint_contents", None),
    ("uint64_contents", "UINT64"),
    ("fp32_contents", "FP32"),
    ("fp64_contents", "FP64"),
    ("bytes_contents", "BYTES"),
)
_NARROW = {"int_contents": ("INT8", "INT16"), "uint_contents": ("UINT8", "UINT16")}
_WIDE = {"int_contents": "INT32", "uint_contents": "UINT32"}


def decode_model_infer(message: Any, *, shm: ShmBinding | None = None) -> InferRequest:
    """One `ModelInferRequest` as an InferRequest (shape and size checks before any array);
    `shm` resolves tensors in shared memory (without it, naming a region is an error)."""
    model = message.model_name
    version = message.model_version
    if version:
        version = _canonical(version)
    raw = message.raw_input_contents
    ios = list(message.inputs)  # each input's wrapper made once
    # Front to back first, as Triton's gRPC frontend hands inputs to its core: each input's
    # source of data (a region, typed `contents` or the next `raw_input_contents` entry, in
    # that order; entries past the last input are not read, as Triton does not read them).
    any_shm = any(io.parameters and REGION in io.parameters for io in ios)
    refs: list[ShmRef | None] = []
    raw_data: list[bytes | None] = []
    next_raw = 0
    for io in ios:
        ref = _shm_ref(io.parameters, io.name) if any_shm else None
        refs.append(ref)
        if ref is not None:
            raw_data.append(None)
        elif io.HasField("contents"):
            if raw:
                raise InvalidInput(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{io.name}' for model '{model}'"
                )
            _contents_field(io.contents, io.name, io.datatype, model)
            raw_data.append(None)
        elif next_raw < len(raw):
            raw_data.append(raw[next_raw])
            next_raw += 1
        else:
            raise InvalidInput(
                f"unable to find data for input tensor '{io.name}' for model '{model}' in request."
            )
    inputs: list[InferTensor] = []
    seen: set[str] = set()
    # Then back to front: Triton's core checks the inputs walking its request's input map, a
    # std::unordered_map that iterates newest first, so of two wrong inputs it names the last
    # one sent (qa/L0_input_validation pins it). No inputs at all is the model's business:
    # a model whose inputs are all optional takes such a request.
    for index in reversed(range(len(ios))):
        io, ref = ios[index], refs[index]
        if ref is not None:
            tensor = _shm_input(io, ref, model, shm)
        else:
            tensor = _input(io, raw_data[index], model)
        if tensor.name in seen:
            raise InvalidInput(f"input '{tensor.name}' already exists in request")
        seen.add(tensor.name)
        inputs.append(tensor)
    return InferRequest(
        model_name=model,
        model_version=version,
        inputs=inputs[::-1],
        requested_outputs=_outputs(message.outputs, shm),
        id=message.id or None,
        parameters=request_parameters(message.parameters),
        binary_output_default=True,
    )


def message_ref(name: str, version: str) -> tuple[str, str | None]:
    """A message's model name and optional version; NOT_FOUND for what is not a name,
    INVALID_ARGUMENT (Triton's text) for what is not a version."""
    if not is_model_name(name):
        raise ModelNotFound(unknown_model(name))
    return name, _canonical(version) if version else None


def _canonical(version: str) -> str:
    """A message's version as Triton reads it (`01` is `1`); INVALID_ARGUMENT in Triton's
    words for what is no version."""
    canonical = canonical_version(version)
    if canonical is None:
        raise InvalidInput(version_refusal(version[:40]))
    return canonical


def request_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A request's `parameters` map as plain values, checked as Triton's gRPC frontend does."""
    values: dict[str, Any] = {}
    if not parameters:
        return values
    for key, param in parameters.items():
        kind = parameter_kind(param)
        if key.startswith(_RESERVED_PREFIX) and key not in _RESERVED_ALLOWED:
            raise InvalidInput(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                "the following keys starting with 'triton_' are allowed: "
                + " ".join(sorted(_RESERVED_ALLOWED))
            )
        typed = _TYPED_PARAMETERS.get(key)
        if typed is not None and kind not in typed[0]:
            raise InvalidInput(f"invalid value type for '{key}' parameter, expected {typed[1]}.")
        if kind is None:
            raise InvalidInput(f"parameter '{key}' has no value")
        value = parameter_value(param)
        if key == "priority" and isinstance(value, int) and value < 0:
            raise InvalidInput("invalid value for 'priority', expected value >= 0.")
        if key == "sequence_id" and isinstance(value, int) and value < 0:
            value += 1 << 64  # Triton reads the int64 as its uint64 id (observed on 2.51)
        values[key] = value
    return values


class UnknownDatatype(InvalidInput):
    """An input whose `datatype` names no datatype; `input_name` says which. Triton's core
    words it against the model's input (`for_model`); without the model, Thaw's words."""

    def __init__(self, input_name: str, datatype: str) -> None:
        super().__init__(f"input '{input_name}' has unknown datatype {datatype!r}")
        self.input_name = input_name

    def for_model(self, model: str, inputs: Mapping[str, str]) -> InvalidInput:
        """Triton's text when `model` (its input datatypes by name) has the input, else this."""
        expected = inputs.get(self.input_name)
        if expected is None:
            return self
        return InvalidInput(
            f"inference input '{self.input_name}' data-type is '<invalid>', but model "
            f"'{model}' expects '{expected}'"
        )


def _input(io: Any, raw: bytes | None, model: str) -> InferTensor:
    """An input whose data is `raw` or else its typed `contents` (its source already chosen)."""
    name, datatype = io.name, io.datatype  # ("": refused by the signature, as by Triton)
    if datatype not in V2_DATATYPES:
        raise UnknownDatatype(name, datatype)
    shape = tuple(io.shape)
    count = checked_shape(name, datatype, shape)
    params = _tensor_parameters(io.parameters)
    if raw is not None:
        data = from_wire(raw, name, datatype, shape, model=model)
    else:
        data = _typed_contents(io.contents, name, datatype, shape, count, model)
    return InferTensor(name, datatype, shape, data, params)


def _shm_ref(parameters: Mapping[str, Any], name: str) -> ShmRef | None:
    try:
        return grpc_ref(parameters, name)
    except SharedMemoryError as exc:
        raise InvalidInput(exc.message) from None


def _shm_input(io: Any, ref: ShmRef, model: str, shm: ShmBinding | None) -> InferTensor:
    """An input whose bytes are in a registered region (Triton's checks and texts)."""
    name, datatype = io.name, io.datatype  # ("": refused by the signature, as by Triton)
    if datatype not in V2_DATATYPES:
        raise InvalidInput(f"input '{name}' has unknown datatype {datatype!r}")
    if io.HasField("contents"):
        raise InvalidInput(
            f"unexpected 'content' provided when using shared memory for input tensor '{name}' "
            f"for model '{model}'"
        )
    if shm is None:
        raise InvalidInput("shared memory is not available for this request")
    shape = tuple(io.shape)
    checked_shape(name, datatype, shape)
    params = _tensor_parameters(io.parameters)
    data = shm.read_input(ref, name, datatype, shape, model)
    return InferTensor(name, datatype, shape, data, params)


def _contents_field(contents: Any, name: str, datatype: str, model: str) -> str | None:
    """The one typed field of `contents` that holds the input's elements (None: none does),
    checked as Triton's gRPC frontend checks it: the fields in the message's order, each
    one's element type against the input's datatype, a second field refused."""
    chosen = None
    for field, element_type in _TRITON_FIELD_ORDER:
        if not len(getattr(contents, field)):
            continue
        if chosen is not None:
            raise InvalidInput(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}', binary data was already supplied."
            )
        if element_type is None:  # 32-bit integer fields carry the narrower types too
            element_type = datatype if datatype in _NARROW[field] else _WIDE[field]
        if element_type != datatype:
            expected = datatype if datatype in V2_DATATYPES else "<invalid>"
            raise InvalidInput(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}' of type '{element_type}', expected datatype '{expected}'"
            )
        chosen = field
    return chosen


def _typed_contents(
    contents: Any, name: str, datatype: str, shape: tuple[int, ...], count: int, model: str
) -> np.ndarray:
    """An input sent in `InferTensorContents` (its one field checked by `_contents_field`) as
    an array; a count that is not the shape's is refused in the words Triton's core uses for
    the bytes the field makes."""
    field = _contents_field(contents, name, datatype, model)
    values = getattr(contents, field) if field is not None else ()
    if len(values) != count:
        if datatype == "BYTES":
            raise string_count_refusal(count, len(values), name, model)
        size = element_size(datatype)
        raise InvalidInput(
            f"input byte size mismatch for input '{name}' for model '{model}'. Expected "
            f"{count * size}, got {len(values) * size}"
        )
    if field is None:
        return np.empty(shape, dtype=v2_to_numpy(datatype))
    if datatype == "BYTES":
        data = np.empty(count, dtype=np.object_)
        data[:] = list(values)
        return data.reshape(shape)
    # Narrow integer types travel in 32-bit fields; Triton keeps their low bytes (astype does).
    return np.asarray(values).astype(v2_to_numpy(datatype), copy=False).reshape(shape)


def _tensor_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if not parameters:
        return values
    for key, param in parameters.items():
        if key not in SHM_PARAMETERS:  # the server's, never a model's
            values[key] = parameter_value(param)
    return values


def _outputs(outputs: Any, shm: ShmBinding | None = None) -> list[RequestedOutput]:
    requested: list[RequestedOutput] = []
    if not outputs:
        return requested
    seen: set[str] = set()
    for out in outputs:
        if not out.name:
            raise InvalidInput("every requested output needs a non-empty 'name'")
        if out.name in seen:
            raise InvalidInput(f"output '{out.name}' already exists in request")
        seen.add(out.name)
        params = _tensor_parameters(out.parameters)
        classes = 0
        if "classification" in out.parameters:
            if parameter_kind(out.parameters["classification"]) != "int64_param":
                raise InvalidInput(
                    "invalid value type for 'classification' parameter, expected int64_param"
                )
            classes = int(params["classification"])
            if classes <= 0:
                raise InvalidInput("invalid value for 'classification' parameter, expected >= 0")
        params.pop("binary_data", None)  # gRPC outputs are always raw bytes
        ref = _shm_ref(out.parameters, out.name) if REGION in out.parameters else None
        if ref is not None:
            if classes:
                raise InvalidInput(
                    "output can't set both 'shared_memory_region' and 'classification'"
                )
            if shm is None:
                raise InvalidInput("shared memory is not available for this request")
            shm.bind_output(ref, out.name)
        requested.append(RequestedOutput(out.name, True, classes, params))
    return requested


def encode_model_infer(
    response: InferResponse,
    request: InferRequest,
    *,
    final: bool | None = None,
    into: Any = None,
    shm: ShmBinding | None = None,
) -> Any:
    """The `ModelInferResponse` of the outputs the request asked for (all, by default), each in
    `raw_output_contents`; `final` (streams only) sets Triton's `triton_final_response`.
    `into`: an empty ModelInferResponse to fill (a stream response's, saving a copy)."""
    message = pb.ModelInferResponse() if into is None else into
    message.model_name = response.model_name
    message.model_version = response.model_version
    message.id = response.id if response.id is not None else (request.id or "")
    if response.parameters:  # (a map's wrapper costs even when nothing goes in it)
        _set_parameters(message.parameters, response.parameters)
    if final is not None:
        message.parameters[FINAL_RESPONSE].bool_param = final
    raw = message.raw_output_contents
    for tensor, _ in selected_outputs(response, request):
        out = message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            _set_parameters(out.parameters, tensor.parameters)
        if shm is not None and tensor.name in shm.outputs:
            shm.write_output(tensor.name, tensor_bytes(tensor))
            raw.append(b"")  # Triton's entry for an output written to shared memory
        else:
            raw.append(tensor_bytes(tensor))
    return message


def _set_parameters(target: Any, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if key != "binary_data_size":  # the REST codec's, never a gRPC one
            set_parameter(target[key], value)


def model_infer_request(request: InferRequest) -> Any:
    """An InferRequest as the `ModelInferRequest` a client sends: inputs' bytes in
    `raw_input_contents`, the requested outputs by name, parameters typed (set_parameter)."""
    message = pb.ModelInferRequest(
        model_name=request.model_name, model_version=request.model_version, id=request.id or ""
    )
    _set_parameters(message.parameters, request.parameters)
    for tensor in request.inputs:
        io = message.inputs.add(name=tensor.name, datatype=tensor.datatype)
        io.shape.extend(tensor.shape)
        _set_parameters(io.parameters, tensor.parameters)
        message.raw_input_contents.append(tensor_bytes(tensor))
    for out in request.requested_outputs:
        message.outputs.add(name=out.name)
    return message


def model_infer_response(message: Any) -> InferResponse:
    """A `ModelInferResponse` (outputs in `raw_output_contents`) as an InferResponse; its
    `triton_final_response` parameter becomes `final` (absent: final), and a final response
    without outputs is `flag_only`. InvalidInput for outputs whose bytes do not fit."""
    raw = message.raw_output_contents
    if len(raw) != len(message.outputs):
        raise InvalidInput(
            f"raw_output_contents holds {len(raw)} entries but the response has "
            f"{len(message.outputs)} outputs"
        )
    outputs = []
    for io, data in zip(message.outputs, raw, strict=True):
        shape = tuple(io.shape)
        if io.datatype not in V2_DATATYPES:
            raise InvalidInput(f"output '{io.name}' has unknown datatype {io.datatype!r}")
        checked_shape(io.name, io.datatype, shape)
        outputs.append(
            InferTensor(io.name, io.datatype, shape, from_wire(data, io.name, io.datatype, shape))
        )
    parameters = {
        key: parameter_value(param)
        for key, param in message.parameters.items()
        if key != FINAL_RESPONSE
    }
    final = True
    if FINAL_RESPONSE in message.parameters:
        final = bool(parameter_value(message.parameters[FINAL_RESPONSE]))
    return InferResponse(
        message.model_name,
        message.model_version,
        outputs,
        id=message.id or None,
        parameters=parameters,
        final=final,
        flag_only=final and not outputs,
    )
