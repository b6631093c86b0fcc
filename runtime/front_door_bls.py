"""BLS calls to models this replica does not serve, sent to `thaw up`'s front door.

Under `thaw up` a replica serves one model; a Python model's `InferenceRequest(...).exec()` to
another model goes to the activator's `/v2/models/{m}/infer`, which holds it while that model
wakes from zero, exactly as any client request. Tensors travel in Triton's binary extension.

`exec(decoupled=True)` (`stream`) goes to the activator's gRPC front door instead, when `thaw
up` gave one: one `ModelStreamInfer` call per BLS request, asking for Triton's empty final
response so the end of a decoupled model's stream is seen; every response comes back, an
in-stream error as a ServingError. Without a gRPC front door a stream is one HTTP infer,
which a decoupled model refuses: that refusal says what is missing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import numpy as np
from google.protobuf.message import DecodeError

from runtime.datatypes import from_wire, serialize_bytes, wire_dtype
from runtime.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
)
from runtime.grpc_codec import model_infer_request, model_infer_response
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.tensor_json import json_to_array
from thawwire.grpc_messages import set_parameter
from thawwire.grpc_service import Method, method_path, pb
from thawwire.grpc_status import http_status

__all__ = [
    "FrontDoorBls",
    "decode_response",
    "encode_request",
    "stream_request",
    "stream_response",
]

logger = logging.getLogger(__name__)

_STATUS_ERRORS: dict[int, type[ServingError]] = {
    400: InvalidInput,
    404: ModelNotFound,
    503: ModelUnavailable,
    504: DeadlineExceeded,
}
_STREAM = method_path(Method.MODEL_STREAM_INFER)
_EMPTY_FINAL = "triton_enable_empty_final_response"
# What the HTTP front door answers for a decoupled model (Triton's words, runtime.http_routes).
_DECOUPLED_REFUSAL = "decoupled transaction policy"


def _raw(tensor: InferTensor) -> bytes:
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=wire_dtype(tensor.datatype)).tobytes()


def encode_request(request: InferRequest) -> tuple[bytes, int]:
    """A binary-extension infer body for `request`, and its JSON header's length."""
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
    """An infer response body (JSON, or JSON + binary sections) as an InferResponse."""
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
    (`error_message`) as a ServingError."""
    answer = pb.ModelStreamInferResponse.FromString(data)
    if answer.error_message:
        raise ServingError(answer.error_message)
    response = model_infer_response(answer.infer_response)
    if not response.model_name:
        response.model_name = model
    return response


class FrontDoorBls:
    """Sends BLS requests to the front door at `url` (one pooled aiohttp session) and BLS
    streams to its gRPC service at `grpc_address` (HOST:PORT; one channel), when given."""

    def __init__(self, url: str, *, timeout_s: float, grpc_address: str | None = None) -> None:
        self._url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._grpc_address = grpc_address
        self._channel: grpc.aio.Channel | None = None

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of `request` (a decoupled model's stream; one of any other),
        through the gRPC front door; over HTTP (one response) without one."""
        if self._grpc_address is None:
            try:
                yield await self.infer(request)
            except InvalidInput as exc:
                if _DECOUPLED_REFUSAL not in exc.message:
                    raise
                raise InvalidInput(
                    f"model '{request.model_name}' is decoupled and served by another replica: "
                    "a BLS stream to it needs thaw up's gRPC front door (this replica was "
                    f"given none: thaw up runs with gRPC off or on port 0): {exc.message}"
                ) from None
            return
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                self._grpc_address,
                options=[
                    ("grpc.max_receive_message_length", -1),
                    ("grpc.max_send_message_length", -1),
                ],
            )
        call: Any = self._channel.stream_stream(_STREAM)(timeout=self._timeout_s)
        try:
            await call.write(stream_request(request))
            await call.done_writing()
            while True:
                data = await call.read()
                if data is grpc.aio.EOF:
                    return
                response = stream_response(data, request.model_name)
                yield response
                if response.final:
                    return
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            logger.warning(
                "model=%s BLS stream through the front door failed: %s %s",
                request.model_name, code, exc.details(),
            )  # fmt: skip
            kind = _STATUS_ERRORS.get(http_status(code), ServingError)
            raise kind(exc.details() or str(code)) from None
        except (DecodeError, ValueError, TypeError) as exc:
            raise ServingError(
                f"the front door's BLS stream answer could not be read: {exc}"
            ) from exc
        finally:
            call.cancel()

    async def infer(self, request: InferRequest) -> InferResponse:
        """The front door's answer; its JSON error as the ServingError of its status."""
        if self._session is None:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        body, header_length = encode_request(request)
        path = f"/v2/models/{request.model_name}"
        if request.model_version:
            path += f"/versions/{request.model_version}"
        headers = {
            "Inference-Header-Content-Length": str(header_length),
            "Content-Type": "application/octet-stream",
        }
        try:
            async with self._session.post(
                self._url + path + "/infer", data=body, headers=headers, timeout=self._timeout
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    raise _status_error(response.status, payload)
                length = response.headers.get("Inference-Header-Content-Length")
                return decode_response(
                    payload, int(length) if length is not None else None, request.model_name
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning(
                "model=%s BLS through the front door failed: %r", request.model_name, exc
            )
            raise ModelUnavailable(f"the front door did not answer a BLS request: {exc!r}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ServingError(f"the front door's BLS answer could not be read: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._channel is not None:
            await self._channel.close()


def _status_error(status: int, payload: bytes) -> ServingError:
    try:
        message = str(json.loads(payload).get("error", ""))
    except (ValueError, AttributeError):
        message = payload[:200].decode(errors="replace")
    return _STATUS_ERRORS.get(status, ServingError)(message or f"HTTP {status}")
