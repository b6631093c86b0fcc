"""KServe v2 infer bodies <-> InferRequest / InferResponse, JSON and Triton's binary tensor data.

A request body is a JSON header, optionally followed by binary sections (its length then comes
in `Inference-Header-Content-Length`); each input with `parameters.binary_data_size` takes the
next section, in input order, and the sections must add up to the body exactly. Every shape is
checked (non-negative ints, `prod(shape) * element size` against the bytes actually present)
before anything is allocated, so a lying body costs a 400, never a MemoryError.

`Inference-Header-Content-Length: 0` makes the whole body the raw bytes of the model's one
input (Triton's raw binary request, `curl --data-binary @file`); the model signature deduces
its name, datatype and shape (runtime.models.signature), and every output is sent binary.

A tensor with `shared_memory_*` parameters (Triton's system shared-memory extension) has its
bytes in a registered region instead: an input is read from it, an output written to it and
sent as its name, datatype and shape alone (runtime.codecs.shm_tensors, with the request's binding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.codecs.body import parse_json
from runtime.codecs.shm_tensors import ShmBinding
from runtime.codecs.tensor_json import json_to_array
from runtime.datatypes import V2_DATATYPES, element_size, from_wire, serialize_bytes, wire_dtype
from runtime.errors import InvalidInput
from runtime.inference import (
    REQUEST_FIELDS,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)
from thawserver import fast_json
from thawwire.errors import SharedMemoryError
from thawwire.shm_params import (
    SHM_PARAMETERS,
    ShmRef,
    check_json_input,
    check_json_output,
    json_ref,
)

__all__ = [
    "EncodedResponse",
    "checked_shape",
    "classify",
    "decode_infer_request",
    "encode_infer_response",
    "selected_outputs",
    "tensor_bytes",
]

# Triton's bound on an element count or byte size (INT64_MAX).
_MAX_SIZE = (1 << 63) - 1

# Input parameters consumed by the codec, not passed on to the model.
_CODEC_PARAMETERS = frozenset({"binary_data_size"}) | SHM_PARAMETERS


def decode_infer_request(
    body: bytes,
    *,
    header_length: int | None,
    model_name: str,
    model_version: str,
    max_json_depth: int,
    shm: ShmBinding | None = None,
) -> InferRequest:
    """Decode one v2 infer body (JSON, JSON header + binary sections, or raw) to an InferRequest.

    `shm` resolves tensors in shared memory (without it, naming a region is an error)."""
    if header_length == 0:
        return InferRequest(
            model_name=model_name,
            model_version=model_version,
            inputs=[],
            raw_input=body,
            binary_output_default=True,
        )
    header, binary = _split_body(body, header_length)
    doc = parse_json(header, max_depth=max_json_depth)
    if not isinstance(doc, dict):
        raise InvalidInput("infer request must be a JSON object")
    raw_inputs = doc.get("inputs")
    # An empty list is the model's business, as in Triton: all its inputs may be optional.
    if not isinstance(raw_inputs, list):
        raise InvalidInput(_unable("inputs", raw_inputs, "array"))
    if "parameters" in doc and not isinstance(doc["parameters"], dict):
        # Triton's text (500 there), also for `null`.
        raise InvalidInput("failed to get request params.: attempt to get members for non-object")
    parameters = _parameters(doc.get("parameters"), "request")
    binary_default = _flag(parameters.get("binary_data_output", False), "binary_data_output")
    if "binary_data_output" in parameters:  # the codec's, as in Triton: the model never sees it
        parameters = {k: v for k, v in parameters.items() if k != "binary_data_output"}
    if parameters:
        _check_reserved(parameters)
    inputs = _decode_inputs(
        raw_inputs, binary, max_json_bytes=len(header), shm=shm, model=model_name
    )
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidInput(_unable("id", request_id, "string"))
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=inputs,
        requested_outputs=_decode_outputs(doc.get("outputs"), shm),
        id=request_id,
        parameters=parameters,
        binary_output_default=binary_default,
    )


def _split_body(body: bytes, header_length: int | None) -> tuple[bytes, memoryview | None]:
    """Split the JSON header from the binary sections that follow it, if any."""
    if header_length is None:
        return body, None
    if not 0 < header_length <= len(body):  # (Triton's text)
        raise InvalidInput(
            f"inference header size should be in range (0, {len(body)}), got: {header_length}"
        )
    view = memoryview(body)
    return body[:header_length], view[header_length:]


def _parameters(value: Any, where: str, name: str | None = None) -> dict[str, Any]:
    """A `parameters` object, or {} when absent; `where` names its owner in the error (with
    `name`: `where 'name'`, formatted only then)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        owner = where if name is None else f"{where} '{name}'"
        raise InvalidInput(f"{owner} 'parameters' must be a JSON object")
    return value


