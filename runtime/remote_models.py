"""Run an ensemble's steps on models served elsewhere: KServe v2 infer calls over HTTP.

Under `thaw up` every model has its own replicas, an ensemble's too; the ensemble's replica
sends each step to the platform's front door (`--ensemble-steps-url`), which wakes and routes
the step's model like any request. Requests and answers use Triton's binary tensor extension
(a JSON header, then the raw tensor bytes), so tensors cross without a JSON round trip. A
failed call is the step's error, with the status the model answered (502 when no answer).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import numpy as np

from runtime.datatypes import from_wire, serialize_bytes
from runtime.errors import (
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse, InferTensor

__all__ = ["RemoteModels"]

logger = logging.getLogger(__name__)

_HEADER_LENGTH = "Inference-Header-Content-Length"
_ERRORS: dict[int, type[ServingError]] = {
    400: InvalidInput,
    404: ModelNotFound,
    503: ModelUnavailable,
}
# Answers of other statuses keep them (504 deadline, 413, ...) on a plain ServingError.


class RemoteModels:
    """A StepRunner that runs each request on the model of that name behind `url`."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # A fresh connection per step: the front door may hand a connection to the step
            # model's replica, and a pooled one would then carry other models' steps there.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=0),
                timeout=self._timeout,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def infer(self, request: InferRequest) -> InferResponse:
        """The model's answer to `request`, or its error as a ServingError."""
        path = f"/v2/models/{request.model_name}"
        if request.model_version:
            path += f"/versions/{request.model_version}"
        body, header_length = _encode(request)
        headers = {
            "Content-Type": "application/octet-stream",
            _HEADER_LENGTH: str(header_length),
            "Accept-Encoding": "identity",
        }
        try:
            async with self._client().post(
                f"{self._url}{path}/infer", data=body, headers=headers
            ) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise _error(resp.status, payload, request.model_name)
                length = resp.headers.get(_HEADER_LENGTH)
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("model=%s remote step failed: %r", request.model_name, exc)
            error = ServingError(f"model '{request.model_name}' did not answer: {exc!r}")
            error.status = 502
            raise error from exc
        return _decode(payload, int(length) if length else None, request)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _encode(request: InferRequest) -> tuple[bytes, int]:
    """A binary-extension body: the JSON header, then each input's raw bytes."""
    chunks: list[bytes] = []
    inputs = []
    for tensor in request.inputs:
        raw = serialize_bytes(tensor.data) if tensor.datatype == "BYTES" else _raw(tensor.data)
        chunks.append(raw)
        inputs.append(
            {
                "name": tensor.name,
                "shape": list(tensor.shape),
                "datatype": tensor.datatype,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    doc: dict[str, Any] = {"inputs": inputs}
    if request.requested_outputs:
        doc["outputs"] = [
            {"name": o.name, "parameters": {"binary_data": True}} for o in request.requested_outputs
        ]
    parameters = {"binary_data_output": True, **request.parameters}
    doc["parameters"] = parameters
    header = json.dumps(doc, separators=(",", ":")).encode()
    return header + b"".join(chunks), len(header)


def _raw(array: np.ndarray) -> bytes:
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return data.tobytes()


def _decode(payload: bytes, header_length: int | None, request: InferRequest) -> InferResponse:
    header = payload[:header_length] if header_length is not None else payload
    try:
        doc = json.loads(header)
    except ValueError as exc:
        raise ServingError(f"model '{request.model_name}' answered unreadable JSON") from exc
    offset = header_length or 0
    view = memoryview(payload)
    outputs = []
    for out in doc.get("outputs", []):
        name, datatype, shape = out["name"], out["datatype"], tuple(out["shape"])
        size = (out.get("parameters") or {}).get("binary_data_size")
        if not isinstance(size, int):  # asked for binary outputs, so never expected
            raise ServingError(f"model '{request.model_name}' answered output '{name}' in JSON")
        chunk = view[offset : offset + size]
        offset += size
        outputs.append(InferTensor(name, datatype, shape, from_wire(chunk, name, datatype, shape)))
    return InferResponse(request.model_name, str(doc.get("model_version", "")), outputs)


def _error(status: int, payload: bytes, model: str) -> ServingError:
    try:
        message = str(json.loads(payload).get("error", ""))
    except (ValueError, AttributeError):
        message = payload[:300].decode(errors="replace")
    error = _ERRORS.get(status, ServingError)(message or f"model '{model}' answered {status}")
    error.status = status
    return error
