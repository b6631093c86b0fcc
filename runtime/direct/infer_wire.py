"""An inference as a replica sends it to `thaw up`'s front door, and the answer read back.

BLS calls and ensemble steps (runtime.direct.front_door) ask the front door for a KServe v2
infer: over HTTP in Triton's binary tensor extension (a JSON header, then each tensor's raw
bytes, `Inference-Header-Content-Length` saying where the header ends), so tensors cross
without a JSON round trip; a BLS stream over gRPC as `ModelStreamInfer` messages. An answer
that is not a success becomes the ServingError of its status, in one place for every call:
400 InvalidInput, 404 ModelNotFound, 503 ModelUnavailable, 504 DeadlineExceeded, anything
else a plain ServingError; each keeps the status it was answered with, and what the answer's
headers mark (a model's own error; a gRPC code HTTP has no status for: thawwire.error_marks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import grpc
import numpy as np

from runtime.codecs.protobuf import model_infer_request, model_infer_response
from runtime.codecs.tensor_json import json_to_array
from runtime.datatypes import from_wire, serialize_bytes, wire_dtype
from runtime.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse, InferTensor
from thawserver.grpc_status import http_status
from thawwire import error_marks
from thawwire.grpc_messages import FINAL_RESPONSE, set_parameter
from thawwire.grpc_service import pb

__all__ = [
    "HEADER_LENGTH",
    "decode_response",
    "encode_request",
    "error_of_grpc",
    "error_of_status",
    "infer_path",
    "message_of",
    "stream_request",
    "stream_response",
]

HEADER_LENGTH = "Inference-Header-Content-Length"
"""The binary extension's header: the JSON header's length in bytes."""

_STATUS_ERRORS: dict[int, type[ServingError]] = {
    400: InvalidInput,
    404: ModelNotFound,
    503: ModelUnavailable,
    504: DeadlineExceeded,
}
_EMPTY_FINAL = "triton_enable_empty_final_response"
_MESSAGE_BYTES = 300  # of an error answer that is not Triton's JSON, the start kept


def infer_path(request: InferRequest) -> str:
    """`/v2/models/{model}[/versions/{version}]/infer` of `request`."""
    path = f"/v2/models/{request.model_name}"
    if request.model_version:
        path += f"/versions/{request.model_version}"
    return path + "/infer"


def _raw(tensor: InferTensor) -> bytes:
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=wire_dtype(tensor.datatype)).tobytes()


def encode_request(request: InferRequest) -> tuple[bytes, int]:
    """A binary-extension infer body for `request` (every output asked for in binary), and
    its JSON header's length."""
    chunks: list[bytes] = []
    inputs = []
    for tensor in request.inputs:
        raw = _raw(tensor)
        chunks.append(raw)
        inputs.append(
            {
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    header: dict[str, object] = {"inputs": inputs}
    if request.id:
        header["id"] = request.id
    if request.requested_outputs:
        header["outputs"] = [
            {"name": o.name, "parameters": {"binary_data": True}} for o in request.requested_outputs
        ]
    else:
        header["parameters"] = {"binary_data_output": True}
    if request.parameters:
        params = dict(request.parameters)
        if "binary_data_output" in header.get("parameters", {}):  # type: ignore[operator]
            params["binary_data_output"] = True
        header["parameters"] = params
    text = json.dumps(header).encode()
    return text + b"".join(chunks), len(text)


def decode_response(body: bytes, header_length: int | None, model: str) -> InferResponse:
    """An infer response body (JSON, or JSON + binary sections) as an InferResponse; raises
    ValueError, KeyError or TypeError when it is not one."""
    head = body if header_length is None else body[:header_length]
    binary = memoryview(body)[header_length:] if header_length is not None else memoryview(b"")
    doc = json.loads(head)
    outputs = []
    offset = 0
    for out in doc.get("outputs", []):
        name, datatype, shape = out["name"], out["datatype"], tuple(out["shape"])
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            data = from_wire(binary[offset : offset + size], name, datatype, shape)
            offset += size
        else:
            count = int(np.prod(shape)) if shape else 1
            data = json_to_array(out.get("data", []), name, datatype, shape, count)
        outputs.append(InferTensor(name, datatype, shape, data))
    return InferResponse(
        doc.get("model_name", model),
        str(doc.get("model_version", "")),
        outputs,
        id=doc.get("id"),
        parameters=doc.get("parameters") or {},
    )


def stream_request(request: InferRequest) -> bytes:
    """The serialized `ModelInferRequest` of a BLS stream: the request, asking for an empty
    final response (a decoupled model's stream may otherwise end without a final flag)."""
    message = model_infer_request(request)
    set_parameter(message.parameters[_EMPTY_FINAL], True)
    return bytes(message.SerializeToString())


def stream_response(data: bytes, model: str) -> InferResponse:
    """One serialized `ModelStreamInferResponse` as an InferResponse; its in-stream error
    (`error_message`) raised as a ServingError when final, else a response with `error` set
    (a decoupled model's error sent without the final flag: the stream goes on)."""
    answer = pb.ModelStreamInferResponse.FromString(data)
    if answer.error_message:
        final = answer.infer_response.parameters.get(FINAL_RESPONSE)
        if final is None or final.bool_param:
            raise ServingError(answer.error_message)
        error = ServingError(answer.error_message, from_model=True)
        request_id = answer.infer_response.id or None
        return InferResponse(model, "", [], id=request_id, final=False, error=error)
    response = model_infer_response(answer.infer_response)
    if not response.model_name:
        response.model_name = model
    return response


def message_of(payload: bytes) -> str:
    """The text of an error answer: Triton's `{"error": ...}`, else the body's start."""
    try:
        return str(json.loads(payload).get("error", ""))
    except (ValueError, AttributeError):
        return payload[:_MESSAGE_BYTES].decode(errors="replace")


def error_of_status(
    status: int, message: str, marks: Mapping[str, str] | None = None
) -> ServingError:
    """The ServingError of an answer with HTTP `status` and `message`, carrying `status`, and
    what the answer's `marks` (its headers) add: a model's own error, a gRPC code
    (thawwire.error_marks)."""
    from_model = marks is not None and marks.get(error_marks.FROM_MODEL) == "1"
    error = _STATUS_ERRORS.get(status, ServingError)(message, from_model=from_model)
    error.status = status
    if marks is not None:
        grpc_code = error_marks.grpc_code_of(marks.get(error_marks.GRPC_CODE))
        if grpc_code:
            error.grpc_code = grpc_code
    return error


def error_of_grpc(code: grpc.StatusCode, details: str | None) -> ServingError:
    """The ServingError of a failed gRPC call: its code's HTTP status, as error_of_status."""
    return error_of_status(http_status(code), details or str(code))