# Triton's HTTP front end refuses request parameters named `triton_*` (v2.51 http_server.cc).
# The one its gRPC front end allows is let through: Thaw's own HTTP hops (an ensemble's steps,
# BLS through the front door) carry a gRPC stream request's parameters on.
_RESERVED_PREFIX = "triton_"
_RESERVED_ALLOWED = frozenset({"triton_enable_empty_final_response"})


def _check_reserved(parameters: dict[str, Any]) -> None:
    """Refuse `triton_*` keys and, as Triton 2.51 does, values no request parameter can hold
    (an object, a list, null: its C API sets only int, bool, string and double parameters)."""
    for key, value in parameters.items():
        if key.startswith(_RESERVED_PREFIX) and key not in _RESERVED_ALLOWED:
            raise InvalidInput(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        if not isinstance(value, str | int | float) and key not in REQUEST_FIELDS:
            raise InvalidInput(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
                "'string'."
            )


def _flag(value: Any, name: str) -> bool:
    """A JSON boolean parameter."""
    if not isinstance(value, bool):
        raise InvalidInput(_unable(name, value, "boolean"))
    return value


def _unable(field: str, value: Any, kind: str, *, verb: str = "parse") -> str:
    """Triton 2.51's text for a JSON member of the wrong kind, or missing (`value` None).
    Triton answers these 500; Thaw 400 (bad input, DESIGN.md)."""
    if value is None:
        return f"Unable to {verb} '{field}': attempt to access non-existing object member '{field}'"
    return f"Unable to {verb} '{field}': attempt to access JSON non-{kind} as {kind}"


# One input's header, checked, before any data is read: (its JSON object, name, datatype,
# shape, element count, binary section, shared-memory reference, parameters for the model).
_InputHeader = tuple[
    dict[str, Any],
    str,
    str,
    tuple[int, ...],
    int,
    memoryview | None,
    ShmRef | None,
    dict[str, Any],
]


def _decode_inputs(
    raw_inputs: list[Any],
    binary: memoryview | None,
    *,
    max_json_bytes: int,
    shm: ShmBinding | None,
    model: str,
) -> list[InferTensor]:
    """Decode every input; binary sections are consumed in input order and must all be used."""
    offset = 0
    headers: list[_InputHeader] = []
    seen: set[str] = set()
    for raw in raw_inputs:
        if not isinstance(raw, dict):
            raise InvalidInput("each entry of 'inputs' must be a JSON object")
        name, datatype, shape, count = _tensor_header(raw)
        if name in seen:
            raise InvalidInput(f"input '{name}' already exists in request")
        seen.add(name)
        params = _parameters(raw.get("parameters"), "input", name)
        ref = section = None
        if params:  # (most JSON inputs have none: nothing below applies to them)
            if not SHM_PARAMETERS.isdisjoint(params):
                ref = _shm_ref(params, name)
            size = params.get("binary_data_size")
            if ref is not None:
                try:
                    check_json_input(raw, params, name)
                except SharedMemoryError as exc:
                    raise InvalidInput(exc.message) from None
            elif size is not None:
                if "data" in raw:
                    raise InvalidInput(_ONE_SOURCE + "But set 'data' 'binary_data_size'")
                section = _section(binary, offset, size, name, model)
                offset += len(section)
            if not _CODEC_PARAMETERS.isdisjoint(params):
                params = {k: v for k, v in params.items() if k not in _CODEC_PARAMETERS}
        headers.append((raw, name, datatype, shape, count, section, ref, params))
    if binary is not None and offset != len(binary):  # (Triton's text)
        raise InvalidInput(f"unexpected additional input data for model '{model}'")
    # The data back to front, as Triton's core checks it (see grpc_codec.decode_model_infer).
    inputs: list[InferTensor] = []
    for raw, name, datatype, shape, count, section, ref, params in reversed(headers):
        if ref is not None:
            data = _binding(shm).read_input(ref, name, datatype, shape, model)
        elif section is None:
            data = _json_input(raw, name, datatype, shape, count, max_json_bytes, model)
        else:
            data = from_wire(section, name, datatype, shape, model=model)
        inputs.append(InferTensor(name, datatype, shape, data, params))
    inputs.reverse()
    return inputs


def _shm_ref(params: dict[str, Any], name: str) -> ShmRef | None:
    try:
        return json_ref(params, name)
    except SharedMemoryError as exc:
        raise InvalidInput(exc.message) from None


def _binding(shm: ShmBinding | None) -> ShmBinding:
    if shm is None:
        raise InvalidInput("shared memory is not available for this request")
    return shm


def _tensor_header(raw: dict[str, Any]) -> tuple[str, str, tuple[int, ...], int]:
    """Name, datatype, shape and element count of one input, all validated (Triton's texts)."""
    name = raw.get("name")
    if not isinstance(name, str):  # ("": refused by the model's signature, as by Triton)
        raise InvalidInput(_unable("name", name, "string"))
    datatype = raw.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidInput(_unable("datatype", datatype, "string"))
    if datatype not in V2_DATATYPES:
        raise InvalidInput(f"invalid datatype for input {name}")  # Triton's text
    shape = raw.get("shape")
    if not isinstance(shape, list):
        raise InvalidInput(_unable("shape", shape, "array"))
    return name, datatype, tuple(shape), checked_shape(name, datatype, shape)


def checked_shape(name: str, datatype: str, shape: Sequence[Any]) -> int:
    """The element count of input `name`'s `shape`, every dim a non-negative int and the byte
    size in range (Triton's texts); the check both protocols' decoders run before allocating."""
    count = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise InvalidInput(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
                f"unsigned-integer (input '{name}', shape {_shape_text(shape)})"
            )
        if dim > _MAX_SIZE:
            raise InvalidInput(
                f"invalid shape for input '{name}': shape {_shape_text(shape)} contains one "
                "or more invalid dimensions"
            )
        count *= dim
        if count > _MAX_SIZE:  # checked per dim, as Triton does: a later 0 does not undo it
            raise InvalidInput(
                f"invalid shape for input '{name}': shape {_shape_text(shape)} causes total "
                f"element count to exceed maximum size of {_MAX_SIZE}"
            )
    item = element_size(datatype)
    if item > 1 and count > _MAX_SIZE // item:
        raise InvalidInput(
            f"byte size overflow for input '{name}': element count ({count}) * data type "
            f"size ({item}) exceeds maximum allowed size ({_MAX_SIZE})"
        )
    if count == 0 and not _holdable_empty(shape, datatype):
        raise InvalidInput(
            f"invalid shape for input '{name}': shape {_shape_text(shape)} holds no elements "
            "but its other dimensions are too large for an array"
        )
    return count


def _holdable_empty(shape: Sequence[int], datatype: str) -> bool:
    """Whether an array of this empty shape can exist: numpy multiplies the non-zero dims and
    the item size (an object pointer for BYTES) and refuses past INT64_MAX, where Triton's
    running product has long been 0 (found by tests/fuzz/test_fuzz_v2_codec.py)."""
    nbytes = max(element_size(datatype), 8)
    for dim in shape:
        if dim:
            nbytes *= dim
            if nbytes > _MAX_SIZE:
                return False
    return True


def _shape_text(shape: Sequence[Any]) -> str:
    """A shape as Triton writes it, `[2,-5]` (the first 16 dims of a longer one)."""
    dims = [str(d)[:40] for d in shape[:16]] + (["..."] if len(shape) > 16 else [])
    return "[" + ",".join(dims) + "]"


def _section(
    binary: memoryview | None, offset: int, size: Any, name: str, model: str
) -> memoryview:
    """The next `size` bytes of binary data for input `name` of `model`."""
    if binary is None:
        raise InvalidInput(
            f"input '{name}' declares binary_data_size but the request has no "
            "Inference-Header-Content-Length header"
        )
    if type(size) is not int or size < 0:
        refusal = _unable("binary_data_size", size, "unsigned-integer")
        raise InvalidInput(f"{refusal} (input '{name}')")
    if offset + size > len(binary):  # (Triton's text)
        raise InvalidInput(
            f"unexpected size for input '{name}', expecting "
            f"{offset + size - len(binary)} additional bytes for model '{model}'"
        )
    return binary[offset : offset + size]


# Triton's text for an input with no data, or two sources of it.
_ONE_SOURCE = (
    "Input must set only one of the following fields: 'data', 'binary_data_size' in "
    "'parameters', 'shared_memory_region' in 'parameters'. "
)


def _json_input(
    raw: dict[str, Any],
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    count: int,
    max_json_bytes: int,
    model: str,
) -> np.ndarray:
    """Convert an input's JSON `data` (flat or nested) into an array of `shape`."""
    if "data" not in raw:
        raise InvalidInput(_ONE_SOURCE + "But no field is set")
    # Every JSON element takes at least one byte, so this bounds `count` before allocating.
    if count > max_json_bytes:
        raise InvalidInput(
            f"input '{name}' shape {list(shape)} holds {count} elements, more than its JSON "
            "data can carry"
        )
    return json_to_array(raw["data"], name, datatype, shape, count, model)


def _decode_outputs(raw: Any, shm: ShmBinding | None = None) -> list[RequestedOutput]:
    """Requested outputs with their binary flag and classification count."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidInput(_unable("outputs", raw, "array"))
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for entry in raw:
        if not isinstance(entry, dict):
            raise InvalidInput("each entry of 'outputs' must be an object with a string 'name'")
        name = entry.get("name")
        if not isinstance(name, str):
            raise InvalidInput(_unable("name", name, "string"))
        if name in seen:
            raise InvalidInput(f"output '{name}' already exists in request")
        seen.add(name)
        params = _parameters(entry.get("parameters"), "output", name)
        if params and not SHM_PARAMETERS.isdisjoint(params):
            params = _shm_output(params, name, shm)
        # A listed output is binary only when it says so: `binary_data_output` is the default
        # of the outputs not listed (Triton's CheckBinaryOutputData; qa/L0_http's test.sh).
        binary = _flag(params.get("binary_data", False), "binary_data")
        classes = params.get("classification", 0)
        if type(classes) is not int or classes < 0:
            raise InvalidInput(
                "Unable to set 'classification': attempt to access JSON non-unsigned-integer as "
                "unsigned-integer"
            )
        outputs.append(RequestedOutput(name, binary, classes, params))
    return outputs


def _shm_output(params: dict[str, Any], name: str, shm: ShmBinding | None) -> dict[str, Any]:
    """Bind output `name` to its region (Triton's rules); the parameters left for the rest."""
    ref = _shm_ref(params, name)
    if ref is None:
        return params
    try:
        check_json_output(params)
    except SharedMemoryError as exc:
        raise InvalidInput(exc.message) from None
    _binding(shm).bind_output(ref, name)
    rest = {k: v for k, v in params.items() if k not in SHM_PARAMETERS}
    rest["binary_data"] = False
    return rest


class EncodedResponse:
    """An encoded infer response: body bytes, and the JSON header length when binary follows."""

    __slots__ = ("body", "header_length")

    def __init__(self, body: bytes, header_length: int | None) -> None:
        self.body = body
        self.header_length = header_length


def encode_infer_response(
    response: InferResponse, request: InferRequest, shm: ShmBinding | None = None
) -> EncodedResponse:
    """Encode the outputs the request asked for (all, by default), JSON or binary per output;
    those bound to shared memory (`shm`) are written there and sent without data."""
    outputs_json: list[dict[str, Any]] = []
    buffers: list[bytes] = []
    for tensor, binary in selected_outputs(response, request):
        if shm is not None and tensor.name in shm.outputs:
            shm.write_output(tensor.name, tensor_bytes(tensor))
            # Triton sends a shared-memory output as its name, datatype and shape alone.
            outputs_json.append(
                {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
            )
            continue
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.parameters:
            entry["parameters"] = dict(tensor.parameters)
        if binary:
            raw = tensor_bytes(tensor)
            entry.setdefault("parameters", {})["binary_data_size"] = len(raw)
            buffers.append(raw)
        else:
            entry["data"] = _json_data(tensor)
        outputs_json.append(entry)
    # Triton's key order (observed on 2.51): id, model_name, model_version, parameters, outputs;
    # an empty id is left out, as Triton leaves it.
    doc: dict[str, Any] = {}
    request_id = response.id if response.id is not None else request.id
    if request_id:
        doc["id"] = request_id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs_json
    header = fast_json.dumps(doc)
    if not buffers:
        return EncodedResponse(header, None)
    return EncodedResponse(b"".join([header, *buffers]), len(header))


def selected_outputs(
    response: InferResponse, request: InferRequest
) -> list[tuple[InferTensor, bool]]:
    """(tensor, binary?) for every output to send, in the model's order, classified where the
    request asked for classes (Triton's classification extension).

    Requested outputs select what is sent but, as in Triton (observed on 2.51), not its order.
    A requested output the model did not return is left out, as Triton answers (observed on
    2.51): the request's names were checked against the config before it ran.
    """
    if not request.requested_outputs:
        default = request.binary_output_default
        return [(tensor, default) for tensor in response.outputs]
    wanted = {output.name: output for output in request.requested_outputs}
    selected = []
    for tensor in response.outputs:
        output = wanted.get(tensor.name)
        if output is not None:
            if output.class_count:
                tensor = classify(tensor, output.class_count, output.labels, batched=output.batched)
            selected.append((tensor, output.binary))
    return selected


def tensor_bytes(tensor: InferTensor) -> bytes:
    """Little-endian, C-order raw bytes of a tensor (BYTES: length-prefixed elements)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=wire_dtype(tensor.datatype)).tobytes()


def _json_data(tensor: InferTensor) -> list[Any]:
    """A flat JSON list of a tensor's elements (BYTES as UTF-8 strings, BF16 as floats)."""
    data = tensor.data
    if tensor.datatype == "BYTES":
        return [_utf8(item, tensor.name) for item in data.reshape(-1)]
    if tensor.datatype == "BF16":
        widened = np.asarray(data, dtype=np.uint16).astype(np.uint32) << 16
        return widened.view(np.float32).reshape(-1).tolist()
    result: list[Any] = np.asarray(data).reshape(-1).tolist()
    return result


def _utf8(item: Any, name: str) -> str:
    """One BYTES element as text for JSON; binary that is not UTF-8 must travel as binary."""
    if isinstance(item, str):
        return item
    if isinstance(item, bytes | bytearray | np.bytes_):
        try:
            return bytes(item).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(
                f"output '{name}' holds bytes that are not UTF-8; request it with binary_data"
            ) from None
    return str(item)


# Triton's TopkClassifications takes integers, FP32 and FP64 only.
_UNCLASSIFIABLE = frozenset({"BYTES", "BOOL", "FP16", "BF16"})


def classify(
    tensor: InferTensor, class_count: int, labels: Sequence[str] = (), *, batched: bool = True
) -> InferTensor:
    """Triton's classification extension: top-k "value:index" strings, with ":label" after
    each class that `labels` (the output's label file) names. As Triton's front ends rank them:
    per batch entry (`[batch, k]`) when `batched` (the model batches) and the tensor has 2 or
    more dimensions, else over the whole tensor flattened (`[k]`; a non-batching model's
    `[2, 8]` output is one entry of 16 classes, qa/L0_infer_variable)."""
    if tensor.datatype in _UNCLASSIFIABLE:
        raise InvalidInput(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )  # Triton's text (a BYTES output crashes Triton 2.51's server: a division by zero)
    data = np.asarray(tensor.data)
    per_entry = batched and data.ndim >= 2
    rows = data.reshape(data.shape[0], -1) if per_entry else data.reshape(1, -1)
    k = min(class_count, rows.shape[1])
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    # std::to_string, as Triton writes a class's value: "%f" for FP32/FP64, digits for integers
    as_text = float if data.dtype.kind == "f" else int
    strings = [
        [_class_string(as_text(row[i]), int(i), labels) for i in top]
        for row, top in zip(rows, order, strict=True)
    ]
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    out[:] = strings
    shape: tuple[int, ...] = (rows.shape[0], k) if per_entry else (k,)
    return InferTensor(tensor.name, "BYTES", shape, out.reshape(shape), dict(tensor.parameters))


def _class_string(value: float | int, index: int, labels: Sequence[str]) -> bytes:
    """One class as Triton writes it: `0.900000:1:dog` (an integer output's value as digits,
    `30:1:dog`), or without the label past the labels (or for an empty label)."""
    text = f"{value:f}" if isinstance(value, float) else str(value)
    label = labels[index] if index < len(labels) else ""
    return (f"{text}:{index}:{label}" if label else f"{text}:{index}").encode()
